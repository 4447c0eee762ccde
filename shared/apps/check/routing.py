"""A mixture-of-experts router's outputs compared as what they choose: expert index sets, their weights, ties.

A router (HF's MixtralTopKRouter) returns its scores over every expert [N, E] (floats), the chosen experts'
weights [N, k] (floats) and their indices [N, k] (integers); a port often returns the last two only (pairing.py
pairs them by what they hold). Which of the k slots holds which expert is no part of what the layer computes (the
chosen experts' outputs are summed): both sides' (index, weight) pairs are put in expert order before they are
compared. Where a row chooses other experts on the two sides and every expert the two choices differ in scores
within rounding of the k-th largest score (torch's own scores over every expert), both choices are a correct
top-k of the same numbers: a tie, said as one, not called a difference. A tie changes which experts the token
trains: the gradients of those experts still differ, and are judged as they are.
A call is read as a router's only where torch's arrays hold that structure: integer indices [..., k], distinct in
each row, a float array of their shape (the weights) and one over every expert ([..., E], E above every index);
anything else (a pool's indices, token ids) is compared as it is.
"""

from __future__ import annotations

import numpy as np

from ...core.parity import TOLERANCES, Tolerance

__all__ = ["in_expert_order"]

# how far apart two scores may be and still tie: each pass's rounding of a deep forward (compare.TOLERANCE's
# bounds), bfloat16's 8 bits of mantissa
ROUNDING = {
    "float64": TOLERANCES["float64"]["parity"],
    "float32": Tolerance(rtol=2e-4, atol=1e-6),
    "bfloat16": Tolerance(rtol=1e-2, atol=1e-6),
}


def _scores(ta: list, idx: np.ndarray) -> tuple[int, np.ndarray] | None:
    """(its index, torch's float array over every expert) beside the indices `idx` [..., k]: [..., E], E above
    every index; the first such array (HF's router logits)."""
    for i, a in enumerate(ta):
        a = np.asarray(a)
        if a.dtype.kind == "f" and a.shape[:-1] == idx.shape[:-1] and a.shape[-1] > idx.max():
            return i, a
    return None


def _is_choice(t: np.ndarray) -> bool:
    """Integer indices [..., k], non-negative and distinct in each row: a top-k's."""
    if t.dtype.kind not in "iu" or t.ndim < 2 or not t.size or t.min() < 0:
        return False
    s = np.sort(t, axis=-1)
    return bool(np.all(s[..., 1:] != s[..., :-1]))


def _tied(scores: np.ndarray, t: np.ndarray, j: np.ndarray, tol: Tolerance) -> tuple[np.ndarray, float] | None:
    """Rows whose chosen sets differ; (those rows, the largest gap) if every one of them is a tie: each expert in
    one choice and not the other scores within rounding of the row's k-th largest score. None otherwise."""
    rows = np.flatnonzero(np.any(t != j, axis=-1).reshape(-1))
    s, k = scores.reshape(-1, scores.shape[-1]).astype(np.float64), t.shape[-1]
    tf, jf, gap = t.reshape(-1, k), j.reshape(-1, k), 0.0
    for r in rows:
        if jf[r].max() >= s.shape[1]:
            return None
        kth = np.sort(s[r])[-k]
        bound = tol.atol + tol.rtol * float(np.max(np.abs(s[r])))
        apart = [abs(s[r, e] - kth) for e in set(tf[r].tolist()) ^ set(jf[r].tolist())]
        if max(apart) > bound:
            return None
        gap = max(gap, max(apart))
    return rows, gap


def in_expert_order(found: list, ta: list, ja: list, dtype: str) -> tuple[list, dict[int, str]]:
    """pair()'s `found` [(torch index, NNX index, torch's array in NNX layout)] as [(n, m, torch's, the port's)],
    each router's indices and weights (see the module docstring) in expert order, and the rows where both sides'
    choices tie within the pass's rounding (ROUNDING[dtype]) taken as torch's; with {torch index: the tie said in
    words} for those arrays."""
    tol = ROUNDING.get(dtype, ROUNDING["float32"])
    out = {n: [n, m, np.asarray(t), np.asarray(ja[m])] for n, m, t in found}
    ties: dict[int, str] = {}
    for n, m, t in found:
        t, j = np.asarray(t), np.asarray(ja[m])
        if not _is_choice(t) or j.shape != t.shape or j.dtype.kind not in "iu":
            continue
        found_scores = _scores(ta, t)
        if found_scores is None:
            continue
        at, scores = found_scores
        weights = [w for w, _, v in found if w != at and np.asarray(v).dtype.kind == "f" and np.shape(v) == t.shape]
        if not weights:
            continue
        ot, oj = np.argsort(t, axis=-1, kind="stable"), np.argsort(j, axis=-1, kind="stable")
        for w in [n, *weights]:  # each side's (index, weight) pairs in the order of its own indices
            out[w][2] = np.take_along_axis(out[w][2], ot, axis=-1)
            out[w][3] = np.take_along_axis(out[w][3], oj, axis=-1)
        ts, js = out[n][2], out[n][3]
        if np.array_equal(ts, js):
            continue
        tied = _tied(scores, ts, js, tol)
        if tied is None:
            continue
        rows, gap = tied
        k = t.shape[-1]
        for w in [n, *weights]:  # the tied rows: either choice is right, so the port's is compared as torch's
            flat = out[w][3].reshape(-1, k).copy()
            flat[rows] = out[w][2].reshape(-1, k)[rows]
            out[w][3] = flat.reshape(out[w][3].shape)
        said = (
            f"tie: {len(rows)} of {ts.reshape(-1, k).shape[0]} rows choose other experts on the two sides, each "
            f"scoring within rounding of the row's k-th largest score (torch's, {gap:.2g} apart at most): both are "
            "a correct top-k of the same numbers"
        )
        ties.update({w: said for w in [n, *weights]})
    return [tuple(v) for v in out.values()], ties
