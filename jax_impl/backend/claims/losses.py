"""claims, losses: where a loss stops its gradient, run in JAX.

What it teaches: the gradients of the same losses as the torch checks, with
jax.lax.stop_gradient: a plain loss by hand (C03), the stopped DQN target (C08), one task kept
out of a shared trunk (C12), first-order MAML (C13), attention weights cut from Q and K (C14),
a policy-gradient loss on stopped logits (C17).
Gradient flow: loss(f(theta), stop_gradient(g(theta))): only f's path reaches theta; the
stopped input is a constant (its own parameters get an exactly zero gradient).
Port note: torch_impl/backend/claims/losses.py: torch reports a cut parameter as .grad None and raises
where JAX is silent (backward through detached logits); jax.grad on a non-scalar raises a
TypeError as torch's backward raises a RuntimeError.
Shapes: B samples, D inputs, A actions, N tokens, E head width (the toys in shared/core/toys.py).
Reference: JAX docs, "The Autodiff Cookbook"; Mnih et al. 2015 (doi:10.1038/nature14236);
Finn et al. 2017, arXiv:1703.03400 (MAML).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

from ....shared.core.toys import toy
from .evidence import array, error, evidence, grad_state, rel_diff

__all__ = ["check_c03", "check_c08", "check_c12", "check_c13", "check_c14", "check_c17"]

stop = jax.lax.stop_gradient


@evidence
def check_c03() -> dict:
    """C03: y = w x + b with w = 3, x = 2, b = 1, loss (y - 5)^2.

    Returns: y, loss, and the gradients w.r.t. w, x, b (expected 7, 4, 8, 12, 4).
    """
    loss = lambda w, x, b: (w * x + b - 5) ** 2
    value, (gw, gx, gb) = jax.value_and_grad(loss, argnums=(0, 1, 2))(3.0, 2.0, 1.0)
    return {"y": 3.0 * 2.0 + 1.0, "loss": float(value), "w_grad": float(gw), "x_grad": float(gx), "b_grad": float(gb)}


def _td_target(d: dict, target_w: jax.Array) -> jax.Array:
    """y [B] = r + gamma (1 - done) max_a s2 @ target_w, stopped."""
    q_next = (array(d["s2"]) @ target_w).max(axis=1)
    y = array(d["r"]) + d["gamma"] * (1 - array(d["done"])) * q_next
    return stop(y)  # GRAD-FLOW: C08 TD target is a constant for the online net


@evidence
def check_c08() -> dict:
    """C08: the TD target at training time, stopped: the target net's gradient is zero, not None.

    Returns: online / target gradient states and max |stored - fresh| target after one online
    step and a target sync (the NameError is Python's, shown by the torch check).
    """
    d = toy("dqn")
    online, target = array(d["online"]), array(d["target"])

    def td_loss(online: jax.Array, target: jax.Array) -> jax.Array:
        q = jnp.take_along_axis(array(d["s"]) @ online, array(d["a"])[:, None], axis=1)[:, 0]
        return 0.5 * jnp.mean((_td_target(d, target) - q) ** 2)

    @jax.jit
    def train(online: jax.Array, target: jax.Array) -> tuple[jax.Array, ...]:
        stored = _td_target(d, target)  # computed at collection time and kept in the buffer
        g_online, g_target = jax.grad(td_loss, argnums=(0, 1))(online, target)
        synced = online - 0.5 * g_online  # one online step, then the target sync
        return g_online, g_target, stored - _td_target(d, synced)

    g_online, g_target, stale = train(online, target)
    return {
        "online_nonzero": grad_state(g_online) == "nonzero",
        "target_grad_zero": grad_state(g_target) == "zero",
        "stale_max_abs": float(np.abs(stale).max()),
    }


def _multitask(p: dict, d: dict, isolate: bool, tasks: tuple[int, ...] = (1, 2)) -> jax.Array:
    f = jnp.tanh(array(d["x"]) @ p["trunk_w"] + p["trunk_b"])
    f2 = stop(f) if isolate else f  # GRAD-FLOW: C12 task 2 does not shape the trunk
    loss = 0.0
    if 1 in tasks:
        loss = loss + jnp.mean((f @ p["head1"] - array(d["y1"])) ** 2)
    if 2 in tasks:
        loss = loss + jnp.mean((f2 @ p["head2"] - array(d["y2"])) ** 2)
    return loss


@evidence
def check_c12() -> dict:
    """C12: multitask isolation with stop_gradient: the trunk gradient is task 1's alone.

    Returns: max |trunk grad (isolated) - trunk grad (task 1 alone)| / max |task 1's|, the same without
    isolation, whether head 2 learns, and the error of jax.grad on a [B, 1] output.
    """
    d = toy("multitask")
    p = {k: array(d[k]) for k in ("trunk_w", "trunk_b", "head1", "head2")}
    grad = jax.grad(_multitask)
    iso, alone, joint = jax.jit(lambda p: (grad(p, d, True), grad(p, d, False, (1,)), grad(p, d, False)))(p)
    diff = lambda a, b: max(rel_diff(a[k], b[k]) for k in ("trunk_w", "trunk_b"))
    head1_out = lambda p: jnp.tanh(array(d["x"]) @ p["trunk_w"] + p["trunk_b"]) @ p["head1"]
    return {
        "isolated_vs_task1_max_rel": diff(iso, alone),
        "joint_vs_task1_max_rel": diff(joint, alone),
        "head2_grad_nonzero": grad_state(iso["head2"]) == "nonzero",
        "non_scalar_grad": error(lambda: jax.grad(head1_out)(p)),
    }


def _maml_losses(d: dict) -> tuple[Callable, Callable]:
    inner = lambda th: jnp.mean((jnp.tanh(array(d["x_in"]) @ th) - array(d["y_in"])) ** 2)
    outer = lambda th: jnp.mean((jnp.tanh(array(d["x_out"]) @ th) - array(d["y_out"])) ** 2)
    return inner, outer


def _maml_grad(d: dict, theta: jax.Array, first_order: bool) -> jax.Array:
    inner, outer = _maml_losses(d)

    def meta(theta: jax.Array) -> jax.Array:
        g = jax.grad(inner)(theta)
        if first_order:
            g = stop(g)  # GRAD-FLOW: C13 first-order MAML: the inner gradient is a constant
        return outer(theta - d["alpha"] * g)

    return jax.grad(meta)(theta)


@evidence
def check_c13() -> dict:
    """C13: first-order MAML (inner gradient stopped) drops the Hessian term.

    Returns: second- and first-order meta-gradients, their relative difference, and the max
    error of each against its closed form (as the torch check).
    """
    d = toy("maml")
    inner, outer = _maml_losses(d)
    alpha = float(d["alpha"])

    @jax.jit
    def both(theta: jax.Array) -> tuple[jax.Array, ...]:
        g_out = jax.grad(outer)(theta - alpha * jax.grad(inner)(theta))
        closed_so = (jnp.eye(3) - alpha * jax.hessian(inner)(theta)) @ g_out
        return _maml_grad(d, theta, False), _maml_grad(d, theta, True), closed_so, g_out

    so, fo, closed_so, g_out = (np.asarray(a) for a in both(array(d["theta"])))
    return {
        "second_order": so.tolist(),
        "first_order": fo.tolist(),
        "relative_difference": float(np.linalg.norm(so - fo) / np.linalg.norm(so)),
        "second_order_vs_closed_form": float(np.abs(so - closed_so).max()),
        "first_order_vs_closed_form": float(np.abs(fo - g_out).max()),
    }


def _attention_loss(p: dict, d: dict, stop_weights: bool) -> jax.Array:
    x = array(d["x"])
    q, k, v = x @ p["wq"], x @ p["wk"], x @ p["wv"]  # [N, E]
    a = jax.nn.softmax(q @ k.T / math.sqrt(2), axis=-1)  # [N, N]
    if stop_weights:
        a = stop(a)  # GRAD-FLOW: C14 attention weights as constants
    return jnp.sum((a @ v - array(d["target"])) ** 2)


@evidence
def check_c14() -> dict:
    """C14: stopped attention weights: dW_q and dW_k are zero, dW_v is unchanged.

    Returns: whether dW_q, dW_k are zero stopped / nonzero not, and max |dW_v difference| / max |dW_v|.
    """
    d = toy("attention")
    p = {k: array(d[k]) for k in ("wq", "wk", "wv")}
    grad = jax.grad(_attention_loss)
    stopped, full = jax.jit(lambda p: (grad(p, d, True), grad(p, d, False)))(p)
    return {
        "wq_wk_grad_zero_stopped": grad_state(stopped["wq"]) == "zero" and grad_state(stopped["wk"]) == "zero",
        "wq_wk_grad_nonzero_full": grad_state(full["wq"]) == "nonzero" and grad_state(full["wk"]) == "nonzero",
        "wv_grad_max_rel_diff": rel_diff(stopped["wv"], full["wv"]),
    }


@evidence
def check_c17() -> dict:
    """C17: a policy-gradient loss on stopped logits gives all-zero gradients, silently.

    Returns: the policy gradient state with and without stop_gradient on the logits.
    """
    d = toy("policy")
    s, a, ret = array(d["s"]), array(d["a"]), array(d["ret"])

    def pg_loss(w: jax.Array, stop_logits: bool) -> jax.Array:
        logits = s @ w  # [B, A]
        if stop_logits:
            logits = stop(logits)  # GRAD-FLOW: C17 the bug: policy-gradient loss on stopped logits
        logp = jnp.take_along_axis(jax.nn.log_softmax(logits, axis=1), a[:, None], axis=1)[:, 0]
        return -jnp.mean(logp * ret)

    grad = jax.grad(pg_loss)
    plain, stopped = jax.jit(lambda w: (grad(w, False), grad(w, True)))(array(d["w"]))
    return {"grad_state": grad_state(plain), "stopped_logits_grad_state": grad_state(stopped)}
