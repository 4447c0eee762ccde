"""`detach-parity site`: a static HTML reference that opens from the file system.

    detach-parity site [SCENARIO ...] [--out DIR] [--seed N]

Every registered scenario and pitfall (or the ones named) is run afresh (all
variants, cases and dtypes), then written to DIR (default `site/`):

  index.html        every scenario and pitfall with its verdict and max errors per
                    dtype, the tutorial source and claims it comes from, and the
                    porting cheat sheet (torch idiom, JAX idiom, trap, proving tests);
  <scenario>.html   torch and JAX code in two aligned columns (pygments, GRAD-FLOW
                    lines highlighted), the lesson, porting notes, the parity table per
                    variant with its expected pattern, and the figures;
  figures/*.svg     drawn by shared/apps/site/figures.py; style.css, pygments.css;
  .detach-parity.json  the marker: every file this build wrote, with its SHA-256.

DIR must be absent, empty, or an earlier site (its marker proves it, and nothing there
was added or changed since); the package's own folders are refused. The site is built
in a temporary sibling of DIR and swapped in whole when complete (shared.apps.common.
OutputFolder): an interrupted or failed build leaves DIR as it was.

Pages come from the jinja2 templates in shared/apps/site/templates/ with autoescaping
on: no text is escaped by hand, and only pygments' output is marked safe.
Exit status: 0 every case passed, 1 a case failed (the site is written anyway,
failures marked), 2 unknown scenario or a folder that is refused or cannot be written,
130 interrupted (DIR left as it was).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ..common import (
    OutputError,
    OutputFolder,
    UsageError,
    check_interrupted,
    failure_line,
    non_negative_int,
    out_dir,
    versions,
)
from ..show import FRAMEWORKS, Block, Row, aligned_rows, fmt_err, parity_rtol, run_cases
from ...core import registry
from ...core.records import Scenario
from ...core.schema import FLOAT_DTYPES

__all__ = [
    "Page",
    "environment",
    "code_spans",
    "highlight",
    "summarize",
    "render_index",
    "render_scenario",
    "build",
    "add_parser",
]

STATIC = ("style.css",)


@dataclass
class Page:
    """Everything one scenario page shows (and its row on the index).

    Attributes:
      spec: the registry record.
      results: CaseResults of a fresh run (may be empty).
      rows: the aligned code blocks (shared.show.align).
      figures: FigureFile list (shared.figures), paths relative to the site root.
    """

    spec: Scenario
    results: list = field(default_factory=list)
    rows: list[Row] = field(default_factory=list)
    figures: list = field(default_factory=list)

    @property
    def href(self) -> str:
        return f"{self.spec.name}.html"


def environment():
    """The jinja2 Environment over shared/templates (HTML autoescaped, undefined names fail)."""
    from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape

    env = Environment(
        loader=PackageLoader(__name__, "templates"),
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
    from .figures import bench_figures

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


def build(
    out: Path | str = "site",
    scenarios: Sequence[str] | None = None,
    seed: int = 0,
    echo=None,
    bench: Path | str | None = None,
) -> list[Page]:
    """Run the scenarios, draw the figures and write the site to `out`; return the pages.

    Args:
      out: site root: absent, empty, or an earlier site (see the module docstring); replaced
        whole when the build is complete, never partly overwritten.
      scenarios: names (default: every registered scenario and pitfall, teaching order); a
        name given twice gets one page.
      echo: optional callable(str) told about progress.
      bench: a `detach-parity bench --json` file; when given, bench.html shows its tables and plots.
    Raises:
      ValueError: an unknown scenario name (message lists the valid names), or a bench file
        that is not a bench payload.
      OutputError: `out` is refused or cannot be written (checked before any case runs).
      KeyboardInterrupt: interrupted; `out` is left as it was.
    """
    from pygments.formatters import HtmlFormatter

    from .figures import figures_for

    specs = [registry.get(n) for n in dict.fromkeys(scenarios or registry.names())]
    bench_payload = None if bench is None else load_bench(bench)  # checked before the long run
    pages: list[Page] = []
    with OutputFolder(out, "site") as root:  # checked (and the build folder made) before the long run
        for spec in specs:
            if echo:
                echo(f"running {spec.name} ...")
            page = Page(spec, run_cases(spec, seed=seed), aligned_rows(spec.name))
            dtype = "float64" if "float64" in spec.dtypes else spec.dtypes[0]
            chosen = [r for r in page.results if r.dtype == dtype and r.case == spec.cases[0] and r.outputs]
            torch_out = {r.variant: r.outputs["torch"] for r in chosen}
            jax_out = {r.variant: r.outputs["jax"] for r in chosen}
            time_fields = {name for name, f in spec.schema.items() if f.shape[:1] == ("T",)}
            page.figures = figures_for(spec.name, torch_out, jax_out, root, time_fields)
            pages.append(page)
            check_interrupted()
        env = environment()
        has_bench = bench_payload is not None
        if has_bench:
            names = [p.spec.name for p in pages]
            (root / "bench.html").write_text(render_bench(env, bench_payload, root, names), encoding="utf-8")
        (root / "index.html").write_text(render_index(env, pages, seed, has_bench), encoding="utf-8")
        if not scenarios:  # the full site also checks the worked ports (shared/apps/site/ports.py)
            from .ports import write_ports

            write_ports(root, env, echo)
        for i, page in enumerate(pages):
            prev = pages[i - 1] if i > 0 else None
            nxt = pages[i + 1] if i + 1 < len(pages) else None
            (root / page.href).write_text(render_scenario(env, page, prev, nxt), encoding="utf-8")
        for name in STATIC:
            (root / name).write_text(env.loader.get_source(env, name)[0], encoding="utf-8")
        (root / "pygments.css").write_text(HtmlFormatter().get_style_defs(".highlight") + "\n", encoding="utf-8")
    return pages


def _cmd(args: argparse.Namespace, console) -> int:
    try:
        pages = build(args.out, args.scenarios, args.seed, echo=None if args.quiet else console.print, bench=args.bench)
    except ValueError as exc:
        if "expected one of" in str(exc) or str(exc).startswith("bench file"):
            raise UsageError(str(exc)) from None
        raise
    except OSError as exc:  # a full disk or a folder that turned read-only mid-build: the old site is kept
        raise OutputError(
            f"--out {args.out!r}: could not write the site ({exc}); the folder was left as it was"
        ) from None
    results = [r for p in pages for r in p.results]
    failed = [r for r in results if not r.ok]
    for r in failed:
        console.print(failure_line(f"{r.label} {r.case} {r.dtype}: {r.verdict}"))
    index = Path(args.out) / "index.html"
    console.print(f"{len(results) - len(failed)}/{len(results)} cases passed; {len(pages)} pages: {index}")
    return 1 if failed else 0


def add_parser(sub) -> None:
    """Register `site` on an argparse subparsers object (shared/cli.py SUBCOMMANDS)."""
    p = sub.add_parser("site", help="write the static HTML reference (fresh run, figures, cheat sheet)")
    p.add_argument("scenarios", nargs="*", metavar="SCENARIO", help=f"default all; one of {registry.names()}")
    p.add_argument("--out", type=out_dir, default="site", metavar="DIR", help="output folder (default site/)")
    p.add_argument("--seed", type=non_negative_int, default=0, help="fixture seed (default 0)")
    p.add_argument(
        "--bench",
        metavar="PATH",
        help="a `detach-parity bench --json` file (make bench writes reports/bench.json): adds bench.html",
    )
    p.add_argument("--quiet", action="store_true", help="no progress lines")
    p.set_defaults(func=_cmd)
