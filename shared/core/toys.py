"""The neutral ground of the claim checks (the pairs `torch_impl/claims_*.py`, `jax_impl/claims_*.py`).

`toy(name)`: the arrays both frameworks load. Plain float64 numpy, built from a fixed seed
per toy, tiny shapes; canonical dense layout `y = x @ W + b` with W `[in, out]`.
`check_evidence(check, evidence)`: the form of what a check returns, JSON data only, so that
what the claims app verifies is exactly what `detach-parity claims --json` writes.
No framework import here.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["toy", "TOYS", "check_evidence"]


def _orthogonal(rng: np.random.Generator, n: int, scale: float) -> np.ndarray:
    q, _ = np.linalg.qr(rng.standard_normal((n, n)))
    return scale * q


def _mlp(rng):  # x [B, D] -> tanh(x w1 + b1) -> tanh(. w2 + b2) = features [B, H] -> head [B, C]
    return {
        "x": rng.standard_normal((8, 4)),
        "w1": rng.standard_normal((4, 6)) / 2,
        "b1": rng.standard_normal(6) / 10,
        "w2": rng.standard_normal((6, 6)) / 2,
        "b2": rng.standard_normal(6) / 10,
        "head_w": rng.standard_normal((6, 2)) / 2,
        "head_b": rng.standard_normal(2) / 10,
        "y": rng.standard_normal((8, 2)),
    }


def _rnn(rng):  # h_t = tanh(h_{t-1} w + x_t u), T = 40 steps, D = 3 inputs, H = 4 hidden units
    return {"x": rng.standard_normal((40, 3)), "w": _orthogonal(rng, 4, 0.9), "u": rng.standard_normal((3, 4)) / 2}


def _explode(rng):  # linear recurrence h_t = h_{t-1} w + x_t u with |eig w| ~ 2.5, T = 20: the gradient explodes
    return {
        "x": rng.standard_normal((20, 2)),
        "w": 2.5 * np.eye(3) + 0.2 * rng.standard_normal((3, 3)),
        "u": rng.standard_normal((2, 3)),
    }


def _maml(rng):  # per-sample loss (tanh(x theta) - y)^2, one inner SGD step of size alpha
    return {
        "x_in": rng.standard_normal((6, 3)),
        "y_in": rng.standard_normal(6),
        "x_out": rng.standard_normal((6, 3)),
        "y_out": rng.standard_normal(6),
        "theta": rng.standard_normal(3),
        "alpha": np.array(0.5),
    }


def _attention(rng):  # x [N, D], projections [D, E], target [N, E]
    return {
        "x": rng.standard_normal((4, 3)),
        "wq": rng.standard_normal((3, 2)),
        "wk": rng.standard_normal((3, 2)),
        "wv": rng.standard_normal((3, 2)),
        "target": rng.standard_normal((4, 2)),
    }


def _multitask(rng):  # trunk tanh(x w + b) [B, H]; two linear heads [H, 1]
    return {
        "x": rng.standard_normal((6, 3)),
        "trunk_w": rng.standard_normal((3, 4)),
        "trunk_b": rng.standard_normal(4) / 10,
        "head1": rng.standard_normal((4, 1)),
        "head2": rng.standard_normal((4, 1)),
        "y1": rng.standard_normal((6, 1)),
        "y2": rng.standard_normal((6, 1)),
    }


def _dqn(rng):  # linear Q nets [D, A]; a batch of B transitions
    return {
        "s": rng.standard_normal((5, 3)),
        "a": rng.integers(0, 2, 5),
        "r": rng.standard_normal(5),
        "done": np.array([0.0, 0.0, 1.0, 0.0, 1.0]),
        "s2": rng.standard_normal((5, 3)),
        "online": rng.standard_normal((3, 2)),
        "target": rng.standard_normal((3, 2)),
        "gamma": np.array(0.9),
    }


def _policy(rng):  # linear softmax policy [D, A]; B states, actions, returns
    return {
        "s": rng.standard_normal((5, 3)),
        "w": rng.standard_normal((3, 4)),
        "a": rng.integers(0, 4, 5),
        "ret": rng.standard_normal(5),
    }


TOYS = {
    "mlp": _mlp,
    "rnn": _rnn,
    "explode": _explode,
    "maml": _maml,
    "attention": _attention,
    "multitask": _multitask,
    "dqn": _dqn,
    "policy": _policy,
}


def toy(name: str) -> dict[str, np.ndarray]:
    """The arrays of one toy (float64, int64 for indices); ValueError naming the valid toys."""
    if name not in TOYS:
        raise ValueError(f"toy expected one of {sorted(TOYS)}, got {name!r}")
    rng = np.random.default_rng(sorted(TOYS).index(name) + 7)
    return {k: np.asarray(v) for k, v in TOYS[name](rng).items()}


def _json_problem(value: object, where: str) -> str | None:
    """Where `value` stops being plain JSON data, or None."""
    if value is None or isinstance(value, bool | str | int):
        return None
    if isinstance(value, float):
        return None if math.isfinite(value) else f"{where} = {value!r} (not finite)"
    if isinstance(value, list):
        return next((p for i, v in enumerate(value) if (p := _json_problem(v, f"{where}[{i}]"))), None)
    if isinstance(value, dict):
        for k, v in value.items():
            if not isinstance(k, str):
                return f"{where} has the key {k!r} ({type(k).__name__}, not str)"
            if p := _json_problem(v, f"{where}[{k!r}]"):
                return p
        return None
    return f"{where} is a {type(value).__module__}.{type(value).__qualname__}"


def check_evidence(check: str, evidence: object) -> dict:
    """The evidence of one check, returned as is once it is plain JSON data.

    Args:
      check: the check's name, e.g. "check_c01" (for the message).
      evidence: what the check returned: a dict with str keys whose values are None, bool,
        int, finite float, str, lists and dicts of them (no tuple, no array, no tensor, no
        numpy scalar: each would change type or fail on the way to JSON).
    Raises:
      TypeError: naming the check and the first offending entry, expected and actual type.
    """
    if not isinstance(evidence, dict):
        raise TypeError(f"{check}: evidence expected a dict, got {type(evidence).__name__}")
    if problem := _json_problem(evidence, "evidence"):
        raise TypeError(f"{check}: evidence expected plain JSON data, but {problem}")
    return evidence
