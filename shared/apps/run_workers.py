"""The worker processes of `detach-parity run --jobs N`; a lost worker loses the one case it was running.

Parent: `run_in_processes(cases, seed, jobs, advance)`. A worker is `python -m <this module> --parent PID`
started through shared.core.children (a session of its own, it follows its parent, it is ended and
reaped here on any exit, Ctrl-C included). It is handed one scenario's cases at a time, one JSON line
each, and answers each case once it is done (a JSON line holding the pickled CaseResult).

A worker that dies (killed, out of memory, a crash in native code) fails the case it was running, by
name and with how it ended; the rest of its scenario goes back to the queue, for another worker or a
fresh one (at most `jobs` fresh ones in a run, then the parent runs what is left), and every case
already answered is kept.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import pickle
import sys
import traceback
from collections import deque
from collections.abc import Callable

from ..core import children
from ..core.runner import CaseResult, run_case
from . import run_profile
from .interrupts import check_interrupted

__all__ = ["run_in_processes", "main"]

Item = tuple[int, str, str, str, str]  # (index in the run, scenario, variant, case, dtype)


def run_in_processes(
    cases: list, seed: int, jobs: int, advance: Callable[[int], object], counters: Callable | None = None
) -> list:
    """run_case for every case: scenarios in `jobs` worker processes, results in the order of `cases`.

    One scenario at a time per worker, the largest first so that the workers finish together. Fresh
    interpreters, never forks: the parent may hold JAX's and torch's threads. The data_parallel family
    runs here afterwards, alone: its ranks are processes of their own whose collectives poll, and beside
    two workers on two cores they starve (measured: the whole run 147 s with the family in a worker,
    against 87 s in one process). Ctrl-C ends the workers and raises KeyboardInterrupt here. With
    `counters` (run --profile: this process's), every worker counts its own and the parent uses these.
    """
    groups: dict[str, list[Item]] = {}
    alone: list[Item] = []
    for i, (spec, variant, case, dtype) in enumerate(cases):
        item = (i, spec.name, variant, case, dtype)
        (alone if spec.family == "data_parallel" else groups.setdefault(spec.name, [])).append(item)
    results: list = [None] * len(cases)
    left = _Workers(seed, jobs, results, advance, profile=counters is not None).run(
        deque(sorted(groups.values(), key=len, reverse=True))
    )
    for i, name, variant, case, dtype in [*left, *alone]:
        results[i] = run_case(name, variant, dtype, seed=seed, case=case, counters=counters)
        check_interrupted()
        advance(1)
    return results


class _Workers:
    """The workers of one run and what each was handed (its pending items, in the order it runs them)."""

    def __init__(
        self, seed: int, jobs: int, results: list, advance: Callable[[int], object], profile: bool = False
    ) -> None:
        self.seed, self.jobs, self.results, self.advance, self.profile = seed, jobs, results, advance, profile
        self.fresh = jobs  # workers that may still be started to replace lost ones
        self.pending: dict[children.Child, deque[Item]] = {}

    def run(self, queue: deque[list[Item]]) -> list[Item]:
        """Run the queued groups; returns the items no worker was left to run (for the parent)."""
        clean = False
        try:
            for _ in range(min(self.jobs, len(queue))):
                self._start()
            while queue or any(self.pending.values()):
                for worker, items in self.pending.items():
                    if not items and queue:
                        self._hand(worker, queue.popleft())
                children.readable(self.pending, 0.2)
                for worker in list(self.pending):
                    self._collect(worker, queue)
                if queue and not self.pending:
                    break  # no worker left, none may be started: the parent runs the rest
                check_interrupted()
            clean = True
        finally:
            children.end(self.pending, grace=5.0 if clean else 0.0)  # Ctrl-C or an error: killed at once
        return [item for group in queue for item in group]

    def _start(self) -> None:
        argv = children.python("-m", __name__, "--parent", str(os.getpid()))
        # the fixtures are far below torch's intra-op grain size: its OpenMP threads would only spin against
        # the other worker's (measured: the scenarios family 17.8 s → 15.0 s); an explicit setting wins
        env = {"OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
        self.pending[children.spawn(argv, "run worker", env=env, pipes=True)] = deque()

    def _hand(self, worker: children.Child, group: list[Item]) -> None:
        for i, name, variant, case, dtype in group:
            task = {"index": i, "scenario": name, "variant": variant, "case": case, "dtype": dtype, "seed": self.seed}
            task["profile"] = self.profile
            worker.send(json.dumps(task).encode())  # a worker that died: its exit is seen by _collect
            self.pending[worker].append((i, name, variant, case, dtype))

    def _collect(self, worker: children.Child, queue: deque[list[Item]]) -> None:
        exited = worker.poll() is not None  # before reading: what it wrote before exiting is read below
        items = self.pending[worker]
        for line in worker.lines():
            try:
                answer = json.loads(line)
                result = pickle.loads(base64.b64decode(answer["result"]))
            except (ValueError, KeyError, pickle.UnpicklingError):
                continue  # not an answer
            items.remove(next(item for item in items if item[0] == answer["index"]))
            self.results[answer["index"]] = result
            self.advance(1)
        if not exited:
            return
        del self.pending[worker]
        if items:  # the first pending item was running: it fails, by name; the rest go back to the queue
            i, name, variant, case, dtype = items.popleft()
            why = f"{name}[{variant}] {case} {dtype}: the worker process running it died: it {worker.exit_text()}"
            self.results[i] = CaseResult(name, variant, case, dtype, self.seed, error=why)
            self.advance(1)
            if items:
                queue.appendleft(list(items))
        if queue and self.fresh > 0:
            self.fresh -= 1
            self._start()


def main() -> int:
    """A worker: follow the parent, then run_case for each task line of stdin, answering each on stdout."""
    parser = argparse.ArgumentParser(prog=f"python -m {__name__}")
    parser.add_argument("--parent", type=int, required=True)
    args = parser.parse_args()
    children.follow_parent(args.parent)
    counters = None
    with children.answer_channel() as answers:
        for line in sys.stdin:
            task = json.loads(line)
            name, variant, case, dtype, seed = (task[k] for k in ("scenario", "variant", "case", "dtype", "seed"))
            if task.get("profile") and counters is None:
                counters = run_profile.counters()
            try:
                result = run_case(name, variant, dtype, seed=seed, case=case, counters=counters)
            except Exception:  # run_case reports an implementation's error itself; this is anything else
                result = CaseResult(
                    name,
                    variant,
                    case,
                    dtype,
                    seed,
                    error=f"{name}[{variant}] {case} {dtype}: " + traceback.format_exc(),
                )
            answers.write(
                json.dumps({"index": task["index"], "result": base64.b64encode(pickle.dumps(result)).decode()})
            )
            answers.write("\n")
    return 0


if __name__ == "__main__":
    code = main()
    sys.stderr.flush()
    os._exit(code)  # no interpreter teardown of torch and JAX: the parent waits for nothing
