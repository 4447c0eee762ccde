"""The likely bug named: the recorded differences tested against the pitfall catalogue (catalogue/).

Two kinds of evidence, both declared by the catalogue's records. A counterfactual replay: one side
is run again with one convention changed (torch with the JAX default: the GELU approximation, norm
epsilons, BatchNorm's momentum and running variance, mask polarity, LSTM carry order, Adam's
decay, first order, the flatten order of CNN features; JAX with another precision); if every
difference then vanishes, the record's pitfall is confirmed. A signature on the recorded quantities: the records' functions, run on the
float64 differences (values), the first step's updates (steps), the paired modules' settings
(config), the weights with no NNX place (dropped), a float32-only difference (float32), the
gradient-flow diff (flow). A signature is a hypothesis with its evidence; where nothing fits:
"unexplained". This module knows no pitfall by name.
"""

from __future__ import annotations

import numpy as np

from ...core import registry
from ..backends import backend
from . import catalogue
from .catalogue.kinds import StepContext
from .compare import rows_of
from .match import translate
from .report import Hint, Row

__all__ = ["page", "diagnose"]


def page(pitfall: str) -> str:
    """The site page of a pitfall id (P04) or scenario name, or "" if the registry has none."""
    for name in registry.names():
        spec = registry.get(name)
        if name == pitfall or (spec.family == "pitfalls" and spec.source == pitfall):
            return f"{name}.html"
    return ""


def _hint(pitfall: str, title: str, where: str, evidence: str, confirmed: bool = False) -> Hint:
    return Hint(pitfall, title, where, evidence, page(pitfall), confirmed)


_ALONE = 8  # replays of one module alone, at most: each is a run of the reference


def _failing(rows: list[Row]) -> set[tuple]:
    return {(r.section, r.step, r.key) for r in rows if not r.ok and r.section not in ("weights", "backward")}


def _types(structures) -> dict[str, set[str]]:
    """The module types of each side, and their kinds by what they are ("norm": a normalisation layer;
    "gelu_tanh", "gelu_exact", "silu": an activation's variant)."""
    return {
        side: {m["type"] for m in structures[i]["modules"]}
        | {m["config"].get("kind", "") for m in structures[i]["modules"]}
        for i, side in enumerate(("torch", "jax"))
    }


def _applicable(structures, steps: int) -> list[tuple[catalogue.Diagnosis, catalogue.Replay]]:
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
    ]


def _replays(report, p, plan, structures, transfer: bool, steps: int) -> list[Hint]:
    kept = {st["step"] for st in p.jax_steps}  # a replay compares the steps the pass kept: from its first difference
    base = [r for r in report.rows if r.dtype == "float64" and (r.step is None or r.step in kept)]
    failing = _failing(base)
    if not failing:
        return []
    first = next(r for r in base if not r.ok and r.section not in ("weights", "backward"))
    # a JAX-side precision replay costs new compiles: only for a float32-sized difference in float64
    rounding = 1e-9 < first.max_rel < 1e-5
    hints = []
    tried = [(d, r, r.knob, "") for d, r in _applicable(structures, steps) if rounding or not r.near_rounding]
    # where every module's replay fails, one module's: a port with the bug in one BatchNorm of several
    alone = [(d, r, f"{r.knob}@{m['path'].replace('/', '.')}", f" (in {m['path'].replace('/', '.')} only)")
             for d, r, *_ in tried if r.per_module for m in structures[0]["modules"]
             if r.modules & {m["type"], m["config"].get("kind", "")}][:_ALONE]  # fmt: skip
    for d, replay, knob, only in tried + alone:
        if only and any(h.confirmed for h in hints):
            break
        try:
            q = p.replay(knob, replay.side)
        except ValueError:
            continue  # the knob does not apply to this model (e.g. an optimizer without Adam's switch)
        rows = rows_of(q, plan, transfer)
        after = _failing(rows)
        fixed, broken = failing - after, after - failing
        if not fixed or broken:
            continue
        title = (replay.title or d.title) + only
        change = f"{replay.side} changed ({knob}: {replay.change}{only})"
        worst = max((r.used for r in rows if np.isfinite(r.used) and not r.explained), default=0.0)
        if not after:
            ev = (f"with {change}, all {len(rows)} float64 quantities match "
                  f"(worst at {worst:.2g} of the tolerance); before: {len(failing)} differed, the first at "
                  f"{first.where} by {first.max_abs:.3g}")  # fmt: skip
            hints.append(_hint(d.id, title, first.where, ev, confirmed=True))
        elif (first.section, first.step, first.key) in fixed:
            ev = f"with {change}, {len(fixed)} of {len(failing)} differences vanish, the first one included"
            hints.append(_hint(d.id, title, first.where, ev))
    # a replay that explains every difference makes the partial ones moot: they explain part of the same one
    return [h for h in hints if h.confirmed] or hints


def _ties(report, p, plan) -> tuple[list[Hint], set[str]]:
    """Hints for the tied tensors the port holds apart, and the NNX keys they explain."""
    hints, explained = [], set()
    for group in plan.untied:
        for d, sig in catalogue.signatures("ties"):
            ev = sig.fn(group, p.values, report)
            if ev:
                hints.append(_hint(d.id, sig.title or d.title, f"float64 grads {group[0][0]}", ev))
                explained |= {key for key, _ in group}
    return hints, explained


def _values(report, p, explained: set[str] = frozenset()) -> list[Hint]:
    hints, seen = [], set()
    for r in report.failed("float64"):
        if r.key in explained:  # a tie signature said why these differ
            continue
        j, t = p.values.get((r.section, r.step, r.key), (None, None))
        if j is None or j.shape != t.shape or j.dtype.kind != "f":
            continue
        fired = None  # once a signature fires on a row, only records sharing its function may fire there
        for d, sig in catalogue.signatures("values"):
            if (sig.section or "") != ("weights" if r.section == "weights" else "") or fired not in (None, sig.fn):
                continue
            ev = sig.fn(r, j, t)
            if ev and (d.id, r.where) not in seen:
                seen.add((d.id, r.where))
                hints.append(_hint(d.id, sig.title or d.title, r.where, ev))
            fired = sig.fn if ev else fired
    return hints


def _first_steps(p) -> tuple[dict, dict] | None:
    """Both sides' step 1 ({"loss", "values"}), where the pass kept it (it parted by then)."""
    t = next((st for st in p.torch_steps if st["step"] == 1), None)
    j = next((st for st in p.jax_steps if st["step"] == 1), None)
    return (t, j) if t and j else None


def _step_context(p, plan, first: tuple[dict, dict]) -> StepContext:
    ratios, decay = {}, {}
    tv, jv = first[0]["values"], first[1]["values"]
    for r_key in p.flow:  # leaves with a gradient; a BatchStat moves without one, by design
        if r_key not in jv or r_key not in tv:
            continue
        dj = jv[r_key] - p.actual[r_key]
        dt = tv[r_key] - p.expected[r_key]
        q = catalogue.kinds.constant_ratio(dj, dt, rtol=1e-6)
        if q is not None:
            ratios[r_key] = q
        c = catalogue.kinds.constant_ratio(dj - dt, p.expected[r_key], rtol=1e-4)  # a shrink c·w on one side
        if c is not None and r_key not in p.no_grad:  # a frozen leaf's decay is frozen_backbone's signature
            decay[r_key] = c
    no_grad = {k for k in ratios if k in p.no_grad}
    return StepContext(ratios, no_grad, p.sources, p.grad_norm, plan.torch_name, decay=decay)


def _steps(report, p, plan) -> list[Hint]:
    """Signatures of the first step's update Δ = after − before, on the leaves that part there."""
    first = _first_steps(p)
    if first is None:
        return []
    parted = {r.key for r in report.failed("float64") if r.section == "steps" and r.step == 1 and r.key != "loss"}
    ctx = _step_context(p, plan, first)
    ctx.ratios = {k: q for k, q in ctx.ratios.items() if k in parted}
    ctx.decay, ctx.parted = {k: c for k, c in ctx.decay.items() if k in parted}, parted
    return [
        _hint(d.id, sig.title or d.title, where, ev)
        for d, sig in catalogue.signatures("steps")
        for where, ev in sig.fn(ctx)
    ]


def _config(structures, plan) -> list[Hint]:
    tmods = {m["path"]: m for m in structures[0]["modules"]}
    jmods = {m["alias"]: m for m in structures[1]["modules"]}
    hints = []
    for path, tm in tmods.items():
        jm = jmods.get(translate(path.replace("/", "."), plan.mapping))
        if jm is None:
            continue
        where = f"{path or '(model)'} ({tm['type']} ↔ {jm['type']})"
        for d, sig in catalogue.signatures("config"):
            ev = sig.fn(tm, jm)
            if ev:
                hints.append(_hint(d.id, sig.title or d.title, where, ev))
    return hints


def _dropped(p, plan) -> list[Hint]:
    hints = []
    moved = p.step_dropped - set(p.dropped)
    for d, sig in catalogue.signatures("dropped"):
        for key, why in p.dropped.items():
            name = plan.torch_name([key])
            hints.append(_hint(d.id, sig.title or d.title, name, sig.fn(name, why, False), confirmed=True))
        for key in sorted(moved):
            name = plan.torch_name([key])
            hints.append(_hint(d.id, sig.title or d.title, name, sig.fn(name, None, True)))
    return hints


def diagnose(report, passes: dict, plan, structures, transfer: bool = True, steps: int = 0) -> list[Hint]:
    """Hints for a report (see module docstring), confirmed ones first; [] when everything matches."""
    p = passes["float64"]
    hints, replayed = _dropped(p, plan), []
    if report.failed("float64"):
        replayed = _replays(report, p, plan, structures, transfer, steps)
        hints += replayed
        tied, explained = _ties(report, p, plan)
        hints += tied + _values(report, p, explained) + _steps(report, p, plan)
        confirmed = {x.pitfall for x in hints if x.confirmed}
        hints += [h for h in _config(structures, plan) if h.pitfall not in confirmed]
    elif report.failed("float32"):
        for d, sig in catalogue.signatures("float32"):
            found = sig.fn(report)
            if found:
                hints.append(_hint(d.id, sig.title or d.title, *found))
    # a replay that makes every float64 quantity match explains the gradient flow's differences too
    for line in [] if any(h.confirmed for h in replayed) else report.mismatches:
        for d, sig in catalogue.signatures("flow"):
            ev = sig.fn(line, report)
            if ev:
                hints.append(_hint(d.id, sig.title or d.title, line.keys, ev))
    back = report.backward_parting()
    for d, sig in catalogue.signatures("backward") if back is not None else ():
        ev = sig.fn(back, *p.values.get(("backward", None, back.key), (None, None)))
        if ev:
            hints.append(_hint(d.id, sig.title or d.title, back.where, ev))
    if report.failed("float64") and not hints:
        r = report.first_parting("float64")
        tried = ", ".join(f"{rp.side}:{rp.knob}" for _, rp in _applicable(structures, steps))
        ev = f"max rel {r.max_rel:.3g}; no catalogue signature fits (replays tried: {tried})"
        hints.append(Hint("unexplained", "a difference the catalogue does not explain", r.where, ev))
    # a pitfall seen in the loaded weights (a loader's layout bug) is the same bug its replay sees downstream
    in_weights = {h.pitfall for h in hints if h.where.startswith("float64 weights ")}
    hints = [h for h in hints if h.pitfall not in in_weights or h.where.startswith("float64 weights ")]
    return sorted(hints, key=lambda h: not h.confirmed)
