"""Port checker, torch half, the model it is given: what is refused, the view it reads, the copies it runs.

What it does: `check_model` refuses what the checker cannot copy or compare honestly (meta or complex
leaves, live dropout, a parametrization other than weight norm, a leaf no rule reaches: a subclass's
own parameters beyond the rule it inherits, loralib's LoRALinear(nn.Linear)); `view` reads through
torch.compile (the OptimizedModule's `_orig_mod`; `module.compile()` undone) so that the checker runs the
original module eagerly, and says so, and what weight norm's g and v are compared as; `clone` is the deep
copy the checker runs (the older weight_norm hook keeps a recomputed, non-leaf `weight` deepcopy refuses).
Port note: the view shares every tensor with the user's model (transfer_back writes into it); only the
modules on the way to a compiled one are shallow copies, the user's own left as they were.
Reference: PyTorch docs, torch.compile (OptimizedModule), nn.Module.compile, torch.nn.utils.parametrize.
"""

from __future__ import annotations

import copy
import dataclasses
import itertools

import numpy as np
import torch
from torch import nn

from .._layout import RULES
from .._weight_norm import g_of, trained_names, weight_norms
from .layout import named_leaves, owned, rule_for

__all__ = ["check_model", "view", "clone"]


def _leaves_of(model: nn.Module) -> list[tuple[str, torch.Tensor]]:
    return [*model.named_parameters(), *model.named_buffers()]


def check_model(model) -> None:
    """Raise ValueError unless `model` is an nn.Module whose forward is deterministic (no live dropout) and
    whose leaves the checker can copy and compare: real values (not complex, not on the meta device), no
    parametrization but weight norm (compared as its g and v) between a trained leaf and the port's, and
    every parameter and floating buffer in some rule's leaf (a ruled module owns its subtree)."""
    if not isinstance(model, nn.Module):
        raise ValueError(f"torch_model: expected a torch.nn.Module, got {type(model).__name__}")
    for name, value in _leaves_of(model):
        if value.is_meta:  # no values to copy or compare: torch would raise deep inside a copy
            raise ValueError(
                f"torch_model: {name} is on the meta device (no values): materialise it first "
                "(model.to_empty(device='cpu'), then initialise or load the weights)"
            )
        if value.is_complex():  # casting to float64 would drop the imaginary part silently
            raise ValueError(
                f"torch_model: {name} is {str(value.dtype).removeprefix('torch.')}: the checker "
                "compares real parameters (float64 / float32)"
            )
    for path, sub in model.named_modules():
        _reparametrizations(path, sub)
        p = getattr(sub, "p", 0.0) if isinstance(sub, nn.modules.dropout._DropoutNd) else 0.0
        if isinstance(sub, nn.MultiheadAttention) or (isinstance(sub, nn.RNNBase) and sub.num_layers > 1):
            p = sub.dropout
        if p and sub.training:
            raise ValueError(
                f"torch_model: {type(sub).__name__} at {path or '(model)'} has dropout p={p} in train mode: "
                "compare in eval mode (model.eval()) or pass the same masks to both models"
            )
    _covered(model)


def _reparametrizations(path: str, sub: nn.Module) -> None:
    """Refuse a parametrization the checker does not compare (spectral norm, orthogonal, a stack), and weight
    norm on a module without a rule (the rule names the weight whose g and v are compared)."""
    where = f"{type(sub).__name__} at {path or '(model)'}"
    if "SpectralNorm" in {type(h).__name__ for h in sub._forward_pre_hooks.values()}:
        raise ValueError(
            f"torch_model: {where} has SpectralNorm (torch.nn.utils.spectral_norm): its trained leaf is weight_orig, "
            "normalised by a power iteration the port would have to replay. Check a copy with it removed: "
            "torch.nn.utils.remove_spectral_norm(module)"
        )
    normed = {attr for attr, _, _ in weight_norms(sub)}
    if other := sorted(set(getattr(sub, "parametrizations", None) or {}) - normed):
        kinds = sorted({type(q).__name__ for name in other for q in sub.parametrizations[name]})
        raise ValueError(
            f"torch_model: {where} has parametrized {other} ({', '.join(kinds)}): only weight norm alone is "
            "compared (as its g and v); its trained leaves are not the weight the port holds. Check a copy with "
            "the weight folded in: torch.nn.utils.parametrize.remove_parametrizations(module, name, "
            "leave_parametrized=True)"
        )
    if normed and rule_for(sub) is None:
        raise ValueError(
            f"torch_model: {where} has weight norm on {sorted(normed)} but no rule: register one naming "
            f"the weight (register_rule({_user_class(sub).__name__}, {{{sorted(normed)[0]!r}: ('kernel', <permutation>), "
            "...})); its g and v are then compared as kernel_g and kernel_v"
        )


def _user_class(sub: nn.Module) -> type:
    """The module's class as the user wrote it: not the subclass torch.nn.utils.parametrize makes (ParametrizedX)."""
    cls = type(sub)
    return cls.__bases__[0] if getattr(sub, "parametrizations", None) is not None and cls.__bases__ else cls


def _rule_class(sub: nn.Module) -> type | None:
    for cls in type(sub).__mro__:
        if cls in RULES or f"{cls.__module__}.{cls.__qualname__}" in RULES:
            return cls
    return None


def _spec(leaf, tensor: torch.Tensor) -> str:
    """A leaf as register_rule writes it: 'bias', or ('kernel', (1, 0)) where its layout is a permutation."""
    probe = np.arange(tensor.numel(), dtype=float).reshape(tuple(tensor.shape))
    canon = leaf.to_canon(probe)
    for perm in itertools.permutations(range(probe.ndim)) if probe.ndim <= 5 else ():
        if np.shape(canon) == np.transpose(probe, perm).shape and np.array_equal(canon, np.transpose(probe, perm)):
            return repr(leaf.name) if perm == tuple(range(probe.ndim)) else f"({leaf.name!r}, {perm})"
    return f"<{leaf.name!r} in its own layout>"


def _specs(sub: nn.Module, leaves: tuple) -> list[str]:
    """The rule's leaves as register_rule's entries; a weight-normed weight by its own name (its v's layout)."""
    tensors, made = dict(_leaves_of(sub)), trained_names(sub)  # g / v name -> the weight they make
    out = []
    for leaf in leaves:
        if leaf.attr not in tensors or (leaf.attr in made and leaf.name.endswith("_g")):
            continue
        plain = dataclasses.replace(leaf, name=leaf.name.removesuffix("_v")) if leaf.attr in made else leaf
        out.append(f"{made.get(leaf.attr, leaf.attr)!r}: {_spec(plain, tensors[leaf.attr])}")
    return out


def _covered(model: nn.Module) -> None:
    """Every parameter and persistent floating buffer below a ruled module is in one of its rule's leaves."""
    owners: set[str] = set()
    for path, sub in model.named_modules():
        if owned(path, owners) or (leaves := rule_for(sub)) is None:
            continue
        owners.add(path)
        have = {leaf.attr for leaf in leaves}
        left = [n for n, _ in sub.named_parameters() if n not in have]
        for name, buf in sub.named_buffers():
            owner, _, attr = name.rpartition(".")
            persistent = attr not in sub.get_submodule(owner)._non_persistent_buffers_set
            left += [name] if persistent and buf.is_floating_point() and name not in have else []
        if not left:
            continue
        cls, base = _user_class(sub), _rule_class(sub)
        rule = f"{{{', '.join(_specs(sub, leaves) + [f'{n!r}: <its NNX leaf>' for n in left])}}}"
        where = f"torch_model: {cls.__name__} at {path or '(model)'!r}"
        if base is cls or base is None:  # the rule is this class's own: the leaves were attached to an instance
            what = "its rule" if base else "the norm it is recognised as"
            raise ValueError(
                f"{where} holds {left} beyond the leaves of {what} {sorted(have)}: they would be neither copied "
                f"nor compared. Hold them in a subclass of {cls.__name__} and register a rule for it: "
                f"register_rule(MySubclass, {rule})"
            )
        raise ValueError(
            f"{where} inherits {base.__name__}'s rule, which holds {sorted(have)} but not {left}: they would "
            f"be neither copied nor compared. Register a rule naming every leaf: register_rule({cls.__name__}, {rule})"
        )


def _compiled(module: nn.Module) -> bool:
    cls = type(module)
    return cls.__qualname__ == "OptimizedModule" and cls.__module__.startswith("torch._dynamo")


def _eager(module: nn.Module, path: str, found: list[str], memo: dict) -> nn.Module:
    if id(module) in memo:
        return memo[id(module)]
    original = module
    while _compiled(module):
        found.append(path)
        module = module._orig_mod
    children = {
        n: _eager(c, f"{path}.{n}".lstrip("."), found, memo) for n, c in module._modules.items() if c is not None
    }
    changed = {n: c for n, c in children.items() if c is not module._modules[n]}
    in_place = getattr(module, "_compiled_call_impl", None) is not None  # nn.Module.compile()
    if in_place and path not in found:
        found.append(path)
    if changed or in_place:  # a shallow copy on the way to a compiled module: the same tensors, eager children
        module = copy.copy(module)
        module._modules = {**module._modules, **changed}
        module._compiled_call_impl = None
    memo[id(original)] = module
    return module


def view(model) -> tuple:
    """The model as the checker reads and runs it, and the notes that say how.

    A model or submodule compiled with torch.compile is read through its `_orig_mod` (no `_orig_mod.` in
    any name) and run eagerly, as is one compiled in place (nn.Module.compile()); the user's model is left
    as it was. Weight-normed weights are noted with what their g and v are compared as.
    Returns (model, notes). Anything but an nn.Module comes back as it is (check_model refuses it).
    """
    if not isinstance(model, nn.Module):
        return model, []
    found: list[str] = []
    model, notes = _eager(model, "", found, {}), []
    if found:
        at = ", ".join(p or "(model)" for p in found)
        notes.append(
            f"the torch model is compiled with torch.compile (at {at}): read through _orig_mod and run eagerly, "
            "uncompiled (the compiled code itself is not checked)"
        )
    return model, notes + _weight_norm_notes(model)


def _weight_norm_notes(model: nn.Module) -> list[str]:
    """What each weight-normed weight is compared as: its g and v, at their canonical keys."""
    if not any(True for sub in model.modules() for _ in weight_norms(sub)):
        return []  # the rules are not applied here otherwise: check_model refuses first, in its own order
    units: dict[str, dict] = {}
    for key, path, sub, leaf in named_leaves(model):
        units.setdefault(path, {"sub": sub, "leaves": {}})["leaves"][key] = leaf
    notes = []
    for path, unit in units.items():
        for key, leaf in unit["leaves"].items():
            if (found := g_of(unit["sub"], leaf)) is None:
                continue
            owner, attr, dim, form = found
            base = key.removesuffix("_g")
            v = unit["leaves"][f"{base}_v"]
            axis = _axis(v, unit["sub"].get_parameter(v.attr), dim)
            per = "one scale for the whole tensor" if axis is None else f"one scale per index of the kernel axis {axis}"
            where = ".".join(p for p in (path, owner, attr) if p)
            notes.append(
                f"torch {where} has weight norm ({form}, dim={dim}): its trained g and v are compared, as "
                f"{key} ({per}) and {base}_v (the {base.rpartition('/')[2]}'s layout), not the weight they make"
            )
    return notes


def _axis(v_leaf, v: torch.Tensor, dim: int) -> int | None:
    """The canonical kernel's axis (negative) that torch's `dim` becomes: the one g scales; None for the whole tensor."""
    if dim == -1:
        return None
    probe = np.indices(tuple(v.shape))[dim].astype(float)
    canon = np.asarray(v_leaf.to_canon(probe))
    varies = [a for a in range(canon.ndim) if canon.shape[a] > 1 and np.any(np.diff(canon, axis=a))]
    return (varies[0] - canon.ndim) if len(varies) == 1 else None


def clone(model: nn.Module) -> nn.Module:
    """copy.deepcopy, also of a module with the older weight_norm hook: its recomputed `weight` (a tensor of the
    graph, which deepcopy refuses) is copied detached; the hook computes it again before each forward."""
    memo: dict = {}
    for sub in model.modules():
        for attr, _, form in weight_norms(sub):
            if form == "hook" and isinstance(getattr(sub, attr, None), torch.Tensor):
                memo[id(getattr(sub, attr))] = getattr(sub, attr).detach().clone()
    return copy.deepcopy(model, memo)
