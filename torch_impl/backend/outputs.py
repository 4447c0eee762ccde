"""Port checker, torch half, output layouts: the named axes of a module's outputs, by torch type; the
mirror of jax_impl/backend/outputs.py.

What it does: every output of a module the checker compares goes through the axes its module's rule
declares, never through a guess from the shapes: nn.Conv2d gives ("B", "C", "S1", "S2"), its NNX twin
("B", "S1", "S2", "C"); nn.GRU(batch_first=False) gives ("T", "B", "H"); nn.LSTMCell gives h then c.
Each array of an output gets (name, axes): the name pairs it with its NNX twin's array (torch's LSTM
state h with nnx's h, whatever their order in the tuples), the axes say how to permute it.
A module without a rule passes on the axes of what it returns: the very tensor a ruled module gave
(a block ending in a conv), or the input it has the shape of (nn.ReLU, a residual block).
Gradient flow: none here; the arrays are recorded copies.
Port note: the names are shared by both halves: "out" (the output), "h" / "c" (a recurrent state),
axes "B" batch, "C" channels, "S<k>" spatial, "T" time, "H" hidden, "L" layers, "F" features and
"L<k>" leading axes of a dense layer (a split NNX axis is "F.0", "F.1": [B, T, H·D] <-> [B, T, H, D]).
Shapes: as the module's outputs.
Reference: PyTorch docs, torch.nn (ConvNd, the norms and pools, RNN / GRU / LSTM and cells, MultiheadAttention).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

__all__ = ["output_axes"]

Spec = tuple[str, tuple[str, ...]] | None  # (name, axes) of one output array, or None: not known


def _channels_first(k: int | None) -> Callable:
    # [B, C, *spatial] (k spatial axes; None: as many as the array has)
    def axes(m, shapes, ins):
        out = []
        for s in shapes:
            n = len(s)
            spatial = n - 2 if k is None else k
            lead = n - 1 - spatial
            if spatial < 0 or lead not in (0, 1) or (k is None and n < 2):
                out.append(None)
                continue
            out.append(("out", ("B",) * lead + ("C",) + tuple(f"S{i + 1}" for i in range(spatial))))
        return out

    return axes


def _recurrent(m: nn.RNNBase, shapes, ins):
    # output [T, B, H] ([B, T, H] batch_first), then h_n (and c_n) [L, B, H]; unbatched: no B
    if not shapes:
        return []
    batched = len(shapes[0]) == 3
    seq = (("B", "T") if m.batch_first else ("T", "B")) if batched else ("T",)
    state = ("L", "B", "H") if batched else ("L", "H")
    names = ("out", *getattr(m, "_state_order", ("h", "c")))  # an LSTM's knob may swap (h, c): knobs.py
    return [(names[i], seq + ("H",) if i == 0 else state) if i < 3 else None for i in range(len(shapes))]


def _cell(m: nn.RNNCellBase, shapes, ins):
    # nn.RNNCell / nn.GRUCell: h; nn.LSTMCell: (h, c), each [B, H]
    names = ("h", "c")
    return [(names[i], ("B", "H")[-len(s) :]) if i < 2 and len(s) in (1, 2) else None for i, s in enumerate(shapes)]


def _attention(m: nn.MultiheadAttention, shapes, ins):
    # attn_output [T, B, E] ([B, T, E] batch_first), then the averaged weights [B, T, S]
    out = []
    for i, s in enumerate(shapes):
        if i == 0:
            axes = (("B", "T") if m.batch_first else ("T", "B")) + ("E",) if len(s) == 3 else ("T", "E")
            out.append(("out", axes))
        else:
            out.append(("weights", ("B", "T", "S")[-len(s) :]))
    return out


def _lead(n: int, ins: tuple | None) -> tuple[str, ...]:
    # a dense layer's leading axes are its input's ([T, B, H] -> [T, B, F]); unknown: L0, L1 ...
    return tuple(ins[:-1]) if ins is not None and len(ins) == n + 1 else tuple(f"L{i}" for i in range(n))


def _dense(m, shapes, ins):
    return [("out", _lead(len(s) - 1, ins) + ("F",)) if s else None for s in shapes]


_POOLS = {
    nn.MaxPool1d: 1, nn.MaxPool2d: 2, nn.MaxPool3d: 3, nn.AvgPool1d: 1, nn.AvgPool2d: 2, nn.AvgPool3d: 3,
    nn.AdaptiveAvgPool1d: 1, nn.AdaptiveAvgPool2d: 2, nn.AdaptiveAvgPool3d: 3, nn.AdaptiveMaxPool1d: 1,
    nn.AdaptiveMaxPool2d: 2, nn.AdaptiveMaxPool3d: 3, nn.Conv1d: 1, nn.Conv2d: 2, nn.Conv3d: 3,
    nn.ConvTranspose1d: 1, nn.ConvTranspose2d: 2, nn.ConvTranspose3d: 3, nn.BatchNorm2d: 2, nn.BatchNorm3d: 3,
    nn.InstanceNorm1d: 1, nn.InstanceNorm2d: 2, nn.InstanceNorm3d: 3, nn.Dropout1d: 1, nn.Dropout2d: 2,
    nn.Dropout3d: 3,
}  # fmt: skip

# module type -> (module, output shapes) -> [(name, axes) or None per array]; a subclass inherits its base's
OUTPUT_RULES: dict[type, Callable] = {
    **{cls: _channels_first(k) for cls, k in _POOLS.items()},
    nn.BatchNorm1d: _channels_first(None),  # [B, C] or [B, C, L]
    nn.GroupNorm: _channels_first(None),
    nn.RNN: _recurrent,
    nn.GRU: _recurrent,
    nn.LSTM: _recurrent,
    nn.RNNCell: _cell,
    nn.GRUCell: _cell,
    nn.LSTMCell: _cell,
    nn.MultiheadAttention: _attention,
    nn.Linear: _dense,
}


def _rule(module: nn.Module) -> Callable | None:
    return next((OUTPUT_RULES[c] for c in type(module).__mro__ if c in OUTPUT_RULES), None)


def output_axes(module: nn.Module, args: tuple, tensors: list, known: dict) -> list[Spec]:
    """The (name, axes) of each tensor of a module's output (flattened as the recorder does), or None.

    Args:
      module: the torch module whose call returned `tensors`; args: its positional inputs.
      known: id(tensor) -> (tensor, spec) of the tensors recorded so far in this forward (updated
        here with these): a module without a rule passes on the spec of the very tensor it returns,
        else that of an input of the same shape.
    Returns:
      one spec per tensor: ("out" | "h" | "c" | "weights", axes names, one per dimension) or None.
    """
    rule = _rule(module)
    shapes = [tuple(t.shape) for t in tensors]
    first = args[0] if args and isinstance(args[0], torch.Tensor) else None
    ins = known[id(first)][1][1] if first is not None and id(first) in known else None
    if rule is not None:
        specs = list(rule(module, shapes, ins))
    else:
        inputs = [known[id(a)] for a in args if isinstance(a, torch.Tensor) and id(a) in known]
        specs = []
        for t in tensors:
            spec = known[id(t)][1] if id(t) in known else None
            if spec is None:
                spec = next((s for a, s in inputs if s is not None and tuple(a.shape) == tuple(t.shape)), None)
            specs.append(("out", spec[1]) if spec else None)
    for t, spec in zip(tensors, specs, strict=True):
        if spec is not None and len(spec[1]) == t.dim():
            known[id(t)] = (t, spec)
    return [s if s is not None and len(s[1]) == t.dim() else None for t, s in zip(tensors, specs, strict=True)]
