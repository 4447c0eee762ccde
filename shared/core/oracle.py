"""The float64 numpy oracle: is the answer right, not only equal in both frameworks?

Each scenario's oracle (in `shared/scenarios/<name>.py`, run by `shared.core.runner`) computes the outputs of
`run()` in float64 numpy, either in closed form or with `fd_grad`: central finite
differences of the forward pass in which every stopped value is computed once at
the base point and fed in as a constant. That is what stop-gradient means
mathematically: d/dθ f(θ, c) with c = g(θ₀) held fixed.

`fd_grad` uses the fourth-order five-point stencil
    f'(x) ≈ [-f(x+2h) + 8 f(x+h) - 8 f(x-h) + f(x-2h)] / (12 h)
whose truncation error is O(h⁴); with h = 1e-3 relative to the entry's scale the
float64 error is about 1e-10 relative for the smooth losses used here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np

__all__ = ["fd_grad", "fd_jacobian", "adamw", "sgd"]


def _step(x: np.ndarray, h: float) -> np.ndarray:
    return h * np.maximum(1.0, np.abs(x))


def _stencil(vals: list, s: float):
    """Five-point derivative from f(x+2s), f(x+s), f(x-s), f(x-2s).

    Written as differences first so that a function that does not depend on the
    entry (a stopped path) gives exactly 0, not a rounding residue.
    """
    return (8.0 * (vals[1] - vals[2]) - (vals[0] - vals[3])) / (12.0 * s)


def fd_grad(
    f: Callable[[dict[str, np.ndarray]], float],
    params: Mapping[str, np.ndarray],
    wrt: list[str] | tuple[str, ...] | None = None,
    h: float = 1e-3,
) -> dict[str, np.ndarray]:
    """Gradient of a scalar function of named float64 arrays, by five-point central differences.

    Args:
      f: params dict -> float. Stopped values must be computed outside f (or from a
        copy of the base params) so that perturbing params does not move them.
      params: name -> float64 array (not modified).
      wrt: names to differentiate; default all.
      h: relative step; the step for an entry x is h * max(1, |x|).
    Returns:
      name -> float64 array of the same shape.
    """
    base = {k: np.array(v, dtype=np.float64, copy=True) for k, v in params.items()}
    grads = {}
    for name in wrt if wrt is not None else list(base):
        x = base[name]
        g = np.zeros_like(x)
        steps = _step(x, h)
        for idx in np.ndindex(x.shape):
            s = steps[idx]
            vals = []
            for mult in (2.0, 1.0, -1.0, -2.0):
                p = dict(base)
                xp = x.copy()
                xp[idx] += mult * s
                p[name] = xp
                vals.append(float(f(p)))
            g[idx] = _stencil(vals, s)
        grads[name] = g
    return grads


def fd_jacobian(f: Callable[[np.ndarray], np.ndarray], x: np.ndarray, h: float = 1e-3) -> np.ndarray:
    """Jacobian d f(x) / d x of an array function, by the same five-point stencil.

    Returns an array of shape f(x).shape + x.shape.
    """
    x = np.array(x, dtype=np.float64, copy=True)
    y0 = np.asarray(f(x), dtype=np.float64)
    jac = np.zeros(y0.shape + x.shape)
    steps = _step(x, h)
    for idx in np.ndindex(x.shape):
        s = steps[idx]
        vals = []
        for mult in (2.0, 1.0, -1.0, -2.0):
            xp = x.copy()
            xp[idx] += mult * s
            vals.append(np.asarray(f(xp), dtype=np.float64))
        jac[(Ellipsis,) + idx] = _stencil(vals, s)
    return jac


def sgd(params: Mapping[str, np.ndarray], grads: Mapping[str, np.ndarray], lr: float) -> dict[str, np.ndarray]:
    """Plain SGD step θ ← θ - lr·g on the keys of `grads` (others unchanged)."""
    return {k: (v - lr * grads[k]) if k in grads else v for k, v in params.items()}


def adamw(
    grad_fn: Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]],
    params: Mapping[str, np.ndarray],
    steps: int,
    *,
    lr: float,
    b1: float,
    b2: float,
    eps: float,
    weight_decay: float,
    trainable: Callable[[str], bool] = lambda name: True,
) -> dict[str, np.ndarray]:
    """Decoupled-weight-decay Adam (Loshchilov & Hutter 2019, arXiv:1711.05101) in float64.

    Implements the update both torch.optim.AdamW and optax.adamw document:
      θ ← θ - lr·(m̂ / (sqrt(v̂) + eps) + wd·θ), m̂, v̂ bias-corrected.
    `grad_fn(params)` is called each step; a name for which `trainable` is False is
    not updated at all (torch: `.grad is None`, skipped by the optimizer).
    """
    p = {k: np.array(v, dtype=np.float64, copy=True) for k, v in params.items()}
    m = {k: np.zeros_like(v) for k, v in p.items()}
    v2 = {k: np.zeros_like(v) for k, v in p.items()}
    for t in range(1, steps + 1):
        g = grad_fn(p)
        for k in p:
            if not trainable(k):
                continue
            m[k] = b1 * m[k] + (1 - b1) * g[k]
            v2[k] = b2 * v2[k] + (1 - b2) * g[k] ** 2
            mhat = m[k] / (1 - b1**t)
            vhat = v2[k] / (1 - b2**t)
            p[k] = p[k] - lr * (mhat / (np.sqrt(vhat) + eps) + weight_decay * p[k])
    return p
