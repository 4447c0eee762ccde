"""The bench's progress on stderr: a bar of the work items done and the time the budget has left.

The bench is capped by time, so the estimate of what is left is the budget's remainder: every
phase stops adding rounds at its share of it. On a terminal a rich progress bar; elsewhere
(a pipe, a log) one plain line per item; with --quiet nothing.
"""

from __future__ import annotations

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, ProgressColumn, TextColumn, TimeElapsedColumn
from rich.text import Text

from .timing import Budget

__all__ = ["BenchProgress"]


class _LeftColumn(ProgressColumn):
    def __init__(self, budget: Budget) -> None:
        super().__init__()
        self.budget = budget

    def render(self, task) -> Text:
        left = self.budget.left()
        return Text(f"≈{left:.0f} s left" if left > 0 else "finishing (budget spent)", style="dim")


class BenchProgress:
    """Progress of `total` work items against `budget`; use as a context manager, call step(text) per item."""

    def __init__(self, total: int, budget: Budget, quiet: bool = False, console: Console | None = None) -> None:
        self.total, self.budget, self.quiet, self.done = total, budget, quiet, 0
        self.console = console or Console(stderr=True)
        self._bar: Progress | None = None

    def __enter__(self) -> BenchProgress:
        if not self.quiet and self.console.is_terminal:
            self._bar = Progress(
                TextColumn("[dim]bench[/dim] {task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                _LeftColumn(self.budget),
                console=self.console,
                transient=True,
            )
            self._bar.start()
            self._task = self._bar.add_task("starting", total=self.total)
        return self

    def step(self, text: str) -> None:
        """Start the next item, described by text (the previous one is done)."""
        if self._bar is not None:
            self._bar.update(self._task, completed=self.done, description=text)
        elif not self.quiet:
            left = self.budget.left()
            self.console.print(
                f"bench [{self.done + 1}/{self.total}] {text} (≈{left:.0f} s left)", markup=False, highlight=False
            )
        self.done += 1

    def __exit__(self, *exc) -> None:
        if self._bar is not None:
            self._bar.stop()
