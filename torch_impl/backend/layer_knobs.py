"""Port checker, torch half, counterfactuals of a convolution's padding and a loss's mean: the knobs that replay
nn.Conv1d / 2d / 3d with XLA's "SAME" padding, and F.cross_entropy's mean over every position (knobs.py applies
them with the others; torch only, as every replay of the reference is).

What it does: `conv_padding_same` pads every convolution's input as XLA's "SAME" does (flax's nnx.Conv default,
and the string a port writes for torch's padding=k // 2): out = ceil(in / stride), the total padding split with
its odd unit at the end, where torch pads both sides alike (padding=1 at stride 2 on an even input: (1, 1) in
torch, (0, 1) in XLA); `ignore_index_mean` divides F.cross_entropy's sum by every target position where torch's
mean divides by the positions not ignored (a port's mean of where(valid, nll, 0)).
Gradient flow: unchanged: the padding is a constant and the division a scale.
Port note: each convolution's forward and F.cross_entropy are restored when the run ends; a convolution whose
padding "SAME" cannot change (stride 1, odd kernel, padding (k - 1) · dilation / 2) is left alone.
Shapes: x [B, C, *spatial] (or unbatched [C, *spatial]); cross_entropy's input [N, C, ...], target [N, ...].
Reference: XLA's operation semantics (Conv, "SAME" padding); PyTorch docs, nn.Conv2d and F.cross_entropy
(ignore_index, reduction="mean").
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

import torch.nn.functional as F
from torch import nn

__all__ = ["KNOBS", "knob"]

KNOBS = ("conv_padding_same", "ignore_index_mean")
_CONVS = {nn.Conv1d: F.conv1d, nn.Conv2d: F.conv2d, nn.Conv3d: F.conv3d}


@contextlib.contextmanager
def knob(model: nn.Module, names: tuple[str, ...]) -> Iterator[None]:
    """Applies the knobs among `names` to the model's convolutions, or to F.cross_entropy, for the body of the with.

    Raises ValueError naming the knob when the model has no convolution whose padding "SAME" could change.
    """
    changed, saved = [], []
    if "conv_padding_same" in names:
        convs = [m for m in model.modules() if type(m) in _CONVS and _could_differ(m)]
        if not convs:
            raise ValueError(
                "knob conv_padding_same: expected an nn.Conv1d / 2d / 3d with zero padding that 'SAME' changes "
                "(a stride above 1, an even kernel or another padding), found none"
            )
        for m in convs:  # the instance's forward: the class and every other model are left alone
            m.forward = _same(m)
            changed.append(m)
    if "ignore_index_mean" in names:
        saved.append(F.cross_entropy)
        F.cross_entropy = _mean_over_every_position(F.cross_entropy)
    try:
        yield
    finally:
        for m in changed:
            m.__dict__.pop("forward", None)
        for original in saved:
            F.cross_entropy = original


def _could_differ(m: nn.Module) -> bool:
    if isinstance(m.padding, str) or m.padding_mode != "zeros":
        return False  # torch's own "same" / "valid", or a reflect / circular padding: another convention
    plain = zip(m.kernel_size, m.stride, m.dilation, m.padding, strict=True)
    return not all(s == 1 and k % 2 == 1 and p == (k - 1) * d // 2 for k, s, d, p in plain)


def _same(m: nn.Module) -> Callable:
    conv, n = _CONVS[type(m)], len(m.kernel_size)

    def run(x):
        pads = []
        for size, k, s, d in zip(x.shape[-n:], m.kernel_size, m.stride, m.dilation, strict=True):
            total = max((-(-size // s) - 1) * s + (k - 1) * d + 1 - size, 0)  # out = ceil(size / stride)
            pads = [total // 2, total - total // 2, *pads]  # F.pad lists the last axis first; the odd unit at the end
        return conv(F.pad(x, pads), m.weight, m.bias, m.stride, 0, m.dilation, m.groups)

    return run


def _mean_over_every_position(cross_entropy: Callable) -> Callable:
    def run(input, target, weight=None, size_average=None, ignore_index=-100, reduce=None, reduction="mean",
            label_smoothing=0.0):  # fmt: skip
        kw = dict(weight=weight, size_average=size_average, ignore_index=ignore_index, reduce=reduce,
                  label_smoothing=label_smoothing)  # fmt: skip
        plain = reduction != "mean" or weight is not None or size_average is not None or reduce is not None
        if plain or target.is_floating_point() or not bool((target == ignore_index).any()):
            return cross_entropy(input, target, reduction=reduction, **kw)
        # the ignored positions count as zeros in the mean: the sum over the kept ones over every position
        return cross_entropy(input, target, reduction="sum", **kw) / target.numel()

    return run
