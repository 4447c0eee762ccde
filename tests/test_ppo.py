"""ppo: jnp.std rescales the normalised advantages by sqrt(B/(B − 1)); a recomputed logπ_old gives ratio 1, and
with the graph attached a zero policy gradient instead of the vanilla policy gradient."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest
import torch
from conftest import case_result
from detach_parity.jax_impl import ppo as jp
from detach_parity.shared.core import fixtures
from detach_parity.shared.scenarios.ppo import PARAMS, log_softmax, mlp, normalize
from detach_parity.torch_impl import ppo as tp

ACTOR = [k for k in PARAMS if k.startswith("actor/")]
CRITIC = [k for k in PARAMS if k.startswith("critic/")]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_jnp_std_rescales_the_policy_term_by_sqrt_b_over_b_minus_1(dtype: str) -> None:
    out = case_result("ppo", "naive_jnp_std", dtype, "random").outputs
    b = len(out["torch"]["advantages"])
    factor = np.sqrt(b / (b - 1))
    rtol = 1e-6 if dtype == "float64" else 1e-4  # the + 1e-8 of the normalisation is all that breaks exactness
    np.testing.assert_allclose(out["jax"]["advantages"], factor * out["torch"]["advantages"], rtol=rtol)
    # the surrogate is positively homogeneous in Â: the same clip decisions, a policy term larger by the factor
    np.testing.assert_allclose(out["jax"]["pg_loss"], factor * out["torch"]["pg_loss"], rtol=rtol)
    for k in ACTOR:
        np.testing.assert_allclose(out["jax"][f"pg_grads/{k}"], factor * out["torch"][f"pg_grads/{k}"], rtol=rtol)
    for key in ("v_loss", "entropy", "ratio", *(f"grads/{k}" for k in CRITIC)):
        np.testing.assert_allclose(out["jax"][key], out["torch"][key], rtol=rtol * 10, atol=1e-7)


def test_recomputed_old_logprob_ratio_is_one_and_its_gradient_is_the_vanilla_policy_gradient() -> None:
    stopped = case_result("ppo", "old_logprob_recomputed", "float64", "random").outputs
    attached = case_result("ppo", "old_logprob_attached", "float64", "random").outputs
    a = fixtures.make("ppo", "float64").float64()
    p = {k: a[f"params/{k}"] for k in PARAMS}
    probs = np.exp(log_softmax(mlp(p, "actor", a["obs"])))
    onehot = np.eye(probs.shape[1])[a["actions"]]
    adv = normalize(a["advantages"], ddof=1)
    vanilla = -np.mean(adv[:, None] * (onehot - probs), axis=0)  # ∇b2 of −mean(Â·logπ(a|s)) at r = 1
    for fw in ("torch", "jax"):
        for out in (stopped, attached):
            np.testing.assert_array_equal(out[fw]["ratio"], np.ones_like(out[fw]["ratio"]))  # exp(0), exactly
        np.testing.assert_allclose(stopped[fw]["pg_grads/actor/l2/bias"], vanilla, rtol=1e-12, atol=1e-15)
        assert np.all(attached[fw]["pg_grads/actor/l2/bias"] == 0)  # ∇ exp(logπ − logπ) = 0: nothing learned
        for key in ("loss", "pg_loss", "v_loss", "entropy", *(f"grads/{k}" for k in CRITIC)):  # same values
            np.testing.assert_allclose(attached[fw][key], stopped[fw][key], rtol=1e-12, atol=1e-15)


def test_value_clipping_changes_the_critic_only() -> None:
    clipped = case_result("ppo", "clipped", "float64", "random").outputs
    plain = case_result("ppo", "value_unclipped", "float64", "random").outputs
    for fw in ("torch", "jax"):
        assert abs(float(clipped[fw]["v_loss"] - plain[fw]["v_loss"])) > 1e-4  # some value change is clipped
        for key in ("pg_loss", "entropy", "ratio", *(f"grads/{k}" for k in ACTOR)):
            np.testing.assert_allclose(clipped[fw][key], plain[fw][key], rtol=1e-12, atol=1e-15)
        assert np.max(np.abs(clipped[fw]["grads/critic/l2/bias"] - plain[fw]["grads/critic/l2/bias"])) > 1e-4
        ratio = clipped[fw]["ratio"]
        assert np.any(np.abs(np.log(ratio)) > np.log1p(0.2)) and np.any(np.abs(ratio - 1) < 0.2)  # both regimes


@pytest.mark.parametrize("impl", [tp, jp], ids=["torch", "jax"])
def test_values_of_shape_b1_are_refused(impl) -> None:
    fx = fixtures.make("ppo", "float32")
    agent = impl.build_agent(fx)
    lib = torch.tensor if impl is tp else jnp.asarray
    batch = {k: lib(np.array(fx[k])) for k in ("obs", "actions", "old_logprobs", "advantages", "returns")}
    batch["values"] = lib(np.array(fx["values"])[:, None])
    coefs = {"clip_coef": 0.2, "vf_coef": 0.5, "ent_coef": 0.01}
    b = fx.dims["B"]
    with pytest.raises(ValueError, match=rf"ppo_losses: actions has shape \({b},\) but values has shape \({b}, 1\)"):
        impl.ppo_losses(agent, batch, coefs, "clipped")
    with pytest.raises(ValueError, match="variant expected one of"):
        impl.normalize_advantages(batch["advantages"], "normalised")


def test_attached_advantages_never_train_the_critic_through_the_policy_loss() -> None:
    """Issue 28 item 7: a user who computes Â = R − V(s) with the critic and leaves it attached.

    rlax stops Â by default, torch's ppo_losses once did not: the critic then trained through the
    policy loss (gradient 0.30) in torch and not in JAX. Both stop it now; the same loss without
    the stop (the positive control) does move the critic.
    """
    from detach_parity.jax_impl._common import flat, numerics
    from detach_parity.torch_impl._layout import grads_of
    from flax import nnx

    fx = fixtures.make("ppo", "float64")
    keys = ("obs", "actions", "old_logprobs", "returns", "values")
    coefs = {k: fx.scalar(k) for k in ("clip_coef", "vf_coef", "ent_coef")}

    agent = tp.build_agent(fx)
    batch = {k: torch.tensor(np.array(fx[k])) for k in keys}
    batch["advantages"] = batch["returns"] - agent(batch["obs"], batch["actions"])[2]  # attached to the critic
    tp.ppo_losses(agent, batch, coefs, "clipped")["pg_loss"].backward()
    torch_critic = grads_of(agent.critic)

    with numerics("float64"):
        jagent = jp.build_agent(fx)
        jbatch = {k: jnp.asarray(fx[k]) for k in keys}

        def pg_loss(agent):
            adv = jbatch["returns"] - agent(jbatch["obs"], jbatch["actions"])[2]  # attached to the critic
            return jp.ppo_losses(agent, {**jbatch, "advantages": adv}, coefs, "clipped")["pg_loss"]

        jax_critic = flat(nnx.grad(pg_loss)(jagent)["critic"])
    assert sorted(torch_critic) == sorted(jax_critic) == sorted(k.removeprefix("critic/") for k in CRITIC)
    for k in torch_critic:
        assert np.all(torch_critic[k] == 0.0) and np.all(np.asarray(jax_critic[k]) == 0.0), k

    # the positive control: the surrogate with an attached Â reaches the critic
    agent.zero_grad(set_to_none=True)
    logp, _, value = agent(batch["obs"], batch["actions"])
    adv = tp.normalize_advantages(batch["returns"] - value, "clipped")
    ratio = (logp - batch["old_logprobs"]).exp()
    eps = coefs["clip_coef"]
    torch.max(-adv * ratio, -adv * torch.clamp(ratio, 1 - eps, 1 + eps)).mean().backward()
    leaked = np.sqrt(sum(float(np.sum(g**2)) for g in grads_of(agent.critic).values()))
    assert leaked > 0.05, leaked
