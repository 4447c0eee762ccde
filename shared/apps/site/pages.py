"""The pages of the static site: what each shows (`Page`, `summarize`) and how it is rendered.

`environment` is the jinja2 Environment over shared/apps/site/templates/ (autoescaped, its
filters: `err`, `ms`, `spread`, `us`, `pct`, `code_spans`); `highlight` is the pygments HTML
of one aligned code block. `render_index`, `render_scenario` and `render_bench` each return
one page's HTML from what they are given (the build in shared/apps/site/__init__.py runs the
cases and writes the files); `load_bench` reads and checks a bench JSON payload.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ...core import registry
from ...core.lessons import FRAMEWORKS
from ...core.records import Scenario
from ...core.schema import FLOAT_DTYPES
from ..blocks import Block, Row
from ..common import versions
from ..show import fmt_err, parity_rtol

__all__ = [
    "Page",
    "environment",
    "code_spans",
    "highlight",
    "summarize",
    "load_bench",
    "render_bench",
    "render_index",
    "render_scenario",
]


@dataclass
class Page:
    """Everything one scenario page shows (and its row on the index).

    Attributes:
      spec: the registry record.
      results: CaseResults of a fresh run (may be empty).
      rows: the aligned code blocks (shared.apps.blocks.align).
      figures: FigureFile list (shared.apps.site.figures), paths relative to the site root.
    """

    spec: Scenario
    results: list = field(default_factory=list)
    rows: list[Row] = field(default_factory=list)
    figures: list = field(default_factory=list)

    @property
    def href(self) -> str:
        return f"{self.spec.name}.html"


def environment():
    """The jinja2 Environment over shared/apps/site/templates (HTML autoescaped, undefined names fail)."""
    from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape

    env = Environment(
        loader=PackageLoader(__package__, "templates"),
        autoescape=select_autoescape(["html"]),
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["err"] = fmt_err
    env.filters["ms"] = lambda seconds: f"{seconds * 1e3:.3f} ms"
    env.filters["spread"] = lambda r: (
        f"{r['median_s'] * 1e3:.3f} ms ±{50 * (r['p75_s'] - r['p25_s']) / r['median_s']:.0f}%"
        + (" ⚠" if r["noisy"] else "")
    )
    env.filters["us"] = lambda seconds: f"{seconds * 1e6:.1f} µs"
    env.filters["pct"] = lambda fraction: f"{100 * fraction:.1f} %"
    env.filters["code_spans"] = code_spans
    return env


def code_spans(text: str):
    """Markdown-style `code` spans of a registry note as <code> elements; all text escaped by markupsafe."""
    from markupsafe import Markup

    parts = str(text).split("`")
    if len(parts) % 2 == 0:  # an unmatched backtick: plain text
        return text
    return Markup("").join(Markup("<code>{}</code>").format(p) if i % 2 else p for i, p in enumerate(parts))


def highlight(block: Block | None, framework: str = "code"):
    """Pygments HTML of one code block, as safe Markup.

    File line numbers; each line a span with id "<framework>-<line>" (wrapped lines indent under
    their number); GRAD-FLOW lines in `hll`.
    """
    from markupsafe import Markup
    from pygments import highlight as pyg_highlight
    from pygments.formatters import HtmlFormatter
    from pygments.lexers import PythonLexer

    if block is None:
        return Markup("")
    fmt = HtmlFormatter(
        linenos="inline", linenostart=block.start, hl_lines=list(block.grad_flow), wrapcode=True, linespans=framework
    )
    return Markup(pyg_highlight(block.code, PythonLexer(), fmt))


def _max(values) -> float | None:
    vals = [v for v in values if v is not None and v == v]
    return max(vals) if vals else None


def summarize(page: Page) -> dict:
    """Verdict and max errors per dtype of a page's results.

    Returns:
      {"verdict": "PASS" | "FAIL" | "NOT RUN", "passed": int, "total": int,
       "dtypes": {dtype: {"parity": max rel torch vs JAX (naive-port variants excluded),
                          "oracle": max rel of either framework vs the oracle (JAX excluded
                          for naive-port variants)}}}
    """
    res = page.results
    passed = sum(r.ok for r in res)
    dtypes: dict[str, dict[str, float | None]] = {}
    for dt in sorted({r.dtype for r in res}, key=lambda d: (d not in FLOAT_DTYPES, d)):
        rs = [r for r in res if r.dtype == dt]
        dtypes[dt] = {
            "parity": _max(r.torch_jax.max_rel for r in rs if r.torch_jax and not r.diverges),
            "oracle": _max(
                c.max_rel
                for r in rs
                for c in (r.torch_oracle, None if r.diverges else r.jax_oracle)
                if c is not None and c.leaves
            ),
        }
    verdict = "NOT RUN" if not res else ("PASS" if passed == len(res) else "FAIL")
    return {"verdict": verdict, "passed": passed, "total": len(res), "dtypes": dtypes}


def _proof(name: str) -> list[str]:
    from ..docs import scenario_tests

    return [f"tests/test_parity.py -k {name}", *scenario_tests(name)]


def load_bench(path: Path | str) -> dict:
    """A bench JSON payload. Raises ValueError naming the file when it lacks the bench's sections."""
    try:
        payload = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"bench file {str(path)!r}: expected a readable JSON file, got {exc}") from None
    from ..bench import check_payload

    try:
        check_payload(payload)
    except ValueError as exc:
        raise ValueError(f"bench file {str(path)!r}: {exc} (write it with `detach-parity bench --json`)") from None
    return payload


def render_bench(env, payload: dict, root: Path, pages: Collection[str] = ()) -> str:
    """bench.html: the bench's machine, tables and figures (drawn into root/figures/).

    pages: the scenario pages this site has; only those are linked.
    """
    from ..bench import noisy_timings
    from .bench_plots import bench_figures

    order = [n for n in registry.names() if n in payload["scenarios"]]  # teaching order, as the terminal
    order += [n for n in payload["scenarios"] if n not in order]
    payload = {**payload, "scenarios": {n: payload["scenarios"][n] for n in order}}
    figures = bench_figures(payload, root)
    return env.get_template("bench.html").render(
        b=payload, m=payload["machine"], figures=figures, pages=set(pages), noisy=noisy_timings(payload)
    )


def render_index(env, pages: Sequence[Page], seed: int = 0, has_bench: bool = False) -> str:
    """index.html: scenario and pitfall tables with verdicts and errors, then the porting cheat sheet."""
    summaries = {p.spec.name: summarize(p) for p in pages}
    dtypes = sorted(
        {dt for s in summaries.values() for dt in s["dtypes"]} or set(FLOAT_DTYPES),
        key=lambda d: (d not in FLOAT_DTYPES, d),
    )
    families = [(f, [p for p in pages if p.spec.family == f]) for f in registry.FAMILIES]
    return env.get_template("index.html").render(
        families=[(f, ps) for f, ps in families if ps],
        pages=pages,
        summaries=summaries,
        dtypes=dtypes,
        proofs={p.spec.name: _proof(p.spec.name) for p in pages},
        versions=versions(),
        seed=seed,
        has_bench=has_bench,
        passed=sum(s["passed"] for s in summaries.values()),
        total=sum(s["total"] for s in summaries.values()),
    )


def render_scenario(env, page: Page, prev: Page | None = None, next: Page | None = None) -> str:
    """<scenario>.html: aligned code, lesson, porting notes, parity per variant, figures."""
    spec = page.spec
    by_variant = [(v, [r for r in page.results if r.variant == v]) for v in spec.variants]
    rows = [(row, {fw: highlight(row.side(fw), fw) for fw in FRAMEWORKS}) for row in page.rows]
    n_tags = {fw: sum(len(b.grad_flow) for r in page.rows if (b := r.side(fw))) for fw in FRAMEWORKS}
    return env.get_template("scenario.html").render(
        spec=spec,
        page=page,
        summary=summarize(page),
        rows=rows,
        n_tags=n_tags,
        by_variant=by_variant,
        rtol={r.dtype: parity_rtol(spec, r.dtype) for r in page.results},
        prev=prev,
        next=next,
    )
