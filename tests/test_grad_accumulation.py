"""grad_accumulation: the accumulated gradient is the full-batch one only for a mean over equal micro-batches."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
import torch
from conftest import case_result
from detach_parity.jax_impl import grad_accumulation as jg
from detach_parity.shared.apps import selfcheck
from detach_parity.shared.core import fixtures
from detach_parity.shared.core.oracle import fd_grad
from detach_parity.shared.scenarios.grad_accumulation import MICRO_BATCHES, PARAMS, mean_loss, sizes
from detach_parity.torch_impl import grad_accumulation as tg
from detach_parity.torch_impl._layout import grads_of


def _tol(dtype: str) -> dict:
    return {"rtol": 1e-12, "atol": 1e-14} if dtype == "float64" else {"rtol": 1e-5, "atol": 1e-6}


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_equal_micro_batches_give_the_full_batch_gradient(dtype: str) -> None:
    out = case_result("grad_accumulation", "mean_equal", dtype, "random").outputs
    for fw in ("torch", "jax"):
        for k in PARAMS:
            np.testing.assert_allclose(out[fw][f"grads/{k}"], out[fw][f"full_grads/{k}"], **_tol(dtype))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_the_traps_by_their_factor(dtype: str) -> None:
    good = case_result("grad_accumulation", "mean_equal", dtype, "random").outputs
    summed = case_result("grad_accumulation", "not_divided", dtype, "random").outputs
    last = case_result("grad_accumulation", "zero_grad_in_loop", dtype, "random").outputs
    a = fixtures.make("grad_accumulation", "float64").float64()
    p = {k: a[f"params/{k}"] for k in PARAMS}
    half = len(a["y"]) // MICRO_BATCHES
    g_last = fd_grad(lambda q: mean_loss(q, a["x"][-half:], a["y"][-half:]), p)
    for k in PARAMS:
        np.testing.assert_allclose(
            summed["torch"][f"grads/{k}"], MICRO_BATCHES * good["torch"][f"grads/{k}"], **_tol(dtype)
        )
        np.testing.assert_allclose(
            summed["jax"][f"grads/{k}"], good["jax"][f"grads/{k}"], **_tol(dtype)
        )  # MultiSteps averages
        for fw in ("torch", "jax"):
            np.testing.assert_allclose(
                last[fw][f"grads/{k}"], g_last[k] / MICRO_BATCHES, rtol=1e-4 if dtype == "float32" else 1e-8, atol=1e-6
            )


def test_unequal_micro_batches_need_size_weights() -> None:
    out = case_result("grad_accumulation", "mean_unequal", "float64", "random").outputs
    fx = fixtures.make("grad_accumulation", "float64")
    model = tg.build_model(fx)
    x, y = torch.tensor(np.array(fx["x"])), torch.tensor(np.array(fx["y"]))
    batches = tg.micro_batches(x, y, MICRO_BATCHES, "mean_unequal")
    assert [len(b[1]) for b in batches] == sizes(len(y), "mean_unequal") and len(set(sizes(len(y), "mean_unequal"))) > 1
    for xb, yb in batches:  # the fix: each micro-batch's mean weighted by its share of the examples
        (tg.mse(model, xb, yb) * len(yb) / len(y)).backward()
    fixed = grads_of(model)
    for k in PARAMS:
        np.testing.assert_allclose(fixed[k], out["torch"][f"full_grads/{k}"], rtol=1e-12, atol=1e-15)
    for fw in ("torch", "jax"):
        assert max(np.max(np.abs(out[fw][f"gap/{k}"])) for k in PARAMS) > 1e-3  # the mean of means is not the mean


def test_torch_cycle_leaves_no_gradient_behind_and_multisteps_accumulates_in_float32_by_default() -> None:
    fx = fixtures.make("grad_accumulation", "float32")
    model = tg.build_model(fx)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.tensor(np.array(fx["x"])), torch.tensor(np.array(fx["y"]))
    tg.accumulate_grads(model, optimizer, tg.micro_batches(x, y, MICRO_BATCHES, "mean_equal"), "mean_equal")
    assert all(p.grad is None for p in model.parameters())
    with jax.enable_x64(True):
        params = {"w": jnp.zeros(3, jnp.float64)}
        default = optax.MultiSteps(optax.sgd(0.1), every_k_schedule=2).init(params)
        kept = optax.MultiSteps(optax.sgd(0.1), every_k_schedule=2, accumulator_dtype=jnp.float64).init(params)
        assert default.acc_grads["w"].dtype == jnp.float32 and kept.acc_grads["w"].dtype == jnp.float64


@pytest.mark.parametrize("impl", [tg, jg], ids=["torch", "jax"])
def test_bad_shapes_are_refused(impl) -> None:
    fx = fixtures.make("grad_accumulation", "float32")
    lib = torch.tensor if impl is tg else jnp.asarray
    x, y = lib(np.array(fx["x"])), lib(np.array(fx["y"])[:, None])
    n = fx.dims["N"]
    with pytest.raises(ValueError, match=rf"mse: pred has shape \({n},\) but y has shape \({n}, 1\)"):
        impl.mse(impl.build_model(fx), x, y)
    arrays = {k: np.array(fx[k]) for k in fx}
    arrays["x"], arrays["y"] = arrays["x"][:-1], arrays["y"][:-1]
    with pytest.raises(ValueError, match=rf"expected N a multiple of 2 micro-batches, larger than 2, got N = {n - 1}"):
        fixtures.from_arrays("grad_accumulation", arrays)


def test_selfcheck_finds_the_accumulation_sites(tmp_path) -> None:
    """(loss / n).backward() -> the undivided sum; MultiSteps every_k_schedule -> 1 (no accumulation)."""
    for side in ("torch_impl", "jax_impl"):
        (tmp_path / side).mkdir()
    src = "(loss / n).backward()\nloss.backward()\ntx = optax.MultiSteps(sgd, every_k_schedule=n)\n"
    (tmp_path / "torch_impl" / "demo.py").write_text(src, encoding="utf-8")
    found = [(s.construct, s.original, s.replacement, s.kind) for s in selfcheck.find_sites(tmp_path)]
    assert found == [
        ("(loss / n).backward()", "loss / n", "(loss)", "arith"),
        ("every_k_schedule= (optax.MultiSteps accumulation)", "n", "1", "arith"),
    ]
