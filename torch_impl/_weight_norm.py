"""Weight norm's trained leaves: g and v in canonical layout, for any ruled module whose weight is weight-normed.

torch.nn.utils.parametrizations.weight_norm (and the older torch.nn.utils.weight_norm hook) trains
g and v and recomputes w = g * v / ||v|| (the norm over every axis but `dim`) at each forward: the
weight is no parameter. A rule's leaf for that weight (`kernel`) becomes two leaves, the ones
that train: `kernel_v` (v, in the kernel's layout: the leaf's own conversion) and `kernel_g` (g,
one scale per index of the weight's axis `dim`: [weight.shape[dim]]; a scalar [] for dim=None,
the whole tensor's norm). torch keeps g with the weight's rank ([out, 1] for dim=0 of a Linear);
canonical g drops the axes of size 1, as an NNX port holds it.
Shapes: v as the leaf; g [n] or [].
Reference: PyTorch docs, torch.nn.utils.parametrizations.weight_norm, torch.nn.utils.weight_norm;
Salimans & Kingma 2016, arXiv:1602.07868.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import numpy as np
from torch import nn

__all__ = ["weight_norms", "reparametrized", "trained_names", "g_of"]


def _owner(module: nn.Module, dotted: str) -> tuple[nn.Module | None, str]:
    owner, _, attr = dotted.rpartition(".")
    try:
        return module.get_submodule(owner), attr
    except AttributeError:
        return None, attr


def weight_norms(module: nn.Module) -> Iterator[tuple[str, int, str]]:
    """(attribute, dim, form) of each weight-normed attribute of the module itself: dim -1 for the whole
    tensor (dim=None), form "parametrizations" or "hook" (the older torch.nn.utils.weight_norm).
    Only a parametrization that is weight norm alone counts (a stack of them is something else)."""
    for hook in module._forward_pre_hooks.values():
        if type(hook).__name__ == "WeightNorm" and hasattr(hook, "dim"):
            yield hook.name, hook.dim, "hook"
    for attr, chain in (getattr(module, "parametrizations", None) or {}).items():
        if len(chain) == 1 and type(chain[0]).__name__ == "_WeightNorm":
            yield attr, chain[0].dim, "parametrizations"


def _trained(attr: str, form: str) -> tuple[str, str]:
    """The names of g and v below the module, for a weight-normed attribute."""
    if form == "hook":
        return f"{attr}_g", f"{attr}_v"
    return f"parametrizations.{attr}.original0", f"parametrizations.{attr}.original1"


def reparametrized(module: nn.Module, leaves: tuple) -> tuple:
    """A rule's leaves with each weight-normed attribute's leaf replaced by its g and v (`<name>_g`, `<name>_v`).

    Leaves of attributes that are not weight-normed come back as they were. Raises ValueError naming the
    module for weight norm on a block of rows of an attribute (nn.MultiheadAttention's packed in_proj).
    """
    out = []
    for leaf in leaves:
        owner, attr = _owner(module, leaf.attr)
        found = [(dim, form) for a, dim, form in (weight_norms(owner) if owner is not None else ()) if a == attr]
        if not found:
            out.append(leaf)
            continue
        if leaf.rows:
            raise ValueError(
                f"{type(module).__name__}.{leaf.attr}: weight norm expected on a whole leaf, got it on the "
                f"packed rows {leaf.rows} (q | k | v): g would mix the three projections"
            )
        (dim, form), prefix = found[0], leaf.attr[: len(leaf.attr) - len(attr)]
        g_name, v_name = (prefix + n for n in _trained(attr, form))
        g_shape = tuple(module.get_parameter(g_name).shape)
        to_canon = (lambda a: np.reshape(a, ())) if dim == -1 else (lambda a: np.reshape(a, (-1,)))
        out.append(
            dataclasses.replace(
                leaf,
                name=f"{leaf.name}_g",
                attr=g_name,
                to_canon=to_canon,
                to_torch=lambda a, s=g_shape: np.reshape(a, s),
            )
        )
        out.append(dataclasses.replace(leaf, name=f"{leaf.name}_v", attr=v_name))
    return tuple(out)


def trained_names(module: nn.Module) -> dict[str, str]:
    """{name of g or v below the module: the weight-normed attribute it makes} (for a rule's coverage)."""
    return {name: attr for attr, _, form in weight_norms(module) for name in _trained(attr, form)}


def g_of(module: nn.Module, leaf) -> tuple[str, str, int, str] | None:
    """(owner, attribute, dim, form) where `leaf` of the module's rule is the g of a weight-normed attribute of
    the submodule `owner` ("" for the module itself: "out_proj" for nn.MultiheadAttention's), else None."""
    parts = leaf.attr.split(".")
    for k in range(len(parts)):
        owner, rest = ".".join(parts[:k]), ".".join(parts[k:])
        try:
            sub = module.get_submodule(owner)
        except AttributeError:
            return None
        for attr, dim, form in weight_norms(sub):
            if _trained(attr, form)[0] == rest:
                return owner, attr, dim, form
    return None
