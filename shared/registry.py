"""The scenario registry: every scenario listed once, in teaching order.

A `Scenario` record (shared/records.py) holds what is framework-neutral about a
scenario: its title, the tutorial claims it comes from (ids of the records in
shared/claims.py, checked by `detach-parity claims`), its variants and fixture cases, the fixture
schema and builder, the float64 oracle, the tolerances per dtype, the expected
zero / non-zero pattern of its outputs per variant (the lesson, asserted on both
frameworks so that parity can never pass with both sides equally wrong), and
the porting notes. Each record lives in `shared/scenarios/<name>.py` next to its
fixture and oracle; `_MODULES` below is the ordered list.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from types import MappingProxyType

from shared.records import FAMILIES, Porting, Scenario

__all__ = ["Porting", "Scenario", "SCENARIOS", "FAMILIES", "get", "names"]

# Teaching order. Each entry is a module of shared/scenarios/ defining SPEC.
_MODULES = (
    "basics",
    "linear_regression",
    "frozen_backbone",
    "multitask",
    "dqn_target",
    "actor_critic",
    "maml",
    "attention_detach",
    "gan",
    "tbptt",
    "grad_clipping",
    "no_grad_inference",
    "feature_stats",
    "mixed_precision",
    "data_vs_detach",
    # pitfalls (family "pitfalls"), P01-P08
    "p01_std_convention",
    "p02_norm_at_zero",
    "p03_subgradient_kinks",
    "p04_gelu",
    "p05_layernorm_eps",
    "p06_batchnorm_stats",
    "p07_linear_layout",
    "p08_gru_bias",
    # pitfalls, P09-P17
    "p09_lstm_layout",
    "p10_adam_weight_decay",
    "p11_none_vs_zero_grad",
    "p12_masked_attention_row",
    "p13_where_nan",
    "p14_td_loss_broadcast",
    "p15_loss_scale_overflow",
    "p16_matmul_precision",
    "p17_soft_update_order",
)


def _load() -> dict[str, Scenario]:
    out: dict[str, Scenario] = {}
    for mod in _MODULES:
        spec = importlib.import_module(f"shared.scenarios.{mod}").SPEC
        if spec.name != mod:
            raise ValueError(f"shared/scenarios/{mod}.py: SPEC.name expected {mod!r}, got {spec.name!r}")
        out[spec.name] = spec
    return out


SCENARIOS: Mapping[str, Scenario] = MappingProxyType(_load())


def names(family: str | None = None) -> list[str]:
    """Registered scenario names in teaching order, optionally of one family."""
    return [n for n, s in SCENARIOS.items() if family is None or s.family == family]


def get(name: str) -> Scenario:
    """The record of a scenario; ValueError listing the valid names if unknown."""
    try:
        return SCENARIOS[name]
    except KeyError:
        raise ValueError(f"scenario expected one of {names()}, got {name!r}") from None
