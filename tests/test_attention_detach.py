"""attention_detach: a stopped attention matrix leaves Wq, Wk untrained and dWv unchanged (C14); masks (P12)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from conftest import assert_same_to_rounding, case_result
from detach_parity.jax_impl import attention_detach as jattn
from detach_parity.shared.core import fixtures
from detach_parity.shared.scenarios.attention_detach import CASES, EMPTY_ROW
from detach_parity.torch_impl import attention_detach as tattn

DTYPES = ("float32", "float64")


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_value_gradient_identical_with_and_without_the_stop(dtype: str, case: str) -> None:
    none = case_result("attention_detach", "none", dtype, case).outputs
    stopped = case_result("attention_detach", "weights_stopped", dtype, case).outputs
    for fw in ("torch", "jax"):
        a, b = none[fw], stopped[fw]
        # two variants are two programs (XLA may fuse them differently): the same values to rounding
        assert_same_to_rounding(a["grads/v/kernel"], b["grads/v/kernel"], f"{fw}: dV with and without the stop")
        for key in ("loss", "context", "weights"):  # the stop changes no value
            assert_same_to_rounding(a[key], b[key], f"{fw} {key}: with and without the stop")
        # Q and K: a real gradient without the stop, exactly none with it
        for key in ("grads/q/kernel", "grads/k/kernel"):
            assert np.min(np.abs(a[key])) > 0 and np.all(b[key] == 0), f"{fw} {key}"
        # x keeps only its value path: a different, still non-zero gradient
        assert np.any(a["grads/x"] != b["grads/x"]) and np.any(b["grads/x"] != 0)


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("variant", ["none", "weights_stopped"])
def test_masks_give_finite_values_and_gradients(variant: str, case: str) -> None:
    fx = fixtures.make("attention_detach", "float32", case=case)
    mask = fx["mask"]
    for fw, out in case_result("attention_detach", variant, "float32", case).outputs.items():
        for key, value in out.items():
            assert np.all(np.isfinite(value)), f"{fw} {key}"
        w = out["weights"]
        assert np.all(w[~mask] == 0), f"{fw}: a masked entry has weight"
        live = mask.any(axis=1)
        np.testing.assert_allclose(w[live].sum(axis=1), 1.0, rtol=1e-6)
        if case == "empty_row":  # defined: an empty row attends to nothing
            assert np.all(w[EMPTY_ROW] == 0) and np.all(out["context"][EMPTY_ROW] == 0), fw


def test_causal_mask_context_of_first_token_is_its_own_value() -> None:
    fx = fixtures.make("attention_detach", "float64", case="causal")
    out = case_result("attention_detach", "none", "float64", "causal").outputs
    v0 = fx["x"][0] @ fx["params/v/kernel"]  # token 0 sees only itself: weight exactly 1
    for fw in ("torch", "jax"):
        assert out[fw]["weights"][0, 0] == 1.0
        np.testing.assert_allclose(out[fw]["context"][0], v0, rtol=1e-14)


def test_unguarded_empty_row_is_nan_in_both_frameworks() -> None:
    """P12: softmax over an all −inf row is NaN and so is the value gradient; the guard gives zeros."""
    s = np.array([[0.3, -1.2, 0.5], [0.1, 0.4, -0.2]])
    mask = np.array([[True, False, True], [False, False, False]])
    v = np.array([[1.0, 2.0], [0.5, -1.0], [3.0, 0.0]])

    def torch_dv(guarded: bool) -> np.ndarray:
        vt = torch.tensor(v, requires_grad=True)
        st, mt = torch.tensor(s), torch.tensor(mask)
        w = tattn.masked_softmax(st, mt) if guarded else torch.softmax(torch.where(mt, st, -torch.inf), dim=-1)
        (w @ vt).sum().backward()
        return vt.grad.numpy()

    with jax.enable_x64(True):

        def jax_dv(guarded: bool) -> np.ndarray:
            sj, mj = jnp.asarray(s), jnp.asarray(mask)
            w = jattn.masked_softmax(sj, mj) if guarded else jax.nn.softmax(jnp.where(mj, sj, -jnp.inf), axis=-1)
            return np.asarray(jax.grad(lambda vj: jnp.sum(w @ vj))(jnp.asarray(v)))

        raw, guarded = {"torch": torch_dv(False), "jax": jax_dv(False)}, {"torch": torch_dv(True), "jax": jax_dv(True)}
        # jax.nn.softmax(where=...) agrees with the guard's definition (torch has no such argument)
        np.testing.assert_array_equal(
            np.asarray(jax.nn.softmax(jnp.asarray(s), where=jnp.asarray(mask))[1]), 0.0
        )  # exact: an empty row is 0 by definition
    want = np.where(mask, np.exp(s), 0.0)
    want = np.divide(want, want.sum(1, keepdims=True), out=np.zeros_like(want), where=mask.any(1, keepdims=True))
    for fw in ("torch", "jax"):
        assert np.all(np.isnan(raw[fw])), fw
        np.testing.assert_allclose(guarded[fw], want.sum(axis=0)[:, None] * np.ones((1, 2)), rtol=1e-14)


@pytest.mark.parametrize("module", [tattn, jattn], ids=["torch", "jax"])
def test_mse_loss_refuses_broadcasting(module) -> None:
    lib = torch if module is tattn else jnp
    with pytest.raises(ValueError, match=r"mse_loss: context has shape \(4, 2\) but target has shape \(4, 1\)"):
        module.mse_loss(lib.zeros((4, 2)), lib.zeros((4, 1)))


def test_random_case_follows_the_seed_and_named_cases_ignore_it() -> None:
    """--seed once changed nothing here: every case was the fixed SEED. `random` draws from the seed."""
    one, two = (fixtures.make("attention_detach", "float64", seed=s, case="random") for s in (1, 2))
    assert not np.array_equal(one["x"], two["x"]) and not np.array_equal(one["params/q/kernel"], two["params/q/kernel"])
    np.testing.assert_array_equal(
        one["x"], fixtures.make("attention_detach", "float64", seed=1, case="random")["x"]
    )  # exact: one generator, one seed
    masks = [fixtures.make("attention_detach", "float64", seed=s, case="random")["mask"] for s in range(40)]
    assert len({m.tobytes() for m in masks}) > 30  # the mask is drawn too
    assert all((m.sum(axis=1) >= 2).any() for m in masks)  # Q and K always have a gradient to lose
    for case in CASES:
        a, b = (fixtures.make("attention_detach", "float64", seed=s, case=case) for s in (1, 2))
        np.testing.assert_array_equal(a["x"], b["x"])  # exact: a named case ignores the seed
