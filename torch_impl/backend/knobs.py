"""Port checker, torch half, counterfactuals: the knobs a run of the reference can apply; the mirror of
jax_impl/backend/knobs.py.

What it does: each knob changes the checker's own copy of the torch model (or a torch function) for one
run, so that if torch with the knob matches JAX, the knob names the bug (the GELU approximation either
way: F.gelu and every GELU module by what it computes, HF's gelu_new included; norm epsilons, BatchNorm
conventions, mask polarity, the LSTM carry order, Adam's decay, first order, the flatten order of
channels-first features, a square Linear's weight used untransposed, a rule's leaf read in another arrangement
of its axes, std / var's correction).
Gradient flow: the running statistics a knob recomputes are buffers, updated under no_grad.
Port note: every attribute and function patched is restored when the run ends (F.gelu,
nn.MultiheadAttention.forward, nn.LSTM.forward, nn.Linear.forward, torch.autograd.grad, Tensor.flatten /
view / reshape, torch.std / var and their Tensor methods, F's regression losses and Tensor.__sub__ for a
loss broadcast, torch.optim.Adam / AdamW's step).
Shapes: as the user's model.
Reference: the checker's catalogue (shared/apps/check/catalogue/), one record per knob.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Callable, Iterator

import torch
import torch.nn.functional as F
from torch import nn

from .._layout import EPS_NAMES, norm_like
from . import layer_knobs, layout_knobs, recurrent_knobs, transformer_knobs
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
    "flatten_channels_last",
    "linear_transposed",
    "std_correction_flipped",
    "bn_batch_stats",
    "bn_running_stats",
    "loss_broadcast",
    *transformer_knobs.KNOBS,  # attention, rotary, gated MLP, embeddings: transformer_knobs.py
    *recurrent_knobs.KNOBS,  # GRU's b_hn, LSTM gate order and state order: recurrent_knobs.py
    *layer_knobs.KNOBS,  # a convolution's "SAME" padding, cross-entropy's mean over ignored positions
    *layout_knobs.KNOBS,  # a rule's leaf read in another arrangement of its axes: layout_knobs.py
)


def knobs() -> frozenset[str]:
    """The counterfactuals `run_loss` / `train` can apply on this side, by name ("a+b" applies two)."""
    return frozenset(_KNOBS)


@contextlib.contextmanager
def knob(model: nn.Module, name: str | None) -> Iterator[None]:
    """Applies the knob `name` ("a+b": both; "a@path": a module knob on the submodule at that dotted path only;
    "leaf_permuted@paths:leaf=axes": layout_knobs.py's) to `model` and torch for the body of the with; restores all.

    Raises ValueError naming the knob when it is not one of `knobs()`, or the path when it is no submodule.
    """
    name, _, only = (name or "").partition("@")
    names = tuple(name.split("+")) if name else ()  # "a+b": both at once
    if any(n not in _KNOBS for n in names):
        raise ValueError(f"knob expected one of {sorted(_KNOBS)} (or several joined by '+') or None, got {name!r}")
    where, only = (only, "") if set(names) & set(layout_knobs.KNOBS) else ("", only)  # paths and a leaf, its own
    try:
        scope = model.get_submodule(only) if only else model  # one module's norms or BatchNorms, the rest as they are
    except AttributeError:
        raise ValueError(f"knob {name}@{only}: expected a submodule path of the model, got {only!r}") from None
    saved, undo = [], []
    norms = (nn.LayerNorm, nn.GroupNorm, nn.RMSNorm)
    for sub in scope.modules():
        if "norm_eps" in names and (isinstance(sub, norms) or norm_like(sub)):
            attr = next(n for n in EPS_NAMES if isinstance(getattr(sub, n, None), float))  # HF: variance_epsilon
            saved.append((sub, attr, getattr(sub, attr)))
            setattr(sub, attr, _NNX_EPS)
        if "bn_momentum" in names and isinstance(sub, nn.modules.batchnorm._BatchNorm) and sub.momentum is not None:
            saved.append((sub, "momentum", sub.momentum))
            sub.momentum = 1 - sub.momentum
        stats = {"bn_batch_stats": False, "bn_running_stats": True}  # knob -> the mode whose BatchNorms it changes
        for name in (n for n in names if n in stats):
            if isinstance(sub, nn.modules.batchnorm._BatchNorm) and sub.training == stats[name]:
                # batch statistics in eval (momentum 0: the running ones stay), or the running ones in training
                sub.forward = lambda x, m=sub, batch=not stats[name]: F.batch_norm(
                    x, None if batch else m.running_mean, None if batch else m.running_var, m.weight, m.bias,
                    training=batch, momentum=0.0, eps=m.eps)  # fmt: skip
                undo.append(_Forget(sub, "forward"))
        if "bn_biased_var" in names and isinstance(sub, nn.modules.batchnorm._BatchNorm):
            undo += [sub.register_forward_pre_hook(_keep_var), sub.register_forward_hook(_biased_var)]
        for gelu in (n for n in names if n in _GELU and activation_of(sub) == _GELU[n][0]):
            # a module's own formula (HF's NewGELUActivation) or an F.gelu bound at init (GELUActivation,
            # GELUTanh) escapes the patch of F.gelu: its output is replaced by F.gelu's other variant
            undo.append(
                sub.register_forward_hook(lambda m, args, out, a=_GELU[gelu][1]: F.gelu(args[0], approximate=a))
            )
        if "lstm_carry_swapped" in names and isinstance(sub, nn.LSTM):
            sub._state_order = ("c", "h")  # what the swapped state holds, for the output layouts (outputs.py)
            undo.append(_Forget(sub, "_state_order"))
    patched = {
        "gelu_tanh": (F, "gelu", lambda f: lambda x, approximate="none": f(x, approximate="tanh")),
        "gelu_exact": (F, "gelu", lambda f: lambda x, approximate="none": f(x, approximate="none")),
        "mask_inverted": (nn.MultiheadAttention, "forward", _inverted_masks),
        "lstm_carry_swapped": (nn.LSTM, "forward", _swapped_carry),
        "first_order": (torch.autograd, "grad", lambda f: lambda *a, **kw: f(*a, **{**kw, "create_graph": False})),
        "linear_transposed": (nn.Linear, "forward", _transposed_linear),
    }.get(names[0] if len(names) == 1 else None)
    patches = [patched] if patched else []
    if names == ("flatten_channels_last",):
        patches = [(owner, attr, _channels_last) for owner, attr in _FLATTENS]
    if names == ("adam_swapped",):  # the user's own Adam / AdamW in their step too; AdamW's hooked step is its own
        patches = [
            (cls, "step", _swapped_decay) for cls in (torch.optim.Adam, torch.optim.AdamW) if "step" in vars(cls)
        ]
    if names == ("loss_broadcast",):
        patches = [(owner, attr, _outer) for owner, attr in _DIFFERENCES]
    if names == ("std_correction_flipped",):
        patches = [(owner, attr, _flipped_correction) for owner, attr in _STATISTICS]
    originals = [(getattr(owner, attr), attr in vars(owner)) for owner, attr, _ in patches]
    for (owner, attr, make), (original, _) in zip(patches, originals, strict=True):
        setattr(owner, attr, make(original))
    try:
        with transformer_knobs.knob(model, names), recurrent_knobs.knob(model, names), layer_knobs.knob(model, names):
            with layout_knobs.knob(model, names, where):
                yield
    finally:
        for (owner, attr, _), (original, own) in zip(patches, originals, strict=True):
            if own:
                setattr(owner, attr, original)
            else:  # inherited (torch.Tensor.view is TensorBase's): the class gets back no attribute of its own
                delattr(owner, attr)
        for sub, attr, value in saved:
            setattr(sub, attr, value)
        for handle in undo:
            handle.remove()


class _Forget:
    """A handle whose remove() deletes an attribute a knob gave a module."""

    def __init__(self, owner, attr: str) -> None:
        self.owner, self.attr = owner, attr

    def remove(self) -> None:
        delattr(self.owner, self.attr)


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


def _swapped_decay(step: Callable) -> Callable:
    # Adam <-> AdamW: coupled L2 (decay added to the gradient) for decoupled (w -= lr·wd·w), and back
    def swapped(self, *args, **kwargs):
        for group in self.param_groups:
            group["decoupled_weight_decay"] = not group["decoupled_weight_decay"]
        try:
            return step(self, *args, **kwargs)
        finally:
            for group in self.param_groups:
                group["decoupled_weight_decay"] = not group["decoupled_weight_decay"]

    swapped.hooked = True  # torch.optim wraps an unhooked step in a profiler hook on the class, for good
    return swapped


# where a loss compares a prediction with its target: F's regression losses, and `q - target` written out
_DIFFERENCES = ((F, "mse_loss"), (F, "smooth_l1_loss"), (F, "huber_loss"), (F, "l1_loss"), (torch.Tensor, "__sub__"),
                (torch.Tensor, "__rsub__"), (torch, "sub"))  # fmt: skip


def _outer(original: Callable) -> Callable:
    # a prediction [B] against its target [B] (one with a gradient, one without) compared as [B, 1] against [B]:
    # every pair, the [B, B] broadcast of a port that keeps the Q-value's trailing axis (P14)
    def outer(a, b, *args, **kwargs):
        pair = isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.dim() == b.dim() == 1
        if pair and a.shape == b.shape and a.shape[0] > 1 and a.requires_grad != b.requires_grad:
            with warnings.catch_warnings():  # F.mse_loss warns of the broadcast: here it is the point
                warnings.simplefilter("ignore", UserWarning)
                return original(a[:, None], b[None, :], *args, **kwargs)
        return original(a, b, *args, **kwargs)

    return outer


def _transposed_linear(forward: Callable) -> Callable:
    # a square nn.Linear multiplies by W instead of Wᵀ: what a port computes with x @ kernel.T on an [in, out] kernel
    def transposed(self, x):
        w = self.weight
        return F.linear(x, w.T if w.shape[0] == w.shape[1] else w, self.bias)

    return transposed


_STATISTICS = ((torch.Tensor, "std"), (torch, "std"), (torch.Tensor, "var"), (torch, "var"))


def _flipped_correction(original: Callable) -> Callable:
    # torch's std / var default to N−1 (correction=1), jnp.std / jnp.var to N (ddof=0): each call computes
    # with the other one (1 <-> 0), whether it was the default, `correction=` or the older `unbiased=`
    def flipped(*args, **kwargs):
        args = list(args)
        unbiased = next((i for i, a in enumerate(args[1:3], start=1) if isinstance(a, bool)), None)
        if unbiased is not None:  # the older positional form std(input, [dim,] unbiased, ...)
            correction = int(args.pop(unbiased))
        elif "unbiased" in kwargs:
            correction = int(kwargs.pop("unbiased"))
        else:
            correction = kwargs.pop("correction", 1)
        return original(*args, correction=0 if correction else 1, **kwargs)

    return flipped


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


# how a forward flattens features: x.flatten(1), torch.flatten(x, 1), nn.Flatten, x.view(B, -1), x.reshape(B, -1)
_FLATTENS = ((torch.Tensor, "flatten"), (torch, "flatten"), (torch.Tensor, "view"), (torch.Tensor, "reshape"),
             (torch, "reshape"))  # fmt: skip


def _channels_last(original: Callable) -> Callable:
    """`original` (a flatten, view or reshape), except that [B, C, *spatial] -> [B, C·prod(spatial)] flattens
    channels last: the order of an NHWC port's x.reshape(B, -1)."""

    def flat(x, *args, **kwargs):
        if not isinstance(x, torch.Tensor) or x.dim() < 3:
            return original(x, *args, **kwargs)
        if original.__name__ == "flatten":
            start = args[0] if args else kwargs.get("start_dim", 0)
            end = args[1] if len(args) > 1 else kwargs.get("end_dim", -1)
            whole = start == 1 and end in (-1, x.dim() - 1)
        else:
            shape = args[0] if len(args) == 1 and isinstance(args[0], tuple | list | torch.Size) else args
            shape = kwargs.get("shape", shape)
            whole = (
                len(shape) == 2
                and all(isinstance(n, int) for n in shape)
                and shape[0] == x.shape[0]
                and shape[1] in (-1, x[0].numel())
            )
        if whole:
            return original(
                x.movedim(1, -1).contiguous(), *(((x.shape[0], -1),) if original.__name__ != "flatten" else (1,))
            )
        return original(x, *args, **kwargs)

    return flat
