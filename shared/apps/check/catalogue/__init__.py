"""The pitfall catalogue of the port checker: one `Diagnosis` record per pitfall, keyed by its id.

Everything the checker knows about a pitfall lives in its record: the title, the counterfactual
replays that would confirm it (which side, which convention, the modules it applies to, what it
changes, in words), and the numerical signatures on the recorded quantities (weights, outputs,
gradients, step deltas, module settings) that point to it. The id is the pitfall's (P04, the
`source` of its scenario record in shared/scenarios/, whose page the hint links) or a
scenario's name (maml, frozen_backbone). The engine (../diagnose.py) knows no pitfall by name: it
runs the replays and signatures the records declare.

A replay's mechanism is framework code: the backend's `port_run` implements each knob a record
names (`knobs()` lists them; tests/test_port_diagnose.py checks that every knob is named by
exactly one record and every record's knob is implemented on its side).

Adding a diagnosis: one record in the theme module where it belongs, plus its test.
"""

from __future__ import annotations

from collections.abc import Iterator

from . import attention, flow, layers, layouts, norms, numerics, optimizers, precision
from .kinds import Diagnosis, Replay, Signature

__all__ = ["Diagnosis", "Replay", "Signature", "CATALOGUE", "get", "replays", "signatures"]

CATALOGUE: dict[str, Diagnosis] = {
    d.id: d for m in (norms, layouts, numerics, attention, layers, optimizers, flow, precision) for d in m.RECORDS
}


def get(pitfall: str) -> Diagnosis:
    """The record of a pitfall id or scenario name; KeyError naming the known ones."""
    if pitfall not in CATALOGUE:
        raise KeyError(f"pitfall expected one of {sorted(CATALOGUE)}, got {pitfall!r}")
    return CATALOGUE[pitfall]


def replays() -> Iterator[tuple[Diagnosis, Replay]]:
    """Every (record, replay) of the catalogue, in catalogue order."""
    return ((d, r) for d in CATALOGUE.values() for r in d.replays)


def signatures(kind: str) -> Iterator[tuple[Diagnosis, Signature]]:
    """Every (record, signature) of one kind ("values", "steps", "config", ...), in catalogue order."""
    return ((d, s) for d in CATALOGUE.values() for s in d.signatures if s.kind == kind)
