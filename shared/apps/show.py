"""`detach-parity show SCENARIO [--variant V]`: torch and JAX side by side in the terminal.

    detach-parity show SCENARIO [--variant V] [--seed N]

The two implementations are cut into blocks at their top-level definitions and
aligned by name: the module header, then each public function / class (same
names in the same order by contract; a private helper travels with the public
definition that follows it). Lines tagged `# GRAD-FLOW:` are marked (❱ in the
gutter, highlighted background). Then the lesson, the porting notes, the
expected zero / non-zero pattern and a fresh parity run of the scenario's cases.

`split_blocks` / `align` are shared with the static site (shared/site.py).
Exit status: 0 every case passed, 1 a case failed, 2 unknown scenario / variant.
"""

from __future__ import annotations

import argparse
import ast
import difflib
import re
from collections.abc import Iterable
from dataclasses import dataclass

from rich.console import Console, Group
from rich.markup import escape
from rich.panel import Panel
from rich.syntax import Syntax
from rich.table import Table
from rich.text import Text

from ..core import registry
from ..core.parity import tolerance_for
from ..core.records import Scenario
from ..core.runner import FRAMEWORKS, iter_cases, run_case, source_path
from .common import UsageError, check_interrupted, failure_line, non_negative_int

__all__ = [
    "FRAMEWORKS",
    "GRAD_FLOW",
    "Block",
    "Row",
    "split_blocks",
    "align",
    "run_cases",
    "parity_rtol",
    "fmt_err",
    "render",
    "add_parser",
]

GRAD_FLOW = re.compile(r"#\s*GRAD-FLOW:")  # the tag tests/test_mirror.py counts
HEADER = "module"  # block name of the docstring / imports / constants before the first definition


@dataclass(frozen=True)
class Block:
    """Consecutive source lines of one file: the header or one top-level definition.

    Attributes:
      name: the public definition's name, or HEADER.
      start: 1-based line number of the first line in the file.
      lines: the source lines, without newlines; trailing blank lines dropped.
    """

    name: str
    start: int
    lines: tuple[str, ...]

    @property
    def code(self) -> str:
        return "\n".join(self.lines)

    @property
    def grad_flow(self) -> tuple[int, ...]:
        """1-based positions inside the block of the lines tagged `# GRAD-FLOW:`."""
        return tuple(i for i, line in enumerate(self.lines, 1) if GRAD_FLOW.search(line))


@dataclass(frozen=True)
class Row:
    """One aligned pair: the same-named block of each side (None where a side lacks it)."""

    name: str
    torch: Block | None
    jax: Block | None

    def side(self, framework: str) -> Block | None:
        return self.torch if framework == "torch" else self.jax


def _first_line(node: ast.stmt, lines: list[str]) -> int:
    """0-based first line of a definition: its decorators and the comment lines right above it."""
    first = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", ()))]) - 1
    while first > 0 and lines[first - 1].lstrip().startswith("#"):
        first -= 1
    return first


def _trim(lines: list[str]) -> tuple[str, ...]:
    while lines and not lines[-1].strip():
        lines = lines[:-1]
    return tuple(lines)


def split_blocks(text: str) -> list[Block]:
    """Cut a module into the header block and one block per public top-level definition.

    A private definition (`_name`) and any statement between definitions join the
    block of the next public definition (helpers are defined before their user);
    whatever follows the last public definition joins it.
    Raises SyntaxError if `text` is not Python.
    """
    lines = text.splitlines()
    tree = ast.parse(text)
    defs = [n for n in tree.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)]
    starts: list[tuple[str, int]] = []  # (public name, 0-based start of its block)
    pending: int | None = None  # start of private definitions before the first public one
    prev_end: int | None = None  # 0-based line after the previous public definition
    for node in defs:
        first = _first_line(node, lines)
        if node.name.startswith("_"):
            pending = first if pending is None else pending
            continue
        if prev_end is not None:  # everything since the previous public definition
            first = prev_end
            while first < len(lines) and not lines[first].strip():
                first += 1
        elif pending is not None:
            first = pending
        starts.append((node.name, first))
        prev_end = node.end_lineno
    if not starts:
        return [Block(HEADER, 1, _trim(lines))]
    blocks = [Block(HEADER, 1, _trim(lines[: starts[0][1]]))]
    for i, (name, first) in enumerate(starts):
        end = starts[i + 1][1] if i + 1 < len(starts) else len(lines)
        blocks.append(Block(name, first + 1, _trim(lines[first:end])))
    return blocks


def align(torch_blocks: list[Block], jax_blocks: list[Block]) -> list[Row]:
    """Pair the blocks of the two sides by name, keeping each side's order (a name on one side only gets a row)."""
    t_names, j_names = [b.name for b in torch_blocks], [b.name for b in jax_blocks]
    rows: list[Row] = []
    matcher = difflib.SequenceMatcher(a=t_names, b=j_names, autojunk=False)
    for op, i1, i2, j1, j2 in matcher.get_opcodes():
        if op == "equal":
            rows += [Row(t.name, t, j) for t, j in zip(torch_blocks[i1:i2], jax_blocks[j1:j2], strict=True)]
            continue
        rows += [Row(t.name, t, None) for t in torch_blocks[i1:i2]]
        rows += [Row(j.name, None, j) for j in jax_blocks[j1:j2]]
    return rows


def aligned_rows(scenario: str) -> list[Row]:
    """The aligned blocks of `torch_impl/<scenario>.py` and `jax_impl/<scenario>.py`."""
    sides = [split_blocks(source_path(fw, scenario).read_text(encoding="utf-8")) for fw in FRAMEWORKS]
    return align(*sides)


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
