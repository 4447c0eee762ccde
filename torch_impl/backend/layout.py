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

from torch import nn

from .._layout import RULES, named_leaves, owned, rule_for

__all__ = ["RULES", "rule_for", "named_leaves", "owned", "activation_of"]

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
