"""Outputs that differ only in entries the loss never reads: stated as such, with the catalogue's reason.

With left padding under a causal mask a query sees no key: torch's F.scaled_dot_product_attention returns zeros
for it (torch 2.x, a boolean or an additive -inf mask), jax.nn.dot_product_attention the uniform average of the
values. A loss masked by the padding never reads those rows, so the loss, the gradients and the steps match while
every module downstream of the attention differs there. Such an output is no difference of what training sees:
where the float64 loss matches, each differing output is tested entry by entry against the gradient arriving at it
from the loss (the float64 cotangents of both sides, port_run.cotangents): where that gradient is exactly zero on
both sides at every entry that differs, the loss never reads them, and the row is a fact ("unread: ..."), its rows
named. The catalogue's replays for unread entries (Replay.unread: P12's fully masked rows averaged as JAX does)
then say why: one that makes every such output match is a confirmed hint. Anything the loss reads is judged as
it was: a real bug elsewhere in the port still differs, and so does an unread output whose float32 pass parts
where the float32 loss, gradients or steps part too.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ..backends import backend
from . import catalogue
from .catalogue.kinds import constant_ratio
from .compare import TOLERANCE, floor, rows_of
from .diagnose import page
from .report import Hint, PortReport, Row

__all__ = ["unread", "boundaries"]


def _differing(j, t) -> np.ndarray | None:
    """The entries where the port's float output parts from torch's beyond the float64 bound (the one Judge used,
    its floor at the output's scale); None where the two are not floats of one shape."""
    j, t = np.asarray(j), np.asarray(t)
    if j.shape != t.shape or j.dtype.kind != "f" or t.dtype.kind != "f" or not t.size:
        return None
    j, t = j.astype(np.float64), t.astype(np.float64)
    scale = float(np.nanmax(np.abs(t), initial=0.0))
    tol = floor(TOLERANCE["float64"], scale) if 0 < scale < np.inf else TOLERANCE["float64"]
    with np.errstate(invalid="ignore"):
        same = (np.abs(j - t) <= tol.atol + tol.rtol * np.abs(t)) | (j == t) | (np.isnan(j) & np.isnan(t))
    return ~same


def _rows(d: np.ndarray) -> str:
    """Where the entries `d` lie, in words: the rows (every axis but the last) holding any of them."""
    if d.ndim < 2:
        at = np.flatnonzero(d).tolist()
        return f"{len(at)} of {d.size} entries {at[:5]}{' ...' if len(at) > 5 else ''}"
    rows = np.argwhere(d.any(axis=-1)).tolist()
    shown = ", ".join(str(r) for r in rows[:5]) + (" ..." if len(rows) > 5 else "")
    return f"{len(rows)} of {int(np.prod(d.shape[:-1]))} rows ({shown})"


def _read_nowhere(p64, key: str) -> str | None:
    """Where the float64 output `key` differs, if every such entry has a zero gradient from the loss on both sides
    (its rows in words); else None."""
    j, t = p64.values.get(("outputs", None, key), (None, None))
    jc, tc = p64.values.get(("backward", None, key), (None, None))
    d = _differing(j, t) if j is not None else None
    if d is None or not d.any() or jc is None or np.shape(jc) != d.shape or np.shape(tc) != d.shape:
        return None
    return _rows(d) if np.all(np.asarray(jc)[d] == 0) and np.all(np.asarray(tc)[d] == 0) else None


def _why(report: PortReport, p64, plan, transfer: bool, keys: set[str]) -> tuple | None:
    """(record, replay, rows of it) of the first unread replay that makes every output in `keys` match and parts
    nothing that matched; None where none applies or none does."""
    before = {(r.section, r.step, r.key) for r in report.rows if r.dtype == "float64" and not r.ok}
    for d, replay in catalogue.replays():
        if not replay.unread or replay.knob not in backend(replay.side).port_run.knobs():
            continue
        try:
            rows = rows_of(p64.replay(replay.knob, replay.side), plan, transfer)
        except ValueError:
            continue  # the knob does not apply to this model
        after = {(r.section, r.step, r.key) for r in rows if not r.ok and r.section not in ("weights", "backward")}
        if not any(k in keys for s, _, k in after if s == "outputs") and after <= before:
            return d, replay, rows
    return None


def unread(report: PortReport, p64, backward: Callable[[], list[Row]], plan, transfer: bool) -> tuple:
    """Judge the float64 outputs that differ where the float64 loss matches (module docstring), and their float32
    twins where everything float32 training reads matches; rows so judged are ok, explained "unread: ...".

    backward: the float64 rows of the gradient arriving at each module (checker._backward), called at most once.
    Returns:
      (notes, hints, the backward rows or None where not computed).
    """
    parted = report.failed("float64", "outputs")
    if not parted or report.failed("float64", "loss") or p64.replay is None:
        return [], [], None
    back = backward()
    found = {r.key: where for r in parted if (where := _read_nowhere(p64, r.key))}
    if not found:
        return [], [], back
    why = _why(report, p64, plan, transfer, set(found))
    reason = f"; {why[0].id}: {why[1].title or why[0].title}" if why else ""
    at: dict[str, list[str]] = {}  # the rows in words -> the modules whose outputs differ there only
    for r in parted:
        if r.key in found:
            r.ok, r.problem = True, ""
            r.explained = (
                f"unread: float64 output of {r.torch} differs only in {found[r.key]}, which the loss never reads"
            )
            at.setdefault(found[r.key], []).append(r.torch)
    notes = [
        f"unread: the output{'s' * (len(names) > 1)} of {', '.join(names)} differ{'s' * (len(names) == 1)} only in "
        f"{where}, where the gradient "
        f"arriving from the loss is exactly zero on both sides: entries the loss never reads, a fact, not a "
        f"difference{reason}"
        for where, names in at.items()
    ]
    trained32 = [r for r in report.rows if r.dtype == "float32" and r.section in ("loss", "grads", "steps")]
    if trained32 and all(r.ok for r in trained32):  # the float32 twins: the same entries, the same loss
        for r in report.failed("float32", "outputs"):
            if r.key in found:
                r.ok, r.problem = True, ""
                r.explained = f"unread: float32 output of {r.torch}: the float64 pass's unread rows"
    if why is None:
        return notes, [], back
    d, replay, rows = why
    worst = max((x.used for x in rows if np.isfinite(x.used) and not x.explained), default=0.0)
    evidence = (
        f"with torch changed ({replay.knob}: {replay.change}), the {len(found)} outputs that differed match and "
        f"all {len(rows)} float64 quantities are as they were or match (worst at {worst:.2g} of the tolerance); they "
        "differed only where the loss never reads: a fact of the two frameworks, not a bug of the port"
    )
    first = next(r for r in parted if r.key in found)
    return notes, [Hint(d.id, replay.title or d.title, first.where, evidence, page(d.id), True)], back


def boundaries(report, p64) -> list[str]:
    """Submodule outputs that differ while what consumes them agrees are where the port draws a module's boundary
    elsewhere (Gemma's √hidden applied after embed_tokens, where HF's table applies it inside): facts, not
    differences. Where everything training reads matches (the loss, every gradient, every step), every differing
    output is one; where it does not, one that is a constant factor off while each module fed by it matches (the
    bug is elsewhere, downstream). Judged per pass (float64, float32: everything matches); returns the notes."""
    notes = []
    for dtype in ("float64", "float32"):
        trained = [r for r in report.rows if r.dtype == dtype and r.section in ("loss", "grads", "steps")]
        parted = report.failed(dtype, "outputs")
        if not parted or not trained:
            continue
        clean = all(r.ok for r in trained)
        if not clean and dtype != "float64":
            continue
        outputs = {}
        for r in report.rows:
            if r.dtype == dtype and r.section == "outputs":
                outputs.setdefault(r.torch, []).append(r)
        for r in parted:
            j, t = p64.values.get(("outputs", None, r.key), (None, None)) if dtype == "float64" else (None, None)
            ratio = constant_ratio(np.asarray(j, float), np.asarray(t, float), 1e-9) if j is not None else None
            if ratio is not None and abs(ratio - 1) < 1e-6:  # the same values up to rounding: no boundary there
                continue
            consumers = [n for n, fed in report.feeds.items() if r.torch in fed and n in outputs]
            agree = ratio is not None and consumers and all(x.ok for n in consumers for x in outputs[n])
            if not (clean or agree):
                continue
            how = f"the port's is torch's times {ratio:.6g} everywhere" if ratio is not None else "it differs"
            r.ok, r.explained = True, f"boundary: {dtype} output of {r.torch}: {how}"
            if dtype == "float64":
                agreed = "the loss, every gradient and every step match" if clean else f"{', '.join(consumers)} match"
                notes.append(
                    f"boundary: {r.torch}'s output differs ({how}), while {agreed}: the port computes part of that "
                    "module outside it (or torch does): a fact, not a difference"
                )
    return notes
