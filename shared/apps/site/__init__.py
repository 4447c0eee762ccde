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

The package:
  __init__.py     build (run, draw, render, write) and the `site` command
  pages.py        Page, the jinja2 environment and its filters, render_index / _scenario / _bench
  figures.py      the gradient-flow figures of a scenario page (by output-key convention)
  bench_plots.py  the figures of bench.html;  draw.py  what every figure shares (FigureFile, SVG)
  ports.py        ports.html: the port checker's reports on the worked ports
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from ...core import registry
from ..blocks import aligned_rows
from ..common import (
    OutputError,
    OutputFolder,
    UsageError,
    check_interrupted,
    failure_line,
    non_negative_int,
    out_dir,
)
from ..show import run_cases
from .pages import (
    Page,
    code_spans,
    environment,
    highlight,
    load_bench,
    render_bench,
    render_index,
    render_scenario,
    summarize,
)

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
