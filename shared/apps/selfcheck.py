"""Mutation self-check: remove each gradient-stopping construct and prove a test fails.

`detach-parity selfcheck` finds every gradient-control site of torch_impl/ and jax_impl/
(shared.apps.mutants) and makes one mutant per site that removes it. Each mutant is written into
a temporary copy of the repository and the tests that cover its module are run there
(`tests/test_parity.py -k <module>` and the test files that name it). A mutant is *killed* when
those tests fail; a surviving mutant is a missing assertion.

Speed: the parent imports torch, JAX and pytest once and forks one child per mutant (no
interpreter start, no re-import; shared.core.children: a session of its own, it follows its
parent, reaped by pid); two children run at a time (`--jobs`, at most the CPUs this process may
use: each child is a whole pytest with torch and JAX), each in its own copy. Exit status 1 if any
mutant survives; 130 when interrupted (the children are killed and reaped, the copies removed, no
JSON written). The JSON is written before the table.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from ..core import children
from ..core.runner import FRAMEWORKS
from .backends import backend
from .common import (
    EXIT_USAGE,
    UsageError,
    bounded_int,
    check_interrupted,
    json_path,
    print_error,
    versions,
    write_json,
)
from .mutants import ROOT, Site, covering_tests, find_sites

__all__ = ["Site", "find_sites", "covering_tests", "selfcheck", "MAX_JOBS"]

# each job is a forked pytest holding torch and JAX, with its own copy of the tree: more jobs
# than CPUs only cost memory and disk
MAX_JOBS = max(2, len(os.sched_getaffinity(0)))
OWN_PACKAGES = ("detach_parity", "conftest")
# generated or installed at the top of the tree: not part of what the tests read
_TOP_LEVEL_SKIP = {".venv", ".git", "site", "reports", "docs", ".pytest_cache", ".hypothesis", ".jax_cache"}


def _copy_tree(root: Path, dest: Path) -> Path:
    def ignore(folder: str, names: list[str]) -> set[str]:
        top = {n for n in names if n in _TOP_LEVEL_SKIP} if Path(folder) == root else set()
        return top | {n for n in names if n == "__pycache__" or n.endswith(".egg-info")}

    shutil.copytree(root, dest, ignore=ignore)
    return dest


def _child(copy: Path, args: list[str]) -> int:
    """In a forked child: run pytest on the mutated copy; its exit status."""
    import sys

    import pytest

    os.chdir(copy)
    sys.path.insert(0, str(copy.parent))
    # the parent imported this package (and, preloading, the implementations' helpers) from the
    # original tree: forget every module of ours, so that the copy's mutated files are imported
    for name in [m for m in sys.modules if m.split(".")[0] in OWN_PACKAGES]:
        del sys.modules[name]
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
    return int(
        pytest.main(["-x", "-q", "-p", "no:cacheprovider", "-W", "ignore::pytest.PytestAssertRewriteWarning", *args])
    )


def _preload() -> None:
    """Import the heavy frameworks once in the parent (through the implementations' shared
    helpers, which import torch, JAX, Flax and optax), without starting any JAX backend."""
    import numpy  # noqa: F401
    import pytest  # noqa: F401

    for framework in FRAMEWORKS:
        backend(framework)


@dataclass
class Outcome:
    site: Site
    status: str  # "killed" | "survived" | "uncovered" | "error"
    seconds: float
    exit_code: int

    def to_json(self) -> dict:
        d = asdict(self.site)
        d.update(status=self.status, seconds=round(self.seconds, 2), exit_code=self.exit_code)
        return d


def selfcheck(
    sites: list[Site], root: Path = ROOT, jobs: int = 2, timeout: float = 240.0, on_done=None
) -> list[Outcome]:
    """Run one mutant per site; returns an Outcome per site in the order of `sites`.

    Exit codes of the covering run: 1 (tests failed) = killed; 0 = survived;
    5 (no test collected) = uncovered; anything else (crash, timeout) = error.
    Raises ValueError unless 1 <= jobs <= MAX_JOBS; on any exception (Ctrl-C included) the
    running children are killed and reaped before the copies are removed.
    """
    if not (isinstance(jobs, int) and 1 <= jobs <= MAX_JOBS):
        raise ValueError(f"selfcheck: jobs expected an integer in [1, {MAX_JOBS}], got {jobs!r}")
    _preload()
    outcomes: dict[int, Outcome] = {}
    running: dict[children.Child, tuple[int, int, float]] = {}  # child -> (site index, slot, start)
    try:
        _run_mutants(sites, root, jobs, timeout, on_done, outcomes, running)
    finally:
        children.end(running)  # interrupted or failed: no child outlives the parent or its copies
    return [outcomes[i] for i in range(len(sites))]


def _run_mutants(sites, root, jobs, timeout, on_done, outcomes, running) -> None:
    with tempfile.TemporaryDirectory(prefix="selfcheck-") as tmp:
        # each copy's root is the package itself: named `detach_parity`, first on its child's sys.path
        copies = [_copy_tree(root, Path(tmp) / f"copy{i}" / "detach_parity") for i in range(jobs)]
        free = list(range(jobs))
        queue = list(enumerate(sites))

        def done(idx: int, status: str, seconds: float, code: int) -> None:
            outcomes[idx] = Outcome(sites[idx], status, seconds, code)
            if on_done:
                on_done(outcomes[idx])

        while queue or running:
            check_interrupted()
            while queue and free:
                idx, site = queue.pop(0)
                args = covering_tests(site.module, root)
                if not args:
                    done(idx, "uncovered", 0.0, 5)
                    continue
                slot = free.pop()
                src = (root / site.path).read_bytes()
                (copies[slot] / site.path).write_bytes(src[: site.start] + site.replacement.encode() + src[site.end :])
                child = children.fork(lambda copy=copies[slot], args=args: _child(copy, args), site.where)
                running[child] = (idx, slot, time.perf_counter())
            for child, (idx, slot, start) in list(running.items()):
                if child.poll() is None:
                    if time.perf_counter() - start > timeout:
                        child.kill()  # reported as an error once reaped
                    continue
                del running[child]
                site = sites[idx]
                (copies[slot] / site.path).write_bytes((root / site.path).read_bytes())  # restore
                free.append(slot)
                code = child.returncode
                done(
                    idx,
                    {1: "killed", 0: "survived", 5: "uncovered"}.get(code, "error"),
                    time.perf_counter() - start,
                    code,
                )
            time.sleep(0.05)


def cmd_selfcheck(args: argparse.Namespace, console) -> int:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
    from rich.table import Table
    from rich.text import Text

    sites = find_sites()
    if args.module:
        known = sorted({s.module for s in sites})
        unknown = [m for m in args.module if m not in known]
        if unknown:
            raise UsageError(f"module expected one of {known}, got {unknown}")
        sites = [s for s in sites if s.module in args.module]
    if args.list:
        for s in sites:
            console.print(f"{s.where}  {s.construct}  [{s.module}]  {s.original!r} -> {s.replacement!r}", markup=False)
        return 0
    if not sites:
        console.print("no mutation site found")
        return 1
    start = time.perf_counter()
    with Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        disable=not console.is_terminal,  # a bar in a log or a pipe is noise
    ) as progress:
        task = progress.add_task("mutants", total=len(sites))

        def done(o: Outcome) -> None:
            progress.update(task, advance=1, description=f"{o.site.where} {o.status}")

        outcomes = selfcheck(sites, jobs=args.jobs, on_done=done)
        elapsed = time.perf_counter() - start
        killed = sum(o.status == "killed" for o in outcomes)
        if args.json:  # before any output: a closed stdout must not lose the outcomes
            payload = {
                "versions": versions(),
                "killed": killed,
                "total": len(outcomes),
                "seconds": round(elapsed, 1),
                "mutants": [o.to_json() for o in outcomes],
            }
            try:
                write_json(Path(args.json), payload)
            except OSError as exc:
                print_error(f"detach-parity selfcheck: error: could not write {args.json}: {exc}")
                return EXIT_USAGE
    table = Table(title="detach-parity selfcheck: one mutant per gradient-control site", header_style="bold")
    for col in ("site", "construct", "module", "mutant", "status", "s"):
        table.add_column(col, no_wrap=col != "mutant")
    for o in outcomes:
        style = "green" if o.status == "killed" else "red"
        table.add_row(
            o.site.where,
            o.site.construct,
            o.site.module,
            Text(f"{o.site.original} → {o.site.replacement}"),
            f"[{style}]{o.status}[/]",
            f"{o.seconds:.1f}",
        )
    console.print(table)
    console.print(f"{killed}/{len(outcomes)} mutants killed ({100 * killed / len(outcomes):.0f} %) in {elapsed:.0f} s")
    return 0 if killed == len(outcomes) else 1


def add_parser(sub) -> None:
    p = sub.add_parser(
        "selfcheck", help="mutation self-check: every gradient-control site must be covered by a failing test"
    )
    p.add_argument("module", nargs="*", help="only these modules (file stems, e.g. frozen_backbone)")
    p.add_argument(
        "--jobs",
        type=bounded_int(1, MAX_JOBS, "the CPUs this process may use"),
        default=2,
        help=f"mutants run at a time (default 2, at most {MAX_JOBS})",
    )
    p.add_argument("--list", action="store_true", help="list the sites and mutants, run nothing")
    p.add_argument("--json", type=json_path, metavar="PATH", help="also write the outcomes as JSON")
    p.set_defaults(func=cmd_selfcheck)
