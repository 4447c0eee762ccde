"""actor_critic: with the stop the critic learns from the value loss alone; Gumbel-max actions agree exactly (C17)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from conftest import case_result
from detach_parity.jax_impl import actor_critic as ja
from detach_parity.jax_impl._common import flat
from detach_parity.shared.core import fixtures
from detach_parity.shared.core.oracle import fd_grad
from detach_parity.shared.scenarios.actor_critic import PARAMS, gumbel_scores, losses, mlp
from detach_parity.torch_impl import actor_critic as ta
from detach_parity.torch_impl._common import field
from detach_parity.torch_impl._layout import grads_of
from flax import nnx

CRITIC = [k for k in PARAMS if k.startswith("critic/")]
ACTOR = [k for k in PARAMS if k.startswith("actor/")]


def _value_loss_grads(fx) -> dict[str, dict[str, np.ndarray]]:
    """vf_coef · ∇critic value_loss alone: torch autograd, JAX grad, float64 finite differences."""
    vf = fx.scalar("vf_coef")
    model = ta.build_model(fx)
    logits, values = model(field(fx, "obs"))
    (vf * ta.a2c_losses(logits, values, field(fx, "actions"), field(fx, "returns"), "advantage_stopped")[1]).backward()
    out = {"torch": {k: v for k, v in grads_of(model).items() if k.startswith("critic/")}}
    with jax.enable_x64(True):
        jmodel = ja.build_model(fx)
        obs, actions, returns = (jnp.asarray(fx[k]) for k in ("obs", "actions", "returns"))

        def value_loss(m):
            return vf * ja.a2c_losses(*m(obs), actions, returns, "advantage_stopped")[1]

        out["jax"] = {k: v for k, v in flat(nnx.grad(value_loss)(jmodel)).items() if k.startswith("critic/")}
    a = fx.float64()
    params = {k: a[f"params/{k}"] for k in PARAMS}
    out["oracle"] = fd_grad(lambda p: vf * losses(p, a)[1], params, wrt=CRITIC)
    return out


def test_stopped_critic_gradient_is_the_value_loss_alone() -> None:
    fx = fixtures.make("actor_critic", "float64")
    ref = _value_loss_grads(fx)
    out = case_result("actor_critic", "advantage_stopped", "float64", "random").outputs
    for fw in ("torch", "jax"):
        for k in CRITIC:
            np.testing.assert_allclose(out[fw][f"grads/{k}"], ref[fw][k], rtol=1e-12, atol=1e-14)
            np.testing.assert_allclose(out[fw][f"grads/{k}"], ref["oracle"][k], rtol=1e-7, atol=1e-9)
    bad = case_result("actor_critic", "advantage_not_stopped", "float64", "random").outputs
    assert np.max(np.abs(bad["torch"]["grads/critic/l2/bias"] - ref["torch"]["critic/l2/bias"])) > 1e-2


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_missing_stop_adds_the_policy_push_to_the_critic_only(dtype: str) -> None:
    good = case_result("actor_critic", "advantage_stopped", dtype, "random").outputs
    bad = case_result("actor_critic", "advantage_not_stopped", dtype, "random").outputs
    rtol, atol = (1e-12, 1e-14) if dtype == "float64" else (1e-5, 1e-7)
    for fw in ("torch", "jax"):
        for key in ("loss", "policy_loss", "value_loss", "entropy", "advantages", *(f"grads/{k}" for k in ACTOR)):
            np.testing.assert_allclose(bad[fw][key], good[fw][key], rtol=rtol, atol=atol)  # same values, same actor
        np.testing.assert_array_equal(bad[fw]["selected_actions"], good[fw]["selected_actions"])  # exact: integers
        for k in CRITIC:  # critic(no stop) = critic(stop) + ∇critic policy_loss
            push = bad[fw][f"policy_grads/{k}"]
            np.testing.assert_allclose(bad[fw][f"grads/{k}"], good[fw][f"grads/{k}"] + push, rtol=rtol, atol=atol)
        # −mean(log π(a|s)·(R − V)) pushes V up by mean(log π(a|s)) < 0 per unit of the output bias
        a = fixtures.make("actor_critic", "float64").float64()
        p = {k: a[f"params/{k}"] for k in PARAMS}
        logits = mlp(p, "actor", a["obs"])
        logp = logits - np.log(np.exp(logits).sum(1, keepdims=True))
        expect = np.mean(logp[np.arange(len(a["actions"])), a["actions"]])
        np.testing.assert_allclose(bad[fw]["policy_grads/critic/l2/bias"], [expect], rtol=max(rtol, 1e-7))
        assert expect < -0.1


def test_gumbel_max_actions_are_identical_integers() -> None:
    runs = {dt: case_result("actor_critic", "advantage_stopped", dt, "random").outputs for dt in ("float32", "float64")}
    a = fixtures.make("actor_critic", "float64").float64()
    p = {k: a[f"params/{k}"] for k in PARAMS}
    logits = mlp(p, "actor", a["obs"])
    expect = np.argmax(gumbel_scores(logits, a["noise"]), axis=1)
    assert not np.array_equal(expect, np.argmax(logits, axis=1))  # the noise really samples: not the greedy action
    for out in runs.values():
        for fw in ("torch", "jax"):
            assert out[fw]["selected_actions"].dtype == np.int64
            np.testing.assert_array_equal(out[fw]["selected_actions"], expect)  # exact: integer actions


def test_acting_outputs_are_constants() -> None:
    """The sampled actions' log-probabilities (what a rollout stores) carry no graph and no gradient."""
    fx = fixtures.make("actor_critic", "float32")
    logits, _ = ta.build_model(fx)(field(fx, "obs"))
    _, logp = ta.select_actions(logits, field(fx, "noise"))
    assert logits.requires_grad and not logp.requires_grad and logp.grad_fn is None
    jmodel = ja.build_model(fx)
    obs, noise = jnp.asarray(fx["obs"]), jnp.asarray(fx["noise"])
    grads = flat(nnx.grad(lambda m: ja.select_actions(m(obs)[0], noise)[1].sum())(jmodel))
    assert all(np.all(grads[k] == 0) for k in ACTOR)


def test_detaching_the_logits_of_the_policy_loss_starves_the_actor_c17() -> None:
    """Detach for acting, never for the loss: a policy loss on stopped logits gives the actor no gradient."""
    fx = fixtures.make("actor_critic", "float32")
    model = ta.build_model(fx)
    logits, values = model(field(fx, "obs"))
    args = (field(fx, "actions"), field(fx, "returns"), "advantage_stopped")
    assert not ta.a2c_losses(logits.detach(), values, *args)[0].requires_grad  # no graph left: backward() raises
    jmodel = ja.build_model(fx)
    obs, actions, returns = (jnp.asarray(fx[k]) for k in ("obs", "actions", "returns"))

    def policy_loss(m, stop):
        lg, v = m(obs)
        return ja.a2c_losses(jax.lax.stop_gradient(lg) if stop else lg, v, actions, returns, "advantage_stopped")[0]

    starved, trained = flat(nnx.grad(policy_loss)(jmodel, True)), flat(nnx.grad(policy_loss)(jmodel, False))
    for k in ACTOR:
        assert np.all(starved[k] == 0) and np.max(np.abs(trained[k])) > 1e-3  # silently zero in JAX


@pytest.mark.parametrize("impl", [ta, ja], ids=["torch", "jax"])
def test_values_of_shape_b1_are_refused(impl) -> None:
    lib = torch.tensor if impl is ta else jnp.asarray
    logits, values = lib(np.zeros((4, 3))), lib(np.zeros((4, 1)))
    actions, returns = lib(np.zeros(4, dtype=np.int64)), lib(np.zeros(4))
    with pytest.raises(ValueError, match=r"a2c_losses: values has shape \(4, 1\) but returns has shape \(4,\)"):
        impl.a2c_losses(logits, values, actions, returns, "advantage_stopped")
    with pytest.raises(ValueError, match=r"select_actions: logits has shape \(4, 3\) but noise has shape \(4,\)"):
        impl.select_actions(logits, returns)
