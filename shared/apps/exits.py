"""Exit codes of every command, the errors that set them, and how an error line is printed.

A `UsageError` raised by a command is printed on stderr by shared.apps.cli and exits 2; an
`OutputError` is a UsageError about where an output was to be written.
"""

from __future__ import annotations

import contextlib

from rich.console import Console
from rich.text import Text

__all__ = [
    "EXIT_OK",
    "EXIT_FAILED",
    "EXIT_USAGE",
    "EXIT_INTERNAL",
    "EXIT_INTERRUPTED",
    "EXIT_BROKEN_PIPE",
    "UsageError",
    "OutputError",
    "failure_line",
    "print_error",
]

EXIT_OK = 0  # every check passed
EXIT_FAILED = 1  # a check failed (a mismatch, a broken lesson, a surviving mutant)
EXIT_USAGE = 2  # bad arguments, or an output that could not be written where asked
EXIT_INTERNAL = 3  # an error inside detach-parity itself (a bug to report), never a verdict on the input
EXIT_INTERRUPTED = 130  # Ctrl-C (128 + SIGINT), nothing half-written left behind
EXIT_BROKEN_PIPE = 141  # standard output closed early (128 + SIGPIPE, as a shell reports it)


class UsageError(Exception):
    """Bad command-line input: printed, exit status 2."""


class OutputError(UsageError):
    """An output that cannot be written where asked (refused folder, read-only place, full disk): exit 2."""


def failure_line(message: str) -> Text:
    """A failure line for the terminal: a red ✗, then the message as plain text (no markup parsed)."""
    return Text.assemble(("✗", "red"), " ", message)


def print_error(message: str) -> None:
    """Print one error line on stderr as plain text, never folded (a path in it stays one copyable token).

    A closed or full stderr is ignored: the exit status still tells what happened.
    """
    with contextlib.suppress(OSError):
        Console(stderr=True, soft_wrap=True).print(message, markup=False, highlight=False)
