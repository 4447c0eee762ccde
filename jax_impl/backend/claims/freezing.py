"""claims, freezing: freezing part of a model, run in JAX.

What it teaches: where the JAX port of the freezing claims differs from PyTorch: the port of
"layer3 under no_grad" runs and gives all-zero gradients, silently; stop_gradient prunes the
frozen part's residuals at trace time, but nnx.BatchNorm statistics still move in training
mode; optax.adamw decays a leaf whose gradient is only zero; an input needs no stop.
Gradient flow: backbone -> features -> head; stop_gradient between features and head makes the
backbone's gradient exactly zero and leaves the head's as it was.
Port note: torch_impl/backend/claims/freezing.py: torch's requires_grad_(False) and detach_() keep a
parameter out of AdamW (no .grad, no decay); mirror that with optax.partition +
optax.set_to_zero, not with a zero gradient. Residuals here, saved-tensor bytes there.
Shapes: B samples, D inputs, H hidden units (features), C outputs (toy "mlp": B 8, D 4, H 6, C 2).
Reference: JAX docs, jax.lax.stop_gradient; optax docs, optax.partition and optax.adamw.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from ....shared.core.toys import toy
from .evidence import array, evidence, grad_state, rel_diff, saved

__all__ = ["check_c05", "check_c06", "check_c07", "check_c16", "check_c22"]

stop = jax.lax.stop_gradient


def _three_layers() -> dict[str, dict[str, jax.Array]]:
    rng = np.random.default_rng(0)
    return {
        f"layer{i}": {"w": array(rng.standard_normal((4, 4)) / 2), "b": array(rng.standard_normal(4) / 10)}
        for i in (1, 2, 3)
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


@evidence
def check_c05() -> dict:
    """C05: the JAX port of "layer3 under no_grad" runs and gives all-zero gradients.

    Returns: per layer "zero" / "nonzero" gradient for the written structure and the fix.
    """
    x, p = array(toy("mlp")["x"]), _three_layers()
    states = lambda g: {k: grad_state(v) for k, v in g.items()}
    grad = jax.grad(_layers_loss)
    written, fixed = jax.jit(lambda p: (grad(p, x, "layer3"), grad(p, x, "below_layer3")))(p)
    return {"as_written": states(written), "fix_stop_below_layer3": states(fixed)}


def _mlp_params(d: dict) -> dict[str, jax.Array]:
    return {k: array(d[k]) for k in ("w1", "b1", "w2", "b2", "head_w", "head_b")}


def _mlp_loss(p: dict, d: dict, how: str) -> jax.Array:
    x = array(d["x"])
    f = jnp.tanh(jnp.tanh(x @ p["w1"] + p["b1"]) @ p["w2"] + p["b2"])
    if how == "stop":
        f = stop(f)  # GRAD-FLOW: C06 the head trains on fixed features
    return jnp.mean((f @ p["head_w"] + p["head_b"] - array(d["y"])) ** 2)


@evidence
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
        "residuals_none": saved(lambda p: _mlp_loss(p, d, "none"), p),
        "residuals_stop": saved(lambda p: _mlp_loss(p, d, "stop"), p),
        "backbone_grad_zero": all(grad_state(grads[k]) == "zero" for k in ("w1", "b1", "w2", "b2")),
        "bn_moved_train": moved_train,
        "bn_moved_eval": bool(np.any(np.asarray(bn.mean.get_value()) != before)),
    }


@evidence
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


@evidence
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
            "residuals": saved(lambda p: _mlp_loss(p, d, "none"), p),
        },
        "stop": {
            "grad_eqns": eqns(lambda p: _mlp_loss(p, d, "stop"), p),
            "residuals": saved(lambda p: _mlp_loss(p, d, "stop"), p),
        },
        "head_only": {"grad_eqns": eqns(frozen, head), "residuals": saved(frozen, head)},
        "speed": "see `detach-parity bench frozen_backbone`: jax full_finetune / detach_features / freeze_params against the ideal",
    }


@evidence
def check_c22() -> dict:
    """C22: stop_gradient on an input is a no-op; on features the loss needs it zeroes the backbone gradient.

    Returns: max |param grad difference| with vs without the input stopped, and the backbone
    gradient state with the features stopped.
    """
    d = toy("mlp")
    p = {"w1": array(d["w1"]), "head_w": array(d["head_w"])}

    def loss(p: dict, stop_input: bool, stop_features: bool) -> jax.Array:
        x = stop(array(d["x"])) if stop_input else array(d["x"])  # GRAD-FLOW: C22 an input never required grad
        f = jnp.tanh(x @ p["w1"])
        if stop_features:
            f = stop(f)  # GRAD-FLOW: C22 features cut from the loss
        return jnp.mean((f @ p["head_w"] - array(d["y"])) ** 2)

    flags = ((False, False), (True, False), (False, True))
    plain, stopped_in, stopped_f = jax.jit(lambda p: [jax.grad(loss)(p, *f) for f in flags])(p)
    return {
        "grad_max_rel_diff": max(rel_diff(plain[k], stopped_in[k]) for k in p),
        "backbone_grad_state_features_stopped": grad_state(stopped_f["w1"]),
    }
