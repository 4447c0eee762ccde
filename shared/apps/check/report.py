"""What `check_port` found: comparison rows, the gradient-flow diff, the hints, as a table or JSON.

A `PortReport` is ok only when every float64 row matches (the bug test: 1e-10 relative), every
float32 row is within float32 noise, no torch weight was dropped, and the gradient flows
agree. Rows are keyed by the NNX leaf paths (the canonical layout of the port), each with the
torch name it came from.
"""

from __future__ import annotations

import io
from dataclasses import asdict, dataclass, field

import numpy as np

__all__ = ["Row", "Hint", "FlowLine", "PortReport", "PortMismatch"]

# "backward": the gradient arriving at each module's output, compared where the forward matched and the
# gradients did not (a stop, a custom VJP, a detach inside a block)
SECTIONS = ("weights", "outputs", "loss", "grads", "backward", "steps")


@dataclass
class Row:
    """One compared quantity: JAX against torch (the reference)."""

    dtype: str
    section: str  # one of SECTIONS
    key: str  # NNX path (or module alias for outputs, "loss")
    torch: str  # the torch name(s) it comes from
    max_abs: float
    max_rel: float
    bound: float
    ok: bool
    step: int | None = None  # 1-based step for section "steps"
    problem: str = ""
    used: float = float("nan")  # the largest |jax - torch| over its bound (<= 1 passes)
    explained: str = ""  # ok only at the precision the reference itself computed in (a float32 island)

    @property
    def where(self) -> str:
        step = f" step {self.step}" if self.step is not None else ""
        return f"{self.dtype} {self.section}{step} {self.key}"


@dataclass
class Hint:
    """A hypothesis with its evidence: the pitfall it names, where, and why."""

    pitfall: str  # "P04", a scenario name ("grad_clipping"), or "unexplained"
    title: str
    where: str
    evidence: str
    page: str = ""  # site page, e.g. "p04_gelu.html"
    confirmed: bool = False  # a counterfactual replay made the difference vanish

    def __str__(self) -> str:
        tag = "confirmed" if self.confirmed else "hypothesis"
        # the lesson in the terminal, and the page of `make site` (site/<page>)
        page = f" (detach-parity show {self.page.removesuffix('.html')}; site/{self.page})" if self.page else ""
        return f"[{self.pitfall}] {self.title}{page} at {self.where} — {tag}: {self.evidence}"


@dataclass
class FlowLine:
    """The gradient flow of a group of parameters on each side, and the mismatch said in words."""

    keys: str  # "encoder/*" or a key
    torch: str  # "flows" | "zero" | "None (requires_grad False)" | "None (no path)"
    jax: str  # "flows" | "zero" | "absent (outside wrt)" | "NaN"
    text: str
    mismatch: bool


@dataclass
class PortReport:
    """The result of check_port (see module docstring)."""

    rows: list[Row] = field(default_factory=list)
    flow: list[FlowLine] = field(default_factory=list)
    hints: list[Hint] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)
    settings: dict = field(default_factory=dict)
    seconds: dict = field(default_factory=dict)
    # K where K steps were compared and none moved a trainable weight on either side (gradient accumulation
    # longer than K, a zero learning rate): equal steps that changed nothing are no evidence about the update
    unmoved: int = 0
    order: list[str] = field(default_factory=list)  # torch's modules (dotted) in the order their forward finished
    skipped: dict = field(default_factory=dict)  # dtype -> side -> the steps that moved no leaf (a skipped update)
    feeds: dict = field(default_factory=dict)  # torch module (dotted) -> the modules whose outputs it took as inputs

    def interval(self) -> tuple[str, list[str], str] | None:
        """Where the float64 forward parts: (the last module before the first parting whose outputs match, the
        torch modules between them that have no NNX twin to compare, the first parting's module); None when the
        first parting is not a module's output. An activation or a rotary table the port computes inline sits in
        the middle list: the difference arises there, or in the code between the two; so does one with no twin
        whose output the parting module (or a module around it) takes as an input, wherever it ran: Llama's
        attention takes its cos / sin from model.rotary_emb, which runs before the first layer."""
        first = self.first_parting("float64")
        if first is None or first.section != "outputs" or first.torch not in self.order:
            return None
        rows: dict[str, list[bool]] = {}
        for r in self.rows:
            if r.dtype == "float64" and r.section == "outputs":
                rows.setdefault(r.torch, []).append(r.ok)
        before = self.order[: self.order.index(first.torch)]
        matched = [i for i, name in enumerate(before) if rows.get(name) and all(rows[name])]
        start = matched[-1] if matched else -1
        unpaired = [name for name in before[start + 1 :] if name not in rows]
        # the parting module's inputs, and those of the nearest block around it that takes any from outside it
        # (Llama's o_proj: self_attn, fed by rotary_emb; down_proj: mlp, fed by a norm, not the layer's inputs)
        parts = first.torch.split(".")
        around = [".".join(parts[:i]) for i in range(len(parts) - 1, 0, -1)]
        outside = lambda n: [m for m in self.feeds.get(n, []) if not m.startswith(n + ".")]  # noqa: E731
        block = next((n for n in around if outside(n)), "")
        fed = [m for m in self.feeds.get(first.torch, []) + outside(block) if m not in rows]
        unpaired += [m for m in dict.fromkeys(fed) if m not in unpaired and not first.torch.startswith(m + ".")]
        return (before[start] if matched else "", unpaired, first.torch)

    @property
    def ok(self) -> bool:
        return bool(self.rows) and all(r.ok for r in self.rows) and not self.dropped and not self.mismatches

    @property
    def mismatches(self) -> list[FlowLine]:
        return [f for f in self.flow if f.mismatch]

    def failed(self, dtype: str | None = None, section: str | None = None) -> list[Row]:
        return [r for r in self.rows if not r.ok and dtype in (None, r.dtype) and section in (None, r.section)]

    def first_parting(self, dtype: str = "float64") -> Row | None:
        """The first failing row in the order of the check: weights, outputs (call order), loss, grads, steps."""
        failed = self.failed(dtype)
        return failed[0] if failed else None

    def backward_parting(self) -> Row | None:
        """In backward order (the reverse of the forward's), the first module whose output matches and whose
        incoming gradient does not: the stop, detach or custom VJP lies between it and the module downstream."""
        outputs = {r.key: r.ok for r in self.rows if r.dtype == "float64" and r.section == "outputs"}
        rows = [r for r in self.rows if r.dtype == "float64" and r.section == "backward"]
        return next((r for r in reversed(rows) if not r.ok and outputs.get(r.key, False)), None)

    def named(self) -> list[str]:
        """The pitfall ids the hints name (confirmed first)."""
        hints = sorted(self.hints, key=lambda h: not h.confirmed)
        return list(dict.fromkeys(h.pitfall for h in hints))

    def summary(self) -> list[dict]:
        """One line per dtype and section: how many leaves, the worst error, and the verdict."""
        out = []
        for dtype in dict.fromkeys(r.dtype for r in self.rows):
            for section in SECTIONS:
                rows = [r for r in self.rows if r.dtype == dtype and r.section == section]
                if not rows:
                    continue
                worst = max(rows, key=lambda r: (not r.ok, _num(r.used)))
                out.append(
                    {
                        "dtype": dtype,
                        "section": section,
                        "compared": len(rows),
                        "failed": sum(not r.ok for r in rows),
                        "max_abs": max(_num(r.max_abs) for r in rows),
                        "max_rel": max(_num(r.max_rel) for r in rows),
                        "used": max(_num(r.used) for r in rows),
                        "worst": worst.key if worst.step is None else f"step {worst.step}: {worst.key}",
                        "ok": all(r.ok for r in rows),
                        "unchecked": section == "steps" and bool(self.unmoved),
                    }
                )
        return out

    def rich_table(self):
        """The summary as a rich Table (the CLI prints it)."""
        from rich.table import Table

        table = Table(title="detach-parity check: JAX port vs torch", header_style="bold")
        for col in (
            "dtype",
            "section",
            "compared",
            "failed",
            "max |jax-torch|",
            "of tolerance",
            "worst leaf",
            "verdict",
        ):
            table.add_column(col, justify="right" if col in ("compared", "failed") else "left")
        for s in self.summary():
            verdict = (
                "[red]DIFFERS[/]" if not s["ok"] else "[yellow]no update[/]" if s["unchecked"] else "[green]match[/]"
            )
            table.add_row(
                s["dtype"], s["section"], str(s["compared"]), str(s["failed"]),
                f"{s['max_abs']:.2e}", f"{s['used']:.2g}", s["worst"], verdict,
            )  # fmt: skip
        return table

    @property
    def explained(self) -> list[Row]:
        """The rows that match only at the precision the reference computed in (match with an explanation)."""
        return [r for r in self.rows if r.ok and r.explained]

    def verdict(self) -> str:
        """ "match", "match, explained" (differences the reference's own float32 computing explains), "match,
        steps unchecked" (the K steps moved no trainable weight: the update was not seen) or "differs"."""
        if not self.ok:
            return "differs"
        if self.unmoved:
            return "match, steps unchecked"
        return "match, explained" if self.explained else "match"

    def lines(self) -> list[str]:
        """What the table does not show: the first parting per dtype, dropped weights, flow mismatches, hints."""
        out = []
        for dtype in ("float64", "float32"):
            row = self.first_parting(dtype)
            if row is not None:
                step = f" step {row.step}" if row.step else ""
                what = row.problem or f"max |jax-torch| {row.max_abs:.3g}"
                out.append(f"{dtype}: first parting at {row.section}{step} {row.key} (torch {row.torch}): {what}")
        span = self.interval()
        if span is not None and (span[0] or span[1]):
            after = f"after {span[0]} (its output matches)" if span[0] else "from the start"
            between = f"; torch modules on the way or feeding it, with no NNX twin to compare: {', '.join(span[1])}"
            between = between if span[1] else ""
            out.append(f"float64: the forward parts {after}, at {span[2]}{between}")
        back = self.backward_parting()
        if back is not None:
            out.append(
                f"float64: backward parting at {back.key} (torch {back.torch}): its output matches, the gradient "
                f"arriving at it differs ({back.problem or f'max |jax-torch| {back.max_abs:.3g}'}): a stop, detach or "
                "custom VJP between it and the modules downstream, whose gradients match"
            )
        out += [f"dropped: {line}" for line in self.dropped]
        out += [f"gradient flow: {f.text}" for f in self.mismatches]
        out += [f"hint: {h}" for h in self.hints]
        out += [f"note: {n}" for n in self.notes]
        for why in dict.fromkeys(r.explained for r in self.explained):
            rows = [r for r in self.explained if r.explained == why]
            worst = max(rows, key=lambda r: _num(r.max_rel))
            judged = "judged at float32 precision from there" if why.startswith("float64 pass") else "so judged"
            out.append(
                f"explained: {why}; {len(rows)} quantities {judged} "
                f"(the largest difference {worst.max_rel:.1e} relative, at {worst.where})"
            )
        verdict = {
            "match": "the port matches",
            "differs": "the port DIFFERS",
            "match, steps unchecked": f"the port matches up to the steps; its {self.unmoved} steps moved no "
            "trainable weight on either side, so the update is unchecked (more --steps, or a learning rate above 0)",
        }.get(self.verdict(), "the port matches, with a difference the reference's own float32 computing explains")
        out.append("verdict: " + verdict)
        return out

    def table(self) -> str:
        """The whole report as plain text: the summary table, then `lines()`."""
        from rich.console import Console

        buf = io.StringIO()
        console = Console(file=buf, width=160, color_system=None, highlight=False)
        console.print(self.rich_table())
        for line in self.lines():
            console.print(line, markup=False)
        return buf.getvalue()

    def to_json(self) -> dict:
        """Everything as JSON-ready data (non-finite numbers as null)."""
        return {
            "ok": self.ok,
            "verdict": self.verdict(),
            "explained": [{"where": r.where, "why": r.explained, "max_rel": _js(r.max_rel)} for r in self.explained],
            "settings": self.settings,
            "seconds": {k: round(v, 3) for k, v in self.seconds.items()},
            "summary": [{k: _js(v) for k, v in s.items()} for s in self.summary()],
            "failed": [{k: _js(v) for k, v in asdict(r).items()} for r in self.rows if not r.ok],
            "compared": len(self.rows),
            "flow": [asdict(f) for f in self.flow],
            "hints": [asdict(h) for h in self.hints],
            "named": self.named(),
            "backward_parting": (lambda r: r and {"key": r.key, "torch": r.torch})(self.backward_parting()),
            "interval": (lambda s: s and {"after": s[0], "unpaired": s[1], "at": s[2]})(self.interval()),
            "dropped": list(self.dropped),
            "notes": list(self.notes),
        }


class PortMismatch(AssertionError):
    """Raised by assert_port_matches: the message is the report."""


def _num(x: float) -> float:
    return float(x) if np.isfinite(x) else float("inf")


def _js(v):
    if isinstance(v, float):
        return v if np.isfinite(v) else None
    return v
