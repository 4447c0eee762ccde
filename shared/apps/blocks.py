"""The two implementations of a scenario cut into blocks and aligned by name (for show and the site).

A module is cut at its top-level definitions (`split_blocks`): the header (docstring,
imports, constants), then one block per public function / class; a private helper travels
with the public definition that follows it. `align` pairs the blocks of the two sides by
name (same names in the same order by contract), `aligned_rows` does both for a registered
scenario's `torch_impl/<scenario>.py` and `jax_impl/<scenario>.py`. Lines tagged
`# GRAD-FLOW:` are listed per block, for the terminal view (shared/apps/show.py) and the
pages (shared/apps/site/) to mark.
"""

from __future__ import annotations

import ast
import difflib
import re
from dataclasses import dataclass

from ..core.lessons import FRAMEWORKS, source_path

__all__ = ["GRAD_FLOW", "HEADER", "Block", "Row", "split_blocks", "align", "aligned_rows"]

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
