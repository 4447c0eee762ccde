"""The float64 numpy oracle: is the answer right, not only equal in both frameworks?

Each scenario's oracle (in `shared/scenarios/<name>.py`, run by `shared.core.runner`) computes the outputs of
`run()` in float64 numpy, either in closed form or with `fd_grad`: central finite
differences of the forward pass in which every stopped value is computed once at
the base point and fed in as a constant. That is what stop-gradient means
mathematically: d/dθ f(θ, c) with c = g(θ₀) held fixed.

`fd_grad` uses the fourth-order five-point stencil
    f'(x) ≈ [-f(x+2h) + 8 f(x+h) - 8 f(x-h) + f(x-2h)] / (12 h)
whose truncation error is O(h⁴); with h = 1e-3 relative to the entry's scale the
float64 error is about 1e-10 relative for the smooth losses used here. The same five values
check that f is smooth over the stencil (a random fixture can put a ReLU's or a norm's kink,
or a sharp curvature, inside the step): where it is not, the step is refined; on a kink
itself the oracle raises, naming the entry, rather than return the average of two slopes.
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


def _kink(vals: list, f0, s: float):
    """How far f is from smooth within ±2s of the point, in units of slope.

    Two consistency checks of the same five values: the central differences with steps s and 2s
    (for a smooth f they agree to s²·|f⁽³⁾|/2) and the second differences with steps s and 2s, times s
    (they agree to s³·|f⁽⁴⁾|/4). A kink (ReLU, |x|, a norm at 0, max) with slope change Δ within 2s
    makes one of them ≥ 0.3·Δ, or ≥ 3 times the five-point value's error where the kink is near 2s.
    """
    c1, c2 = (vals[1] - vals[2]) / (2.0 * s), (vals[0] - vals[3]) / (4.0 * s)
    d1 = (vals[1] - 2.0 * f0 + vals[2]) / s**2
    d2 = (vals[0] - 2.0 * f0 + vals[3]) / (4.0 * s**2)
    return np.maximum(np.abs(c1 - c2), s * np.abs(d1 - d2))


# A five-point value is trusted when the kink indicator is below SMOOTH_TOL·(|f'| + G), G the largest |f'| of the
# call (the derivative's scale: a function of size 1e-6 has kinks of size 1e-6), or at the rounding level of its
# values; otherwise the step is divided by REFINE, at most MAX_REFINES times (h = 1e-3 → 2e-6). Its rounding error
# must stay under ROUNDING_TOL·(|f'| + G): a large constant in f (1e6 + ...) swamps its change and is refused.
SMOOTH_TOL, ROUNDING_TOL, REFINE, MAX_REFINES = 1e-6, 1e-8, 8.0, 3
_EPS = np.finfo(np.float64).eps


def _five(f_at: Callable[[float], np.ndarray], s: float) -> list:
    return [f_at(m * s) for m in (2.0, 1.0, -1.0, -2.0)]


def _derivative(f_at: Callable[[float], np.ndarray], f0, s: float, vals: list, scale, where: str):
    """Five-point derivative of t ↦ f_at(t) at t = 0 from `vals` (its values at step s), the step shrunk until f
    is smooth over ±2s; `scale` is the derivative's scale G (the largest |f'| of the call).

    The five-point error measured about the square of the indicator on the curved losses here (cosine
    similarity of short vectors), so SMOOTH_TOL = 1e-6 keeps it far under float64's tolerance.
    Raises ValueError, naming the entry, when f is still not smooth at the smallest step (the point sits on a
    kink: a ReLU at exactly 0, |x| at 0, where the derivative is a framework's convention, not a limit), or
    when rounding alone exceeds ROUNDING_TOL of the derivative's scale.
    """
    for _ in range(MAX_REFINES + 1):
        d = _stencil(vals, s)
        size = np.maximum.reduce([np.abs(f0), *(np.abs(v) for v in vals)])
        bound = np.abs(d) + scale + np.finfo(np.float64).tiny
        if np.all(_kink(vals, f0, s) <= np.maximum(SMOOTH_TOL * bound, 16.0 * _EPS * size / s)):
            rounding = 2.0 * _EPS * size / s
            # where nothing moves (G = 0: every difference exactly 0, a stopped path) rounding decides nothing
            if np.any((rounding > ROUNDING_TOL * bound) & (np.asarray(scale) > 0)):
                raise ValueError(
                    f"finite differences: |f| = {float(np.max(size)):.3g} is too large against its change at {where}:"
                    f" rounding alone is {float(np.max(rounding)):.2g}, the derivative's scale "
                    f"{float(np.max(bound)):.2g}; subtract f's constant part or give that derivative in closed form"
                )
            return d
        s /= REFINE
        vals = _five(f_at, s)
    raise ValueError(
        f"finite differences: f is not smooth at {where} (kink indicator {float(np.max(_kink(vals, f0, s))):.3g} "
        f"at step {s:.3g}, the smallest): the point is on a kink (ReLU at 0, |x| at 0, a norm at 0, max); "
        "move the fixture off it or give that derivative in closed form"
    )


def fd_grad(
    f: Callable[[dict[str, np.ndarray]], float],
    params: Mapping[str, np.ndarray],
    wrt: list[str] | tuple[str, ...] | None = None,
    h: float = 1e-3,
) -> dict[str, np.ndarray]:
    """Gradient of a scalar function of named float64 arrays, by five-point central differences.

    Each entry's value is checked for smoothness on its own five values (`_kink`), against the scale of the
    whole gradient; where a kink or a strong curvature lies within two steps, the step is refined (÷8, up to 3
    times), so a fixture drawn near a ReLU's or a norm's kink gets the right gradient, not a silently wrong one.

    Args:
      f: params dict -> float. Stopped values must be computed outside f (or from a
        copy of the base params) so that perturbing params does not move them.
      params: name -> float64 array (not modified).
      wrt: names to differentiate; default all.
      h: relative step; the step for an entry x is h * max(1, |x|).
    Returns:
      name -> float64 array of the same shape.
    Raises:
      ValueError: f is not smooth at an entry even at the smallest step, or so large against its change that
        rounding decides the value (the entry is named).
    """
    base = {k: np.array(v, dtype=np.float64, copy=True) for k, v in params.items()}
    f0 = float(f(base))
    entries = []  # first every entry at its base step, for the gradient's scale
    for name in wrt if wrt is not None else list(base):
        x, steps = base[name], _step(base[name], h)
        for idx in np.ndindex(x.shape):

            def f_at(t, idx=idx, name=name, x=x):
                xp = x.copy()
                xp[idx] += t
                return float(f({**base, name: xp}))

            vals = _five(f_at, steps[idx])
            entries.append((name, idx, f_at, steps[idx], vals, abs(_stencil(vals, steps[idx]))))
    scale = max((e[-1] for e in entries), default=0.0)
    grads = {name: np.zeros_like(base[name]) for name in (wrt if wrt is not None else list(base))}
    for name, idx, f_at, s, vals, _ in entries:
        where = f"{name!r}{list(idx)} = {base[name][idx]:.6g}"
        grads[name][idx] = _derivative(f_at, f0, s, vals, scale, where)
    return grads


def fd_jacobian(f: Callable[[np.ndarray], np.ndarray], x: np.ndarray, h: float = 1e-3) -> np.ndarray:
    """Jacobian d f(x) / d x of an array function, by the same self-checked five-point stencil (the scale of
    each output is its largest derivative).

    Returns an array of shape f(x).shape + x.shape.
    Raises:
      ValueError: some output is not smooth in an entry of x even at the smallest step, or rounding decides it.
    """
    x = np.array(x, dtype=np.float64, copy=True)
    y0 = np.asarray(f(x), dtype=np.float64)
    jac = np.zeros(y0.shape + x.shape)
    steps = _step(x, h)
    entries = []
    for idx in np.ndindex(x.shape):

        def f_at(t, idx=idx):
            xp = x.copy()
            xp[idx] += t
            return np.asarray(f(xp), dtype=np.float64)

        vals = _five(f_at, steps[idx])
        entries.append((idx, f_at, steps[idx], vals, np.abs(_stencil(vals, steps[idx]))))
    scale = np.maximum.reduce([e[-1] for e in entries]) if entries else 0.0
    for idx, f_at, s, vals, _ in entries:
        jac[(Ellipsis,) + idx] = _derivative(f_at, y0, s, vals, scale, f"x{list(idx)} = {x[idx]:.6g}")
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
