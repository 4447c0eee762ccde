"""`detach-parity claims [ID ...] [--json PATH]`: every tutorial claim checked by running it.

Writes the JSON first (atomically, shared.apps.common.write_json), then prints a table (id,
source, claim, verdict, evidence from this run, reproduced ✓/✗).
Exit status: 0 every selected claim reproduces its stated verdict; 1 any does not (a new
torch or JAX version changed a fact: that must be loud); 2 an unknown claim id, or an output
error (the JSON could not be written, stdout is closed): the message on stderr says which,
and how many claims reproduced.
"""

from __future__ import annotations

import argparse
import contextlib
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table
from rich.text import Text

from .. import claims
from ..common import UsageError, json_path, print_error, versions, write_json

__all__ = ["add_parser", "cmd_claims", "print_outcomes"]


def print_outcomes(outcomes: list[claims.Outcome], elapsed: float, console: Console) -> None:
    """The table, one line per claim that no longer reproduces (a real ✗, no markup), the count."""
    table = Table(title="detach-parity: tutorial claims, checked by running them", header_style="bold", show_lines=True)
    table.add_column("id", no_wrap=True)
    table.add_column("source", no_wrap=True)
    table.add_column("claim", ratio=2)
    table.add_column("verdict", no_wrap=True)
    table.add_column("evidence (this run)", ratio=3)
    table.add_column("reproduced", justify="center", no_wrap=True)
    for o in outcomes:
        c = o.claim
        mark = Text("✓", style="green") if o.reproduced else Text("✗", style="red")
        table.add_row(*(Text(s) for s in (c.id, c.source, c.claim, c.verdict, o.text)), mark)  # texts are not markup
    console.print(table)
    failed = [o for o in outcomes if not o.reproduced]
    for o in failed:
        console.print(Text.assemble(("✗", "red"), f" {o.claim.id} no longer reproduces '{o.claim.verdict}': {o.text}"))
    console.print(f"{len(outcomes) - len(failed)}/{len(outcomes)} claims reproduced in {elapsed:.1f} s")


def cmd_claims(args: argparse.Namespace, console: Console) -> int:
    """Run the selected claim checks, write JSON on request, print the table; 0 / 1 / 2 (see module)."""
    try:
        ids = [claims.get(i).id for i in args.ids] if args.ids else None
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    start = time.perf_counter()
    with contextlib.nullcontext() if args.quiet else console.status("checking claims"):
        outcomes = claims.run_all(ids)
    elapsed = time.perf_counter() - start
    failed = [o.claim.id for o in outcomes if not o.reproduced]
    verdicts = f"{len(outcomes) - len(failed)}/{len(outcomes)} claims reproduced" + (
        f" ({', '.join(failed)} no longer)" if failed else ""
    )
    problems = []
    if args.json:  # before the table: a closed stdout must not lose the evidence
        payload = {
            "versions": versions(),
            "ok": not failed,
            "seconds": round(elapsed, 3),
            "claims": [o.to_json() for o in outcomes],
        }
        try:
            write_json(Path(args.json), payload)
        except OSError as exc:
            kept = "; the file there was left as it was" if Path(args.json).exists() else ""
            problems.append(f"could not write {args.json}: {exc}{kept}")
    try:
        print_outcomes(outcomes, elapsed, console)
    except OSError as exc:  # BrokenPipeError: stdout closed by its reader
        problems.append(f"could not print the table: {exc}")
    if problems:
        print_error(f"detach-parity claims: error: {'; '.join(problems)} ({verdicts})")
        return 2
    return 1 if failed else 0


def add_parser(sub) -> None:
    """Register the `claims` subcommand on an argparse subparsers object."""
    p = sub.add_parser("claims", help=f"check every tutorial claim about detach() by running it ({claims.id_range()})")
    p.add_argument("ids", nargs="*", metavar="ID", help=f"default all; of {list(claims.CLAIMS)}")
    p.add_argument(
        "--json", type=json_path, metavar="PATH", help="write ids, verdicts and this run's evidence as JSON first"
    )
    p.add_argument("--quiet", action="store_true", help="no spinner")
    p.set_defaults(func=cmd_claims)
