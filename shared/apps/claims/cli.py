"""`detach-parity claims [ID ...] [--json PATH]`: every tutorial claim checked by running it.

Prints a table (id, source, claim, verdict, evidence from this run, reproduced ✓/✗).
Exit status: 0 every selected claim reproduces its stated verdict, 1 any does not (a new
torch or JAX version changed a fact: that must be loud), 2 an unknown claim id.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import time

from rich.console import Console
from rich.table import Table

from shared.apps import claims
from shared.apps.common import UsageError, json_path, versions

__all__ = ["add_parser", "cmd_claims"]


def cmd_claims(args: argparse.Namespace, console: Console) -> int:
    """Run the selected claim checks, print the table, write JSON on request; 0 / 1 / 2."""
    try:
        chosen = [claims.get(i) for i in args.ids] if args.ids else None
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    start = time.perf_counter()
    with contextlib.nullcontext() if args.quiet else console.status("checking claims"):
        outcomes = claims.run_all([c.id for c in chosen] if chosen else None)
    elapsed = time.perf_counter() - start

    table = Table(title="detach-parity: tutorial claims, checked by running them", header_style="bold", show_lines=True)
    table.add_column("id", no_wrap=True)
    table.add_column("source", no_wrap=True)
    table.add_column("claim", ratio=2)
    table.add_column("verdict", no_wrap=True)
    table.add_column("evidence (this run)", ratio=3)
    table.add_column("reproduced", justify="center", no_wrap=True)
    for o in outcomes:
        c = o.claim
        mark = "[green]✓[/]" if o.reproduced else "[red]✗[/]"
        table.add_row(c.id, c.source, c.claim, c.verdict, o.text, mark)
    console.print(table)
    failed = [o for o in outcomes if not o.reproduced]
    for o in failed:
        console.print(
            f"[red]✗[/] {o.claim.id} no longer reproduces '{o.claim.verdict}': {o.text}", markup=False, highlight=False
        )
    console.print(f"{len(outcomes) - len(failed)}/{len(outcomes)} claims reproduced in {elapsed:.1f} s")
    if args.json:
        payload = {
            "versions": versions(),
            "ok": not failed,
            "seconds": round(elapsed, 3),
            "claims": [o.to_json() for o in outcomes],
        }
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(payload, fh, indent=2, ensure_ascii=False)
            fh.write("\n")
    return 1 if failed else 0


def add_parser(sub) -> None:
    """Register the `claims` subcommand on an argparse subparsers object."""
    p = sub.add_parser("claims", help="check every tutorial claim about detach() by running it (C01–C22)")
    p.add_argument("ids", nargs="*", metavar="ID", help=f"default all; of {list(claims.CLAIMS)}")
    p.add_argument(
        "--json", type=json_path, metavar="PATH", help="also write ids, verdicts and this run's evidence as JSON"
    )
    p.add_argument("--quiet", action="store_true", help="no spinner")
    p.set_defaults(func=cmd_claims)
