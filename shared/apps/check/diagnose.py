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

from . import catalogue
from .catalogue.kinds import StepContext
from .match import translate
from .replays import applicable, by_replay, hint, page
from .report import Hint

__all__ = ["page", "diagnose"]


def _ties(report, p, plan) -> tuple[list[Hint], set[str]]:
    """Hints for the tied tensors the port holds apart, and the NNX keys they explain."""
    hints, explained = [], set()
    for group in plan.untied:
        for d, sig in catalogue.signatures("ties"):
            ev = sig.fn(group, p.values, report)
            if ev:
                hints.append(hint(d.id, sig.title or d.title, f"float64 grads {group[0][0]}", ev))
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
                hints.append(hint(d.id, sig.title or d.title, r.where, ev))
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
        hint(d.id, sig.title or d.title, where, ev)
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
                hints.append(hint(d.id, sig.title or d.title, where, ev))
    return hints


def _dropped(p, plan) -> list[Hint]:
    hints = []
    moved = p.step_dropped - set(p.dropped)
    for d, sig in catalogue.signatures("dropped"):
        for key, why in p.dropped.items():
            name = plan.torch_name([key])
            hints.append(hint(d.id, sig.title or d.title, name, sig.fn(name, why, False), confirmed=True))
        for key in sorted(moved):
            name = plan.torch_name([key])
            hints.append(hint(d.id, sig.title or d.title, name, sig.fn(name, None, True)))
    return hints


def diagnose(report, passes: dict, plan, structures, transfer: bool = True, steps: int = 0) -> list[Hint]:
    """Hints for a report (see module docstring), confirmed ones first; [] when everything matches."""
    p = passes["float64"]
    hints, replayed = _dropped(p, plan), []
    if report.failed("float64"):
        replayed = by_replay(report, p, plan, structures, transfer, steps)
        hints += replayed
        tied, explained = _ties(report, p, plan)
        hints += tied + _values(report, p, explained) + _steps(report, p, plan)
        confirmed = {x.pitfall for x in hints if x.confirmed}
        hints += [h for h in _config(structures, plan) if h.pitfall not in confirmed]
    elif report.failed("float32"):
        for d, sig in catalogue.signatures("float32"):
            found = sig.fn(report)
            if found:
                hints.append(hint(d.id, sig.title or d.title, *found))
    if report.failed("bfloat16") and not report.failed("float64"):  # a port right in float64, less precise in bf16
        for d, sig in catalogue.signatures("bfloat16"):
            hints += [hint(d.id, sig.title or d.title, where, ev) for where, ev in sig.fn(report)]
    # a replay that makes every float64 quantity match explains the gradient flow's differences too
    for line in [] if any(h.confirmed for h in replayed) else report.mismatches:
        for d, sig in catalogue.signatures("flow"):
            ev = sig.fn(line, report)
            if ev:
                hints.append(hint(d.id, sig.title or d.title, line.keys, ev))
    back = report.backward_parting()
    for d, sig in catalogue.signatures("backward") if back is not None else ():
        ev = sig.fn(back, *p.values.get(("backward", None, back.key), (None, None)))
        if ev:
            hints.append(hint(d.id, sig.title or d.title, back.where, ev))
    if report.failed("float64") and not hints:
        r = report.first_parting("float64")
        tried = ", ".join(f"{rp.side}:{rp.knob}" for _, rp in applicable(structures, steps) if not rp.per_leaf)
        ev = f"max rel {r.max_rel:.3g}; no catalogue signature fits (replays tried: {tried})"
        hints.append(Hint("unexplained", "a difference the catalogue does not explain", r.where, ev))
    # a pitfall seen in the loaded weights (a loader's layout bug) is the same bug its replay sees downstream
    in_weights = {h.pitfall for h in hints if h.where.startswith("float64 weights ")}
    hints = [h for h in hints if h.pitfall not in in_weights or h.where.startswith("float64 weights ")]
    return sorted(hints, key=lambda h: not h.confirmed)
