"""Port checker, torch half, counterfactuals: the knobs a run of the reference can apply; the mirror of
jax_impl/backend/knobs.py.

What it does: each knob changes the checker's own copy of the torch model (or a torch function) for one
run, so that if torch with the knob matches JAX, the knob names the bug (the GELU approximation either
way: F.gelu and every GELU module by what it computes, HF's gelu_new included; norm
epsilons, BatchNorm conventions, mask polarity, the LSTM carry order, Adam's decay, first order).
Gradient flow: the running statistics a knob recomputes are buffers, updated under no_grad.
Port note: every attribute and function patched is restored when the run ends (F.gelu,
nn.MultiheadAttention.forward, nn.LSTM.forward, torch.autograd.grad).
Shapes: as the user's model.
Reference: the checker's catalogue (shared/apps/check/catalogue/), one record per knob.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

import torch
import torch.nn.functional as F
from torch import nn

from .._layout import EPS_NAMES, norm_like
from .layout import activation_of

__all__ = ["knobs", "knob"]

# a GELU knob -> (the variant of module it swaps, F.gelu's `approximate` it computes with instead)
_GELU = {"gelu_tanh": ("gelu_exact", "tanh"), "gelu_exact": ("gelu_tanh", "none")}
_NNX_EPS = 1e-6  # nnx.LayerNorm / nnx.GroupNorm / nnx.RMSNorm default epsilon
# the counterfactuals of the torch reference, each named by one record of the checker's catalogue
# (shared/apps/check/catalogue/), which says what it changes and which pitfall it confirms
_KNOBS = (
    "gelu_tanh",
    "gelu_exact",
    "norm_eps",
    "bn_momentum",
    "bn_biased_var",
    "mask_inverted",
    "lstm_carry_swapped",
    "adam_swapped",
    "first_order",
)


def knobs() -> frozenset[str]:
    """The counterfactuals `run_loss` / `train` can apply on this side, by name ("a+b" applies two)."""
    return frozenset(_KNOBS)


@contextlib.contextmanager
def knob(model: nn.Module, name: str | None) -> Iterator[None]:
    """Applies the knob `name` ("a+b": both) to `model` and torch for the body of the with; restores all.

    Raises ValueError naming the knob when it is not one of `knobs()`.
    """
    names = () if name is None else tuple(name.split("+"))  # "a+b": both at once
    if any(n not in _KNOBS for n in names):
        raise ValueError(f"knob expected one of {sorted(_KNOBS)} (or several joined by '+') or None, got {name!r}")
    saved, undo = [], []
    norms = (nn.LayerNorm, nn.GroupNorm, nn.RMSNorm)
    for sub in model.modules():
        if "norm_eps" in names and (isinstance(sub, norms) or norm_like(sub)):
            attr = next(n for n in EPS_NAMES if isinstance(getattr(sub, n, None), float))  # HF: variance_epsilon
            saved.append((sub, attr, getattr(sub, attr)))
            setattr(sub, attr, _NNX_EPS)
        if "bn_momentum" in names and isinstance(sub, nn.modules.batchnorm._BatchNorm) and sub.momentum is not None:
            saved.append((sub, "momentum", sub.momentum))
            sub.momentum = 1 - sub.momentum
        if "bn_biased_var" in names and isinstance(sub, nn.modules.batchnorm._BatchNorm):
            undo += [sub.register_forward_pre_hook(_keep_var), sub.register_forward_hook(_biased_var)]
        for gelu in (n for n in names if n in _GELU and activation_of(sub) == _GELU[n][0]):
            # a module's own formula (HF's NewGELUActivation) or an F.gelu bound at init (GELUActivation,
            # GELUTanh) escapes the patch of F.gelu: its output is replaced by F.gelu's other variant
            undo.append(
                sub.register_forward_hook(lambda m, args, out, a=_GELU[gelu][1]: F.gelu(args[0], approximate=a))
            )
    patched = {
        "gelu_tanh": (F, "gelu", lambda f: lambda x, approximate="none": f(x, approximate="tanh")),
        "gelu_exact": (F, "gelu", lambda f: lambda x, approximate="none": f(x, approximate="none")),
        "mask_inverted": (nn.MultiheadAttention, "forward", _inverted_masks),
        "lstm_carry_swapped": (nn.LSTM, "forward", _swapped_carry),
        "first_order": (torch.autograd, "grad", lambda f: lambda *a, **kw: f(*a, **{**kw, "create_graph": False})),
    }.get(names[0] if len(names) == 1 else None)
    if patched:
        owner, attr, make = patched
        original = getattr(owner, attr)
        setattr(owner, attr, make(original))
    try:
        yield
    finally:
        if patched:
            setattr(owner, attr, original)
        for sub, attr, value in saved:
            setattr(sub, attr, value)
        for handle in undo:
            handle.remove()


def _keep_var(bn, args) -> None:
    # torch updates (and saves for backward) the buffer it is handed: hand it a throwaway copy, keep the real one
    bn._kept_var = bn.running_var
    if bn.running_var is not None:
        bn.running_var = bn.running_var.clone()


def _biased_var(bn, args, out) -> None:
    kept, bn.running_var = bn._kept_var, bn._kept_var
    if bn.training and kept is not None and bn.momentum is not None:
        x = args[0]
        dims = [d for d in range(x.dim()) if d != 1]
        with torch.no_grad():  # the running statistics are buffers, outside the graph
            var = x.var(dim=dims, correction=0)  # biased: nnx's running variance
            kept.copy_((1 - bn.momentum) * kept + bn.momentum * var)


def _inverted_masks(forward: Callable) -> Callable:
    def inverted(self, *args, **kwargs):
        for name in ("key_padding_mask", "attn_mask"):
            mask = kwargs.get(name)
            if mask is not None and mask.dtype == torch.bool:
                kwargs[name] = ~mask
        return forward(self, *args, **kwargs)

    return inverted


def _swapped_carry(forward: Callable) -> Callable:
    def swapped(self, *args, **kwargs):
        out, (h, c) = forward(self, *args, **kwargs)
        return out, (c, h)

    return swapped
