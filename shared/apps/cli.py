"""`detach-parity`: the command line. One subcommand per module of shared/apps/.

    detach-parity run | list | show | site | docs | claims | bench | selfcheck | check | similarity

Exit status: 0 success, 1 a failed check, 2 bad arguments (the message names the
argument, the expected and the actual value) or an output that could not be written,
3 an internal error (one line; `--traceback` before the command prints the traceback), 130 interrupted (Ctrl-C; nothing half-written is left), 141 standard output closed
early (e.g. `| head`; files the command writes are written before its tables).
"""

from __future__ import annotations

import argparse
import atexit
import os
import sys
import threading
import traceback
from collections.abc import Callable, Sequence

from rich.console import Console

from . import bench, docs, run, selfcheck, show, similarity, site
from .check import cli as check_cli
from .claims import cli as claims_cli
from .common import (
    EXIT_BROKEN_PIPE,
    EXIT_INTERNAL,
    EXIT_INTERRUPTED,
    EXIT_USAGE,
    UsageError,
    check_interrupted,
    interrupt_guard,
    print_error,
)

__all__ = ["main", "entry", "build_parser", "SUBCOMMANDS"]

# name -> function adding the subparser; one line per subcommand.
SUBCOMMANDS: dict[str, Callable] = {
    "run": run.add_run,
    "list": run.add_list,
    "docs": docs.add_parser,
    "claims": claims_cli.add_parser,
    "bench": bench.add_parser,
    "selfcheck": selfcheck.add_parser,
    "check": check_cli.add_parser,
    "show": show.add_parser,
    "site": site.add_parser,
    "similarity": similarity.add_parser,
}


class _Stdout(Console):
    """The commands' console: a closed stdout raises BrokenPipeError to main (rich would exit 1,
    the code of a failed check)."""

    def on_broken_pipe(self) -> None:
        self.quiet = True
        raise BrokenPipeError("standard output was closed")


def build_parser() -> argparse.ArgumentParser:
    """The argparse parser of every subcommand."""
    parser = argparse.ArgumentParser(prog="detach-parity", description=__doc__.split("\n")[0])
    parser.add_argument(
        "--traceback", action="store_true", help="on an internal error (exit 3), print its traceback too"
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for add in SUBCOMMANDS.values():
        add(sub)
    return parser


def _silence_stdout() -> None:
    """Point the stdout file descriptor at /dev/null, so that the interpreter's last flush cannot fail again."""
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):
        return  # not a real file (a test's capture): nothing is flushed at exit
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, fd)
    os.close(devnull)


def entry() -> int:
    """The console script `detach-parity`: `main` in a process of its own, where a command may set what is the
    process's to set (`check` keeps JAX's compiled programs in the user's cache folder between runs), and which
    ends without the interpreter's teardown (`_end`)."""
    return _end(main(own_process=True))


def _end(code: int) -> int:
    """End this process with `code` now: the atexit handlers run (children ended, logs flushed) and the standard
    streams are flushed, but the interpreter's teardown of every module is skipped: after torch and JAX it takes
    0.7 s, a fifth of a small check's wait (measured 2026-12-07). Returns `code` where a thread of the command's
    own still runs (a normal exit waits for it)."""
    if any(t.is_alive() and not t.daemon for t in threading.enumerate() if t is not threading.main_thread()):
        return code
    atexit._run_exitfuncs()  # what a normal exit runs first; os._exit runs none of them
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (BrokenPipeError, OSError, ValueError):  # closed early (`| head`): what main says of it, once
        code = code or EXIT_BROKEN_PIPE
    os._exit(code)


def main(argv: Sequence[str] | None = None, own_process: bool = False) -> int:
    """Run one subcommand; return its exit status (see the module docstring). `own_process`: the process is this
    command's alone (the console script), not a caller's that imported the package."""
    if sys.stdout is None:  # started with standard output closed (`>&-`): Python gives no sys.stdout at all
        print_error("detach-parity: error: standard output is closed; nothing was run (give it a file or /dev/null)")
        return EXIT_BROKEN_PIPE
    console = _Stdout() if sys.stdout.isatty() else _Stdout(width=200)  # logs and CI: no wrapping
    args = build_parser().parse_args(argv)  # argparse exits 2 on bad syntax
    args.own_process = own_process

    def say(message: str) -> None:
        print_error(f"detach-parity {args.command}: {message}")

    try:
        with interrupt_guard():
            code = args.func(args, console)
            check_interrupted()  # a Ctrl-C that a library swallowed still ends the command with 130
        return code
    except UsageError as exc:
        say(f"error: {exc}")
        return EXIT_USAGE
    except KeyboardInterrupt:
        say("interrupted; no output was left half-written")
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        _silence_stdout()
        say("error: standard output was closed before the command finished (files it writes come first)")
        return EXIT_BROKEN_PIPE
    except Exception as exc:  # not a verdict: exit 1 would tell a CI job that the port or a lesson is wrong
        if args.traceback:
            print_error("".join(traceback.format_exception(exc)).rstrip())
        say(
            f"internal error: {type(exc).__name__}: {exc} (a bug in detach-parity: please report it; --traceback shows where)"
        )
        return EXIT_INTERNAL


if __name__ == "__main__":
    sys.exit(entry())
