"""straight_through: the estimator's gradient in closed form, the EMA codebook by hand, round and sign to second order."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from conftest import case_result
from detach_parity.jax_impl import straight_through as jst
from detach_parity.shared.core import fixtures
from detach_parity.torch_impl import straight_through as tst

FRAMEWORKS = ("torch", "jax")
TIGHT = {"float32": {"rtol": 1e-5, "atol": 1e-6}, "float64": {"rtol": 1e-12, "atol": 1e-14}}


def _case(variant: str, dtype: str = "float64"):
    return fixtures.make("straight_through", "float64").float64(), case_result(
        "straight_through", variant, dtype, "random"
    )


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_encoder_gets_the_decoder_input_gradient_through_the_estimator(dtype: str) -> None:
    """∂recon/∂W_enc = xᵀ·∂recon/∂z with z = z_q in the forward pass: the identity's Jacobian, in closed form."""
    a, r = _case("codebook_loss", dtype)
    z_q = a["params/codebook"][r.outputs["oracle"]["codes"]]
    x_hat = z_q @ a["params/decoder/kernel"] + a["params/decoder/bias"]
    dz = 2.0 * (x_hat - a["x"]) @ a["params/decoder/kernel"].T / a["x"].size  # [B, K]
    for fw in FRAMEWORKS:
        out = r.outputs[fw]
        np.testing.assert_array_equal(out["codes"], r.outputs["oracle"]["codes"], err_msg=fw)  # exact: integer codes
        np.testing.assert_allclose(out["quantized"], z_q, **TIGHT[dtype], err_msg=fw)
        np.testing.assert_allclose(out["grads/recon/encoder/kernel"], a["x"].T @ dz, **TIGHT[dtype], err_msg=fw)
        np.testing.assert_allclose(out["grads/recon/encoder/bias"], dz.sum(0), **TIGHT[dtype], err_msg=fw)


def test_ema_codebook_is_sonnets_laplace_smoothed_average_and_no_gradient_step() -> None:
    a, r = _case("ema_codebook")
    plain = case_result("straight_through", "codebook_loss", "float64", "random").outputs
    codes = r.outputs["oracle"]["codes"]
    z_e = a["x"] @ a["params/encoder/kernel"] + a["params/encoder/bias"]
    onehot = np.eye(len(a["ema_count"]))[codes]
    g, eps = a["decay"], a["ema_eps"]
    n = g * a["ema_count"] + (1 - g) * onehot.sum(0)
    m = g * a["ema_sum"] + (1 - g) * onehot.T @ z_e
    smoothed = (n + eps) / (n.sum() + len(n) * eps) * n.sum()
    for fw in FRAMEWORKS:
        out = r.outputs[fw]
        np.testing.assert_allclose(out["ema/count"], n, rtol=1e-13, err_msg=fw)
        np.testing.assert_allclose(out["params/codebook"], m / smoothed[:, None], rtol=1e-12, err_msg=fw)
        assert not any(np.any(out[f"grads/{t}/codebook"]) for t in ("recon", "commit")), fw
        for k in ("encoder/kernel", "encoder/bias", "decoder/kernel", "decoder/bias"):  # no codebook term there
            np.testing.assert_allclose(out[f"params/{k}"], plain[fw][f"params/{k}"], rtol=1e-13, atol=1e-15)


def test_without_the_estimator_only_the_commitment_loss_moves_the_encoder() -> None:
    a, r = _case("no_straight_through")
    for fw in FRAMEWORKS:
        out = r.outputs[fw]
        for k in ("encoder/kernel", "encoder/bias"):
            moved = out[f"params/{k}"] - a[f"params/{k}"]
            want = -a["lr"] * a["beta"] * out[f"grads/commit/{k}"]
            np.testing.assert_allclose(moved, want, rtol=1e-12, err_msg=fw)


def test_the_unstopped_difference_cancels_the_encoder_gradient_exactly() -> None:
    """z_e + (z_q − z_e) is z_q in value and 1 − 1 = 0 in gradient: no error, an encoder cut off."""
    z_e = torch.tensor([[0.3, -1.2]], dtype=torch.float64, requires_grad=True)
    z_q = torch.tensor([[0.5, -1.0]], dtype=torch.float64)
    (g_bug,) = torch.autograd.grad((z_e + (z_q - z_e)).pow(2).sum(), z_e)
    (g_st,) = torch.autograd.grad(tst.straight_through(z_e, z_q).pow(2).sum(), z_e)
    assert torch.all(g_bug == 0) and torch.equal(g_st, 2 * z_q)  # exact: 2·z is exact


@pytest.mark.parametrize("rounding", ["round", "sign"])
def test_round_and_sign_to_second_order(rounding: str) -> None:
    """Value q(u), first derivative q(u) − t, second 1: the identity's, in both frameworks (q' = 0 for both)."""
    a, r = _case("codebook_loss")
    q = np.round(a["u"]) if rounding == "round" else np.sign(a["u"])
    for fw in FRAMEWORKS:
        out = r.outputs[fw]
        np.testing.assert_array_equal(out[f"st/{rounding}/value"], q, err_msg=fw)  # exact: rounded values are integers
        np.testing.assert_allclose(out[f"st/{rounding}/grad"], q - a["t"], rtol=1e-15, err_msg=fw)
        np.testing.assert_array_equal(
            out[f"st/{rounding}/second"], np.ones_like(q), err_msg=fw
        )  # exact: the identity's derivative
    u = torch.tensor(a["u"], requires_grad=True)
    op = torch.round if rounding == "round" else torch.sign
    assert torch.all(torch.autograd.grad(op(u).sum(), u)[0] == 0)  # the quantizer itself: zero derivative
    assert np.all(
        np.asarray(jax.grad(lambda v: (jnp.round(v) if rounding == "round" else jnp.sign(v)).sum())(a["u"])) == 0
    )
    (grad,) = torch.autograd.grad(0.5 * ((tst.straight_through(u, op(u)) - torch.tensor(a["t"])) ** 2).sum(), u)
    with pytest.raises(RuntimeError, match="does not require grad"):  # torch needs create_graph for the second
        torch.autograd.grad(grad.sum(), u)


@pytest.mark.parametrize("module", [tst, jst], ids=FRAMEWORKS)
def test_bad_input(module) -> None:
    lib = torch if module is tst else jnp
    with pytest.raises(ValueError, match=r"straight_through: x has shape \(2, 3\) but q has shape \(3, 2\)"):
        module.straight_through(lib.zeros((2, 3)), lib.zeros((3, 2)))
    with pytest.raises(ValueError, match=r"straight_through: variant expected one of .*got 'ste'"):
        module.vq_losses(None, None, "ste")
    with pytest.raises(ValueError, match=r"ema_update: decay expected a number in \[0, 1\), got 1.0"):
        module.ema_update(None, None, None, 1.0, 1e-5)
