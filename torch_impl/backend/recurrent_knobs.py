"""Port checker, torch half, counterfactuals of a recurrent layer: the knobs that replay nn.GRU / nn.LSTM with
one convention of a hand-written port (knobs.py applies them with the others; torch only, as every replay of
the reference is).

What it does: `gru_bhn_outside` computes each GRU step with b_hn added outside the reset gate,
n = tanh(W_in x + b_in + r ⊙ (W_hn h) + b_hn), where torch (and cuDNN) compute r ⊙ (W_hn h + b_hn);
`lstm_gates_ifog` reads the fused LSTM gate rows as i | f | o | g where torch packs i | f | g | o (a port that
splits them in Keras' o-before-g order); `lstm_state_in_swapped` hands the LSTM its initial state as (c0, h0)
(a port that passes torch's (h0, c0) as nnx's (c, h) carry).
Gradient flow: unchanged: the permuted gate rows are an indexing of the parameters, so their gradients land
in torch's own layout.
Port note: every forward and weight list is restored when the run ends.
Shapes: x [T, B, I] or [B, T, I] (batch_first), [T, I] unbatched; h [layers, B, H].
Reference: PyTorch docs, nn.GRU / nn.LSTM (the gate equations); Cho et al. 2014 and Hochreiter & Schmidhuber
1997 for the cells.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

import torch
from torch import nn

__all__ = ["KNOBS", "knob"]

KNOBS = ("gru_bhn_outside", "lstm_gates_ifog", "lstm_state_in_swapped")


@contextlib.contextmanager
def knob(model: nn.Module, names: tuple[str, ...]) -> Iterator[None]:
    """Applies the recurrent knobs among `names` to the model's nn.GRU / nn.LSTM for the body of the with.

    Raises ValueError naming the knob when the model has no layer it applies to.
    """
    names = tuple(n for n in names if n in KNOBS)
    changed = []
    for name in names:
        kind = nn.GRU if name.startswith("gru") else nn.LSTM
        layers = [m for m in model.modules() if type(m) is kind]
        if not layers:
            raise ValueError(f"knob {name}: expected an nn.{kind.__name__} in the model, found none")
        for m in layers:  # the instance's forward: the class and every other model are left alone
            m.forward = _FORWARDS[name](m, type(m).forward.__get__(m))
            changed.append(m)
    try:
        yield
    finally:
        for m in changed:
            m.__dict__.pop("forward", None)


def _gru_bhn_outside(m: nn.GRU, forward: Callable) -> Callable:
    def run(x, hx=None):
        if m.num_layers != 1 or m.bidirectional or x.dim() != 3:  # one layer, batched: the port's cell, step by step
            return forward(x, hx)
        xs = x.transpose(0, 1) if m.batch_first else x
        h = xs.new_zeros(xs.shape[1], m.hidden_size) if hx is None else hx[0]
        b_ih = m.bias_ih_l0 if m.bias else None
        b_hr, b_hz, b_hn = m.bias_hh_l0.chunk(3) if m.bias else (0.0, 0.0, 0.0)
        outs = []
        for t in range(xs.shape[0]):
            i_r, i_z, i_n = nn.functional.linear(xs[t], m.weight_ih_l0, b_ih).chunk(3, -1)
            h_r, h_z, h_n = nn.functional.linear(h, m.weight_hh_l0).chunk(3, -1)
            r, z = torch.sigmoid(i_r + h_r + b_hr), torch.sigmoid(i_z + h_z + b_hz)
            n = torch.tanh(i_n + r * h_n + b_hn)  # b_hn outside the reset gate: the port's formula
            h = (1 - z) * n + z * h
            outs.append(h)
        out = torch.stack(outs)
        return (out.transpose(0, 1) if m.batch_first else out), h[None]

    return run


def _lstm_gates_ifog(m: nn.LSTM, forward: Callable) -> Callable:
    hidden = m.hidden_size
    # rows of i | f | g | o read as i | f | o | g: the port's "g" is torch's o rows, its "o" torch's g rows
    order = torch.cat([torch.arange(2 * hidden), torch.arange(3 * hidden, 4 * hidden),
                       torch.arange(2 * hidden, 3 * hidden)])  # fmt: skip

    def run(*args, **kwargs):
        saved = m._flat_weights
        m._flat_weights = [w[order] if w is not None and w.shape[0] == 4 * hidden else w for w in saved]
        m._update_flat_weights = lambda: None  # keep the permuted list for this call
        try:
            return forward(*args, **kwargs)
        finally:
            m._flat_weights = saved
            del m._update_flat_weights

    return run


def _lstm_state_in_swapped(m: nn.LSTM, forward: Callable) -> Callable:
    def run(x, hx=None):
        return forward(x, None if hx is None else (hx[1], hx[0]))

    return run


_FORWARDS = {"gru_bhn_outside": _gru_bhn_outside, "lstm_gates_ifog": _lstm_gates_ifog,
             "lstm_state_in_swapped": _lstm_state_in_swapped}  # fmt: skip
