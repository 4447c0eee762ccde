"""The claim record and what its verifiers share: `Claim`, `Theme`, `Facts`, the evidence readers.

A theme module of this package (aliasing.py, freezing.py, ...) opens with its `Theme`, whose
`claim(...)` decorator puts each record right above the verifier that decides it:

    THEME = Theme(module="aliasing", title="what detach() returns")

    @THEME.claim(id="C02", article="A1", section="§2.2", scenario="basics", verdict="correct",
                 claim="...", right="...")
    def detached_result_needs_no_grad(t: dict, j: dict, f: Facts) -> None:
        f.need(not t["z_requires_grad"] and t["y_requires_grad"], "z.requires_grad False, y True")

The verifier reads this run's torch evidence `t` and JAX evidence `j` (what `check_c02` of
`torch_impl/backend/claims/aliasing.py` and `jax_impl/backend/claims/aliasing.py` returned) and states each fact
it needs with `f.need(condition, text)`. No framework is imported here.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "ARTICLES",
    "VERDICTS",
    "NO_GRAD_FN",
    "INPLACE",
    "Facts",
    "Claim",
    "Theme",
    "raised",
    "close",
    "fmt",
]

# Cited by title, never quoted (the handed cases list them; the articles' text is never copied).
ARTICLES = {
    "A1": "PyTorch detach()：从原理到实战，解锁计算图控制的进阶技巧",
    "A2": "Pytorch 为什么在这个例子中需要调用detach函数",
    "A3": "Python中Delta与Detach的深度解析：计算图与张量操作的关键机制",
}
VERDICTS = ("correct", "incomplete", "misleading", "wrong")

# two computations of one value (two graphs, two compiled programs) agree to rounding, not bit for bit:
# a relative difference of the float64 toys' gradients below 8 ulps is "the same gradient"
SAME = 8 * 2.0**-52
NO_GRAD_FN = "element 0 of tensors does not require grad and does not have a grad_fn"
INPLACE = "modified by an inplace operation"

# what a verifier may raise on evidence of the wrong shape: it then counts as not reproduced
UNREADABLE = (KeyError, TypeError, ValueError, IndexError, AttributeError, ZeroDivisionError)


class Facts:
    """The facts a verifier needs; the text shows what was found, each failed fact marked ✗."""

    def __init__(self) -> None:
        self.parts: list[str] = []
        self.failed: list[str] = []
        self.needed = 0

    def need(self, cond: Any, text: str) -> None:
        """One fact the verdict rests on: `cond` must hold; `text` says what it is."""
        ok = bool(cond)
        self.needed += 1
        self.parts.append(text if ok else f"✗ {text}")
        if not ok:
            self.failed.append(text)

    def note(self, text: str) -> None:
        """Context that is not a fact of the verdict (e.g. where the timings are)."""
        self.parts.append(text)

    def result(self) -> tuple[bool, str]:
        """(every needed fact held, the facts as one text); no fact at all is not a reproduction."""
        if not self.needed:
            return False, "✗ the verifier stated no fact"
        return not self.failed, "; ".join(self.parts)


@dataclass(frozen=True)
class Claim:
    """One tutorial claim and its verdict.

    id: "C" and two digits; article: a key of ARTICLES; section: e.g. "§2.1"; claim: what the
    article says, in our words; verdict: one of VERDICTS; right: the right statement;
    scenario: the related registered scenario (or None); module: the pair that checks it,
    `torch_impl/<module>.py` / `jax_impl/<module>.py`, each with `check_<id lower>`;
    verifier: (torch evidence, JAX evidence, Facts) -> None, stating the facts.
    Raises ValueError naming the field, the expected and the actual value.
    """

    id: str
    article: str
    section: str
    claim: str
    verdict: str
    right: str
    scenario: str | None
    module: str
    verifier: Callable[[dict, dict, Facts], None] = field(repr=False, compare=False)

    def __post_init__(self) -> None:
        if not (isinstance(self.id, str) and re.fullmatch(r"C\d{2}", self.id)):
            raise ValueError(f"claim id expected 'C' and two digits, e.g. 'C07', got {self.id!r}")
        if self.verdict not in VERDICTS:
            raise ValueError(f"{self.id}: verdict expected one of {VERDICTS}, got {self.verdict!r}")
        if self.article not in ARTICLES:
            raise ValueError(f"{self.id}: article expected one of {sorted(ARTICLES)}, got {self.article!r}")
        for name in ("section", "claim", "right"):
            if not (isinstance(getattr(self, name), str) and getattr(self, name).strip()):
                raise ValueError(f"{self.id}: {name} expected a non-empty text, got {getattr(self, name)!r}")
        if not (isinstance(self.module, str) and self.module.isidentifier() and not self.module.startswith("_")):
            raise ValueError(
                f"{self.id}: module expected a theme's module name (backend/claims/<theme>.py), got {self.module!r}"
            )
        if not callable(self.verifier):
            raise ValueError(f"{self.id}: verifier expected a callable, got {self.verifier!r}")

    @property
    def check(self) -> str:
        """Name of the check function in torch_impl/<module>.py and jax_impl/<module>.py."""
        return f"check_{self.id.lower()}"

    @property
    def source(self) -> str:
        return f"{self.article} {self.section}"

    def verify(self, torch_evidence: dict, jax_evidence: dict) -> tuple[bool, str]:
        """Whether this run's evidence still supports the stated verdict, and a short text of it.

        A missing key or a value of the wrong type counts as not reproduced (the text says why).
        """
        facts = Facts()
        try:
            self.verifier(torch_evidence, jax_evidence, facts)
        except UNREADABLE as exc:
            return False, f"✗ evidence unreadable: {type(exc).__name__}: {exc}"
        return facts.result()


@dataclass
class Theme:
    """The claims of one theme module and the pair that checks them (`module`, e.g. "freezing": backend/claims/freezing.py)."""

    module: str
    title: str
    claims: list[Claim] = field(default_factory=list)

    def claim(self, **fields: Any) -> Callable[[Callable], Callable]:
        """Decorator: the keyword record of the claim the decorated verifier decides (module: this theme's)."""

        def register(verifier: Callable[[dict, dict, Facts], None]) -> Callable[[dict, dict, Facts], None]:
            self.claims.append(Claim(**fields, module=self.module, verifier=verifier))
            return verifier

        return register


def raised(ev: dict, typ: str, fragment: str) -> bool:
    """An error entry {"type", "message"} of the evidence is `typ` with `fragment` in its message."""
    return ev.get("type") == typ and fragment in ev.get("message", "")


def close(a, b, tol: float = 1e-12) -> bool:
    """Numbers or equal-length lists agree within `tol`, relative above 1 and absolute below."""
    a, b = (a if isinstance(a, list) else [a]), (b if isinstance(b, list) else [b])
    return len(a) == len(b) and all(abs(x - y) <= tol * max(1.0, abs(y)) for x, y in zip(a, b, strict=True))


def fmt(x: float) -> str:
    return f"{x:.3g}"
