"""bench: step time and residual bytes in JAX, stop_gradient vs not / differentiating the head alone.

What it teaches: what stop_gradient buys at run time. The backbone is the first depth − 1
layers, the head the last one; a "train" step is a jitted forward + gradient of the trainable
parameters, a "forward" step the jitted forward pass alone.
Gradient flow: train_full all layers; train_stop the head only (features stopped);
train_frozen the head only (jax.grad w.r.t. the head's parameters alone).
Port note: jit traces once, so stop_gradient prunes the backbone's backward at trace time;
JAX has no grad mode and no inference mode (torch_impl/bench.py has those variants).
Shapes: B samples, W width (every layer W -> W).
Reference: JAX docs, jax.lax.stop_gradient and jax.ad_checkpoint.print_saved_residuals.
"""

from __future__ import annotations

import contextlib
import io
import math
import re
import statistics
import time
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax.ad_checkpoint import print_saved_residuals

__all__ = ["build", "measure"]

_ITEMSIZE = {"f64": 8, "f32": 4, "bf16": 2, "f16": 2}


def _model(data: dict[str, np.ndarray]) -> tuple[Callable, Callable, Callable, dict, dict, dict]:
    """full(params), stopped(params), frozen(head, trunk) losses and the parameter groups."""
    depth = sum(k.startswith("w") for k in data)
    x = jnp.asarray(data["x"])
    params = {k: jnp.asarray(v) for k, v in data.items() if k != "x"}

    def backbone(p: dict) -> jax.Array:
        h = x
        for i in range(depth - 1):
            h = jax.nn.relu(h @ p[f"w{i}"] + p[f"b{i}"])  # [B, W]
        return h

    loss = lambda p, f: jnp.mean((f @ p[f"w{depth - 1}"] + p[f"b{depth - 1}"]) ** 2)
    full = lambda p: loss(p, backbone(p))
    stopped = lambda p: loss(p, jax.lax.stop_gradient(backbone(p)))  # GRAD-FLOW: bench features cut
    frozen = lambda head, trunk: loss(head, backbone({**trunk, **head}))
    head_keys = (f"w{depth - 1}", f"b{depth - 1}")
    head = {k: params[k] for k in head_keys}
    trunk = {k: v for k, v in params.items() if k not in head_keys}
    return full, stopped, frozen, params, head, trunk


def build(data: dict[str, np.ndarray]) -> dict[str, tuple[Callable, tuple]]:
    """One jitted step per variant, on float32 weights w{i} [W, W], b{i} [W] and x [B, W].

    Returns: {variant: (step, args)}; train steps return the gradients, forward the loss.
    """
    full, stopped, frozen, params, head, trunk = _model(data)
    return {
        "train_full": (jax.jit(jax.grad(full)), (params,)),
        "train_stop": (jax.jit(jax.grad(stopped)), (params,)),
        "train_frozen": (jax.jit(jax.grad(frozen)), (head, trunk)),
        "forward": (jax.jit(full), (params,)),
    }


def _residual_bytes(fn: Callable, *args) -> int:
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        print_saved_residuals(fn, *args)
    total = 0
    for line in buf.getvalue().splitlines():
        if (
            (m := re.match(r"(\w+)\[([\d,]*)\]", line.strip()))
            and "from the argument" not in line
            and "from a constant" not in line
        ):
            total += _ITEMSIZE.get(m.group(1), 4) * math.prod(int(n) for n in m.group(2).split(",") if n)
    return total


def measure(data: dict[str, np.ndarray], repeats: int, inner: int) -> dict[str, dict[str, float]]:
    """Median seconds per jitted step over `repeats` timings of `inner` steps, and residual bytes.

    Returns: {variant: {"median_s": float, "residual_bytes": int}} (bytes of the residuals
    jax.grad saves, arguments and constants excluded, from jax.ad_checkpoint.print_saved_residuals; 0 for forward).
    Raises: ValueError if repeats or inner < 1.
    """
    if repeats < 1 or inner < 1:
        raise ValueError(f"repeats and inner expected >= 1, got {repeats} and {inner}")
    full, stopped, frozen, params, head, trunk = _model(data)
    residuals = {
        "train_full": _residual_bytes(full, params),
        "train_stop": _residual_bytes(stopped, params),
        "train_frozen": _residual_bytes(lambda head: frozen(head, trunk), head),  # trunk: not differentiated
        "forward": 0,
    }
    out = {}
    for name, (step, args) in build(data).items():
        jax.block_until_ready(step(*args))  # compile + warm-up
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            for _ in range(inner):
                jax.block_until_ready(step(*args))
            times.append((time.perf_counter() - start) / inner)
        out[name] = {"median_s": statistics.median(times), "residual_bytes": residuals[name]}
    return out
