"""grad_clipping: the four regimes, torch's formula vs optax's, measured, and no NaN at zero (P02)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
import torch
from conftest import assert_same_to_rounding, case_result
from detach_parity.jax_impl import grad_clipping as jg
from detach_parity.shared.core import fixtures
from detach_parity.torch_impl import grad_clipping as tg

EPS = 1e-6  # torch.nn.utils.clip_grad_norm_


def _outputs(variant: str, dtype: str = "float64") -> dict:
    return case_result("grad_clipping", variant, dtype, "random").outputs


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_regimes_above_clips_every_step_below_none(dtype: str) -> None:
    fx = fixtures.make("grad_clipping", dtype)
    max_norm = dict(zip(("above", "at", "below", "zero"), fx["max_norm"].tolist(), strict=True))
    for fw in ("torch", "jax"):
        out = _outputs("torch_formula", dtype)[fw]
        assert np.all(out["above/coefs"] < 1) and np.all(out["above/norms"] > max_norm["above"])
        # torch's clipped norm lands just under max_norm: max_norm * n / (n + 1e-6)
        n = out["above/norms"].astype(np.float64)
        np.testing.assert_allclose(out["above/clipped_norms"], max_norm["above"] * n / (n + EPS), rtol=2e-6)
        assert np.all(out["below/coefs"] == 1) and np.all(out["below/norms"] < max_norm["below"])


def test_exactly_at_threshold_torch_still_scales_optax_does_not() -> None:
    fx = fixtures.make("grad_clipping", "float64")
    n1 = float(fx["max_norm"][1])  # "at": the first step's gradient norm
    torch_out, optax_out = _outputs("torch_formula")["torch"], _outputs("optax_default")["jax"]
    np.testing.assert_allclose(torch_out["at/norms"][0], n1, rtol=1e-13)
    np.testing.assert_allclose(torch_out["at/coefs"][0], n1 / (n1 + EPS), rtol=1e-13)  # 0.99874: scaled
    np.testing.assert_allclose(optax_out["at/coefs"][0], 1.0, rtol=1e-14)  # left as it is


def test_measured_gap_is_one_minus_norm_over_norm_plus_eps() -> None:
    """The float64 gap between the formulas on step 1 (same parameters): coef_torch / coef_optax = n / (n + 1e-6)."""
    torch_out, optax_out = _outputs("optax_default")["torch"], _outputs("optax_default")["jax"]
    n = torch_out["above/norms"][0]
    ratio = torch_out["above/coefs"][0] / optax_out["above/coefs"][0]
    np.testing.assert_allclose(ratio, n / (n + EPS), rtol=1e-12)
    gap = 1 - ratio
    assert 1e-3 < gap < 2e-3  # 1e-6 / ‖g‖ with ‖g‖ = 7.9e-4: 1.26e-3, far above the float64 tolerance 1e-10
    # the same where nothing is clipped: below the threshold and for all-zero gradients (two variants: to rounding)
    for regime in ("below", "zero"):
        for key in torch_out:
            if key.startswith(f"{regime}/"):
                why = f"{key}: nothing clipped, optax and torch's formula agree"
                assert_same_to_rounding(optax_out[key], _outputs("torch_formula")["jax"][key], why)


def test_gap_at_unit_norm_hides_in_float32_not_float64() -> None:
    """‖g‖ = 2, max_norm = 1: the formulas differ by 5e-7 relative, under float32's parity rtol, over float64's."""
    g = np.array([1.2, -1.6])  # norm 2
    param = torch.nn.Parameter(torch.zeros(2, dtype=torch.float64))
    param.grad = torch.from_numpy(g.copy())
    tg.clip_by_global_norm_torch([param], 1.0)
    with jax.enable_x64(True):
        ported, _ = jg.clip_by_global_norm_torch(1.0).update(jnp.asarray(g), optax.EmptyState())
        plain, _ = optax.clip_by_global_norm(1.0).update(jnp.asarray(g), optax.EmptyState())
    torch_g = param.grad.numpy()
    np.testing.assert_allclose(np.asarray(ported), torch_g, rtol=1e-15)
    np.testing.assert_allclose(np.asarray(plain), g / 2, rtol=1e-15)
    rel = np.max(np.abs(np.asarray(plain) - torch_g)) / np.max(np.abs(torch_g))
    assert 1e-10 < rel < 2e-5 and np.isclose(rel, EPS / (2 + EPS), rtol=1e-6)
    np.testing.assert_allclose(torch_g / np.linalg.norm(torch_g), g / 2, rtol=1e-15)  # direction kept (C18)


def test_zero_gradients_no_nan_anywhere_and_nothing_moves() -> None:
    for variant in ("torch_formula", "optax_default"):
        for dtype in ("float32", "float64"):
            for fw, out in _outputs(variant, dtype).items():
                for key, value in out.items():
                    assert np.all(np.isfinite(value)), f"{variant} {dtype} {fw} {key}"
                    if key.startswith("zero/moved/"):
                        assert np.all(value == 0)
                if fw != "oracle":
                    np.testing.assert_array_equal(out["zero/coefs"], [1, 1, 1])  # exact: min(1, ·) is 1


def test_norm_value_is_safe_at_zero_its_gradient_is_not() -> None:
    """P02: the clip needs only the norm's value; jax.grad of the norm at zero is NaN, torch's is 0."""
    zeros = {"w": jnp.zeros(3), "b": jnp.zeros(2)}

    @jax.jit
    def clip_both_and_grad(tree):
        clips = (jg.clip_by_global_norm_torch(1.0), optax.clip_by_global_norm(1.0))
        return [clip.update(tree, clip.init(tree))[0] for clip in clips], jax.grad(optax.tree.norm)(tree)

    clipped, norm_grad = clip_both_and_grad(zeros)
    for tree in clipped:
        assert all(np.all(np.asarray(v) == 0) for v in tree.values())
    assert np.all(np.isnan(np.asarray(norm_grad["w"])))
    x = torch.zeros(3, requires_grad=True)
    torch.linalg.vector_norm(x).backward()
    assert x.grad.tolist() == [0.0, 0.0, 0.0]


def test_masked_loss_shape_mismatch_raises() -> None:
    msg = r"masked_loss: y has shape \(4, 2, 1\) but target has shape \(4, 2\)"
    with pytest.raises(ValueError, match=msg):
        tg.masked_loss(torch.zeros(4, 2, 1), torch.zeros(4, 2), torch.ones(4, 2), 1.0)
    with pytest.raises(ValueError, match=msg):
        jg.masked_loss(jnp.zeros((4, 2, 1)), jnp.zeros((4, 2)), jnp.ones((4, 2)), 1.0)
