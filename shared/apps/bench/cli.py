"""`detach-parity bench`: its arguments, the start of the measuring process, the JSON and the tables.

The measuring runs in a fresh interpreter (shared.apps.bench.worker, started through
shared.core.children: it follows this process and is ended with it) so that its CPU affinity
and thread counts are set before torch or JAX start. This process checks the arguments
before anything is measured, picks the threads (by default the CPUs idle when it starts:
torch's threads on a core that another process keeps busy turned millisecond steps into
seconds), waits for the worker, checks its payload and writes it.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from rich.console import Console

from ...core import children, registry
from ..check.match import PortInputError
from ..common import UsageError, bounded_int, json_path, positive_int, print_error, versions, write_json
from . import latency, port_check
from .payload import check_payload
from .sizes import SIZES
from .tables import print_tables
from .worker import available_cpus

__all__ = ["MAX_REPEATS", "MAX_BUDGET_S", "scenario_names", "choose_threads", "run", "cmd_bench", "add_parser"]

MAX_REPEATS = 1000  # more rounds change no median: they only hold the CPUs longer
MAX_BUDGET_S = 3600


def scenario_names() -> tuple[str, ...]:
    """The scenarios whose pair has a training step (`make_step`), in teaching order."""
    return tuple(n for n, spec in registry.SCENARIOS.items() if spec.has_step)


def _busy_cpus(sample_s: float = 0.5) -> float | None:
    """CPUs kept busy by other processes over sample_s (from /proc/stat), None where unreadable."""

    def read() -> tuple[int, int]:
        with open("/proc/stat", encoding="utf-8") as fh:
            values = [int(v) for v in fh.readline().split()[1:]]
        return sum(values), values[3] + values[4]  # all jiffies, idle + iowait

    try:
        total0, idle0 = read()
        time.sleep(sample_s)
        total1, idle1 = read()
    except (OSError, ValueError, IndexError):
        return None
    if total1 <= total0:
        return None
    return (1 - (idle1 - idle0) / (total1 - total0)) * (os.cpu_count() or 1)


def choose_threads(threads: int | None) -> tuple[int, str]:
    """(threads, why): the requested count, or the CPUs this process may use that nothing else keeps busy.

    Raises ValueError unless threads is None or an int in [1, the CPUs this process may use].
    """
    cpus = len(available_cpus())
    if threads is not None:
        if isinstance(threads, bool) or not isinstance(threads, int) or not 1 <= threads <= cpus:
            raise ValueError(f"bench: threads expected 1..{cpus} (the CPUs this process may use), got {threads}")
        return threads, f"--threads {threads} of {cpus} CPUs"
    busy = _busy_cpus()
    if busy is None:
        return cpus, f"all {cpus} CPUs (/proc/stat unreadable: the load of other processes unknown)"
    chosen = max(1, cpus - round(busy))
    return chosen, f"auto: {chosen} of {cpus} CPUs, {busy:.1f} CPU(s) busy with other work before the run"


def run(
    scenarios: Sequence[str] | None = None,
    repeats: int = 15,
    threads: int | None = None,
    quick: bool = False,
    quiet: bool = True,
    budget_s: float | None = None,
) -> dict:
    """Run the bench in a fresh interpreter and return its payload (see shared.apps.bench).

    scenarios: names of scenarios with a step (default all); frozen_backbone adds the freezing
    section and tbptt the truncation memory sweep, and both run when no name is given; the port
    check of a 1 M-parameter model (`shared.apps.check.bench_one_million`) runs in a full run of
    every scenario only.
    threads: CPUs for both frameworks (default: choose_threads). budget_s: seconds the whole
    command may take, start-up included (default SIZES[mode]["budget_s"]); rounds stop at
    each phase's share of it, never below MIN_ROUNDS.
    Raises ValueError on an unknown scenario, repeats outside [1, MAX_REPEATS], budget_s
    outside [1, MAX_BUDGET_S] or threads outside [1, available]; RuntimeError if the worker
    fails (its stderr was shown).
    """
    start = time.time()
    known = scenario_names()
    if isinstance(scenarios, str):
        raise ValueError(f"bench: scenarios expected a list of names, got the string {scenarios!r}")
    names = list(known) if not scenarios else list(dict.fromkeys(scenarios))
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ValueError(f"bench: scenario expected one of {list(known)}, got {unknown}")
    if isinstance(repeats, bool) or not isinstance(repeats, int) or not 1 <= repeats <= MAX_REPEATS:
        raise ValueError(f"bench: repeats expected an integer in [1, {MAX_REPEATS}], got {repeats!r}")
    mode = "quick" if quick else "full"
    budget_s = SIZES[mode]["budget_s"] if budget_s is None else budget_s
    if isinstance(budget_s, bool) or not isinstance(budget_s, int | float) or not 1 <= budget_s <= MAX_BUDGET_S:
        raise ValueError(f"bench: budget expected seconds in [1, {MAX_BUDGET_S}], got {budget_s!r}")
    threads, why = choose_threads(threads)
    config = {
        "scenarios": names,
        "freezing": "frozen_backbone" in names,
        "tbptt": "tbptt" in names,
        "port_check": not scenarios and not quick,  # the full default run only: one 20 s check, no rounds
        "repeats": repeats,
        "threads": threads,
        "threads_chosen": why,
        "mode": mode,
        "quiet": quiet,
        "parent": os.getpid(),
        "budget_s": float(budget_s),
        "budget_end": start + budget_s,
    }
    previous = signal.signal(signal.SIGTERM, _terminated)  # so that `finally` ends the worker
    try:
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "bench.json"
            cmd = children.python("-m", __package__, "--worker", json.dumps(config), str(out))
            worker = children.spawn(cmd, "bench worker", cwd=Path(__file__).resolve().parents[3])
            try:
                code = worker.wait()
            finally:
                children.end([worker])  # Ctrl-C, SIGTERM, an error: killed and reaped, never left measuring
            if code != 0 or not out.exists():
                raise RuntimeError(
                    f"bench: the measuring process {worker.exit_text()} (its messages, if any, are above)"
                )
            return json.loads(out.read_text(encoding="utf-8"))
    finally:
        signal.signal(signal.SIGTERM, previous)


def _terminated(signum, frame) -> None:
    raise SystemExit(128 + signum)


def cmd_bench(args: argparse.Namespace, console: Console) -> int:
    """Run the bench, write JSON on request, print the tables.

    Returns 0; 1 if the measuring process failed, its payload is incomplete or the JSON could
    not be written (a previous file there is left as it was); bad arguments raise UsageError
    (exit 2).
    """
    start = time.perf_counter()
    kept = f"; {args.json} was left as it was" if args.json and Path(args.json).exists() else ""
    if args.port_check:
        return _port_check(args, console, kept)
    try:
        payload = run(args.scenarios, args.repeats, args.threads, args.quick, args.quiet, args.budget)
    except ValueError as exc:
        raise UsageError(str(exc).removeprefix("bench: ")) from None  # the CLI names the command already
    except RuntimeError as exc:
        print_error(f"detach-parity bench: error: {exc}{kept}")
        return 1
    payload = {"versions": versions(), **payload, "seconds": round(time.perf_counter() - start, 3)}
    try:
        check_payload(payload)
    except ValueError as exc:
        errors = "; ".join(f"{k}: {v}" for k, v in payload.get("errors", {}).items())
        print_error(f"detach-parity bench: error: incomplete measurements ({exc}) {errors}{kept}")
        return 1
    if args.json:  # before the tables: a closed stdout must not lose the measurements
        try:
            write_json(Path(args.json), payload)
        except OSError as exc:
            print_error(f"detach-parity bench: error: could not write {args.json}: {exc}")
            return 1
    print_tables(payload, console)
    console.print(f"bench done in {payload['seconds']:.1f} s (measurements, not assertions)")
    if args.json:
        console.print(f"wrote {args.json}", markup=False, highlight=False)
    return 0


def _latency(args: argparse.Namespace, console: Console, kept: str) -> int:
    """`bench --port-check` alone: the latencies of the worked ports against the import floor (latency.py)."""
    progress = None if args.quiet else (lambda msg: console.print(f"  {msg}", markup=False, highlight=False))
    try:
        payload = {"versions": versions(), "latency": latency.measure(progress=progress)}
    except RuntimeError as exc:
        print_error(f"detach-parity bench: error: {exc}{kept}")
        return 1
    if args.json:
        try:
            write_json(Path(args.json), payload)
        except OSError as exc:
            print_error(f"detach-parity bench: error: could not write {args.json}: {exc}{kept}")
            return 1
    console.print(latency.markdown(payload["latency"]), markup=False, highlight=False, soft_wrap=True)
    if args.json:
        console.print(f"wrote {args.json}", markup=False, highlight=False)
    return 0


def _port_check(args: argparse.Namespace, console: Console, kept: str) -> int:
    if args.port_check == LATENCY:
        return _latency(args, console, kept)
    name, size = port_check.parse(args.port_check)
    progress = None if args.quiet else (lambda msg: console.print(f"  {msg}", markup=False, highlight=False))
    try:
        payload = {"versions": versions(), "port_check": port_check.measure(name, size, progress=progress)}
    except PortInputError as exc:
        raise UsageError(f"--port-check {args.port_check}: {exc}") from None
    if args.json:
        try:
            write_json(Path(args.json), payload)
        except OSError as exc:
            print_error(f"detach-parity bench: error: could not write {args.json}: {exc}{kept}")
            return 1
    m = payload["port_check"]
    peak = "n/a (no /proc)" if m["peak_gb"] is None else f"{m['peak_gb']} GB ({m['bytes_per_parameter']} B/parameter)"
    console.print(
        f"port check {name}:{size}: {m['parameters']:,} parameters, {m['steps']} steps, {' + '.join(m['dtypes'])}: "
        f"{'match' if m['ok'] else 'DIFFERS'}; wall {m['wall_s']} s, CPU {m['cpu_s']} s, peak {peak} above the caller",
        markup=False,
        highlight=False,
    )
    if args.json:
        console.print(f"wrote {args.json}", markup=False, highlight=False)
    return 0 if m["ok"] else 1


LATENCY = "latency"  # --port-check without a port


def add_parser(sub) -> None:
    """Register the `bench` subcommand on an argparse subparsers object."""
    p = sub.add_parser(
        "bench", help="step time and memory: torch eager and torch.compile vs JAX jit; what stopping gradients saves"
    )
    p.add_argument("scenarios", nargs="*", metavar="SCENARIO", help="scenarios to measure (default: all with a step)")
    p.add_argument(
        "--repeats",
        type=bounded_int(1, MAX_REPEATS, "more rounds change no median"),
        default=15,
        help=f"timed rounds per step, median reported (default 15, at most {MAX_REPEATS})",
    )
    p.add_argument(
        "--budget",
        type=bounded_int(1, MAX_BUDGET_S, "seconds"),
        metavar="SECONDS",
        help=f"time cap of the whole command: rounds stop at each phase's share of it (default "
        f"{SIZES['full']['budget_s']:.0f}, {SIZES['quick']['budget_s']:.0f} with --quick)",
    )
    p.add_argument(
        "--threads", type=positive_int, help="CPUs for both frameworks (default: the CPUs idle when the bench starts)"
    )
    p.add_argument(
        "--quick",
        action="store_true",
        help="tiny sizes, torch.compile without building kernels (aot_eager): the smoke test of the bench itself",
    )
    p.add_argument("--json", type=json_path, metavar="PATH", help="also write the measurements as JSON")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument(
        "--port-check",
        nargs="?",
        const=LATENCY,
        metavar="NAME[:SIZE]",
        help="instead: alone, how long a check takes against the import floor (the CLI in a new process, a warm "
        "process; the worked cnn, gru, transformer, GPT-2, Llama); with NAME[:SIZE], time and weigh one check_port "
        "of a worked port (gpt2:base is GPT-2 small, 124 M parameters)",
    )
    p.set_defaults(func=cmd_bench)
