"""How the port's value relates to torch's at the place they part, said only where it is simple.

The two arrays may hold their entries in different layouts (torch's [B, H, T, T] scores against a port's
[B, T, H, T]): the port's value is tried in each arrangement of its axes that gives torch's shape (and as a
reshape of the same size), and the first simple relation found is said. Simple: a constant factor (a sign
flip is the factor -1), a constant offset, a flip or a shift by one along one axis (a window, a diagonal,
positions), a permutation along one axis, and values zeroed or unmasked along a mask's pattern (the entries
that differ are, on one side, exactly the zeros, or the large negatives an additive mask writes).
"""

from __future__ import annotations

import itertools

import numpy as np

__all__ = ["relation", "aligned"]

_RTOL = 1e-9
_MASKED = -1e9  # an additive mask's entries: finfo.min, -inf, -1e9 and below


def _close(a: np.ndarray, b: np.ndarray) -> bool:
    scale = max(float(np.max(np.abs(b))) if b.size else 0.0, 1e-300)
    return a.shape == b.shape and bool(np.all(np.abs(a - b) <= _RTOL * scale + _RTOL * np.abs(b)))


def _arrangements(a: np.ndarray, shape: tuple) -> list[np.ndarray]:
    out = [a] if a.shape == shape else []
    if a.ndim == len(shape) and a.ndim <= 5:
        out += [np.transpose(a, p) for p in itertools.permutations(range(a.ndim)) if
                p != tuple(range(a.ndim)) and tuple(a.shape[i] for i in p) == shape]  # fmt: skip
    if not out and a.size == int(np.prod(shape)):
        out.append(a.reshape(shape))
    return out


def _factor(a: np.ndarray, b: np.ndarray) -> str | None:
    nonzero = np.abs(b) > 1e-300
    if not nonzero.any() or np.any(np.abs(a[~nonzero]) > 1e-300):
        return None
    ratio = a[nonzero] / b[nonzero]
    c = float(np.median(ratio))
    if abs(c - 1) < 1e-12 or not np.allclose(ratio, c, rtol=1e-7, atol=0):
        return None
    return "the same up to its sign" if abs(c + 1) < 1e-9 else f"the same up to a factor {c:.6g} everywhere"


def _offset(a: np.ndarray, b: np.ndarray) -> str | None:
    d = (a - b).ravel()
    c = float(np.median(d))
    scale = max(float(np.max(np.abs(b))), 1e-300)
    if abs(c) <= _RTOL * scale or not np.allclose(d, c, rtol=0, atol=1e-7 * max(abs(c), scale)):
        return None
    return f"the same up to an offset {c:.6g} everywhere"


def _along(a: np.ndarray, b: np.ndarray) -> str | None:
    for axis in range(a.ndim):
        n = a.shape[axis]
        if n < 2:
            continue
        if _close(a, np.flip(b, axis)):
            return f"flipped along axis {axis}"
        head, tail = np.take(a, range(1, n), axis), np.take(a, range(n - 1), axis)
        if _close(head, np.take(b, range(n - 1), axis)):
            return f"shifted by one along axis {axis}: the port's [i] is torch's [i - 1]"
        if _close(tail, np.take(b, range(1, n), axis)):
            return f"shifted by one along axis {axis}: the port's [i] is torch's [i + 1]"
        order = []
        for i in range(n):
            match = [k for k in range(n) if _close(np.take(a, [i], axis), np.take(b, [k], axis))]
            if not match:
                break
            order.append(match[0])
        if len(order) == n and sorted(order) == list(range(n)) and order != list(range(n)):
            shown = order if n <= 12 else order[:12] + ["..."]
            return f"permuted along axis {axis}: the port's [i] is torch's {shown}[i]"
    return None


def _masked(a: np.ndarray, b: np.ndarray) -> str | None:
    scale = max(float(np.max(np.abs(np.where(np.abs(b) < 1e8, b, 0)))), 1e-300)
    differ = np.abs(a - b) > _RTOL * scale + _RTOL * np.abs(b)
    n, total = int(differ.sum()), differ.size
    if n == 0 or n == total:
        return None
    if np.all(b[differ] == 0):
        return f"unmasked: {n} of {total} entries torch holds at zero are not zero in the port"
    if np.all(a[differ] == 0):
        return f"zeroed: {n} of {total} entries are zero in the port and not in torch"
    if np.all(b[differ] <= _MASKED):
        return f"unmasked: {n} of {total} entries torch masks (large negatives) are not masked in the port"
    if np.all(a[differ] <= _MASKED):
        return f"masked: {n} of {total} entries the port masks (large negatives) are not masked in torch"
    return None


def relation(port: np.ndarray, torch: np.ndarray) -> str | None:
    """A sentence on how `port` relates to `torch` where it is simple (see the module docstring), else None."""
    big = {"posinf": 1e300, "neginf": -1e300}  # an additive mask's -inf, as a large negative
    a, b = (np.nan_to_num(np.asarray(x, dtype=np.float64), nan=np.nan, **big) for x in (port, torch))
    if a.size != b.size or b.size == 0 or np.isnan(a).any() or np.isnan(b).any():
        return None
    for arranged in _arrangements(a, b.shape):
        for said in (_factor(arranged, b), _offset(arranged, b), _along(arranged, b), _masked(arranged, b)):
            if said:
                return said
    return None


def aligned(port, torch) -> bool:
    """Whether `port` holds torch's entries in torch's arrangement up to a layout: a transpose of its axes, then a
    reshape to torch's shape ([B, T, H, D] against torch's [B * H, T, D]); not where only the multiset agrees (heads
    merged in another order)."""
    a, b = np.asarray(port, dtype=np.float64), np.asarray(torch, dtype=np.float64)
    if a.size != b.size:
        return False
    perms = itertools.permutations(range(a.ndim)) if a.ndim <= 5 else [tuple(range(a.ndim))]
    return any(_close(np.transpose(a, p).reshape(b.shape), b) for p in perms)
