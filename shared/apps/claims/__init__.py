"""Claims, checked: the tutorial claims about detach(), each a keyword record next to its verifier.

A claim lives in two places: its record and verifier in a theme module of this package
(aliasing, freezing, losses, recurrence, modes; see record.py for the form), and its
`check_<id>` in the theme's mirrored pair `torch_impl/<module>.py` / `jax_impl/<module>.py`,
each returning an evidence dict from this run. `evaluate(claim)` runs both checks and the
verifier; a new torch or JAX version that changes a fact makes `detach-parity claims` exit 1.
The ids, their count and their range are read from the records (`CLAIMS`, `id_range()`),
never written out; `validate()` checks the records against the scenario registry and the pairs.

Speed claims are judged on what does not depend on a clock (saved-tensor bytes, autograd
nodes, residuals, errors); the ratios are measured by `detach-parity bench`.
No framework is imported here (the records are readable without torch or JAX).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable
from dataclasses import dataclass

from ...core import registry
from ...core.runner import FRAMEWORKS, source_path
from ..backends import backend
from . import aliasing, freezing, losses, modes, recurrence
from .record import ARTICLES, INPLACE, NO_GRAD_FN, VERDICTS, Claim, Facts, Theme

__all__ = [
    "ARTICLES",
    "VERDICTS",
    "NO_GRAD_FN",
    "INPLACE",
    "Claim",
    "Facts",
    "Theme",
    "THEMES",
    "CLAIMS",
    "id_range",
    "get",
    "verify",
    "validate",
    "Outcome",
    "evaluate",
    "run_all",
    "markdown_table",
]

# in reading order; the claims themselves are listed by id
THEMES: tuple[Theme, ...] = (aliasing.THEME, freezing.THEME, losses.THEME, recurrence.THEME, modes.THEME)


def _collect(themes: Iterable[Theme]) -> dict[str, Claim]:
    """Every claim of the themes by id, in id order; ValueError naming a duplicated id and its modules."""
    out: dict[str, Claim] = {}
    for theme in themes:
        for c in theme.claims:
            if c.id in out:
                raise ValueError(f"claim id {c.id} is recorded twice: in {out[c.id].module} and in {c.module}")
            out[c.id] = c
    return dict(sorted(out.items()))


CLAIMS: dict[str, Claim] = _collect(THEMES)


def id_range() -> str:
    """The ids as a range for help texts, "<first>–<last>" (read from the records)."""
    ids = list(CLAIMS)
    return f"{ids[0]}–{ids[-1]}" if len(ids) > 1 else "".join(ids)


def get(claim_id: str) -> Claim:
    """The record of a claim (case-insensitive id); ValueError listing the valid ids if unknown."""
    try:
        return CLAIMS[claim_id.upper()]
    except (KeyError, AttributeError):
        raise ValueError(f"claim expected one of {list(CLAIMS)}, got {claim_id!r}") from None


def verify(claim: Claim, torch_evidence: dict, jax_evidence: dict) -> tuple[bool, str]:
    """Whether this run's evidence still supports the claim's stated verdict, and a short text of it.

    A missing key or a wrong type in the evidence counts as not reproduced (the text says why).
    """
    return claim.verify(torch_evidence, jax_evidence)


def _public_checks(path) -> tuple[list[str], str]:
    """`__all__` and the module docstring of an implementation file, read without importing it."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names: list[str] = []
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "__all__" for t in node.targets):
            names = [e.value for e in node.value.elts]  # type: ignore[attr-defined]
    return names, ast.get_docstring(tree) or ""


def validate(themes: Iterable[Theme] = THEMES) -> list[str]:
    """What is wrong with the claim records, one line each ([] when all is well).

    Unique ids; each record's scenario registered; each scenario's claim ids recorded; each
    theme's pair exists in both frameworks with exactly the theme's checks in `__all__`, in id
    order, and a Port note; the ids a pair's docstring names are the theme's. Reads the implementation files without importing them (no framework).
    """
    themes = list(themes)
    problems: list[str] = []
    try:
        claims = _collect(themes)
    except ValueError as exc:
        problems.append(str(exc))
        claims = {c.id: c for t in themes for c in t.claims}
    for c in claims.values():
        if c.scenario is not None and c.scenario not in registry.SCENARIOS:
            problems.append(f"{c.id}: scenario expected a registered scenario, got {c.scenario!r}")
    for name, spec in registry.SCENARIOS.items():
        unknown = sorted(set(spec.claims) - set(claims))
        if unknown:
            problems.append(f"scenario {name}: claims {unknown} have no record")
    for theme in themes:
        want = [c.check for c in sorted(theme.claims, key=lambda c: c.id)]
        for fw in FRAMEWORKS:
            try:
                names, doc = _public_checks(source_path(fw, f"backend.claims.{theme.module}"))
            except ValueError as exc:
                problems.append(f"{theme.module}: {exc}")
                continue
            if names != want:
                problems.append(f"{fw}_impl/backend/claims/{theme.module}.py: __all__ expected {want}, got {names}")
            if "Port note" not in doc:
                problems.append(f"{fw}_impl/backend/claims/{theme.module}.py: the module docstring needs a Port note")
            strays = sorted(set(re.findall(r"\bC\d{2}\b", doc)) - {c.id for c in theme.claims})
            if strays:
                problems.append(
                    f"{fw}_impl/backend/claims/{theme.module}.py: the docstring names {strays}, not claims of this theme"
                )
    return problems


@dataclass
class Outcome:
    """One claim checked in this run."""

    claim: Claim
    reproduced: bool
    text: str
    torch: dict
    jax: dict
    error: str | None = None

    def to_json(self) -> dict:
        c = self.claim
        return {
            "id": c.id,
            "article": c.article,
            "article_title": ARTICLES[c.article],
            "section": c.section,
            "claim": c.claim,
            "verdict": c.verdict,
            "right": c.right,
            "scenario": c.scenario,
            "module": c.module,
            "check": c.check,
            "reproduced": self.reproduced,
            "evidence_text": self.text,
            "error": self.error,
            "torch": self.torch,
            "jax": self.jax,
        }


def evaluate(claim: Claim) -> Outcome:
    """Run the torch and JAX checks of one claim and verify them (an exception = not reproduced)."""
    try:
        t = backend("torch").claims.CHECKS[claim.check]()
        j = backend("jax").claims.CHECKS[claim.check]()
    except Exception as exc:  # a check that crashes no longer reproduces its finding: report it
        why = f"{type(exc).__name__}: {exc}"
        return Outcome(claim, False, f"✗ check raised {why}", {}, {}, why)
    ok, text = verify(claim, t, j)
    return Outcome(claim, ok, text, t, j)


def run_all(ids: list[str] | None = None) -> list[Outcome]:
    """Evaluate the given claims (default all) in id order, each once."""
    chosen = sorted({get(i).id for i in ids}) if ids else list(CLAIMS)
    return [evaluate(CLAIMS[i]) for i in chosen]


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def markdown_table() -> str:
    """The "Claims, checked" table (id, source, claim, verdict, right statement) and the sources by title."""
    lines = ["| id | source | claim | verdict | right statement |", "|---|---|---|---|---|"]
    for c in CLAIMS.values():
        lines.append(f"| {c.id} | {_cell(c.source)} | {_cell(c.claim)} | **{c.verdict}** | {_cell(c.right)} |")
    lines.append("")
    lines.append("Sources (cited by title): " + "; ".join(f"{k}: “{v}”" for k, v in ARTICLES.items()) + ".")
    return "\n".join(lines) + "\n"
