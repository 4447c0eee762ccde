"""Which torch output array is compared with which NNX one, through which permutation: from the rules.

Each backend names the axes of every output it records (torch_impl/backend/outputs.py and its JAX
twin): nn.Conv2d ("B", "C", "S1", "S2"), nnx.Conv ("B", "S1", "S2", "C"); nn.GRU time-major ("T",
"B", "H"), nnx.RNN ("B", "T", "H"); torch's LSTMCell (h, c), nnx's ((c, h), h). Arrays pair by their
names ("out", "h", "c") and are permuted by their axes, whatever the sizes: C = H = W, C = L or T = B
cannot fool it. Where the NNX module declares nothing (a module of the user's own), the torch rule's
NNX layout (channels last) is tried first, then torch's own; where torch declares nothing, the
shapes decide as they must (the same shape, else channels moved last). Floats pair with floats, integers with
integers; tuples of different lengths (HF's Mixtral router returns logits, scores and expert indices, a port
its scores and indices) pair each array with its nearest twin, not by position.
A dense kernel whose loaded rows are torch's in channels-last flatten order ([C, H, W] flattened as
[H, W, C]: the NHWC port of a CNN head, loaded by the user's own loader) is `flatten_orders`' business:
its weights, gradients and steps are compared in that order.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["to_nnx", "pair", "flatten_orders"]


def to_nnx(t: np.ndarray, taxes: tuple, jaxes: tuple, shape: tuple) -> np.ndarray | None:
    """Torch's array `t` (axes `taxes`) in the NNX layout `jaxes` of shape `shape`, or None if it does not fit.

    An NNX axis "X.0", "X.1" splits torch's axis X ([B, T, H·D] -> [B, T, H, D]); an axis on one side only
    must have size 1 (torch's h_n [1, B, H] -> [B, H]).
    """
    t, tax, jax_ = np.asarray(t), list(taxes), list(jaxes)
    if len(tax) != t.ndim or len(jax_) != len(shape):
        return None
    for base in dict.fromkeys(a.split(".")[0] for a in jax_ if "." in a):
        parts = [a for a in jax_ if a.split(".")[0] == base]
        if base not in tax or base in jax_:
            continue
        i, sizes = tax.index(base), tuple(shape[jax_.index(a)] for a in parts)
        if math.prod(sizes) != t.shape[i]:
            return None
        t = t.reshape(t.shape[:i] + sizes + t.shape[i + 1 :])
        tax[i : i + 1] = parts
    for a in [a for a in tax if a not in jax_]:
        i = tax.index(a)
        if t.shape[i] != 1:
            return None
        t, _ = np.squeeze(t, i), tax.pop(i)
    for a in [a for a in jax_ if a not in tax]:
        if shape[jax_.index(a)] != 1:
            return None
        t, _ = t[..., None], tax.append(a)
    if len(set(tax)) != len(tax):
        return None
    t = np.transpose(t, [tax.index(a) for a in jax_])
    return t if t.shape == tuple(shape) else None


def _placeholders(taxes: tuple, jaxes: tuple) -> tuple[tuple, tuple]:
    """A dense layer's leading axes of unknown meaning ("L0", "L1" ...) stand for the other side's axes
    at the same place: a torch Linear on [T, B, H] and an NNX Linear on an array it cannot name."""
    if len(taxes) != len(jaxes):
        return taxes, jaxes
    placeholder = lambda a: a[:1] == "L" and a[1:].isdigit()  # noqa: E731
    t = tuple(j if placeholder(a) and not placeholder(j) else a for a, j in zip(taxes, jaxes, strict=True))
    j = tuple(a if placeholder(j) else j for a, j in zip(t, jaxes, strict=True))
    return t, j


def _nnx_default(taxes: tuple) -> tuple:
    # the NNX layout a torch rule implies where the NNX module declares none: channels last
    return tuple(a for a in taxes if a != "C") + (("C",) if "C" in taxes else ())


def _by_shape(t: np.ndarray, shape: tuple, j) -> np.ndarray | None:
    last = np.moveaxis(t, 1, -1) if t.ndim >= 3 else t  # torch channels first, NNX channels last
    if t.shape == shape and last.shape == shape:
        return _nearer(j, t, last)
    return t if t.shape == shape else last if last.shape == shape else None


def _nearer(j, *candidates: np.ndarray) -> np.ndarray:
    """Of torch's array in two layouts that both fit the port's shape (C = H = W after a stride), the one the
    port's array is in: the nearer to it."""
    j = np.asarray(j, dtype=np.float64)
    return min(candidates, key=lambda c: float(np.nanmax(np.abs(j - c), initial=0.0)))


def _fit(t: np.ndarray, ts, j, js, declared: bool) -> np.ndarray | None:
    """Torch's array `t` in the layout of the port's `j`, or None where they cannot be twins: another kind of
    number (a router's float scores never pair with its integer expert indices), or a layout that does not fit."""
    if (t.dtype.kind == "f") != (np.asarray(j).dtype.kind == "f"):
        return None
    shape = tuple(np.shape(j))
    if ts is not None and declared:
        return to_nnx(t, *_placeholders(ts[1], js[1]), shape) if js is not None and js[0] == ts[0] else None
    if ts is not None:
        moved = to_nnx(t, ts[1], _nnx_default(ts[1]), shape)
        moved = _nearer(j, moved, t) if moved is not None and t.shape == shape else moved
        return t if moved is None and t.shape == shape else moved
    return _by_shape(t, shape, j)


def _distance(j, t: np.ndarray) -> float:
    """How far the port's array is from a torch candidate, in [0, 1]: the largest difference relative to torch's
    scale for floats, the share of unequal entries for integers."""
    j, t = np.asarray(j), np.asarray(t)
    if t.dtype.kind != "f":
        return float(np.mean(j != t)) if t.size else 0.0
    gap = np.abs(j.astype(np.float64) - t.astype(np.float64))
    if not np.all(np.isfinite(gap)):
        return 1.0
    scale = float(np.max(np.abs(t), initial=0.0))
    return min(1.0, float(np.max(gap, initial=0.0)) / scale) if scale else float(np.max(gap, initial=0.0) > 0)


def _nearest(fits: dict) -> list[tuple[int, int, np.ndarray]]:
    """Of the fitting (torch index, NNX index) pairs, the most pairs, each NNX array with the torch array nearest
    to it (the least total distance): tuples of different lengths (HF's router returns logits, scores and
    indices; a port its scores and indices) have no positions to go by, only what their arrays hold."""
    cost = {nm: _distance(j, moved) for nm, (moved, j) in fits.items()}
    ns = sorted({n for n, _ in fits})

    def best(i: int, used: frozenset) -> tuple[int, float, tuple]:
        if i == len(ns):
            return 0, 0.0, ()
        count, total, chosen = best(i + 1, used)  # torch's array ns[i] left unpaired
        for (n, m), c in cost.items():
            if n == ns[i] and m not in used:
                k, t, rest = best(i + 1, used | {m})
                if (k + 1, -(t + c)) > (count, -total):
                    count, total, chosen = k + 1, t + c, ((n, m), *rest)
        return count, total, chosen

    if len(fits) > 24:  # a long tuple: each torch array with its nearest free twin, nearest first
        chosen, used_n, used_m = [], set(), set()
        for n, m in sorted(cost, key=lambda nm: (cost[nm], nm)):
            if n not in used_n and m not in used_m:
                chosen.append((n, m))
                used_n.add(n)
                used_m.add(m)
    else:
        chosen = list(best(0, frozenset())[2])
    return [(n, m, fits[(n, m)][0]) for n, m in sorted(chosen)]


def pair(ta: list, tspecs: list | None, ja: list, jspecs: list | None) -> list[tuple[int, int, np.ndarray]]:
    """(torch index, NNX index, torch's array in NNX layout) for the arrays of one call that pair.

    tspecs / jspecs: per array (name, axes) or None (outputs.py of each backend; None: not recorded).
    Where the NNX module declares its outputs, a torch array pairs with the NNX array of its name only; floats pair
    with floats and integers with integers. Tuples of one length pair by position (the first free twin that fits:
    a swapped (h, c) is a difference to see, not to pair away); of different lengths, by what the arrays hold
    (_nearest).
    """
    tspecs = list(tspecs or []) + [None] * (len(ta) - len(tspecs or []))
    jspecs = list(jspecs or []) + [None] * (len(ja) - len(jspecs or []))
    declared = any(s is not None for s in jspecs)
    if len(ta) != len(ja) and not declared:
        fits = {}
        for n, t in enumerate(ta):
            for m, j in enumerate(ja):
                moved = _fit(np.asarray(t), tspecs[n], j, jspecs[m], declared)
                if moved is not None:
                    fits[(n, m)] = (moved, j)
        return _nearest(fits)
    used: set[int] = set()
    out = []
    for n, t in enumerate(ta):
        for m, j in enumerate(ja):
            moved = None if m in used else _fit(np.asarray(t), tspecs[n], j, jspecs[m], declared)
            if moved is not None:
                used.add(m)
                out.append((n, m, moved))
                break
    return out


def _channels_first_shapes(run: dict) -> set[tuple]:
    """The per-example shapes [C, *spatial] of every channels-first output torch recorded."""
    shapes = set()
    for path, calls in run.get("outputs", {}).items():
        for arrays, specs in zip(calls, run.get("layouts", {}).get(path, []), strict=False):
            for a, s in zip(arrays, specs or [], strict=False):
                if s is not None and len(s[1]) >= 3 and s[1][:2] == ("B", "C"):
                    shapes.add(tuple(np.shape(a)[1:]))
    return shapes


def flatten_orders(expected: dict, actual: dict, torch_run: dict) -> dict[str, tuple[np.ndarray, tuple]]:
    """NNX dense kernels [in, out] whose loaded rows are torch's in channels-last flatten order.

    For a torch output [B, C, *spatial] (a conv's, a pool's) with C·prod(spatial) = in, row r of the
    NNX kernel holding torch's row idx[r], idx the [C, *spatial] -> [*spatial, C] flatten order.
    Returns {NNX key: (idx, the [C, *spatial] it flattens)}; only kernels that differ as loaded.
    """
    shapes = _channels_first_shapes(torch_run)
    orders = {}
    for key, e in expected.items():
        a = actual.get(key)
        e = np.asarray(e)
        if a is None or e.ndim != 2 or np.shape(a) != e.shape or np.array_equal(a, e):
            continue
        for shape in sorted(shapes):
            if math.prod(shape) != e.shape[0] or len(shape) < 2:
                continue
            idx = np.arange(e.shape[0]).reshape(shape).transpose(*range(1, len(shape)), 0).ravel()
            if np.array_equal(np.asarray(a), e[idx]):
                orders[key] = (idx, shape)
                break
    return orders
