"""What the subcommands share, one module per concern, importable from here as before.

    exits        exit codes, UsageError / OutputError, failure_line, print_error
    argtypes     argparse types: bad values refused before any work, naming expected and actual
    interrupts   Ctrl-C counted even when swallowed (interrupt_guard, check_interrupted)
    json_file    one JSON report written whole or not at all (write_json), versions()
    out_folder   a command's output folder, written whole (OutputFolder, MARKER)

Writing files follows one rule: a command never overwrites or deletes what it did not write,
and never leaves anything half-written; an interrupted command writes nothing and exits 130.
The processes a command starts live in shared.core.children.
"""

from __future__ import annotations

from .argtypes import bounded_int, json_path, non_negative_int, out_dir, positive_int
from .exits import (
    EXIT_BROKEN_PIPE,
    EXIT_FAILED,
    EXIT_INTERNAL,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_USAGE,
    OutputError,
    UsageError,
    failure_line,
    print_error,
)
from .interrupts import check_interrupted, interrupt_guard, interrupted
from .json_file import versions, write_json
from .out_folder import MARKER, OutputFolder

__all__ = [
    "EXIT_OK",
    "EXIT_FAILED",
    "EXIT_USAGE",
    "EXIT_INTERNAL",
    "EXIT_INTERRUPTED",
    "EXIT_BROKEN_PIPE",
    "UsageError",
    "OutputError",
    "versions",
    "non_negative_int",
    "positive_int",
    "bounded_int",
    "json_path",
    "out_dir",
    "failure_line",
    "print_error",
    "interrupt_guard",
    "interrupted",
    "check_interrupted",
    "write_json",
    "MARKER",
    "OutputFolder",
]
