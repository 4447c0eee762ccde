"""Port checker, torch half, rule table: a torch module's weights <-> canonical leaves, by torch type.

The table is the lessons' own (torch_impl/_layout.py, the one place where canonical layouts
become torch layouts and back: the lessons load their fixtures through it), so the checker and
the lessons convert the same way. This module is the checker's view of it, mirrored by
jax_impl/backend/layout.py (canonical leaves <-> an NNX module's own). `named_leaves` walks a
model by the table (a module with a rule owns its subtree). Activation modules are read for
their variant (`activation_of`): what they compute, whatever library's class they are.
Port note: torch is the reference, so its table defines the canonical leaves; the NNX table only
maps them where an NNX module stores them otherwise (recurrent cells, a flipped ConvTranspose).
Shapes: canonical per leaf (see torch_impl/_layout.py).
Reference: PyTorch docs, torch.nn (Linear, ConvNd, RNN / GRU / LSTM, MultiheadAttention, the norms,
GELU); transformers.activations (ACT2CLS).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np
from torch import nn

from .._layout import RULES, Leaf, named_leaves, owned, rule_for
from .._weight_norm import trained_names

__all__ = ["RULES", "rule_for", "named_leaves", "owned", "register", "activation_of"]


def register(module_type: type, leaves: Mapping[str, tuple[str, tuple[int, ...] | None]]) -> Callable[[], None]:
    """Add a rule for a torch module class of the user's; returns the function that removes it again.

    leaves: {torch attribute (dotted below the module): (canonical leaf name, the permutation of the torch
    array's axes into the canonical layout, or None)}. The class's subclasses follow it too.
    Raises ValueError naming the class when it already has a rule (registered twice, or a built-in one).
    The rule, applied to a module, raises ValueError naming the class for an attribute the module lacks, a
    permutation of another number of axes than the array's, or a parameter no leaf covers (a ruled module
    owns its subtree: a parameter left out would never be compared).
    """
    if not isinstance(module_type, type) or not issubclass(module_type, nn.Module):
        raise ValueError(f"module_type expected a torch.nn.Module subclass, got {module_type!r}")
    if module_type in RULES or f"{module_type.__module__}.{module_type.__qualname__}" in RULES:
        raise ValueError(f"{module_type.__qualname__} already has a rule (registered twice?): remove it first")

    def rule(m: nn.Module) -> tuple[Leaf, ...]:
        out, owner = [], type(m).__qualname__
        params, buffers = dict(m.named_parameters()), dict(m.named_buffers())
        for attr, (name, perm) in leaves.items():
            tensor = params.get(attr, buffers.get(attr))
            if tensor is None and not _has(m, attr):  # None: an optional weight left out (bias=False)
                raise ValueError(f"{owner}: its rule's leaf {attr!r} is no attribute of the module")
            if perm is not None and tensor is not None and len(perm) != tensor.dim():
                raise ValueError(f"{owner}.{attr}: permutation {perm} expected {tensor.dim()} axes, got {len(perm)}")
            to_canon = (lambda a, p=perm: np.transpose(a, p)) if perm else (lambda a: a)
            to_torch = (lambda a, p=perm: np.transpose(a, np.argsort(p))) if perm else (lambda a: a)
            out.append(Leaf(name, attr, to_canon, to_torch, buffer=attr in buffers))
        trained = trained_names(m)  # a weight-normed leaf trains as its g and v
        left = sorted(n for n in params if n not in leaves and trained.get(n) not in leaves)
        if left:
            raise ValueError(f"{owner}: parameters {left} are in no leaf of its rule (given {sorted(leaves)})")
        return tuple(out)

    RULES[module_type] = rule

    def remove() -> None:
        if RULES.get(module_type) is rule:
            del RULES[module_type]

    return remove


def _has(module: nn.Module, dotted: str) -> bool:
    owner, _, attr = dotted.rpartition(".")
    try:
        return hasattr(module.get_submodule(owner), attr)
    except AttributeError:
        return False


# activation classes by qualified name -> what they compute (transformers stays optional: never imported)
_ACTIVATIONS = {
    "torch.nn.modules.activation.SiLU": "silu",
    "transformers.activations.SiLUActivation": "silu",
    "transformers.activations.GELUActivation": "gelu_exact",  # F.gelu, or its erf formula in Python
    "transformers.activations.NewGELUActivation": "gelu_tanh",  # GPT-2's gelu_new, the tanh formula in Python
    "transformers.activations.GELUTanh": "gelu_tanh",  # gelu_pytorch_tanh: F.gelu(approximate="tanh")
    "transformers.activations.FastGELUActivation": "gelu_tanh",
    "transformers.activations.AccurateGELUActivation": "gelu_tanh",
    "transformers.activations.QuickGELUActivation": "gelu_sigmoid",  # x·σ(1.702 x)
}


def activation_of(module: nn.Module) -> str | None:
    """What an activation module computes: "gelu_exact" (erf), "gelu_tanh", "gelu_sigmoid", "silu", else None.

    nn.GELU by its `approximate` ("none" | "tanh"); another library's class (transformers'
    NewGELUActivation, GELUActivation, GELUTanh, SiLUActivation ...) by its qualified name, or its base's.
    """
    if isinstance(module, nn.GELU):
        return "gelu_tanh" if module.approximate == "tanh" else "gelu_exact"
    for cls in type(module).__mro__:
        variant = _ACTIVATIONS.get(f"{cls.__module__}.{cls.__qualname__}")
        if variant:
            return variant
    return None
