"""dqn_target: stopped targets, the max tie, semi vs residual gradient, target updates, P14 and P17 (claim C08)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
import torch
from conftest import assert_same_to_rounding, case_result
from detach_parity.jax_impl import dqn_target as jd
from detach_parity.jax_impl._common import flat
from detach_parity.shared.core import fixtures
from detach_parity.shared.core.oracle import fd_grad
from detach_parity.shared.scenarios.dqn_target import DONE_ROW, LAYERS, PARAMS, TIE_ACTIONS, TIE_ROW, q_values
from detach_parity.torch_impl import dqn_target as td
from detach_parity.torch_impl._common import field
from detach_parity.torch_impl._layout import grads_of
from flax import nnx

ONLINE = [f"grads/online/{k}" for k in LAYERS]


def _arrays(fx):
    a = fx.float64()
    return a, {k: a[f"params/{k}"] for k in PARAMS}


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize(
    "seed", [0, 2537]
)  # 2537: H = 4, A = 3, where XLA's float64 dot broke a tie of several products
def test_fixture_tie_is_exact_and_the_max_in_both_frameworks(dtype: str, seed: int) -> None:
    fx = fixtures.make("dqn_target", dtype, seed=seed)
    i, j = TIE_ACTIONS
    online, target = td.build_networks(fx)
    with torch.no_grad():
        qs = {"torch online": online(field(fx, "next_obs")), "torch target": target(field(fx, "next_obs"))}
    with jax.enable_x64(dtype == "float64"):
        jon, jtg = jd.build_networks(fx)
        qs.update({"jax online": jon(jnp.asarray(fx["next_obs"])), "jax target": jtg(jnp.asarray(fx["next_obs"]))})
        qs = {k: np.asarray(v) for k, v in qs.items()}
    for name, q in qs.items():
        assert q.dtype == np.dtype(dtype), name
        assert q[TIE_ROW, i] == q[TIE_ROW, j], f"{name}: no exact tie {q[TIE_ROW]}"
        assert q[TIE_ROW, i] > q[TIE_ROW, 0] and np.argmax(q[TIE_ROW]) == i, name


def test_how_each_max_distributes_the_gradient_at_a_tie() -> None:
    """Measured: torch q.max(1) -> first index; torch.amax and jnp.max -> split; greedy -> first, both sides."""
    q = np.array([[1.0, 3.0, 3.0, 0.5]])
    first, split = np.array([[0.0, 1.0, 0.0, 0.0]]), np.array([[0.0, 0.5, 0.5, 0.0]])

    def torch_grad(fn):
        t = torch.tensor(q, requires_grad=True)
        fn(t).sum().backward()
        return t.grad.numpy()

    # exact: the lesson is which index a tie's gradient reaches; 0, 1/2 and 1 are exact on every CPU
    np.testing.assert_array_equal(torch_grad(lambda t: t.max(dim=1).values), first)
    np.testing.assert_array_equal(torch_grad(lambda t: torch.amax(t, dim=1)), split)
    np.testing.assert_array_equal(torch_grad(lambda t: td.greedy(t)[0]), first)
    np.testing.assert_array_equal(jax.grad(lambda x: jnp.max(x, axis=1).sum())(jnp.asarray(q)), split)
    np.testing.assert_array_equal(jax.grad(lambda x: jd.greedy(x)[0].sum())(jnp.asarray(q)), first)


def _jax_grads(fx, max_fn, stopped: bool) -> dict[str, np.ndarray]:
    """Online gradients of the TD loss with y = r + γ(1 − done)·max_fn(Q_online(s′)), float64."""
    with jax.enable_x64(True):
        online, _ = jd.build_networks(fx)
        b = {k: jnp.asarray(fx[k]) for k in ("obs", "actions", "rewards", "next_obs", "dones")}

        def loss(net):
            q_sa = jnp.take_along_axis(net(b["obs"]), b["actions"][:, None], axis=1).squeeze(1)
            y = b["rewards"] + fx.scalar("gamma") * (1.0 - b["dones"]) * max_fn(net(b["next_obs"]))
            return jd.td_loss(q_sa, jax.lax.stop_gradient(y) if stopped else y)

        return {f"grads/online/{k}": np.asarray(v) for k, v in flat(nnx.grad(loss)(online)).items()}


def _torch_grads(fx, max_fn) -> dict[str, np.ndarray]:
    """The residual (unstopped) twin of _jax_grads in torch."""
    online, _ = td.build_networks(fx)
    b = {k: field(fx, k) for k in ("obs", "actions", "rewards", "next_obs", "dones")}
    q_sa = online(b["obs"]).gather(1, b["actions"][:, None]).squeeze(1)
    y = b["rewards"] + fx.scalar("gamma") * (1.0 - b["dones"]) * max_fn(online(b["next_obs"]))
    td.td_loss(q_sa, y).backward()
    return {f"grads/online/{k}": g for k, g in grads_of(online).items()}


def test_tie_convention_matters_for_the_residual_gradient() -> None:
    fx = fixtures.make("dqn_target", "float64")
    stored = case_result("dqn_target", "residual_gradient", "float64", "random").outputs
    pinned = _jax_grads(fx, lambda q: jd.greedy(q)[0], stopped=False)
    naive = _jax_grads(fx, lambda q: jnp.max(q, axis=1), stopped=False)
    t_first = _torch_grads(fx, lambda q: q.max(dim=1).values)
    t_split = _torch_grads(fx, lambda q: torch.amax(q, dim=1))
    for k in ONLINE:
        np.testing.assert_allclose(pinned[k], stored["jax"][k], rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(t_first[k], stored["torch"][k], rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(t_split[k], naive[k], rtol=1e-12, atol=1e-14)
    # the two conventions differ exactly by the tie row's bootstrap term: (γ(1 − d)δ / B)·(∇split − ∇first)
    a, p = _arrays(fx)
    delta = stored["torch"]["td_errors"][TIE_ROW]
    coef = a["gamma"] * (1.0 - a["dones"][TIE_ROW]) * delta / len(a["actions"])
    i, j = TIE_ACTIONS
    h = np.tanh(p["online/l1/bias"])  # hidden features at s′ = 0
    expect_l2 = np.zeros_like(p["online/l2/kernel"])
    expect_l2[:, i], expect_l2[:, j] = -0.5 * coef * h, 0.5 * coef * h
    np.testing.assert_allclose(
        naive["grads/online/l2/kernel"] - pinned["grads/online/l2/kernel"], expect_l2, atol=1e-14
    )
    assert abs(coef) > 1e-3 and np.max(np.abs(expect_l2)) > 1e-3


@pytest.mark.parametrize("max_name", ["jnp.max", "greedy"])
def test_tie_convention_cannot_matter_for_a_stopped_target(max_name: str) -> None:
    fx = fixtures.make("dqn_target", "float64")
    max_fn = (lambda q: jnp.max(q, axis=1)) if max_name == "jnp.max" else (lambda q: jd.greedy(q)[0])
    got = _jax_grads(fx, max_fn, stopped=True)
    stored = case_result("dqn_target", "online_semi_gradient", "float64", "random").outputs["jax"]
    for k in ONLINE:  # only the value of the max enters, and at a tie the value is unambiguous
        np.testing.assert_allclose(got[k], stored[k], rtol=1e-13, atol=1e-15)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_residual_minus_semi_gradient_is_the_bootstrap_term(dtype: str) -> None:
    """residual − semi = (γ/B)·Σ δ_i (1 − done_i) ∇Q_online(s′_i, a*_i); forward values are identical."""
    semi = case_result("dqn_target", "online_semi_gradient", dtype, "random").outputs
    resid = case_result("dqn_target", "residual_gradient", dtype, "random").outputs
    a, p = _arrays(fixtures.make("dqn_target", dtype))
    rows = np.arange(len(a["actions"]))
    a_star = np.argmax(q_values(p, "online", a["next_obs"]), axis=1)
    weight = a["gamma"] * (1.0 - a["dones"]) * semi["torch"]["td_errors"].astype(np.float64) / len(rows)

    def bootstrap(q):
        return float(np.sum(weight * q_values(q, "online", a["next_obs"])[rows, a_star]))

    extra = fd_grad(bootstrap, p, wrt=[f"online/{k}" for k in LAYERS])
    rtol, atol = (1e-7, 1e-10) if dtype == "float64" else (2e-4, 1e-5)
    for fw in ("torch", "jax"):
        for key in ("loss", "td_errors", "td_targets"):
            np.testing.assert_allclose(resid[fw][key], semi[fw][key], rtol=rtol)
        for k in LAYERS:
            diff = resid[fw][f"grads/online/{k}"].astype(np.float64) - semi[fw][f"grads/online/{k}"]
            np.testing.assert_allclose(diff, extra[f"online/{k}"], rtol=rtol, atol=atol)
        assert np.max(np.abs(extra["online/l2/kernel"])) > 1e-2
    # the lesson states this sign for ∇L (it once gave the update direction's −γ(1 − done)·δ·∇Q as "the gradient")
    assert "∇L gains +(γ/B)·Σ (1 − done)·δ·∇Q(s′, a*)" in fixtures.make("dqn_target", dtype).spec.lesson


@pytest.mark.parametrize("variant", ["target_network", "online_semi_gradient", "double_dqn", "residual_gradient"])
def test_terminal_transition_target_is_the_reward(variant: str) -> None:
    fx = fixtures.make("dqn_target", "float64")
    a, p = _arrays(fx)
    out = case_result("dqn_target", variant, "float64", "random").outputs
    for fw in ("torch", "jax"):
        assert out[fw]["td_targets"][DONE_ROW] == fx["rewards"][DONE_ROW]
    # dropping (1 − done) would change this row by γ·v(s′), which is not small
    assert abs(a["gamma"] * q_values(p, "online", a["next_obs"])[DONE_ROW].max()) > 1e-2


def test_double_dqn_differs_from_target_network_only_where_the_argmaxes_differ() -> None:
    a, p = _arrays(fixtures.make("dqn_target", "float64"))
    differ = np.argmax(q_values(p, "online", a["next_obs"]), 1) != np.argmax(q_values(p, "target", a["next_obs"]), 1)
    differ &= a["dones"] == 0
    assert differ.any() and not differ.all()
    tn = case_result("dqn_target", "target_network", "float64", "random").outputs
    dd = case_result("dqn_target", "double_dqn", "float64", "random").outputs
    for fw in ("torch", "jax"):
        why = f"{fw}: two variants pick the same target Q-value where the argmaxes agree"
        assert_same_to_rounding(tn[fw]["td_targets"][~differ], dd[fw]["td_targets"][~differ], why)
        assert np.all(tn[fw]["td_targets"][differ] > dd[fw]["td_targets"][differ])  # max ≥ any other action


def test_torch_target_grad_is_none_not_zero() -> None:
    """P11: torch leaves the target network's .grad None; the output maps it to explicit zeros, as JAX gives."""
    fx = fixtures.make("dqn_target", "float64")
    online, target = td.build_networks(fx)
    opt = torch.optim.SGD(online.parameters(), lr=fx.scalar("lr"))
    batch = {k: field(fx, k) for k in ("obs", "actions", "rewards", "next_obs", "dones")}
    td.train_step(online, target, opt, batch, field(fx, "gamma"), "target_network")
    assert all(q.grad is None for q in target.parameters())
    assert all(q.grad is not None for q in online.parameters())


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_soft_and_hard_target_updates(dtype: str) -> None:
    fx = fixtures.make("dqn_target", dtype)
    tau = fx.scalar("tau")
    out = case_result("dqn_target", "target_network", dtype, "random").outputs
    rtol = 1e-13 if dtype == "float64" else 1e-6
    for fw in ("torch", "jax"):
        for k in LAYERS:
            new, old = out[fw][f"params/online/{k}"], fx[f"params/target/{k}"]
            np.testing.assert_array_equal(out[fw][f"params/target_hard/{k}"], new)  # exact: a hard update copies
            np.testing.assert_allclose(out[fw][f"params/target_soft/{k}"], tau * new + (1 - tau) * old, rtol=rtol)


def test_incremental_update_argument_order_p17() -> None:
    """optax.incremental_update(new, old, τ) = τ·new + (1 − τ)·old: swapped, the target jumps to the online net."""
    online, target, tau = jnp.array([1.0, 2.0]), jnp.array([0.0, 0.0]), 0.05
    right = optax.incremental_update(new_tensors=online, old_tensors=target, step_size=tau)
    swapped = optax.incremental_update(target, online, tau)
    np.testing.assert_allclose(right, [0.05, 0.1], rtol=1e-6)
    np.testing.assert_allclose(swapped, [0.95, 1.9], rtol=1e-6)  # a near-hard copy, without an error
    t = torch.tensor([0.0, 0.0])
    t.lerp_(torch.tensor([1.0, 2.0]), tau)  # torch's idiom: weight τ on the online (end) tensor
    np.testing.assert_allclose(t.numpy(), right, rtol=1e-6)


@pytest.mark.parametrize("impl", [td, jd], ids=["torch", "jax"])
def test_td_loss_refuses_b1_against_b_p14(impl) -> None:
    lib = torch.tensor if impl is td else jnp.asarray
    q = np.array([[1.0], [2.0], [0.5], [-1.0]], dtype=np.float32)
    y = np.array([1.5, 1.0, 0.0, -0.5], dtype=np.float32)
    assert np.mean((y - q) ** 2) == 1.8125  # what broadcasting to [B, B] would silently give
    with pytest.raises(ValueError, match=r"td_loss: q has shape \(4, 1\) but target has shape \(4,\)"):
        impl.td_loss(lib(q), lib(y))
    assert float(impl.td_loss(lib(q[:, 0]), lib(y))) == 0.5 * 0.4375
