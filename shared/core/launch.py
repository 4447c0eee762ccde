"""Start the ranks of a data-parallel case as processes, hand them jobs, collect rank 0's outputs.

Framework-neutral (no framework, no collective here): the ranks rendezvous among themselves
(torch.distributed, jax.distributed) on 127.0.0.1 at the port picked here; this module starts them
(shared.core.children), talks to them over pipes and ends them. Its promises:

  * one start serves many cases: `pool(module, world)` keeps one set of ranks per process and
    configuration, started on first use (an import and a rendezvous cost seconds);
  * a rank that raises fails the case with its traceback at once, and the whole set is killed (a peer
    may be blocked in a collective that will never complete): the next case starts a fresh one;
  * a rank that does not answer in time fails the case with a RankTimeout naming it;
  * a port found in use at the rendezvous (a rank's init raises PortInUse) is retried on a new port;
  * no orphan: ranks are killed on failure and at exit and follow their parent; a rank that dies while
    its set is idle ends the set (a watcher thread: the others killed, the folder removed); the folder
    of a dead owner is removed by the next start (shared.core.owned: by an advisory lock, so a live
    owner in another PID namespace keeps its folder).

Here `Ranks(module, world).start()`, `.run(scenario, fx, variant)`, `.close()`, `pool()`; the rank side
(`serve`, the fixture files, the errors) is shared.core.rank. Jobs and answers are JSON lines on each
rank's stdin and stdout; its stderr is `rank<r>.log` in the set's folder, quoted in error messages.
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import numpy as np

from . import children
from .fixtures import Fixture
from .owned import OwnedFolder
from .rank import RankError, RankTimeout, free_port, save_fixture

__all__ = ["START_TIMEOUT", "JOB_TIMEOUT", "PREFIX", "RankError", "RankTimeout", "Ranks", "pool", "close_pools"]

START_TIMEOUT = 300.0  # seconds for every rank to import its framework and rendezvous (2 shared cores: slow)
JOB_TIMEOUT = 300.0  # seconds for every rank to answer one case
PREFIX = "detach-parity-ranks-"  # + the owner's pid: the folder of one Ranks, with its logs and job files
_LOG_TAIL = 3000  # characters of a rank's log quoted in an error
_WATCH_S = 0.5  # how often the watcher looks at the ranks of an idle set


class Ranks:
    """`world` processes running `python -m <module>` (whose `__main__` calls rank.serve), one job at a time.

    env: extra environment variables of the ranks; ports: gives the next rendezvous port to try; attempts:
    ports tried while a rank reports PortInUse; start_timeout: seconds for every rank to be ready.
    """

    def __init__(
        self,
        module: str,
        world: int,
        *,
        env: Mapping[str, str] | None = None,
        ports: Callable[[], int] = free_port,
        attempts: int = 3,
        start_timeout: float = START_TIMEOUT,
    ) -> None:
        if not isinstance(world, int) or isinstance(world, bool) or world < 1:
            raise ValueError(f"Ranks: world expected an int >= 1, got {world!r}")
        if not isinstance(attempts, int) or attempts < 1:
            raise ValueError(f"Ranks: attempts expected an int >= 1, got {attempts!r}")
        self.module, self.world = module, world
        self.env = dict(env or {})
        self.ports, self.attempts, self.start_timeout = ports, attempts, start_timeout
        self.ports_tried: list[int] = []
        self.port: int | None = None
        self.procs: list[children.Child] = []
        self.dir: Path | None = None
        self._folder: OwnedFolder | None = None
        self._owner = os.getpid()
        self._jobs = 0
        self._lock = threading.RLock()  # one job at a time; the watcher ends only an idle set
        self._closed = threading.Event()

    @property
    def label(self) -> str:
        return f"{self.module} x{self.world}"

    @property
    def alive(self) -> bool:
        """Started by this process and every rank still running."""
        return self._owner == os.getpid() and bool(self.procs) and all(p.poll() is None for p in self.procs)

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.procs]

    # -- start ---------------------------------------------------------------------------------
    def start(self) -> Ranks:
        """Start the ranks and wait until each has rendezvoused; returns self. Raises RankError (a rank failed
        to start: its traceback; or `attempts` ports found in use), RankTimeout (a rank not ready, named)."""
        if self.procs:
            raise RankError(f"{self.label}: already started (pids {self.pids})")
        self._folder = OwnedFolder(PREFIX)  # sweeps the folders of dead owners first
        self.dir = self._folder.path
        for _ in range(self.attempts):
            port = int(self.ports())
            self.ports_tried.append(port)
            self._spawn(port)
            try:
                replies = self._collect(lambda m: "ready" in m, time.monotonic() + self.start_timeout, "start-up")
            except BaseException:
                self.close(grace=0)
                raise
            busy = [r for r, m in enumerate(replies) if not m["ready"] and m.get("port_in_use")]
            failed = [r for r, m in enumerate(replies) if not m["ready"] and not m.get("port_in_use")]
            if failed and not busy:  # (a peer of a rank that found the port taken has no answer yet)
                text = self._errors(replies, failed, "failed to start")
                self.close(grace=0)
                raise RankError(text)
            if not busy:
                self.port = port
                self._closed = threading.Event()
                threading.Thread(
                    target=self._watch, args=(self._closed,), name=f"watch {self.label}", daemon=True
                ).start()
                return self
            children.end(self.procs)  # someone else holds the port: try another
        tried = self.ports_tried
        self.close(grace=0)
        raise RankError(f"{self.label}: the rendezvous port was in use on all {self.attempts} attempts (ports {tried})")

    def _spawn(self, port: int) -> None:
        assert self.dir is not None
        self.procs = []
        for rank in range(self.world):
            argv = children.python("-m", self.module, "--rank", str(rank), "--world", str(self.world))
            argv += ["--port", str(port), "--parent", str(os.getpid())]
            with open(self.dir / f"rank{rank}.log", "ab") as log:
                self.procs.append(children.spawn(argv, f"rank {rank}", env=self.env, pipes=True, stderr=log))

    def _watch(self, closed: threading.Event) -> None:
        """While the set is open: a rank that exits while no job runs ends the set (nobody would notice)."""
        while not closed.wait(_WATCH_S):
            if not self._lock.acquire(blocking=False):
                continue  # a job runs: it sees the exit itself
            try:
                if self.procs and not self.alive:
                    self.close(grace=0)
            finally:
                self._lock.release()

    # -- jobs ----------------------------------------------------------------------------------
    def _check_alive(self) -> None:
        if not self.alive:
            raise RankError(f"{self.label}: not running (start() first, or a previous failure ended it)")

    def submit(self, job: Mapping, timeout: float = JOB_TIMEOUT) -> list[dict]:
        """Send one job to every rank; return each rank's answer (rank order) once all succeeded.

        Raises RankError at the first rank that raised or exited (its traceback, or its exit code
        and log), RankTimeout naming the ranks that did not answer within `timeout`; either way
        the ranks are killed (a peer may be stuck in a collective) and `alive` becomes False.
        """
        with self._lock:
            self._check_alive()
            self._jobs += 1
            job = {**job, "id": self._jobs}
            for proc in self.procs:
                proc.send(json.dumps(job).encode())  # a rank that died: _collect reports its exit and log
            what = f"job {job['id']} ({job.get('scenario', '?')}[{job.get('variant', '?')}])"
            try:
                replies = self._collect(lambda m: m.get("id") == job["id"], time.monotonic() + timeout, what)
            except BaseException:
                self.close(grace=0)  # a peer may be stuck in a collective: kill, do not wait
                raise
            failed = [r for r, m in enumerate(replies) if not m.get("ok")]
            if failed:
                text = self._errors(replies, failed, f"failed in {what}")
                self.close(grace=0)
                raise RankError(text)
            return replies

    def run(self, scenario: str, fx: Fixture, variant: str, timeout: float = JOB_TIMEOUT) -> dict[str, np.ndarray]:
        """Run `scenario[variant]` on `fx` on every rank; return rank 0's outputs (a flat dict of arrays)."""
        with self._lock:
            self._check_alive()
            job_dir = Path(tempfile.mkdtemp(prefix="job-", dir=self.dir))  # type: ignore[arg-type]
            try:
                meta = save_fixture(fx, job_dir / "fixture.npz")
                self.submit({"scenario": scenario, "variant": variant, "fixture": meta, "out": str(job_dir)}, timeout)
                with np.load(job_dir / "rank0.npz") as data:
                    return {k: data[k] for k in data.files}
            finally:
                shutil.rmtree(job_dir, ignore_errors=True)  # our own folder

    def _collect(self, wanted: Callable[[dict], bool], deadline: float, what: str) -> list[dict]:
        """Read answers until every rank gave one matching `wanted`, one failed, or the deadline."""
        answers: list[dict | None] = [None] * self.world
        while True:
            for rank, proc in enumerate(self.procs):
                exited = proc.poll() is not None  # before reading: what it wrote before exiting is read below
                if answers[rank] is None:
                    answers[rank] = _first(proc.lines(), wanted)
                if answers[rank] is None and exited:
                    answers[rank] = {"ok": False, "ready": False, "error": f"{proc.exit_text()} before answering"}
            if any(a is not None and _failed(a) for a in answers) or all(a is not None for a in answers):
                break  # a failure is reported at once: its peers may never answer
            left = deadline - time.monotonic()
            if left <= 0:
                missing = [r for r, a in enumerate(answers) if a is None]
                arrived = [r for r, a in enumerate(answers) if a is not None]
                logs = "\n".join(f"--- rank {r} log (tail) ---\n{self._log(r)}" for r in missing)
                raise RankTimeout(
                    f"{self.label}: rank(s) {missing} did not arrive within the timeout in {what} "
                    f"(answered: {arrived})\n{logs}"
                )
            children.readable([p for r, p in enumerate(self.procs) if answers[r] is None], min(left, 0.2))
        return [a if a is not None else {"ok": False, "ready": False, "pending": True} for a in answers]

    def _errors(self, replies: Sequence[dict], ranks: Sequence[int], what: str) -> str:
        pending = [r for r in ranks if replies[r].get("pending")]
        parts = [f"{self.label}: rank {r} {what}:\n{replies[r].get('error', '?')}" for r in ranks if r not in pending]
        parts += [f"(rank(s) {pending} had not answered yet; ended with the others)"] if pending else []
        died = [r for r in ranks if "before answering" in str(replies[r].get("error", ""))]
        return "\n".join(parts + [f"--- rank {r} log (tail) ---\n{self._log(r)}" for r in died])

    def _log(self, rank: int) -> str:
        try:
            return (self.dir / f"rank{rank}.log").read_text(encoding="utf-8", errors="replace")[-_LOG_TAIL:]  # type: ignore[operator]
        except (OSError, TypeError):
            return ""

    # -- end -----------------------------------------------------------------------------------
    def close(self, grace: float = 5.0) -> None:
        """End the ranks: close their stdin (they exit), kill any still running after `grace` s.

        Removes the pool's folder. A copy of this object in a forked child ends nothing.
        """
        if self._owner != os.getpid():
            self.procs = []
            return
        with self._lock:
            self._closed.set()
            children.end(self.procs, grace)
            self.procs = []
            if self._folder is not None:
                self._folder.release()  # the folder start() created
                self._folder, self.dir = None, None

    def __enter__(self) -> Ranks:
        return self if self.procs else self.start()

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Ranks({self.module!r}, world={self.world}, port={self.port}, pids={self.pids})"


def _first(lines: list[bytes], wanted: Callable[[dict], bool]) -> dict | None:
    for line in lines:
        try:
            message = json.loads(line)
        except ValueError:
            continue  # not ours
        if isinstance(message, dict) and (wanted(message) or _failed(message)):
            return message
    return None


def _failed(message: dict) -> bool:  # a rank's error, or a start-up that failed
    return message.get("ok") is False or message.get("ready") is False


_POOLS: dict[tuple, Ranks] = {}


def pool(module: str, world: int, *, env: Mapping[str, str] | None = None) -> Ranks:
    """The running ranks of (module, world, env) in this process, started on first use or after a failure."""
    key = (module, world, tuple(sorted((env or {}).items())))
    ranks = _POOLS.get(key)
    if ranks is None or not ranks.alive:
        if ranks is not None:
            ranks.close(grace=0)  # a rank of it died: the others and its folder go too
        ranks = Ranks(module, world, env=env).start()
        _POOLS[key] = ranks
    return ranks


def close_pools() -> None:
    """End every pool this process started (registered with atexit)."""
    for key in list(_POOLS):
        _POOLS.pop(key).close()


atexit.register(close_pools)
