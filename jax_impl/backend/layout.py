"""Port checker, JAX half, rule table: canonical leaves <-> an NNX module's own leaves, by NNX type.

The canonical layout is torch's rule table (torch_impl/_layout.py, reached by the torch twin of this
module): dense kernels [in, out], recurrent kernels `ih/kernel`, `hh/kernel` with torch's gate order.
Most NNX modules hold it as it is (nnx.Linear, nnx.Conv, nnx.MultiHeadAttention, nnx.BatchNorm,
nnx.Embed); the recurrent cells split or fold gates, nnx.ConvTranspose may flip its kernel.
Port note: nnx.GRUCell has no slot for torch's b_hn (P08): reported as dropped, never lost;
nnx.LSTMCell keeps one bias per gate where torch keeps b_ih and b_hh (their sum carries over, P09).
Shapes: canonical per leaf (see torch_impl/_layout.py).
Reference: Flax NNX docs, flax.nnx.nn.recurrent (GRUCell, LSTMCell, OptimizedLSTMCell, SimpleCell).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Mapping

import numpy as np
from flax import nnx

from .norm_rule import norm_rule

__all__ = ["RULES", "rule_for", "register"]


def _blocks(a: np.ndarray, n: int) -> list[np.ndarray]:
    return np.split(np.asarray(a), n, axis=-1)


def _need(c: Mapping, names: tuple[str, ...], kind: str) -> None:
    missing = [n for n in names if n not in c]
    if missing:
        raise ValueError(f"{kind}: canonical leaves {missing} missing (given {sorted(c)}): no rule maps them")


def _fold(c: Mapping, grad: bool) -> np.ndarray:
    # torch's two biases act as their sum; a gradient reaches both equally, so either one is the folded leaf's
    return np.asarray(c["ih/bias"]) if grad else np.asarray(c["ih/bias"]) + np.asarray(c["hh/bias"])


def _gru_cell(m, c, grad):
    _need(c, ("ih/kernel", "ih/bias", "hh/kernel", "hh/bias"), "nnx.GRUCell")
    h = m.hidden_features
    b_hn = np.asarray(c["hh/bias"])[2 * h :]
    bias = np.asarray(c["ih/bias"]) + (0 if grad else np.concatenate([np.asarray(c["hh/bias"])[: 2 * h], 0 * b_hn]))
    leaves = {"dense_i/kernel": c["ih/kernel"], "dense_i/bias": bias, "dense_h/kernel": c["hh/kernel"]}
    sources = {"dense_i/kernel": ["ih/kernel"], "dense_i/bias": ["ih/bias", "hh/bias"], "dense_h/kernel": ["hh/kernel"]}
    dropped = {}
    if grad or np.any(b_hn != 0):
        what = "its gradient" if grad else f"max |b_hn| = {np.max(np.abs(b_hn)):.3g}"
        dropped["hh/bias"] = f"b_hn = hh/bias[{2 * h}:{3 * h}] ({what}) has no place in nnx.GRUCell (P08)"
    return leaves, sources, dropped


def _gru_cell_back(m, n):
    h = m.hidden_features
    return {
        "ih/kernel": n["dense_i/kernel"],
        "ih/bias": n["dense_i/bias"],
        "hh/kernel": n["dense_h/kernel"],
        "hh/bias": np.zeros(3 * h, n["dense_i/bias"].dtype),
    }


_LSTM_I, _LSTM_H = ("ii", "if_", "ig", "io"), ("hi", "hf", "hg", "ho")  # gates i | f | g | o, as torch


def _lstm_cell(m, c, grad):
    _need(c, ("ih/kernel", "ih/bias", "hh/kernel", "hh/bias"), "nnx.LSTMCell")
    leaves, sources = {}, {}
    for gi, gh, ki, kh, b in zip(
        _LSTM_I,
        _LSTM_H,
        _blocks(c["ih/kernel"], 4),
        _blocks(c["hh/kernel"], 4),
        _blocks(_fold(c, grad), 4),
        strict=True,
    ):
        leaves.update({f"{gi}/kernel": ki, f"{gh}/kernel": kh, f"{gh}/bias": b})
        sources.update(
            {f"{gi}/kernel": ["ih/kernel"], f"{gh}/kernel": ["hh/kernel"], f"{gh}/bias": ["ih/bias", "hh/bias"]}
        )
    return leaves, sources, {}


def _lstm_cell_back(m, n):
    bias = np.concatenate([n[f"{g}/bias"] for g in _LSTM_H])
    return {
        "ih/kernel": np.concatenate([n[f"{g}/kernel"] for g in _LSTM_I], axis=-1),
        "ih/bias": bias,
        "hh/kernel": np.concatenate([n[f"{g}/kernel"] for g in _LSTM_H], axis=-1),
        "hh/bias": np.zeros_like(bias),
    }


def _fused_cell(biased: str):
    # nnx.OptimizedLSTMCell (bias on dense_h) and nnx.SimpleCell (bias on dense_i): fused gates, one folded bias
    def to(m, c, grad):
        _need(c, ("ih/kernel", "ih/bias", "hh/kernel", "hh/bias"), "fused nnx cell")
        leaves = {"dense_i/kernel": c["ih/kernel"], "dense_h/kernel": c["hh/kernel"], f"{biased}/bias": _fold(c, grad)}
        sources = {
            "dense_i/kernel": ["ih/kernel"],
            "dense_h/kernel": ["hh/kernel"],
            f"{biased}/bias": ["ih/bias", "hh/bias"],
        }
        return leaves, sources, {}

    def back(m, n):
        b = n[f"{biased}/bias"]
        return {"ih/kernel": n["dense_i/kernel"], "ih/bias": b, "hh/kernel": n["dense_h/kernel"], "hh/bias": 0 * b}

    return to, back


def _conv_transpose(m, c, grad):
    kernel = np.asarray(c["kernel"])
    if m.transpose_kernel:  # kernel [kh, kw, out, in], applied as the gradient of a conv: torch's own layout, unflipped
        kernel = np.swapaxes(kernel[::-1, ::-1], -1, -2)
    leaves = {**c, "kernel": kernel}
    return leaves, {k: [k] for k in leaves}, {}


def _conv_transpose_back(m, n):
    kernel = np.asarray(n["kernel"])
    return {**n, "kernel": np.swapaxes(kernel, -1, -2)[::-1, ::-1] if m.transpose_kernel else kernel}


def _identity(m, c, grad):
    return dict(c), {k: [k] for k in c}, {}


RULES: dict[type, tuple[Callable, Callable]] = {
    nnx.GRUCell: (_gru_cell, _gru_cell_back),
    nnx.LSTMCell: (_lstm_cell, _lstm_cell_back),
    nnx.OptimizedLSTMCell: _fused_cell("dense_h"),
    nnx.SimpleCell: _fused_cell("dense_i"),
    nnx.ConvTranspose: (_conv_transpose, _conv_transpose_back),
}


_RECURRENT = ("ih/kernel", "ih/bias", "hh/kernel", "hh/bias")
_FUSED = {
    "ih/kernel": "dense_i/kernel",
    "ih/bias": "dense_i/bias",
    "hh/kernel": "dense_h/kernel",
    "hh/bias": "dense_h/bias",
}
_GATES = {f"{g}/{leaf}" for g in _LSTM_I + _LSTM_H for leaf in ("kernel", "bias")}


def _renamed(m, c, grad):
    # a hand-written fused cell keeping both of torch's biases: torch's leaves under nnx's fused names
    if set(c) != set(_RECURRENT):
        return _identity(m, c, grad)
    return {_FUSED[k]: v for k, v in c.items()}, {_FUSED[k]: [k] for k in c}, {}


def _renamed_back(m, n):
    return {k: n[v] for k, v in _FUSED.items()} if "dense_i/kernel" in n else dict(n)


def _gates(m, c, grad):
    # a hand-written per-gate LSTM cell keeping both biases: torch's fused i | f | g | o split by gate, nothing folded
    if set(c) != set(_RECURRENT):
        return _identity(m, c, grad)
    leaves, sources = {}, {}
    for names, side in ((_LSTM_I, "ih"), (_LSTM_H, "hh")):
        for g, kernel, bias in zip(names, _blocks(c[f"{side}/kernel"], 4), _blocks(c[f"{side}/bias"], 4), strict=True):
            leaves.update({f"{g}/kernel": kernel, f"{g}/bias": bias})
            sources.update({f"{g}/kernel": [f"{side}/kernel"], f"{g}/bias": [f"{side}/bias"]})
    return leaves, sources, {}


def _gates_back(m, n):
    if "ii/kernel" not in n:
        return dict(n)
    return {
        f"{side}/{leaf}": np.concatenate([n[f"{g}/{leaf}"] for g in names], axis=-1)
        for names, side in ((_LSTM_I, "ih"), (_LSTM_H, "hh"))
        for leaf in ("kernel", "bias")
    }


def _by_leaves(module) -> tuple[Callable, Callable] | None:
    """A rule for a class of the user's that has none, by what it holds rather than its name: a recurrent
    cell written by hand with nnx's leaf names and both of torch's biases (fused dense_i / dense_h, or
    nnx.LSTMCell's per-gate ii ... ho), or a norm written by hand under HF's names (`weight`, `eps`:
    norm_rule.py). None for anything else (held as the canonical layout). Found once per module object: a
    check maps every step of both sides through its rules, and its model copies keep their leaves' names."""
    if type(module).__module__.startswith("flax."):
        return None
    if module not in _FOUND:
        _FOUND[module] = _found_by_leaves(module)
    return _FOUND[module]


_FOUND: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # module object -> _by_leaves' rule or None


def _found_by_leaves(module) -> tuple[Callable, Callable] | None:
    names = {"/".join(map(str, path)) for path, _ in nnx.to_flat_state(nnx.state(module, nnx.Param))}
    if names == set(_FUSED.values()):
        return _renamed, _renamed_back
    if names == _GATES:
        return _gates, _gates_back
    return norm_rule(module)


def rule_for(module) -> tuple[str, Callable, Callable, nnx.Module]:
    """The rule of an NNX module: (prefix, to, back, the module it applies to).

    to(module, canonical, grad) -> (leaves, sources, dropped): canonical leaves (torch's rule
    table, keyed like `ih/kernel`) as the module's own; back(module, leaves) -> canonical.
    nnx.RNN hands its leaves to its cell (prefix `cell/`); a class of the user's without a rule is
    recognised by its leaves where it is a hand-written recurrent cell or norm (_by_leaves); any other module
    holds the canonical layout as it is (nnx.Linear, nnx.Conv, nnx.Embed, the norms).
    """
    prefix = ""
    while isinstance(module, nnx.RNN):
        prefix, module = f"{prefix}cell/", module.cell
    to, back = RULES.get(type(module)) or _by_leaves(module) or (_identity, lambda m, n: dict(n))
    return prefix, to, back, module


def register(module_type: type, leaves: Mapping[str, tuple[str, tuple[int, ...] | None]]) -> Callable[[], None]:
    """Add a rule for an NNX module class of the user's; returns the function that removes it again.

    leaves: {canonical leaf (torch's rule: "kernel", "bias"): (the module's own leaf path, the permutation
    of the canonical array's axes into its layout, or None)}. Only this class, not its subclasses (the
    table goes by exact type). Raises ValueError naming the class when it already has a rule; the rule,
    applied, raises ValueError for canonical leaves it does not name, or names that are missing.
    """
    if not isinstance(module_type, type) or not issubclass(module_type, nnx.Module):
        raise ValueError(f"module_type expected a flax.nnx.Module subclass, got {module_type!r}")
    if module_type in RULES:
        raise ValueError(f"{module_type.__qualname__} already has a rule (registered twice?): remove it first")
    kind = module_type.__qualname__

    def to(m, c, grad):
        _need(c, tuple(leaves), kind)
        extra = sorted(set(c) - set(leaves))
        if extra:
            raise ValueError(f"{kind}: canonical leaves {extra} are in no leaf of its rule (given {sorted(leaves)})")
        out = {name: np.transpose(np.asarray(c[k]), perm) if perm else c[k] for k, (name, perm) in leaves.items()}
        return out, {name: [k] for k, (name, _) in leaves.items()}, {}

    def back(m, n):
        return {
            k: np.transpose(np.asarray(n[name]), np.argsort(perm)) if perm else n[name]
            for k, (name, perm) in leaves.items()
        }

    RULES[module_type] = (to, back)

    def remove() -> None:
        if RULES.get(module_type) == (to, back):
            del RULES[module_type]

    return remove
