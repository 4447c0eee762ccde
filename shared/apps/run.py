"""`detach-parity run` and `detach-parity list`: the parity suite and the registered scenarios.

    detach-parity run [SCENARIO ...] [--variant V] [--family F] [--dtype float32|float64|all]
                      [--seed N] [--jobs N] [--json PATH] [--profile]
    detach-parity list [--family F]

Exit status of run: 0 every case passed, 1 any mismatch or error, 2 bad arguments (the
message lists the valid names) or a JSON file that could not be written (a previous file
there is left as it was), 130 interrupted (no JSON written). The JSON is written before
the table, so a closed stdout (`| head -1`) cannot lose it. `--jobs N` runs the scenarios in N
fresh processes (shared.apps.run_workers), one scenario at a time each, and then the data_parallel
family in this process (its ranks need the CPUs); the results and the JSON are the same as with one
job, and a worker that dies fails only the case it was running. `--profile` adds where the time went
(shared.apps.run_profile): seconds per stage, JAX's traces, lowerings and compiles; in the JSON too.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from ..core import registry
from ..core.runner import iter_cases, run_case
from ..core.schema import FLOAT_DTYPES
from . import run_profile
from .common import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_USAGE,
    UsageError,
    bounded_int,
    check_interrupted,
    failure_line,
    json_path,
    non_negative_int,
    print_error,
    versions,
    write_json,
)
from .run_workers import run_in_processes

__all__ = ["results_table", "cmd_run", "cmd_list", "add_run", "add_list", "MAX_JOBS"]

MAX_JOBS = max(2, len(os.sched_getaffinity(0)))


def _fmt(x: float | None) -> str:
    if x is None or x != x:
        return "-"
    return f"{x:.1e}" if x else "0"


def _cell(comp, attr: str) -> str:
    """A comparison's figure for the table; NaN / inf in the compared outputs are shown, never hidden."""
    if comp is None:
        return "-"
    text = _fmt(getattr(comp, attr)) if comp.leaves else ("NaN" if comp.nonfinite else "-")
    return f"{text} +NaN" if comp.leaves and comp.nonfinite else text


def results_table(results) -> Table:
    """The parity table of `detach-parity run` (one row per case)."""
    table = Table(title="detach-parity: torch vs JAX vs float64 oracle", header_style="bold")
    for col, just, wrap in (
        ("scenario", "left", True),
        ("variant", "left", True),
        ("case", "left", True),
        ("dtype", "left", False),
        ("|torch−jax|", "right", False),
        ("rel", "right", False),
        ("torch/oracle", "right", False),
        ("jax/oracle", "right", False),
        ("tol used", "right", False),
        ("lesson", "left", False),
        ("verdict", "left", False),
    ):
        table.add_column(col, justify=just, no_wrap=not wrap, overflow="fold")
    for r in results:
        tj, to = r.shown, r.torch_oracle
        jo = r.divergent_oracle if r.diverges else r.jax_oracle
        # the share of the tolerance used by the comparisons that must pass (<= 1)
        must_pass = [c for c in (r.torch_jax, r.torch_oracle, r.jax_oracle, r.divergent_oracle) if c is not None]
        used = max((c.used for c in must_pass), default=None)
        style = "green" if r.ok else "red"
        table.add_row(
            escape(r.scenario),
            escape(r.variant),
            escape(r.case),
            r.dtype,
            _cell(tj, "max_abs"),
            _cell(tj, "max_rel"),
            _cell(to, "max_rel"),
            _cell(jo, "max_rel"),
            _fmt(used),
            "held" if r.lesson_ok else "[red]broken[/]",
            f"[{style}]{r.verdict}[/]",
        )
    return table


def cmd_run(args: argparse.Namespace, console: Console) -> int:
    dtypes = FLOAT_DTYPES if args.dtype == "all" else (args.dtype,)
    try:
        cases = list(iter_cases(args.scenarios or None, args.variant, dtypes, args.family))
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    if not cases:
        raise UsageError(
            f"no case selected (scenarios {args.scenarios or 'all'}, family {args.family}, dtype {args.dtype})"
        )
    start = time.perf_counter()
    with Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=True,
        disable=args.quiet or not console.is_terminal,  # a bar in a log or a pipe is noise
    ) as progress:
        task = progress.add_task("parity", total=len(cases))
        counters = run_profile.counters() if args.profile else None
        if args.jobs == 1:
            results = []
            for spec, variant, case, dtype in cases:
                progress.update(task, description=f"{spec.name}[{variant}] {case} {dtype}")
                results.append(run_case(spec, variant, dtype, seed=args.seed, case=case, counters=counters))
                check_interrupted()  # run_case reports errors as results; an interrupt must stop the run
                progress.advance(task)
        else:
            results = run_in_processes(
                cases, args.seed, args.jobs, lambda n: progress.advance(task, n), counters=counters
            )
        elapsed = time.perf_counter() - start
        failed = [r for r in results if not r.ok]
        profile = run_profile.summary(results, elapsed) if args.profile else None
        # before any output: a closed stdout cannot lose it
        written = _write_results(args, results, failed, elapsed, profile)

    console.print(results_table(results))
    if profile:
        console.print(run_profile.table(profile))
        for line in run_profile.lines(profile):
            console.print(escape(line))
    for r in failed:
        for problem in r.problems():
            console.print(failure_line(problem))
    naive = sum(r.ok and bool(r.diverges) for r in results)
    console.print(
        f"{len(results)} cases: {len(results) - len(failed) - naive} PASS, "
        f"{naive} DIFFERS (expected: a naive port, wrong exactly where declared), {len(failed)} failed "
        f"— {elapsed:.1f} s"
    )
    if not written:
        return EXIT_USAGE
    return EXIT_FAILED if failed else EXIT_OK


def _write_results(args: argparse.Namespace, results: list, failed: list, elapsed: float, profile=None) -> bool:
    """Write --json (atomically); False, with a message on stderr, when it could not be written."""
    if not args.json:
        return True
    payload = {
        "versions": versions(),
        "seed": args.seed,
        "ok": not failed,
        "results": [r.to_json() for r in results],
        "seconds": round(elapsed, 3),
    }
    if profile:
        payload["profile"] = profile
    try:
        write_json(Path(args.json), payload)
    except OSError as exc:
        print_error(
            f"detach-parity run: error: could not write {args.json}: {exc} (a previous file there was left as it was)"
        )
        return False
    return True


def cmd_list(args: argparse.Namespace, console: Console) -> int:
    table = Table(title="detach-parity scenarios", header_style="bold")
    for col in ("scenario", "family", "title", "variants", "source", "claims"):
        table.add_column(col)
    for name in registry.names(args.family):
        s = registry.get(name)
        table.add_row(
            *(escape(t) for t in (name, s.family, s.title, ", ".join(s.variants), s.source, ", ".join(s.claims)))
        )
    console.print(table)
    return 0


def add_run(sub) -> None:
    p = sub.add_parser("run", help="run the parity suite: torch vs JAX vs oracle, lesson checks")
    p.add_argument("scenarios", nargs="*", metavar="SCENARIO", help=f"default all; one of {registry.names()}")
    p.add_argument("--variant", help="only this variant")
    p.add_argument("--family", choices=registry.FAMILIES, help="only this family")
    p.add_argument("--dtype", default="all", choices=(*FLOAT_DTYPES, "all"))
    p.add_argument("--seed", type=non_negative_int, default=0, help="fixture seed (default 0)")
    p.add_argument(
        "--jobs",
        type=bounded_int(1, MAX_JOBS, "the CPUs this process may use"),
        default=1,
        help="processes to run the scenarios in (default 1; `make report` uses 2)",
    )
    p.add_argument("--json", type=json_path, metavar="PATH", help="also write the results as JSON")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument(
        "--profile", action="store_true", help="also show where the time went: stages, JAX traces and compiles"
    )
    p.set_defaults(func=cmd_run)


def add_list(sub) -> None:
    p = sub.add_parser("list", help="list the registered scenarios")
    p.add_argument("--family", choices=registry.FAMILIES)
    p.set_defaults(func=cmd_list)
