"""Port checker, torch half, rule table: a torch module's weights <-> canonical leaves, by torch type.

The table is the lessons' own (torch_impl/_layout.py, the one place where canonical layouts
become torch layouts and back: the lessons load their fixtures through it), so the checker and
the lessons convert the same way. This module is the checker's view of it, mirrored by
jax_impl/backend/layout.py (canonical leaves <-> an NNX module's own). `named_leaves` walks a
model by the table (a module with a rule owns its subtree).
Port note: torch is the reference, so its table defines the canonical leaves; the NNX table only
maps them where an NNX module stores them otherwise (recurrent cells, a flipped ConvTranspose).
Shapes: canonical per leaf (see torch_impl/_layout.py).
Reference: PyTorch docs, torch.nn (Linear, ConvNd, RNN / GRU / LSTM, MultiheadAttention, the norms).
"""

from __future__ import annotations

from .._layout import RULES, named_leaves, owned, rule_for

__all__ = ["RULES", "rule_for", "named_leaves", "owned"]
