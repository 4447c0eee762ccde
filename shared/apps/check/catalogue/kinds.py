"""The shape of a catalogue record: a `Diagnosis` holds its `Replay`s and its `Signature`s.

Signature kinds, and what the engine (../diagnose.py) hands each one:
  values   fn(row, j, t) -> evidence | None, for each float64 quantity that differs (weights,
           outputs, loss, gradients, steps), j the JAX array and t torch's, same shape, float.
           Records fire in catalogue order; once one fires on a row, only records sharing its
           function may fire there too (one NaN is evidence for two pitfalls, not for a third).
  steps    fn(ctx: StepContext) -> [(where, evidence)], on the first optimizer step's updates.
  config   fn(torch_module, nnx_module) -> evidence | None, for each paired module's settings
           (dicts with "type" and "config").
  dropped  fn(torch_name, why, moved) -> evidence, for a torch weight the NNX model has no place for:
           at step 0 (moved False: confirmed, the loader's reason `why`), or one that torch's
           steps move away from its initial value (moved True: a hypothesis).
  float32  fn(report) -> (where, evidence) | None, when float64 matches and float32 does not.
  bfloat16 fn(report) -> [(where, evidence)], when float64 matches and the bfloat16 pass does not (its rows:
           each side's error against float64 truth, and the float32 the reference keeps: precision.py).
  flow     fn(line, report) -> evidence | None, for each gradient-flow line that does not match.
  backward fn(row, j, t) -> evidence | None, for the backward parting (report.backward_parting): the first
           module, in backward order, whose output matches and whose incoming gradient does not (j, t: the
           two incoming gradients, or None where they were not kept).
  ties     fn(group, values, report) -> evidence | None, for each torch tensor the port gives several
           NNX leaves (group: [(NNX key, layout transposed from the first's)], values: the float64
           pass's {(section, step, key): (jax, torch)}); the keys it explains get no "values" hint.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

__all__ = ["Replay", "Signature", "Diagnosis", "StepContext", "KINDS", "table"]

KINDS = ("values", "steps", "config", "dropped", "float32", "bfloat16", "flow", "ties", "backward")


@dataclass(frozen=True)
class Replay:
    """Run one side again with one convention changed; if every difference vanishes, confirmed.

    side: whose run is replayed ("torch": the reference, with the JAX convention; "jax": the port).
    knob: the backend's name for the change (its port_run implements it; "a+b" applies both).
    change: what the replay changes, in words (the hint quotes it).
    title: the hint's title when this replay confirms (the record's title if empty).
    modules: module types (of the replayed side) it applies to; empty: every model.
    needs_steps: only when optimizer steps are compared (an optimizer convention).
    near_rounding: only for a float32-sized difference in float64 (a precision replay costs compiles).
    per_module: where the replay of every module fails, tried on each module of its types alone ("knob@path"):
      a port with the bug in one BatchNorm of several.
    per_leaf: never run as it is: tried on each leaf a registered rule declares, with each other arrangement of
      its axes that keeps its shape ("knob@paths:leaf=axes", the rule's modules at once): a rule's wrong permutation.
    unread: never run as a bug's replay: tried where outputs differ only in entries the loss never reads (the
      gradient arriving there is zero on both sides, ../unread.py), to say why they differ (fully masked rows).
    """

    side: str
    knob: str
    change: str
    title: str = ""
    modules: frozenset[str] = frozenset()
    needs_steps: bool = False
    near_rounding: bool = False
    per_module: bool = False
    per_leaf: bool = False
    unread: bool = False


@dataclass(frozen=True)
class Signature:
    """A numerical signature on recorded quantities (see the module docstring for each kind).

    title: the hint's title when it fires (the record's title if empty); section: for a "values"
    signature, the one section it reads ("weights"), or "" for every section but weights.
    """

    kind: str
    fn: Callable
    title: str = ""
    section: str = ""

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"Signature.kind expected one of {KINDS}, got {self.kind!r}")


@dataclass(frozen=True)
class Diagnosis:
    """One pitfall's diagnosis: its id, title, replays and signatures, and where its bug shows.

    in_steps: the difference shows only in the optimizer steps (running statistics, weight decay
    on a frozen leaf): a worked port with this bug is checked with steps.
    """

    id: str
    title: str
    replays: tuple[Replay, ...] = ()
    signatures: tuple[Signature, ...] = ()
    in_steps: bool = False

    def __post_init__(self) -> None:
        if not self.replays and not self.signatures:
            raise ValueError(f"Diagnosis {self.id}: expected a replay or a signature as evidence, got neither")


@dataclass
class StepContext:
    """The first optimizer step, for "steps" signatures.

    ratios: NNX key -> Δ_jax / Δ_torch where that ratio is one constant over the leaf's entries;
    no_grad: keys whose torch gradient is None or zero; sources: key -> the canonical torch
    leaves it folds; grad_norm: ‖g‖ over every torch gradient; torch_name: key(s) -> torch names;
    decay: key -> c where Δ_jax − Δ_torch = c · w (w the weight before the step) with one c over the
    leaf's entries, for leaves with a gradient; parted: the keys whose step 1 differs.
    """

    ratios: dict[str, float]
    no_grad: set[str]
    sources: dict[str, list]
    grad_norm: float
    torch_name: Callable[[list], str]
    trained: dict[str, float] = field(default_factory=dict)
    decay: dict[str, float] = field(default_factory=dict)
    parted: set[str] = field(default_factory=set)

    def where(self, key: str) -> str:
        return f"float64 steps step 1 {key}"


def constant_ratio(a: np.ndarray, b: np.ndarray, rtol: float) -> float | None:
    """a / b where b ≠ 0, if it is one constant within rtol, else None (no entries: None)."""
    mask = np.abs(b) > 0
    if not mask.any() or not np.all(np.isfinite(a)):
        return None
    q = a[mask] / b[mask]
    return float(np.mean(q)) if np.std(q) <= rtol * abs(np.mean(q)) else None


def table(title: str, intro: str, records) -> list[str]:
    """A cheatsheet section (docs/cheatsheet.md) for records with no lesson page: each record, what its replays
    change; markdown lines."""
    cell = lambda text: text.replace("|", "\\|")  # noqa: E731
    rows = [f"| `{d.id}` | {cell(d.title)} | {cell('; '.join(r.change for r in d.replays))} |" for d in records]
    head = ["| diagnosis | the convention | replays (the torch reference with ...) |", "|---|---|---|"]
    return [f"## {title}", "", intro, "", *head, *rows, ""]
