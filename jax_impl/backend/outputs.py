"""Port checker, JAX half, output layouts: the named axes of an NNX module's outputs, by NNX type; the
mirror of torch_impl/backend/outputs.py.

What it does: every output of a module the checker compares goes through the axes its module's rule
declares: nnx.Conv gives ("B", "S1", "S2", "C") where torch's conv gives ("B", "C", "S1", "S2");
nnx.RNN gives ("B", "T", "H") or, time-major, ("T", "B", "H"), and with return_carry its carry first;
nnx.LSTMCell returns ((c, h), h), named "c", "h", "out", so that torch's (h, c) pairs by name.
A module without a rule passes on the axes of what it returns (the very array a ruled module gave,
or the input it has the shape of: nnx.BatchNorm, a residual block).
Gradient flow: none here; the arrays are recorded values (tracers while jitted).
Port note: the names are torch_impl/backend/outputs.py's; call-time settings count (rnn(x,
time_major=True, return_carry=True)).
Shapes: as the module's outputs.
Reference: Flax NNX docs (nnx.Conv, nnx.RNN, nnx.LSTMCell, nnx.GRUCell, nnx.LinearGeneral, nnx.MultiHeadAttention).
"""

from __future__ import annotations

from collections.abc import Callable

import jax
from flax import nnx

__all__ = ["output_axes"]

Spec = tuple[str, tuple[str, ...]] | None  # (name, axes) of one output array, or None: not known


def _conv(m, args, kwargs, shapes, ins):
    # [B, *spatial, C]: as many spatial axes as the kernel
    k = len(m.kernel_size) if isinstance(m.kernel_size, tuple | list) else 1
    out = []
    for s in shapes:
        lead = len(s) - 1 - k
        axes = ("B",) * lead + tuple(f"S{i + 1}" for i in range(k)) + ("C",)
        out.append(("out", axes) if lead in (0, 1) else None)
    return out


_CARRY = {nnx.LSTMCell: ("c", "h"), nnx.OptimizedLSTMCell: ("c", "h"), nnx.GRUCell: ("h",), nnx.SimpleCell: ("h",)}


def _cell(m, args, kwargs, shapes, ins):
    # cell(carry, x) -> (carry, y): LSTM carry (c, h), GRU / simple carry h; y is h
    names = _CARRY.get(type(m))
    if names is None or len(shapes) != len(names) + 1:
        return [None] * len(shapes)
    return [(n, ("B", "H")[-len(s) :]) for n, s in zip((*names, "out"), shapes, strict=True)]


def _rnn(m, args, kwargs, shapes, ins):
    # outputs [B, T, H] ([T, B, H] time-major); with return_carry, the cell's carry [B, H] first
    time_major = kwargs.get("time_major") if kwargs.get("time_major") is not None else m.time_major
    carry = kwargs.get("return_carry") if kwargs.get("return_carry") is not None else m.return_carry
    names = (*(_CARRY.get(type(m.cell), (None,)) if carry else ()), "out")
    if None in names or len(names) != len(shapes) or len(shapes[-1]) != 3:
        return [None] * len(shapes)
    seq = ("T", "B", "H") if time_major else ("B", "T", "H")
    return [(n, seq if n == "out" else ("B", "H")) for n in names]


def _attention(m, args, kwargs, shapes, ins):
    return [("out", ("B", "T", "E")[-len(s) :]) if len(s) in (2, 3) else None for s in shapes]


def _lead(n: int, ins: tuple | None) -> tuple[str, ...]:
    # a dense layer's leading axes are its input's ([B, T, H] -> [B, T, F]); unknown: L0, L1 ...
    return tuple(ins[:-1]) if ins is not None and len(ins) == n + 1 else tuple(f"L{i}" for i in range(n))


def _dense(m, args, kwargs, shapes, ins):
    return [("out", _lead(len(s) - 1, ins) + ("F",)) if s else None for s in shapes]


def _dense_general(m, args, kwargs, shapes, ins):
    # nnx.LinearGeneral(out_features=(H, D)) on the last axis: [..., H, D], torch's Linear [..., H·D] split
    n = len(m.out_features) if isinstance(m.out_features, tuple | list) else 1
    axis = tuple(m.axis) if isinstance(m.axis, tuple | list) else (m.axis,)
    if axis != (-1,) or m.batch_axis:
        return [None] * len(shapes)
    out = []
    for s in shapes:
        lead = _lead(len(s) - n, ins)
        out.append(("out", lead + (("F",) if n == 1 else tuple(f"F.{i}" for i in range(n)))))
    return out


# NNX module type -> (module, args, kwargs, output shapes) -> [(name, axes) or None per array]
OUTPUT_RULES: dict[type, Callable] = {
    nnx.Conv: _conv,
    nnx.ConvTranspose: _conv,
    nnx.LSTMCell: _cell,
    nnx.OptimizedLSTMCell: _cell,
    nnx.GRUCell: _cell,
    nnx.SimpleCell: _cell,
    nnx.RNN: _rnn,
    nnx.MultiHeadAttention: _attention,
    nnx.Linear: _dense,
    nnx.LinearGeneral: _dense_general,
}


def output_axes(module, args: tuple, kwargs: dict, arrays: list, known: dict) -> list[Spec]:
    """The (name, axes) of each array of an NNX module's output (its pytree leaves, in order), or None.

    Args:
      module: the NNX module whose call returned `arrays`; args, kwargs: its inputs.
      known: id(array) -> (array, spec) of the arrays recorded so far in this forward (updated here
        with these): a module without a rule passes on the spec of the very array it returns, else
        that of an input of the same shape.
    Returns:
      one spec per array: ("out" | "h" | "c", axes names, one per dimension) or None.
    """
    rule = next((OUTPUT_RULES[c] for c in type(module).__mro__ if c in OUTPUT_RULES), None)
    shapes = [tuple(a.shape) for a in arrays]
    ins = known[id(args[0])][1][1] if args and id(args[0]) in known else None
    if rule is not None:
        specs = list(rule(module, args, kwargs, shapes, ins))
    else:
        inputs = [known[id(a)] for a in jax.tree.leaves((args, kwargs)) if id(a) in known]
        specs = []
        for a in arrays:
            spec = known[id(a)][1] if id(a) in known else None
            if spec is None:
                spec = next((s for x, s in inputs if s is not None and tuple(x.shape) == tuple(a.shape)), None)
            specs.append(("out", spec[1]) if spec else None)
    for a, spec in zip(arrays, specs, strict=True):
        if spec is not None and len(spec[1]) == a.ndim:
            known[id(a)] = (a, spec)
    return [s if s is not None and len(s[1]) == a.ndim else None for a, s in zip(arrays, specs, strict=True)]
