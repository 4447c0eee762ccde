"""mixed_precision: exact scale sequences, the skipped overflow, bf16 vs float32 gradients, the naive port."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from conftest import assert_same_to_rounding, case_result
from detach_parity.jax_impl import mixed_precision as jm
from detach_parity.shared.core import fixtures
from detach_parity.torch_impl import mixed_precision as tm
from flax import nnx

U = 2.0**-8  # bfloat16 unit roundoff
GRADS = ("encoder/kernel", "encoder/bias", "head/kernel", "head/bias")
FWS = ("torch", "jax", "oracle")


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_scale_sequences_are_identical_and_exact(dtype: str) -> None:
    dyn = case_result("mixed_precision", "dynamic", dtype, "random").outputs
    sta = case_result("mixed_precision", "static", dtype, "random").outputs
    for fw in FWS:
        # halved to 2^15 at the overflow (step 2), grown after every 2 finite steps
        assert dyn[fw]["scale"].tolist() == [65536, 32768, 32768, 65536, 65536, 131072]
        assert sta[fw]["scale"].tolist() == [1024] * 6
        for out in (dyn, sta):
            assert out[fw]["skipped"].tolist() == [False, True, False, False, False, False]
            assert int(out[fw]["optimizer_steps"]) == 5


def _with(fx, **changes) -> fixtures.Fixture:
    arrays = {k: np.array(v) for k, v in fx.items()}
    arrays.update({k: np.array(v) for k, v in changes.items()})
    return fixtures.from_arrays("mixed_precision", arrays)


@pytest.mark.parametrize("variant", ["dynamic", "static"])
def test_overflow_step_leaves_parameters_and_step_count_unchanged(variant: str) -> None:
    """Two steps, one of them overflowing: first or second, the one applied step is the same, bit for bit
    (a power-of-two scale is exact, so the scale in force does not change the unscaled gradient)."""
    fx = fixtures.make("mixed_precision", "float32")
    overflow_first = _with(fx, steps=2, overflow_at=1)
    then_overflow = _with(fx, steps=2, overflow_at=2)
    for run in (tm.run, jm.run):
        a, b = run(overflow_first, variant), run(then_overflow, variant)
        for k in GRADS:
            np.testing.assert_array_equal(b[f"params/{k}"], a[f"params/{k}"])  # exact: one step program, twice
            assert np.any(a[f"params/{k}"] != fx[f"params/{k}"])  # and the applied step did move them
        assert int(a["optimizer_steps"]) == int(b["optimizer_steps"]) == 1
        assert a["skipped"].tolist() == [True, False] and b["skipped"].tolist() == [False, True]
        if variant == "dynamic":
            assert b["scale"].tolist() == [65536, 32768]  # P15: backed off to 32768
            assert a["scale"].tolist() == [32768, 32768]


def test_bf16_gradients_agree_with_float32_within_bf16_tolerance() -> None:
    r = case_result("mixed_precision", "dynamic", "float32", "random").outputs
    for fw in ("torch", "jax"):
        for k in GRADS:
            g, full = r[fw][f"grads/{k}"], r[fw][f"grads_full/{k}"]
            rel = np.max(np.abs(g - full)) / np.max(np.abs(full))
            assert 0 < rel <= 8 * U, (fw, k, rel)  # bfloat16 really computed, and within 8 ulps
        for k in GRADS:  # full precision: float32 parity
            np.testing.assert_allclose(r[fw][f"grads_full/{k}"], r["oracle"][f"grads_full/{k}"], rtol=2e-5, atol=1e-7)
    # torch and JAX round at the same points: seed 0 differs by at most 3 units
    for k in GRADS:
        t, j = r["torch"][f"grads/{k}"], r["jax"][f"grads/{k}"]
        assert np.max(np.abs(t - j)) <= 3 * U * np.max(np.abs(t))


def test_float64_is_never_autocast() -> None:
    r = case_result("mixed_precision", "dynamic", "float64", "random").outputs
    for fw in ("torch", "jax"):
        for k in GRADS:
            why = f"{fw} {k}: autocast leaves float64 alone (bfloat16 would differ by 1e-3)"
            assert_same_to_rounding(r[fw][f"grads/{k}"], r[fw][f"grads_full/{k}"], why)
    x = torch.ones(2, 3, dtype=torch.float64)
    with tm.autocast():
        assert torch.nn.functional.linear(x, torch.ones(4, 3, dtype=torch.float64)).dtype == torch.float64
        assert torch.nn.functional.linear(x.float(), torch.ones(4, 3)).dtype == torch.bfloat16
        assert torch.tanh(x.float()).dtype == torch.float32  # tanh is not on the CPU autocast list
    assert jm.autocast(jnp.ones(2, jnp.float32)).dtype == jnp.bfloat16
    with jax.enable_x64(True):
        assert jm.autocast(jnp.ones(2, jnp.float64)).dtype == jnp.float64


def test_power_of_two_scale_changes_no_gradient() -> None:
    # scale 2^16 (dynamic) and 2^10 (static) give the same unscaled step-1 gradients; two variants are two
    # programs, so to rounding here: the exactness itself is shown in one program by the overflow-step test
    dyn = case_result("mixed_precision", "dynamic", "float32", "random").outputs
    sta = case_result("mixed_precision", "static", "float32", "random").outputs
    for fw in ("torch", "jax"):
        for k in GRADS:
            assert_same_to_rounding(dyn[fw][f"grads/{k}"], sta[fw][f"grads/{k}"], f"{fw} {k}: scale 2^16 vs 2^10")


def test_naive_port_applies_the_nan_update() -> None:
    naive = case_result("mixed_precision", "naive_no_skip", "float32", "random").outputs
    dyn = case_result("mixed_precision", "dynamic", "float32", "random").outputs
    for k in GRADS:
        assert np.all(np.isnan(naive["jax"][f"params/{k}"]))  # every parameter destroyed
        # exact: torch runs the same code in both variants (one program, twice)
        np.testing.assert_array_equal(naive["torch"][f"params/{k}"], dyn["torch"][f"params/{k}"])
        assert_same_to_rounding(naive["jax"][f"grads/{k}"], dyn["jax"][f"grads/{k}"], f"{k}: step 1 unaffected")
    assert int(naive["jax"]["optimizer_steps"]) == 6 and int(naive["torch"]["optimizer_steps"]) == 5
    assert not naive["jax"]["skipped"].any()


def test_jax_scale_rule_matches_aten_amp_update_scale() -> None:
    fx = fixtures.make("mixed_precision", "float32")
    state = jm.make_scaler(fx, "dynamic")
    scale, tracker = torch.tensor(65536.0), torch.tensor(0, dtype=torch.int32)
    for found_inf in (0, 0, 1, 0, 1, 1, 0, 0, 0, 0, 0):
        torch._amp_update_scale_(scale, tracker, torch.tensor(float(found_inf)), 2.0, 0.5, 2)
        state = state.update(jnp.asarray(not found_inf))
        assert float(state.scale) == scale.item() and int(state.growth_tracker) == tracker.item()


def test_linear_rounds_once_like_torch_autocast() -> None:
    fx = fixtures.make("mixed_precision", "float32")
    x = np.array(fx["x"])
    with torch.no_grad():
        t = tm.linear(tm.build_model(fx).encoder, torch.tensor(x)).float().numpy()
    model = jm.build_model(fx)
    j = np.asarray(jm.linear(model.encoder, jnp.asarray(x)).astype(jnp.float32))
    # torch and JAX accumulate the float32 product in their own orders: a bfloat16 rounding may flip
    # where the sum lies within float32 rounding of a tie (rare), never by more than one bfloat16 ulp
    bf16_ulp = np.abs(t) * 2.0**-7
    assert np.all(np.abs(j - t) <= bf16_ulp) and np.mean(j == t) >= 0.9, np.mean(j == t)
    # nnx.Linear(dtype=bfloat16) rounds before and after the bias: not torch's numbers (11 of 48 entries here)
    lin = nnx.Linear(x.shape[1], t.shape[1], dtype=jnp.bfloat16, rngs=nnx.Rngs(0))
    lin.kernel.set_value(model.encoder.kernel[...])
    lin.bias.set_value(model.encoder.bias[...])
    assert np.mean(np.asarray(lin(jnp.asarray(x)).astype(jnp.float32)) != t) > 0.1


def test_mse_refuses_broadcasting() -> None:
    for mod, arr in ((tm, torch.zeros), (jm, jnp.zeros)):
        with pytest.raises(ValueError, match=r"mse: pred has shape \(6, 2\) but y has shape \(6,\)"):
            mod.mse(arr((6, 2)), arr((6,)))
