"""Port checker, torch half, counterfactuals of a convolution's padding, a loss's mean and a fully masked attention
row: the knobs that replay nn.Conv1d / 2d / 3d with XLA's "SAME" padding, F.cross_entropy's mean over every
position, and F.scaled_dot_product_attention's empty rows as JAX computes them (knobs.py applies them with the
others; torch only, as every replay of the reference is).

What it does: `conv_padding_same` pads every convolution's input as XLA's "SAME" does (flax's nnx.Conv default,
and the string a port writes for torch's padding=k // 2): out = ceil(in / stride), the total padding split with
its odd unit at the end, where torch pads both sides alike (padding=1 at stride 2 on an even input: (1, 1) in
torch, (0, 1) in XLA); `ignore_index_mean` divides F.cross_entropy's sum by every target position where torch's
mean divides by the positions not ignored (a port's mean of where(valid, nll, 0)); `masked_rows_uniform` gives a
query that sees no key (left padding under a causal mask) the uniform average of the values, as
jax.nn.dot_product_attention's large negative fill does, where torch 2.x returns zeros for a boolean or -inf mask:
the mask is made additive with the dtype's finite minimum, so an empty row's scores are all equal.
`sdpa_mask_inverted` inverts each boolean mask given to F.scaled_dot_product_attention (a port passing the
mask's complement to jax.nn.dot_product_attention), an empty row then averaged as JAX does.
Gradient flow: unchanged: the padding is a constant and the division a scale.
Port note: each convolution's forward, F.cross_entropy and F.scaled_dot_product_attention are restored when the
run ends (a module that bound the function at import escapes the last); a convolution whose
padding "SAME" cannot change (stride 1, odd kernel, padding (k - 1) · dilation / 2) is left alone.
Shapes: x [B, C, *spatial] (or unbatched [C, *spatial]); cross_entropy's input [N, C, ...], target [N, ...].
Reference: XLA's operation semantics (Conv, "SAME" padding); PyTorch docs, nn.Conv2d and F.cross_entropy
(ignore_index, reduction="mean").
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["KNOBS", "knob"]

KNOBS = ("conv_padding_same", "ignore_index_mean", "masked_rows_uniform", "sdpa_mask_inverted")
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
        saved.append(("cross_entropy", F.cross_entropy))
        F.cross_entropy = _mean_over_every_position(F.cross_entropy)
    if "masked_rows_uniform" in names:
        saved.append(("scaled_dot_product_attention", F.scaled_dot_product_attention))
        F.scaled_dot_product_attention = _uniform_empty_rows(F.scaled_dot_product_attention)
    if "sdpa_mask_inverted" in names:
        saved.append(("scaled_dot_product_attention", F.scaled_dot_product_attention))
        F.scaled_dot_product_attention = _inverted_mask(F.scaled_dot_product_attention)
    try:
        yield
    finally:
        for m in changed:
            m.__dict__.pop("forward", None)
        for attr, original in saved:
            setattr(F, attr, original)


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


def _uniform_empty_rows(sdpa: Callable) -> Callable:
    def run(query, key, value, attn_mask=None, *args, **kwargs):
        if attn_mask is not None:  # additive, finite: an empty row's scores all equal, its softmax uniform
            low = torch.finfo(query.dtype).min
            if attn_mask.dtype == torch.bool:
                attn_mask = torch.zeros(attn_mask.shape, dtype=query.dtype, device=query.device).masked_fill(
                    ~attn_mask, low
                )
            else:
                attn_mask = attn_mask.clamp(min=low)
        return sdpa(query, key, value, attn_mask, *args, **kwargs)

    return run


def _inverted_mask(sdpa: Callable) -> Callable:
    """F.scaled_dot_product_attention with each boolean mask inverted, as a port passes `~mask` to
    jax.nn.dot_product_attention (both read True as attend). A row left with no key is the uniform average of
    the values, as JAX's fill gives it, with no gradient to its scores (JAX's `where` cuts it)."""

    def run(query, key, value, attn_mask=None, *args, **kwargs):
        if attn_mask is None or attn_mask.dtype != torch.bool:
            return sdpa(query, key, value, attn_mask, *args, **kwargs)
        keep = ~attn_mask
        empty = ~keep.any(-1, keepdim=True)  # [..., L, 1]: the queries that see no key
        out = sdpa(query, key, value, keep | empty, *args, **kwargs)  # every row sees a key: no 0 / 0
        return torch.where(empty, value.mean(-2, keepdim=True), out)

    return run
