"""`detach-parity`: the command line. One subcommand per module of shared/apps/.

    detach-parity run | list | show | site | docs | claims | bench | selfcheck

Exit status: 0 success, 1 a failed check, 2 bad arguments (the message names the
argument, the expected and the actual value).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

from rich.console import Console

from shared.apps import bench, docs, run, selfcheck, show, site
from shared.apps.claims import cli as claims_cli
from shared.apps.common import UsageError

__all__ = ["main", "build_parser", "SUBCOMMANDS"]

# name -> function adding the subparser; one line per subcommand.
SUBCOMMANDS: dict[str, Callable] = {
    "run": run.add_run,
    "list": run.add_list,
    "docs": docs.add_parser,
    "claims": claims_cli.add_parser,
    "bench": bench.add_parser,
    "selfcheck": selfcheck.add_parser,
    "show": show.add_parser,
    "site": site.add_parser,
}


def build_parser() -> argparse.ArgumentParser:
    """The argparse parser of every subcommand."""
    parser = argparse.ArgumentParser(prog="detach-parity", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for add in SUBCOMMANDS.values():
        add(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one subcommand; return its exit status (2 for bad arguments)."""
    console = Console() if sys.stdout.isatty() else Console(width=200)  # logs and CI: no wrapping
    args = build_parser().parse_args(argv)  # argparse exits 2 on bad syntax
    try:
        return args.func(args, console)
    except UsageError as exc:
        Console(stderr=True).print(f"detach-parity {args.command}: error: {exc}", markup=False, highlight=False)
        return 2


if __name__ == "__main__":
    sys.exit(main())
