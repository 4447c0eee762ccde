"""Counterfactual replays: the torch reference (or the port) run again with one convention changed, and the
differences that vanish (diagnose.py's first kind of evidence; the catalogue declares each replay).

A replay whose run makes every float64 quantity match confirms its record's pitfall; one that removes some
differences and adds none explains part of them, and is joined with each other replay of its side ("a+b")
to name two bugs at once, or to say how many differences are left unexplained. The replays of the first
parting module's kind are tried first, and the first that confirms ends the search (each is a run of the
reference).
"""

from __future__ import annotations

import numpy as np

from ...core import registry
from ..backends import backend
from . import catalogue
from .compare import rows_of
from .declared import located
from .report import Hint, Row

__all__ = ["page", "hint", "parted", "applicable", "by_replay"]


def page(pitfall: str) -> str:
    """The site page of a pitfall id (P04) or scenario name, or "" if the registry has none."""
    for name in registry.names():
        spec = registry.get(name)
        if name == pitfall or (spec.family == "pitfalls" and spec.source == pitfall):
            return f"{name}.html"
    return ""


def hint(pitfall: str, title: str, where: str, evidence: str, confirmed: bool = False) -> Hint:
    return Hint(pitfall, title, where, evidence, page(pitfall), confirmed)


_ALONE = 8  # replays of one module alone, at most: each is a run of the reference


def parted(rows: list[Row]) -> set[tuple]:
    return {(r.section, r.step, r.key) for r in rows if not r.ok and r.section not in ("weights", "backward")}


def _types(structures) -> dict[str, set[str]]:
    """The module types of each side, and their kinds by what they are ("norm": a normalisation layer;
    "gelu_tanh", "gelu_exact", "silu": an activation's variant)."""
    return {
        side: {m["type"] for m in structures[i]["modules"]}
        | {m["config"].get("kind", "") for m in structures[i]["modules"]}
        for i, side in enumerate(("torch", "jax"))
    }


def applicable(structures, steps: int) -> list[tuple[catalogue.Diagnosis, catalogue.Replay]]:
    """The catalogue's replays that apply to these models: their modules present, steps where needed,
    and the knob available on its side (JAX's default precision is full float32 on a CPU)."""
    types = _types(structures)
    available = {side: backend(side).port_run.knobs() for side in ("torch", "jax")}
    return [
        (d, r)
        for d, r in catalogue.replays()
        if (not r.modules or r.modules & types[r.side])
        and (steps or not r.needs_steps)
        and all(k in available[r.side] for k in r.knob.split("+"))
        and not r.unread  # unread.py's: why outputs the loss never reads differ, not a bug
    ]


def by_replay(report, p, plan, structures, transfer: bool, steps: int) -> list[Hint]:
    kept = {st["step"] for st in p.jax_steps}  # a replay compares the steps the pass kept: from its first difference
    base = [r for r in report.rows if r.dtype == "float64" and (r.step is None or r.step in kept)]
    failing = parted(base)
    if not failing:
        return []
    first = next(r for r in base if not r.ok and r.section not in ("weights", "backward"))
    # a JAX-side precision replay costs new compiles: only for a float32-sized difference in float64
    rounding = 1e-9 < first.max_rel < 1e-5
    hints, usable = [], applicable(structures, steps)
    tried = [(d, r, r.knob, "") for d, r in usable if (rounding or not r.near_rounding) and not r.per_leaf]
    # the replays of the first parting module's kind, or its enclosing modules', first (a norm's epsilon where a
    # norm parts, an attention's convention where its o_proj does): the first that makes everything match ends
    # the search, each further one being another run of the reference
    path = first.torch.split(".")
    around = {".".join(path[:i]) for i in range(1, len(path) + 1)}
    at = {x for m in structures[0]["modules"] if m["path"].replace("/", ".") in around
          for x in (m["type"], m["config"].get("kind", ""))}  # fmt: skip
    tried.sort(key=lambda x: not (x[1].modules & at))
    # where every module's replay fails, one module's: a port with the bug in one BatchNorm of several
    alone = [(d, r, f"{r.knob}@{m['path'].replace('/', '.')}", f" (in {m['path'].replace('/', '.')} only)")
             for d, r, *_ in tried if r.per_module for m in structures[0]["modules"]
             if r.modules & {m["type"], m["config"].get("kind", "")}][:_ALONE]  # fmt: skip
    partial = []  # (fixed, the differences left, the record, its replay, knob) of each replay that explains part
    for d, replay, knob, only in tried + located(usable, structures, plan)[:_ALONE] + alone:
        if any(h.confirmed for h in hints):
            break
        found = _replayed(p, plan, transfer, replay.side, knob, failing)
        if found is None:
            continue
        rows, fixed, after = found
        title = (replay.title or d.title) + only
        change = f"{replay.side} changed ({knob}: {replay.change}{only})"
        if not after:
            hints.append(hint(d.id, title, first.where, _all_match(change, rows, failing, first), confirmed=True))
        else:
            partial.append((fixed, after, d, replay, knob, rows))
            if (first.section, first.step, first.key) in fixed:
                ev = f"with {change}, {len(fixed)} of {len(failing)} differences vanish, the first one included"
                hints.append(hint(d.id, title, first.where, ev))
    # a replay that explains every difference makes the partial ones moot: they explain part of the same one
    if any(h.confirmed for h in hints):
        return [h for h in hints if h.confirmed]
    if report.failed("float64", "weights"):  # the loaded weights differ: what follows from them is one bug, not two
        return hints
    return hints + _second(p, plan, transfer, failing, first, partial, tried)


def _replayed(p, plan, transfer: bool, side: str, knob: str, failing: set) -> tuple | None:
    """(rows, the differences it removes, those left) of a replay that removes some and adds none; else None."""
    try:
        q = p.replay(knob, side)
    except ValueError:
        return None  # the knob does not apply to this model (e.g. an optimizer without Adam's switch)
    rows = rows_of(q, plan, transfer)
    after = parted(rows)
    fixed, broken = failing - after, after - failing
    return None if not fixed or broken else (rows, fixed, after)


def _all_match(change: str, rows: list[Row], failing: set, first: Row) -> str:
    worst = max((r.used for r in rows if np.isfinite(r.used) and not r.explained), default=0.0)
    return (f"with {change}, all {len(rows)} float64 quantities match (worst at {worst:.2g} of the tolerance); "
            f"before: {len(failing)} differed, the first at {first.where} by {first.max_abs:.3g}")  # fmt: skip


def _second(p, plan, transfer: bool, failing: set, first: Row, partial: list, tried: list) -> list[Hint]:
    """Past the replay that explains the most: what it leaves. Each other replay of its side joined to it
    ("a+b"); where one pair makes everything match, both bugs are named, confirmed together; else the
    differences it leaves are said, at the first of them (a second bug the catalogue has no record for)."""
    if not partial:
        return []
    fixed, after, d, replay, knob, rows = max(partial, key=lambda x: len(x[0]))
    where = next(r.where for r in rows if (r.section, r.step, r.key) in after)  # the first left, in check order
    for d2, r2, knob2, only2 in tried:
        if r2.side != replay.side or knob2 == knob or only2:
            continue
        found = _replayed(p, plan, transfer, replay.side, f"{knob}+{knob2}", failing)
        if found is not None and not found[2]:
            change = f"{replay.side} changed ({knob}+{knob2}: {replay.change}; and {r2.change})"
            ev = _all_match(change, found[0], failing, first) + f"; {knob} alone leaves {len(after)} of them"
            return [hint(d.id, replay.title or d.title, first.where, ev, confirmed=True),
                    hint(d2.id, r2.title or d2.title, where, ev, confirmed=True)]  # fmt: skip
    ev = (
        f"{len(after)} of {len(failing)} differences are left with {replay.side} changed ({knob}: {replay.change}): "
        f"a second bug, the first of them at {where}; no replay of the catalogue, alone or joined, explains them"
    )
    return [Hint("unexplained", f"{len(after)} differences left unexplained", where, ev)]
