"""What `check_port` found: comparison rows, the gradient-flow diff, the hints, as a table or JSON.

A `PortReport` is ok only when every float64 row matches (the bug test: 1e-10 relative), every
float32 row is within float32 noise, no torch weight was dropped, and the gradient flows
agree. Rows are keyed by the NNX leaf paths (the canonical layout of the port), each with the
torch name it came from.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np

from . import text

__all__ = ["Row", "Hint", "FlowLine", "PortReport", "PortMismatch"]

# "backward": the gradient arriving at each module's output, compared where the forward matched and the
# gradients did not (a stop, a custom VJP, a detach inside a block)
# "precision": the bfloat16 pass's float32 the reference keeps (a softmax, a norm's statistics) that the port keeps too
SECTIONS = ("weights", "outputs", "loss", "grads", "backward", "steps", "precision")


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
    reference: float = float("nan")  # the bfloat16 pass: the reference's own error against float64 truth

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
    factor: float = 0.0  # the bfloat16 pass: the port's error allowed, in multiples of the reference's own
    profile: dict = field(default_factory=dict)  # where the time went: stages.Stages.profile
    line: dict | None = None  # where the float64 forward parts, to the port's line (line.py)

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
        """The summary as a rich Table (the CLI prints it): text.rich_table."""
        return text.rich_table(self)

    @property
    def explained(self) -> list[Row]:
        """The rows that match only at the precision the reference computed in (match with an explanation)."""
        return [r for r in self.rows if r.ok and r.explained]

    def verdict(self) -> str:
        """ "match" (a module boundary drawn elsewhere, or outputs differing only where the loss never reads, are
        stated facts), "match, explained" (differences judged
        at float32's bound where an island could not be widened, or rounding noise Adam scales), "match,
        steps unchecked" (the K steps moved no trainable weight: the update was not seen) or "differs"."""
        if not self.ok:
            return "differs"
        if self.unmoved:
            return "match, steps unchecked"
        facts = ("boundary:", "unread:")  # a module boundary drawn elsewhere, entries the loss never reads
        return "match, explained" if any(not r.explained.startswith(facts) for r in self.explained) else "match"

    def lines(self) -> list[str]:
        """What the table does not show: the first parting per dtype, dropped weights, flow mismatches, hints,
        notes, what is explained and the verdict (text.lines)."""
        return text.lines(self)

    def table(self) -> str:
        """The whole report as plain text: the summary table, then `lines()`."""
        return text.table(self)

    def to_json(self) -> dict:
        """Everything as JSON-ready data (non-finite numbers as null)."""
        return {
            "ok": self.ok,
            "verdict": self.verdict(),
            "explained": [{"where": r.where, "why": r.explained, "max_rel": _js(r.max_rel)} for r in self.explained],
            "settings": self.settings,
            "factor": self.factor or None,  # the bfloat16 pass's allowed error ratio, where it ran
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
            "profile": self.profile,
            "line": self.line,
        }


class PortMismatch(AssertionError):
    """Raised by assert_port_matches: the message is the report."""


def _num(x: float) -> float:
    return float(x) if np.isfinite(x) else float("inf")


def _js(v):
    if isinstance(v, float):
        return v if np.isfinite(v) else None
    return v
