"""claims: the tutorial claims C01–C22 about detach(), run in JAX to see what the port does.

What it teaches: where the JAX port of each claim behaves differently from PyTorch: errors
become silent zero gradients, arrays are immutable (no aliasing writes), jnp.std has ddof=0,
stop_gradient prunes the stopped part's residuals at trace time.
Gradient flow: each check builds the smallest function that shows its claim (records and
verdicts in shared/claims.py).
Port note: JAX has no grad mode, no requires_grad flag, no in-place writes and no inference
tensors; where a claim is about those alone the check says so ({"applies": False, "why": ...}).
Shapes: T time steps, B samples, D inputs, H hidden units, C outputs.
Reference: JAX docs, "The Autodiff Cookbook" and jax.lax.stop_gradient.
"""

from __future__ import annotations

import contextlib
import functools
import io
import math
import re
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx
from jax.ad_checkpoint import print_saved_residuals

from shared.core.toys import toy

__all__ = [
    "check_c01",
    "check_c02",
    "check_c03",
    "check_c04",
    "check_c05",
    "check_c06",
    "check_c07",
    "check_c08",
    "check_c09",
    "check_c10",
    "check_c11",
    "check_c12",
    "check_c13",
    "check_c14",
    "check_c15",
    "check_c16",
    "check_c17",
    "check_c18",
    "check_c19",
    "check_c20",
    "check_c21",
    "check_c22",
]

stop = jax.lax.stop_gradient
_ITEMSIZE = {"f64": 8, "f32": 4, "bf16": 2, "f16": 2, "i64": 8, "i32": 4, "bool": 1}


def _x64(check: Callable[[], dict]) -> Callable[[], dict]:
    """Run a check with float64 enabled (scoped: nothing leaks into other code)."""

    @functools.wraps(check)
    def run() -> dict:
        with jax.enable_x64(True):
            return check()

    return run


def _a(a: np.ndarray) -> jax.Array:
    return jnp.asarray(a)


def _error(fn: Callable[[], Any]) -> dict[str, str | None]:
    """The exception fn() raises, as {"type", "message"} (first line); type None if it returns."""
    try:
        fn()
    except Exception as exc:  # the check reports whatever the framework raises
        return {"type": type(exc).__name__, "message": str(exc).split("\n")[0]}
    return {"type": None, "message": ""}


def _residuals(fn: Callable, *args) -> dict[str, int]:
    """Residuals jax.grad would save for fn(*args): {"count", "bytes"} (jax.ad_checkpoint.print_saved_residuals)."""
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        print_saved_residuals(fn, *args)
    count, nbytes = 0, 0
    for line in buf.getvalue().splitlines():
        if m := re.match(r"(\w+)\[([\d,]*)\]", line.strip()):
            count += 1
            nbytes += _ITEMSIZE.get(m.group(1), 8) * math.prod(int(n) for n in m.group(2).split(",") if n)
    return {"count": count, "bytes": nbytes}


def _state(g: jax.Array) -> str:
    return "nonzero" if np.any(np.asarray(g) != 0) else "zero"


def _cos(a: np.ndarray, b: np.ndarray) -> float:
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def _global(grads) -> np.ndarray:
    """All leaves of a gradient pytree as one flat numpy vector (post-processing stays out of JAX)."""
    return np.concatenate([np.asarray(g).reshape(-1) for g in jax.tree.leaves(grads)])


@_x64
def check_c01() -> dict:
    """C01: JAX arrays are immutable: no write-through alias, item assignment raises.

    Returns: y after z = stop_gradient(y) and z.at[0].set(100), the new array, the
    item-assignment error.
    """
    y = jnp.array([1.0, 2.0, 3.0]) * 2
    z = stop(y)  # GRAD-FLOW: C01 a detached alias of y

    def assign() -> None:
        z[0] = 100.0

    written = z.at[0].set(100.0)
    return {"y_after_at_set": y.tolist(), "at_set_result": written.tolist(), "item_assignment": _error(assign)}


@_x64
def check_c02() -> dict:
    """C02: no requires_grad flag in JAX: the flag becomes the gradient (0 through stop_gradient).

    Returns: d sum(stop_gradient(2x)) / dx and d sum(2x) / dx at x = [1, 2].
    """
    x = jnp.array([1.0, 2.0])
    g_z = jax.grad(lambda x: stop(x * 2).sum())(x)  # GRAD-FLOW: C02 z is cut from x
    g_y = jax.grad(lambda x: (x * 2).sum())(x)
    return {"z_grad": g_z.tolist(), "y_grad": g_y.tolist()}


@_x64
def check_c03() -> dict:
    """C03: y = w x + b with w = 3, x = 2, b = 1, loss (y - 5)^2.

    Returns: y, loss, and the gradients w.r.t. w, x, b (expected 7, 4, 8, 12, 4).
    """
    loss = lambda w, x, b: (w * x + b - 5) ** 2
    value, (gw, gx, gb) = jax.value_and_grad(loss, argnums=(0, 1, 2))(3.0, 2.0, 1.0)
    return {"y": 3.0 * 2.0 + 1.0, "loss": float(value), "w_grad": float(gw), "x_grad": float(gx), "b_grad": float(gb)}


@_x64
def check_c04() -> dict:
    """C04: no error in JAX: the gradient through a stopped value is silently 0.

    Returns: d sum(stop_gradient(2x)) / dx at x = [1, 2] and the error (None).
    """
    x = jnp.array([1.0, 2.0])
    fn = lambda x: stop(x * 2).sum()  # GRAD-FLOW: C04 nothing to differentiate
    return {"grad": jax.grad(fn)(x).tolist(), "error": _error(lambda: jax.grad(fn)(x))}


def _three_layers() -> dict[str, dict[str, jax.Array]]:
    rng = np.random.default_rng(0)
    return {
        f"layer{i}": {"w": _a(rng.standard_normal((4, 4)) / 2), "b": _a(rng.standard_normal(4) / 10)} for i in (1, 2, 3)
    }


def _layers_loss(p: dict, x: jax.Array, where: str) -> jax.Array:
    dense = lambda name, h: h @ p[name]["w"] + p[name]["b"]
    h = dense("layer2", jax.nn.relu(dense("layer1", x)))
    if where == "below_layer3":
        h = stop(h)  # GRAD-FLOW: C05 fix: cut below layer3
    out = dense("layer3", h)
    if where == "layer3":
        out = stop(out)  # GRAD-FLOW: C05 as written: layer3 under no_grad
    return out.sum()


@_x64
def check_c05() -> dict:
    """C05: the JAX port of "layer3 under no_grad" runs and gives all-zero gradients.

    Returns: per layer "zero" / "nonzero" gradient for the written structure and the fix.
    """
    x, p = _a(toy("mlp")["x"]), _three_layers()
    states = lambda g: {k: _state(_global(v)) for k, v in g.items()}
    grad = jax.grad(_layers_loss)
    written, fixed = jax.jit(lambda p: (grad(p, x, "layer3"), grad(p, x, "below_layer3")))(p)
    return {"as_written": states(written), "fix_stop_below_layer3": states(fixed)}


def _mlp_params(d: dict) -> dict[str, jax.Array]:
    return {k: _a(d[k]) for k in ("w1", "b1", "w2", "b2", "head_w", "head_b")}


def _mlp_loss(p: dict, d: dict, how: str) -> jax.Array:
    x = _a(d["x"])
    f = jnp.tanh(jnp.tanh(x @ p["w1"] + p["b1"]) @ p["w2"] + p["b2"])
    if how == "stop":
        f = stop(f)  # GRAD-FLOW: C06 the head trains on fixed features
    return jnp.mean((f @ p["head_w"] + p["head_b"] - _a(d["y"])) ** 2)


@_x64
def check_c06() -> dict:
    """C06: stop_gradient prunes the backbone's residuals, but BatchNorm statistics still move.

    Returns: residual count and bytes with / without stop_gradient, whether the backbone
    gradient is zero, and whether nnx.BatchNorm's running mean moved in training mode when
    its output is stopped (and not in eval mode).
    """
    d = toy("mlp")
    p = _mlp_params(d)
    grads = jax.jit(jax.grad(lambda p: _mlp_loss(p, d, "stop")))(p)
    bn = nnx.BatchNorm(6, rngs=nnx.Rngs(0))  # float32 statistics
    forward = nnx.jit(lambda bn, x: stop(bn(x)))  # GRAD-FLOW: C06 the head trains on fixed features
    feats = (d["x"] @ d["w1"]).astype(np.float32)  # [B, H]
    before = np.asarray(bn.mean.get_value())
    bn.train()
    forward(bn, feats)
    moved_train = bool(np.any(np.asarray(bn.mean.get_value()) != before))
    before = np.asarray(bn.mean.get_value())
    bn.eval()
    forward(bn, feats)
    return {
        "residuals_none": _residuals(lambda p: _mlp_loss(p, d, "none"), p),
        "residuals_stop": _residuals(lambda p: _mlp_loss(p, d, "stop"), p),
        "backbone_grad_zero": all(_state(grads[k]) == "zero" for k in ("w1", "b1", "w2", "b2")),
        "bn_moved_train": moved_train,
        "bn_moved_eval": bool(np.any(np.asarray(bn.mean.get_value()) != before)),
    }


@_x64
def check_c07() -> dict:
    """C07: the zero-gradient port of a detach_()-frozen parameter is decayed by optax.adamw.

    Returns: the frozen leaf after one adamw step (lr 0.1, weight_decay 0.1) with a
    stop_gradient zero gradient, the expected 0.99 * w, and the leaf when frozen leaves are
    kept out of the optimizer (optax.partition).
    """
    params = {"w": jnp.array([1.0, -2.0, 3.0]), "head": jnp.array([0.5, 0.5, 0.5])}
    loss = lambda p: (p["head"] * stop(p["w"])).sum()  # GRAD-FLOW: C07 frozen by a zero gradient
    naive = optax.adamw(0.1, weight_decay=0.1)
    right = optax.partition(
        {"train": optax.adamw(0.1, weight_decay=0.1), "frozen": optax.set_to_zero()}, {"w": "frozen", "head": "train"}
    )

    @jax.jit
    def steps(params: dict) -> tuple[jax.Array, ...]:
        grads = jax.grad(loss)(params)
        decayed = optax.apply_updates(params, naive.update(grads, naive.init(params), params)[0])
        kept = optax.apply_updates(params, right.update(grads, right.init(params), params)[0])
        live = jax.grad(lambda p: (p["head"] * p["w"]).sum())(params)  # w unstopped: a non-zero gradient
        kept_live = optax.apply_updates(params, right.update(live, right.init(params), params)[0])
        return grads["w"], decayed["w"], kept["w"], kept_live["w"]

    zero_grad, decayed, kept, kept_live = steps(params)
    return {
        "zero_grad": zero_grad.tolist(),
        "frozen_after_adamw": decayed.tolist(),
        "expected_decay": [1.0 * 0.99, -2.0 * 0.99, 3.0 * 0.99],
        "frozen_after_partition": kept.tolist(),
        "frozen_after_partition_live_grad": kept_live.tolist(),
    }


def _td_target(d: dict, target_w: jax.Array) -> jax.Array:
    """y [B] = r + gamma (1 - done) max_a s2 @ target_w, stopped."""
    q_next = (_a(d["s2"]) @ target_w).max(axis=1)
    y = _a(d["r"]) + d["gamma"] * (1 - _a(d["done"])) * q_next
    return stop(y)  # GRAD-FLOW: C08 TD target is a constant for the online net


@_x64
def check_c08() -> dict:
    """C08: the TD target at training time, stopped: the target net's gradient is zero, not None.

    Returns: online / target gradient states and max |stored - fresh| target after one online
    step and a target sync (the NameError is Python's, shown by the torch check).
    """
    d = toy("dqn")
    online, target = _a(d["online"]), _a(d["target"])

    def td_loss(online: jax.Array, target: jax.Array) -> jax.Array:
        q = jnp.take_along_axis(_a(d["s"]) @ online, _a(d["a"])[:, None], axis=1)[:, 0]
        return 0.5 * jnp.mean((_td_target(d, target) - q) ** 2)

    @jax.jit
    def train(online: jax.Array, target: jax.Array) -> tuple[jax.Array, ...]:
        stored = _td_target(d, target)  # computed at collection time and kept in the buffer
        g_online, g_target = jax.grad(td_loss, argnums=(0, 1))(online, target)
        synced = online - 0.5 * g_online  # one online step, then the target sync
        return g_online, g_target, stored - _td_target(d, synced)

    g_online, g_target, stale = train(online, target)
    return {
        "online_nonzero": _state(g_online) == "nonzero",
        "target_grad_zero": _state(g_target) == "zero",
        "stale_max_abs": float(np.abs(stale).max()),
    }


def check_c09() -> dict:
    """C09: nothing to show in JAX: no inference mode, no inference tensors.

    Returns: {"applies": False, "why": ...}.
    """
    why = (
        "JAX has no grad mode and no inference tensors: a forward pass outside jax.grad records nothing, "
        "and its result can be fed into a differentiated function later; speed: `detach-parity bench`"
    )
    return {"applies": False, "why": why}


def _cuts(every: int | None, steps: int) -> jax.Array:
    """cut [T] bool: True where the hidden state is stopped before step t (every k steps, t > 0)."""
    return np.array([bool(every) and t > 0 and t % every == 0 for t in range(steps)])


def _rnn_loss(w: jax.Array, u: jax.Array, x: jax.Array, cut: jax.Array, all_steps: bool) -> jax.Array:
    def step(h: jax.Array, inp: tuple[jax.Array, jax.Array]) -> tuple[jax.Array, jax.Array]:
        x_t, cut_t = inp
        h = jnp.where(cut_t, stop(h), h)  # GRAD-FLOW: C10 truncate backprop through time
        h = jnp.tanh(h @ w + x_t @ u)
        return h, h.sum()

    h, sums = jax.lax.scan(step, jnp.zeros(4), (x, cut))
    return sums.sum() if all_steps else h.sum()


_rnn_grad = jax.jit(jax.grad(_rnn_loss, argnums=2), static_argnums=4)


def _reached(g: jax.Array) -> list[int]:
    g = np.asarray(g)
    return [t for t in range(g.shape[0]) if np.any(g[t] != 0)]


@_x64
def check_c10() -> dict:
    """C10: stop_gradient on the hidden state every k steps: which inputs x_t the last output reaches.

    Returns: {"none" | "every_10" | "every_1": [steps with a nonzero gradient]}, T = 40.
    """
    d = toy("rnn")
    w, u, x = _a(d["w"]), _a(d["u"]), _a(d["x"])
    return {
        name: _reached(_rnn_grad(w, u, x, _cuts(every, 40), False))
        for name, every in (("none", None), ("every_10", 10), ("every_1", 1))
    }


@_x64
def check_c11() -> dict:
    """C11: with a loss summed over all steps, stopping every 10 steps saves no residuals.

    Returns: residual count / bytes without and with stop_gradient every 10 steps, and whether
    x_0 still gets a gradient.
    """
    d = toy("rnn")
    w, u, x = _a(d["w"]), _a(d["u"]), _a(d["x"])
    out = {}
    for name, every in (("none", None), ("every_10", 10)):
        cut = _cuts(every, 40)
        out[f"residuals_{name}"] = _residuals(lambda w, u, x, cut=cut: _rnn_loss(w, u, x, cut, True), w, u, x)
        out[f"x0_grad_nonzero_{name}"] = _state(_rnn_grad(w, u, x, cut, True)[0]) == "nonzero"
    return out


def _multitask(p: dict, d: dict, isolate: bool, tasks: tuple[int, ...] = (1, 2)) -> jax.Array:
    f = jnp.tanh(_a(d["x"]) @ p["trunk_w"] + p["trunk_b"])
    f2 = stop(f) if isolate else f  # GRAD-FLOW: C12 task 2 does not shape the trunk
    loss = 0.0
    if 1 in tasks:
        loss = loss + jnp.mean((f @ p["head1"] - _a(d["y1"])) ** 2)
    if 2 in tasks:
        loss = loss + jnp.mean((f2 @ p["head2"] - _a(d["y2"])) ** 2)
    return loss


@_x64
def check_c12() -> dict:
    """C12: multitask isolation with stop_gradient: the trunk gradient is task 1's alone.

    Returns: max |trunk grad (isolated) - trunk grad (task 1 alone)|, the same without
    isolation, whether head 2 learns, and the error of jax.grad on a [B, 1] output.
    """
    d = toy("multitask")
    p = {k: _a(d[k]) for k in ("trunk_w", "trunk_b", "head1", "head2")}
    grad = jax.grad(_multitask)
    iso, alone, joint = jax.jit(lambda p: (grad(p, d, True), grad(p, d, False, (1,)), grad(p, d, False)))(p)
    diff = lambda a, b: max(float(np.abs(np.asarray(a[k] - b[k])).max()) for k in ("trunk_w", "trunk_b"))
    head1_out = lambda p: jnp.tanh(_a(d["x"]) @ p["trunk_w"] + p["trunk_b"]) @ p["head1"]
    return {
        "isolated_vs_task1_max_abs": diff(iso, alone),
        "joint_vs_task1_max_abs": diff(joint, alone),
        "head2_grad_nonzero": _state(iso["head2"]) == "nonzero",
        "non_scalar_grad": _error(lambda: jax.grad(head1_out)(p)),
    }


def _maml_losses(d: dict) -> tuple[Callable, Callable]:
    inner = lambda th: jnp.mean((jnp.tanh(_a(d["x_in"]) @ th) - _a(d["y_in"])) ** 2)
    outer = lambda th: jnp.mean((jnp.tanh(_a(d["x_out"]) @ th) - _a(d["y_out"])) ** 2)
    return inner, outer


def _maml_grad(d: dict, theta: jax.Array, first_order: bool) -> jax.Array:
    inner, outer = _maml_losses(d)

    def meta(theta: jax.Array) -> jax.Array:
        g = jax.grad(inner)(theta)
        if first_order:
            g = stop(g)  # GRAD-FLOW: C13 first-order MAML: the inner gradient is a constant
        return outer(theta - d["alpha"] * g)

    return jax.grad(meta)(theta)


@_x64
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

    so, fo, closed_so, g_out = (np.asarray(a) for a in both(_a(d["theta"])))
    return {
        "second_order": so.tolist(),
        "first_order": fo.tolist(),
        "relative_difference": float(np.linalg.norm(so - fo) / np.linalg.norm(so)),
        "second_order_vs_closed_form": float(np.abs(so - closed_so).max()),
        "first_order_vs_closed_form": float(np.abs(fo - g_out).max()),
    }


def _attention_loss(p: dict, d: dict, stop_weights: bool) -> jax.Array:
    x = _a(d["x"])
    q, k, v = x @ p["wq"], x @ p["wk"], x @ p["wv"]  # [N, E]
    a = jax.nn.softmax(q @ k.T / math.sqrt(2), axis=-1)  # [N, N]
    if stop_weights:
        a = stop(a)  # GRAD-FLOW: C14 attention weights as constants
    return jnp.sum((a @ v - _a(d["target"])) ** 2)


@_x64
def check_c14() -> dict:
    """C14: stopped attention weights: dW_q and dW_k are zero, dW_v is unchanged.

    Returns: whether dW_q, dW_k are zero stopped / nonzero not, and max |dW_v difference|.
    """
    d = toy("attention")
    p = {k: _a(d[k]) for k in ("wq", "wk", "wv")}
    grad = jax.grad(_attention_loss)
    stopped, full = jax.jit(lambda p: (grad(p, d, True), grad(p, d, False)))(p)
    return {
        "wq_wk_grad_zero_stopped": _state(stopped["wq"]) == "zero" and _state(stopped["wk"]) == "zero",
        "wq_wk_grad_nonzero_full": _state(full["wq"]) == "nonzero" and _state(full["wk"]) == "nonzero",
        "wv_grad_max_abs_diff": float(np.abs(np.asarray(stopped["wv"] - full["wv"])).max()),
    }


def check_c15() -> dict:
    """C15: bfloat16 compute with float32 parameters needs no stop; stopping the loss zeroes every gradient.

    Returns: the compute dtype, the gradient dtype and state, and the gradient state with the
    loss stopped (no error in JAX).
    """
    d = toy("mlp")
    x, w = jnp.asarray(d["x"], jnp.float32), jnp.asarray(d["w1"], jnp.float32)
    forward = lambda w: x.astype(jnp.bfloat16) @ w.astype(jnp.bfloat16)  # [B, H] bfloat16
    loss = lambda w: jnp.mean(forward(w).astype(jnp.float32) ** 2)
    stopped_loss = lambda w: stop(loss(w))  # GRAD-FLOW: C15 a detached loss has no graph
    out, g, g_stop = jax.jit(lambda w: (forward(w), jax.grad(loss)(w), jax.grad(stopped_loss)(w)))(w)
    out_dtype = str(out.dtype)
    return {
        "compute_dtype": out_dtype,
        "grad_dtype": str(g.dtype),
        "grad_state": _state(g),
        "stopped_loss_grad_state": _state(g_stop),
    }


@_x64
def check_c16() -> dict:
    """C16: stop_gradient removes the frozen part's backward at trace time.

    Returns: equations in the jaxpr of the gradient (all parameters) without / with stop_gradient
    and of the gradient w.r.t. the head only, and the residuals each saves; timings in the bench.
    """
    d = toy("mlp")
    p = _mlp_params(d)
    head = {k: p[k] for k in ("head_w", "head_b")}
    frozen = lambda h: _mlp_loss({**p, **h}, d, "none")  # GRAD-FLOW: C16 proper freezing
    eqns = lambda fn, args: len(jax.make_jaxpr(jax.grad(fn))(args).eqns)
    return {
        "none": {
            "grad_eqns": eqns(lambda p: _mlp_loss(p, d, "none"), p),
            "residuals": _residuals(lambda p: _mlp_loss(p, d, "none"), p),
        },
        "stop": {
            "grad_eqns": eqns(lambda p: _mlp_loss(p, d, "stop"), p),
            "residuals": _residuals(lambda p: _mlp_loss(p, d, "stop"), p),
        },
        "head_only": {"grad_eqns": eqns(frozen, head), "residuals": _residuals(frozen, head)},
        "speed": "see `detach-parity bench frozen_backbone`: jax full_finetune / detach_features / freeze_params against the ideal",
    }


@_x64
def check_c17() -> dict:
    """C17: a policy-gradient loss on stopped logits gives all-zero gradients, silently.

    Returns: the policy gradient state with and without stop_gradient on the logits.
    """
    d = toy("policy")
    s, a, ret = _a(d["s"]), _a(d["a"]), _a(d["ret"])

    def pg_loss(w: jax.Array, stop_logits: bool) -> jax.Array:
        logits = s @ w  # [B, A]
        if stop_logits:
            logits = stop(logits)  # GRAD-FLOW: C17 the bug: policy-gradient loss on stopped logits
        logp = jnp.take_along_axis(jax.nn.log_softmax(logits, axis=1), a[:, None], axis=1)[:, 0]
        return -jnp.mean(logp * ret)

    grad = jax.grad(pg_loss)
    plain, stopped = jax.jit(lambda w: (grad(w, False), grad(w, True)))(_a(d["w"]))
    return {"grad_state": _state(plain), "stopped_logits_grad_state": _state(stopped)}


def _explode_loss(p: dict, x: jax.Array, cut: jax.Array) -> jax.Array:
    def step(h: jax.Array, inp: tuple[jax.Array, jax.Array]) -> tuple[jax.Array, None]:
        x_t, cut_t = inp
        h = jnp.where(cut_t, stop(h), h)  # GRAD-FLOW: C18 truncation, not clipping
        return h @ p["w"] + x_t @ p["u"], None

    h, _ = jax.lax.scan(step, jnp.zeros(3), (x, cut))
    return h.sum()


@_x64
def check_c18() -> dict:
    """C18: optax.clip_by_global_norm keeps the direction; stop_gradient every step does not.

    Returns: the full gradient norm, the clipped norm and its cosine with the full gradient,
    the stop-every-step gradient norm and its cosine.
    """
    d = toy("explode")
    p, x = {"w": _a(d["w"]), "u": _a(d["u"])}, _a(d["x"])
    clip = optax.clip_by_global_norm(1.0)

    @jax.jit
    def grads(p: dict) -> tuple[dict, ...]:
        full = jax.grad(_explode_loss)(p, x, _cuts(None, 20))
        clipped, _ = clip.update(full, clip.init(full))
        return full, clipped, jax.grad(_explode_loss)(p, x, _cuts(1, 20))

    full_v, clipped_v, trunc_v = (_global(g) for g in grads(p))
    return {
        "full_norm": float(np.linalg.norm(full_v)),
        "clipped_norm": float(np.linalg.norm(clipped_v)),
        "clipped_cosine": _cos(clipped_v, full_v),
        "detach_every_step_norm": float(np.linalg.norm(trunc_v)),
        "detach_every_step_cosine": _cos(trunc_v, full_v),
    }


@_x64
def check_c19() -> dict:
    """C19: jnp.std has ddof=0 (torch .std() has ddof=1): the ported statistic differs.

    Returns: jnp.std of stopped features, jnp.std(ddof=1), and B.
    """
    d = toy("mlp")
    feats = stop(jnp.tanh(_a(d["x"]) @ _a(d["w1"])))  # GRAD-FLOW: C19 statistics of fixed features
    return {
        "std": jnp.std(feats, axis=0).tolist(),
        "std_ddof1": jnp.std(feats, axis=0, ddof=1).tolist(),
        "n": feats.shape[0],
    }


def check_c20() -> dict:
    """C20: nothing to compare in JAX: there is no no_grad mode.

    Returns: {"applies": False, "why": ...}.
    """
    why = (
        "JAX has no grad mode, no requires_grad flag and no in-place writes: stop_gradient is the "
        "only form, a value-level identity with a zero derivative; computing outside jax.grad records nothing"
    )
    return {"applies": False, "why": why}


@_x64
def check_c21() -> dict:
    """C21: no .data in JAX: "zeroing" the output makes a new array and the gradient stays sigmoid'(x).

    Returns: the gradient of sum(sigmoid(x)) at x = [1, 2, 3], the original output after
    out.at[:].set(0), and sigmoid'(x).
    """

    @jax.jit
    def run(x: jax.Array) -> tuple[jax.Array, ...]:
        out = jax.nn.sigmoid(x)
        zeroed = stop(out).at[:].set(0.0)  # GRAD-FLOW: C21 no alias: .at[].set returns a new array
        return jax.grad(lambda x: jax.nn.sigmoid(x).sum())(x), out, zeroed

    grad, out, zeroed = run(jnp.array([1.0, 2.0, 3.0]))
    s = 1 / (1 + np.exp(-np.array([1.0, 2.0, 3.0])))
    return {
        "grad": grad.tolist(),
        "out_after_zeroing": out.tolist(),
        "zeroed_copy": zeroed.tolist(),
        "right_grad": (s * (1 - s)).tolist(),
    }


@_x64
def check_c22() -> dict:
    """C22: stop_gradient on an input is a no-op; on features the loss needs it zeroes the backbone gradient.

    Returns: max |param grad difference| with vs without the input stopped, and the backbone
    gradient state with the features stopped.
    """
    d = toy("mlp")
    p = {"w1": _a(d["w1"]), "head_w": _a(d["head_w"])}

    def loss(p: dict, stop_input: bool, stop_features: bool) -> jax.Array:
        x = stop(_a(d["x"])) if stop_input else _a(d["x"])  # GRAD-FLOW: C22 an input never required grad
        f = jnp.tanh(x @ p["w1"])
        if stop_features:
            f = stop(f)  # GRAD-FLOW: C22 features cut from the loss
        return jnp.mean((f @ p["head_w"] - _a(d["y"])) ** 2)

    flags = ((False, False), (True, False), (False, True))
    plain, stopped_in, stopped_f = jax.jit(lambda p: [jax.grad(loss)(p, *f) for f in flags])(p)
    return {
        "grad_max_abs_diff": max(float(np.abs(np.asarray(plain[k] - stopped_in[k])).max()) for k in p),
        "backbone_grad_state_features_stopped": _state(stopped_f["w1"]),
    }
