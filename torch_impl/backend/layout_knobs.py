"""Port checker, torch half, counterfactual of a rule's layout: the knob that replays ruled modules with one
canonical leaf read in another arrangement of its axes (knobs.py applies it with the others; torch only, as
every replay of the reference is).

What it does: `leaf_permuted@<paths>:<leaf>=<axes>` ("leaf_permuted@c_fc,c_proj:kernel=1,0") runs each module
at the dotted `paths` with the weight behind its canonical `leaf` (its rule's, torch_impl/_layout.py) taken
as canonical.transpose(axes) instead: what the port computes when the permutation a rule declares
(register_rule(MyConv, {"weight": ("kernel", (2, 3, 1, 0))})) is not the one its forward reads. The
permutation must keep the leaf's shape (a square weight, equal window sides): otherwise the port would not
have loaded at all.
Gradient flow: the permuted weight is a gather of the parameter, so its gradient reaches the parameter
itself (in torch's layout, as without the knob); nothing else changes.
Port note: the module's attribute is shadowed for its forward only (an instance attribute over the
registered parameter, removed when the forward returns, and by the end of the run if it raised): the
parameter, its name, its place in named_parameters and the optimizer's state stay as they are.
Shapes: the leaf's canonical shape, kept by `axes`.
Reference: the checker's catalogue (shared/apps/check/catalogue/layouts.py, P07).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import numpy as np
import torch
from torch import nn

from .layout import rule_for

__all__ = ["KNOBS", "knob"]

KNOBS = ("leaf_permuted",)


def _parse(where: str) -> tuple[list[str], str, tuple[int, ...]]:
    paths, _, arg = where.partition(":")
    leaf, _, axes = arg.rpartition("=")
    try:
        perm = tuple(int(a) for a in axes.split(","))
    except ValueError:
        perm = ()
    if not leaf or sorted(perm) != list(range(len(perm))) or len(perm) < 2:
        raise ValueError(
            f"knob leaf_permuted: expected leaf_permuted@<module paths>:<canonical leaf>=<axes> "
            f"(leaf_permuted@c_fc:kernel=1,0), got {'leaf_permuted@' + where!r}"
        )
    return paths.split(","), leaf, perm


def _gather(module: nn.Module, path: str, leaf: str, perm: tuple[int, ...]) -> tuple[nn.Module, str, torch.Tensor]:
    """(the module holding the parameter, its attribute, the flat index of torch's array that reads it permuted)."""
    spec = next((x for x in rule_for(module) or () if x.name == leaf and not x.buffer), None)
    if spec is None or spec.rows:
        raise ValueError(f"knob leaf_permuted@{path}: expected a parameter leaf of its rule, got {leaf!r}")
    owner_path, _, attr = spec.attr.rpartition(".")
    owner = module.get_submodule(owner_path)
    param = owner._parameters.get(attr)
    if param is None:
        raise ValueError(f"knob leaf_permuted@{path}: {spec.attr} expected a parameter, got none")
    shape = tuple(param.shape)
    canon = spec.to_canon(np.arange(param.numel()).reshape(shape))  # where each entry goes, as numbers
    if len(perm) != canon.ndim or canon.transpose(perm).shape != canon.shape:
        raise ValueError(
            f"knob leaf_permuted@{path}: axes {perm} expected to keep {leaf}'s shape {canon.shape}, "
            f"got {canon.transpose(perm).shape if len(perm) == canon.ndim else f'{len(perm)} axes'}"
        )
    index = np.ascontiguousarray(spec.to_torch(canon.transpose(perm))).reshape(-1)
    return owner, attr, torch.as_tensor(index, device=param.device)


@contextlib.contextmanager
def knob(model: nn.Module, names: tuple[str, ...], where: str) -> Iterator[None]:
    """Applies leaf_permuted (if among `names`) at `where` ("<paths>:<leaf>=<axes>") for the body of the with.

    Raises ValueError naming the knob for a malformed `where`, a path that is no submodule, a leaf its rule
    does not have, or axes that change the leaf's shape.
    """
    if "leaf_permuted" not in names:
        yield
        return
    paths, leaf, perm = _parse(where)
    handles, shadowed = [], []
    for path in paths:
        try:
            module = model.get_submodule(path)
        except AttributeError:
            raise ValueError(f"knob leaf_permuted@{path}: expected a submodule path of the model") from None
        owner, attr, index = _gather(module, path, leaf, perm)

        def shadow(m, args, owner=owner, attr=attr, index=index) -> None:
            param = owner._parameters[attr]
            owner.__dict__[attr] = param.reshape(-1)[index].reshape(param.shape)  # read before the parameter
            shadowed.append((owner, attr))

        def unshadow(m, args, out, owner=owner, attr=attr) -> None:
            owner.__dict__.pop(attr, None)

        handles += [module.register_forward_pre_hook(shadow), module.register_forward_hook(unshadow)]
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()
        for owner, attr in shadowed:  # a forward that raised left its shadow
            owner.__dict__.pop(attr, None)
