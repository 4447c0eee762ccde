"""`detach-parity show SCENARIO [--variant V]`: torch and JAX side by side in the terminal.

    detach-parity show SCENARIO [--variant V] [--seed N]

The two implementations are cut into blocks at their top-level definitions and
aligned by name (shared/apps/blocks.py: the module header, then each public
function / class; a private helper travels with the public definition that follows
it). Lines tagged `# GRAD-FLOW:` are marked (❱ in the gutter, highlighted
background). Then the lesson, the porting notes, the expected zero / non-zero
pattern and a fresh parity run of the scenario's cases.

`run_cases`, `parity_rtol` and `fmt_err` are shared with the static site (shared/apps/site/).
Exit status: 0 every case passed, 1 a case failed, 2 unknown scenario / variant.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterable

from rich.console import Console, Group
from rich.markup import escape
from rich.panel import Panel
from rich.syntax import Syntax
from rich.table import Table
from rich.text import Text

from ..core import registry
from ..core.lessons import FRAMEWORKS
from ..core.records import Scenario
from ..core.runner import iter_cases, run_case
from ..core.tolerance import tolerance_for
from .blocks import Block, Row, aligned_rows
from .common import UsageError, check_interrupted, failure_line, non_negative_int

__all__ = ["run_cases", "parity_rtol", "fmt_err", "render", "add_parser"]


def run_cases(spec: Scenario, variant: str | None = None, seed: int = 0) -> list:
    """CaseResults of every (variant, case, dtype) of a scenario, or of one variant.

    Raises KeyboardInterrupt after the case during which a SIGINT arrived (run_case reports
    an implementation's exceptions as results, so an interrupt turned into one would not stop it).
    """
    results = []
    for s, v, case, dt in iter_cases([spec.name], variant, None, None):
        results.append(run_case(s, v, dt, seed=seed, case=case))
        check_interrupted()
    return results


def parity_rtol(spec: Scenario, dtype: str) -> float | None:
    """The parity rtol of a scenario in a dtype, None where no tolerance is defined."""
    try:
        return tolerance_for(dtype, "parity", spec.tolerances).rtol
    except ValueError:
        return None


def fmt_err(x: float | None) -> str:
    """An error for a table: '-' when absent or NaN, '0' when exact, else 1.2e-07."""
    if x is None or x != x:
        return "-"
    return f"{x:.1e}" if x else "0"


def _syntax(block: Block | None) -> Syntax | Text:
    if block is None:
        return Text("(no counterpart)", style="dim italic")
    marked = {block.start + i - 1 for i in block.grad_flow}
    syntax = Syntax(
        block.code,
        "python",
        theme="monokai",
        line_numbers=True,
        start_line=block.start,
        highlight_lines=marked,
        word_wrap=True,
        background_color="default",
    )
    for i in block.grad_flow:
        syntax.stylize_range("bold on #5f5f00", (i, 0), (i, len(block.lines[i - 1])))
    return syntax


def code_table(spec: Scenario, rows: Iterable[Row]) -> Table:
    """The side-by-side rich table of a scenario's two implementations."""
    table = Table(
        title=f"{spec.name}: torch vs JAX, aligned by definition (❱ = GRAD-FLOW line)",
        expand=True,
        show_lines=True,
        header_style="bold",
        padding=(0, 1),
    )
    for fw in FRAMEWORKS:
        table.add_column(f"{fw}_impl/{spec.name}.py", ratio=1, overflow="fold")
    for row in rows:
        table.add_row(_syntax(row.torch), _syntax(row.jax))
    return table


def notes(spec: Scenario, variant: str | None = None) -> Group:
    """Lesson, porting notes and the expected zero / non-zero pattern per variant."""
    claims = f" (claims {', '.join(spec.claims)})" if spec.claims else ""
    lesson = Panel(Text(spec.lesson), title=f"lesson: {spec.title}", subtitle=f"{spec.source}{claims}")
    porting = Table(title="porting notes", show_header=False, expand=True)
    porting.add_column(style="bold", no_wrap=True)
    porting.add_column(ratio=1)
    porting.add_row("torch", spec.porting.torch)
    porting.add_row("JAX", spec.porting.jax)
    porting.add_row("trap", spec.porting.trap)
    pattern = Table(title="expected pattern (the lesson, asserted on both sides)", expand=True)
    pattern.add_column("variant", no_wrap=True)
    pattern.add_column("outputs: zero / nonzero", ratio=1)
    for v in spec.variants:
        if variant is None or v == variant:
            tag = " [naive port: JAX must differ]" if v in spec.diverges else ""
            rules = ", ".join(f"{glob} {want}" for glob, want in spec.pattern[v])
            pattern.add_row(Text(v + tag), Text(rules))
    return Group(lesson, porting, pattern)


def parity_table(spec: Scenario, results: list) -> Table:
    """Fresh parity figures of the given CaseResults."""
    table = Table(title=f"parity: {spec.name} (fresh run)", header_style="bold")
    for col in ("variant", "case", "dtype", "|torch−jax|", "rel", "torch/oracle", "jax/oracle", "rtol", "verdict"):
        table.add_column(col, no_wrap=True, justify="right" if col[0] in "|rtj" else "left")
    for r in results:
        tj, to, jo = r.shown, r.torch_oracle, (r.divergent_oracle if r.diverges else r.jax_oracle)
        table.add_row(
            escape(r.variant),
            escape(r.case),
            r.dtype,
            fmt_err(tj.max_abs if tj else None),
            fmt_err(tj.max_rel if tj else None),
            fmt_err(to.max_rel if to else None),
            fmt_err(jo.max_rel if jo else None),
            fmt_err(parity_rtol(spec, r.dtype)),
            Text(r.verdict, style="green" if r.ok else "bold red"),
        )
    return table


def render(console: Console, scenario: str, variant: str | None = None, seed: int = 0) -> int:
    """Print the whole `show` view of a scenario; return 0 if every case passed, else 1.

    Raises:
      ValueError: unknown scenario or variant (message lists the valid names).
    """
    spec = registry.get(scenario)
    if variant is not None:
        spec.check_variant(variant)
    console.print(code_table(spec, aligned_rows(spec.name)))
    console.print(notes(spec, variant))
    with console.status(f"running {spec.name} cases ..."):
        results = run_cases(spec, variant, seed)
    console.print(parity_table(spec, results))
    failed = [r for r in results if not r.ok]
    for r in failed:
        for problem in r.problems():
            console.print(failure_line(problem))
    console.print(f"{len(results) - len(failed)}/{len(results)} cases passed")
    return 1 if failed else 0


def _cmd(args: argparse.Namespace, console: Console) -> int:
    try:
        return render(console, args.scenario, args.variant, args.seed)
    except ValueError as exc:
        if "expected one of" in str(exc):
            raise UsageError(str(exc)) from None
        raise


def add_parser(sub) -> None:
    """Register `show` on an argparse subparsers object (shared/cli.py SUBCOMMANDS)."""
    p = sub.add_parser("show", help="torch and JAX code side by side, GRAD-FLOW lines marked, lesson, parity")
    p.add_argument("scenario", metavar="SCENARIO", help=f"one of {registry.names()}")
    p.add_argument("--variant", help="only this variant's pattern and cases")
    p.add_argument("--seed", type=non_negative_int, default=0, help="fixture seed (default 0)")
    p.set_defaults(func=_cmd)
