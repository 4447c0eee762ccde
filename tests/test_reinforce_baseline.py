"""reinforce_baseline: the policy loss trains the baseline only without the stop, by a closed-form amount."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import rlax
import torch
from conftest import case_result
from detach_parity.jax_impl import reinforce_baseline as jr
from detach_parity.shared.apps import selfcheck
from detach_parity.shared.core import fixtures
from detach_parity.shared.scenarios.reinforce_baseline import PARAMS, mlp
from detach_parity.torch_impl import reinforce_baseline as tr

POLICY = [k for k in PARAMS if k.startswith("policy/")]
BASELINE = [k for k in PARAMS if k.startswith("baseline/")]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_missing_stop_adds_the_policy_push_to_the_baseline_only(dtype: str) -> None:
    good = case_result("reinforce_baseline", "baseline_stopped", dtype, "random").outputs
    bad = case_result("reinforce_baseline", "baseline_not_stopped", dtype, "random").outputs
    rtol, atol = (1e-12, 1e-14) if dtype == "float64" else (1e-5, 1e-7)
    a = fixtures.make("reinforce_baseline", "float64").float64()
    p = {k: a[f"params/{k}"] for k in PARAMS}
    logits = mlp(p, "policy", a["obs"])
    logp = logits - np.log(np.exp(logits).sum(1, keepdims=True))
    steps = np.arange(len(a["actions"]))
    # −mean(γ^t·log π(a_t|s_t)·(G_t − b_t)) pushes the output bias of b by mean(γ^t·log π(a_t|s_t)) < 0
    expect = np.mean(a["gamma"] ** steps * logp[steps, a["actions"]])
    assert expect < -0.1
    for fw in ("torch", "jax"):
        for key in ("loss", "policy_loss", "baseline_loss", "returns", "advantages", *(f"grads/{k}" for k in POLICY)):
            np.testing.assert_allclose(bad[fw][key], good[fw][key], rtol=rtol, atol=atol)  # same values, same policy
        for k in BASELINE:  # baseline(no stop) = baseline(stop) + ∇baseline policy_loss
            push = bad[fw][f"policy_grads/{k}"]
            np.testing.assert_allclose(bad[fw][f"grads/{k}"], good[fw][f"grads/{k}"] + push, rtol=rtol, atol=atol)
        np.testing.assert_allclose(bad[fw]["policy_grads/baseline/l2/bias"], [expect], rtol=max(rtol, 1e-7))


def test_returns_by_hand() -> None:
    rewards, gamma = np.array([1.0, 0.0, 2.0]), 0.5
    expect = [1.0 + 0.5 * (0.0 + 0.5 * 2.0), 0.0 + 0.5 * 2.0, 2.0]
    np.testing.assert_allclose(tr.discounted_returns(torch.tensor(rewards), gamma).numpy(), expect, rtol=1e-15)
    with jax.enable_x64(True):
        out = jr.discounted_returns(jnp.asarray(rewards), jnp.asarray(gamma))
        np.testing.assert_allclose(np.asarray(out), expect, rtol=1e-15)


def test_rlax_stops_the_advantage_by_default() -> None:
    """The JAX stop is rlax's flag: on by default, so a baseline inside adv_t gets no gradient unless it is off."""
    logits, actions, weights = jnp.array([[0.3, -0.2], [0.1, 0.4]]), jnp.array([0, 1]), jnp.ones(2)

    def loss(b, **flag):
        return rlax.policy_gradient_loss(logits, actions, jnp.array([1.0, -0.5]) - b, weights, **flag)

    b = jnp.array([0.2, 0.1])
    assert np.all(np.asarray(jax.grad(loss)(b)) == 0)
    assert np.all(np.asarray(jax.grad(lambda v: loss(v, use_stop_gradient=False))(b)) != 0)


@pytest.mark.parametrize("impl", [tr, jr], ids=["torch", "jax"])
def test_baselines_of_shape_t1_are_refused(impl) -> None:
    lib = torch.tensor if impl is tr else jnp.asarray
    logits, baselines = lib(np.zeros((4, 3))), lib(np.zeros((4, 1)))
    actions, returns = lib(np.zeros(4, dtype=np.int64)), lib(np.zeros(4))
    with pytest.raises(
        ValueError, match=r"reinforce_losses: baselines has shape \(4, 1\) but returns has shape \(4,\)"
    ):
        impl.reinforce_losses(logits, baselines, actions, returns, 0.9, "baseline_stopped")
    with pytest.raises(ValueError, match=r"discounted_returns: rewards expected rank 1 \[T\], got shape \(4, 1\)"):
        impl.discounted_returns(baselines, 0.9)
    with pytest.raises(ValueError, match="variant expected one of"):
        impl.reinforce_losses(logits, returns, actions, returns, 0.9, "stopped")


def test_selfcheck_finds_rlax_stop_flags(tmp_path) -> None:
    """rlax's use_stop_gradient / stop_target_gradients are stops: True -> False, a switch inverted."""
    for side in ("torch_impl", "jax_impl"):
        (tmp_path / side).mkdir()
    src = "a = rlax.policy_gradient_loss(l, a, adv, w, use_stop_gradient=stop)\nb = f(x, stop_target_gradients=True)\n"
    (tmp_path / "jax_impl" / "demo.py").write_text(src, encoding="utf-8")
    found = [(s.construct, s.original, s.replacement) for s in selfcheck.find_sites(tmp_path)]
    assert found == [
        ("use_stop_gradient=<switch> (rlax's stop)", "stop", "not (stop)"),
        ("stop_target_gradients=True (rlax's stop)", "True", "False"),
    ]
