"""sac: where the two frameworks' gradients of the same SAC loss part ways (the log-det's + 1e-6), and who trains what."""

from __future__ import annotations

import distrax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from conftest import case_result
from detach_parity.jax_impl import sac as js
from detach_parity.shared.core import fixtures
from detach_parity.shared.scenarios.sac import LOG_DET_EPS, PARAMS, SATURATED, _pre_tanh
from detach_parity.torch_impl import sac as ts
from torch.distributions.transforms import TanhTransform

ACTOR = [k for k in PARAMS if k.startswith("actor/")]
Q = [k for k in PARAMS if k.startswith(("qf1/", "qf2/"))]


def test_naive_port_differs_by_the_epsilon_of_the_log_det_most_at_the_saturated_action() -> None:
    out = case_result("sac", "naive_distrax", "float64", "random").outputs
    a = fixtures.make("sac", "float64").float64()
    p = {k: a[f"params/{k}"] for k in PARAMS}
    mu, std = _pre_tanh(p, a["obs"], 0.0)
    u = mu + std * a["noise"]
    assert u[0, 0] == pytest.approx(SATURATED, abs=1e-12)
    one_minus = 1.0 - np.tanh(u) ** 2
    # log π(JAX, exact) − log π(torch, CleanRL) = Σ_a log(1 − tanh²u + 1e-6) − log(1 − tanh²u)
    expect = np.sum(np.log1p(LOG_DET_EPS / one_minus), axis=1)
    np.testing.assert_allclose(out["jax"]["log_pi"] - out["torch"]["log_pi"], expect, rtol=1e-6, atol=1e-12)
    assert np.argmax(expect) == 0 and expect[0] > 1e-3 > 3 * np.max(expect[1:])  # the saturated action dominates
    grad_ratio = one_minus[0, 0] / (
        one_minus[0, 0] + LOG_DET_EPS
    )  # d/du of the two log-dets: −2 tanh u · ratio vs −2 tanh u
    assert 1 - grad_ratio > 1e-3


def test_the_epsilon_form_cancels_in_float32_and_xla_tanh_is_not_torch_tanh() -> None:
    """The trap's second half: log(1 − tanh²u + 1e-6) near saturation amplifies XLA's few-ulp tanh error."""
    u = np.linspace(4.0, 5.0, 201, dtype=np.float32)
    yt, yj = torch.tanh(torch.tensor(u)), jnp.tanh(jnp.asarray(u))
    eps_t = torch.log(1 - yt.pow(2) + LOG_DET_EPS).numpy()
    eps_j = np.asarray(jnp.log(1 - yj**2 + LOG_DET_EPS))
    exact_t = TanhTransform().log_abs_det_jacobian(torch.tensor(u), yt).numpy()
    exact_j = np.asarray(distrax.Tanh().forward_log_det_jacobian(jnp.asarray(u)))
    assert np.max(np.abs(eps_t - eps_j)) > 1e-4  # as large as the 1e-6 itself changes the log-det here
    np.testing.assert_allclose(exact_t, exact_j, rtol=1e-6, atol=1e-6)  # the stable form agrees


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_freezing_q_changes_where_the_actor_loss_gradient_goes_not_the_actor_gradient(dtype: str) -> None:
    frozen = case_result("sac", "exact_log_det", dtype, "random").outputs
    free = case_result("sac", "q_not_frozen", dtype, "random").outputs
    rtol, atol = (1e-12, 1e-14) if dtype == "float64" else (1e-5, 1e-7)
    for fw in ("torch", "jax"):
        for k in ACTOR:
            np.testing.assert_allclose(
                free[fw][f"grads/actor_loss/{k}"], frozen[fw][f"grads/actor_loss/{k}"], rtol=rtol, atol=atol
            )
        for k in Q:
            assert np.all(frozen[fw][f"grads/actor_loss/{k}"] == 0)
        # without the freeze each critic gets −1/B per sample where it is the minimum: the l2 bias sums them
        n = sum(float(free[fw][f"grads/actor_loss/qf{i}/l2/bias"][0]) for i in (1, 2))
        assert n == pytest.approx(-1.0, rel=1e-5)
        assert all(float(free[fw][f"grads/actor_loss/qf{i}/l2/bias"][0]) < 0 for i in (1, 2))


def test_torch_critics_are_trainable_again_after_the_actor_loss() -> None:
    fx = fixtures.make("sac", "float32")
    model = ts.build_agent(fx)
    batch = {k: torch.tensor(np.array(fx[k])) for k in ("obs", "noise")}
    consts = {"action_scale": 1.0, "action_bias": 0.0, "gamma": 0.99}
    loss, _, _ = ts.actor_loss(model, batch, consts, "exact_log_det")
    assert all(p.requires_grad for p in model.parameters())
    loss.backward()
    assert all(p.grad is None for q in (model.qf1, model.qf2) for p in q.parameters())  # frozen when it counted
    assert all(p.grad is not None for p in model.actor.parameters())


@pytest.mark.parametrize("impl", [ts, js], ids=["torch", "jax"])
def test_a_target_of_shape_b1_is_refused(impl) -> None:
    fx = fixtures.make("sac", "float32")
    model = impl.build_agent(fx)
    lib = torch.tensor if impl is ts else jnp.asarray
    batch = {k: lib(np.array(fx[k])) for k in ("obs", "actions")}
    b = fx.dims["B"]
    with pytest.raises(ValueError, match=rf"q_loss: q has shape \({b},\) but target has shape \({b}, 1\)"):
        impl.q_loss(model, batch, lib(np.zeros((b, 1), np.float32)))
    with pytest.raises(ValueError, match="variant expected one of"):
        impl.actor_loss(model, batch, {"action_scale": 1.0, "action_bias": 0.0}, "exact")


@pytest.mark.parametrize("variant", ["exact_log_det", "q_not_frozen"])
def test_actor_loss_freezes_q_itself_on_both_sides(variant: str) -> None:
    """Audit of issue 28 item 7: torch's actor_loss freezes Q inside (requires_grad_(False)); the JAX twin once
    left it to its caller's nnx.DiffState, so a user's own nnx.grad of actor_loss trained Q. Both freeze it
    inside now: the actor gets the gradient through Q's input, Q's parameters none (q_not_frozen: both do)."""
    from detach_parity.jax_impl._common import flat, numerics
    from detach_parity.torch_impl._layout import grads_of
    from flax import nnx

    fx = fixtures.make("sac", "float64")
    keys = ("obs", "noise")
    consts = {k: fx.scalar(k) for k in ("action_scale", "action_bias", "gamma")}
    model = ts.build_agent(fx)
    ts.actor_loss(model, {k: torch.tensor(np.array(fx[k])) for k in keys}, consts, variant)[0].backward()
    torch_grads = grads_of(model)
    with numerics("float64"):
        jmodel = js.build_agent(fx)
        jbatch = {k: jnp.asarray(fx[k]) for k in keys}
        jax_grads = flat(nnx.grad(lambda m: js.actor_loss(m, jbatch, consts, variant)[0])(jmodel))
    for grads in (torch_grads, jax_grads):
        assert all(np.any(np.asarray(grads[k]) != 0.0) for k in ACTOR)
        assert all(np.any(np.asarray(grads[k]) != 0.0) == (variant == "q_not_frozen") for k in Q), variant
