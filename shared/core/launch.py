"""Start the ranks of a data-parallel case as processes, hand them jobs, collect rank 0's outputs.

Framework-neutral infrastructure of the `data_parallel` family: this module imports no framework
and performs no collective. The ranks rendezvous among themselves (torch.distributed,
jax.distributed) on the free port picked here; this module only starts them, talks to them
over pipes and ends them. Its promises:

  * one start serves many cases: `pool(module, world)` keeps one set of ranks per process and
    configuration, started on first use (the frameworks' import and rendezvous cost seconds);
  * a rank that raises fails the case with that rank's traceback, at once: the other ranks may
    be blocked in a collective that will never complete, so the whole set is killed, and the
    next case starts a fresh one;
  * a rank that does not answer in time fails the case with a RankTimeout naming it;
  * a port found in use at the rendezvous (a rank's init raises PortInUse) is retried on a new port;
  * no orphan: ranks are killed on failure and at exit, and a rank whose parent died (even by
    SIGKILL) sees its stdin close, or its parent pid change, and exits; the folder of a dead owner
    (`detach-parity-ranks-<pid>-*` in the temporary directory) is removed by the next start.

Parent side: `Ranks(module, world).start()`, `Ranks.run(scenario, fx, variant)`, `Ranks.close()`,
`pool()`. Rank side: `serve(init, run)`, the main loop of `python -m <module>`. Fixtures travel as
an .npz in the pool's temporary folder (`save_fixture` / `load_fixture`); each rank writes its
outputs as `rank<r>.npz` next to it.

Wire protocol: one JSON object per line, jobs on each rank's stdin, answers on its stdout (a rank
points its file descriptor 1 at its log at once, so a library printing to stdout, as gloo does,
cannot corrupt an answer); stderr goes to `rank<r>.log`, quoted in error messages.
"""

from __future__ import annotations

import argparse
import atexit
import json
import os
import selectors
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import numpy as np

from . import registry
from .fixtures import Fixture

__all__ = [
    "START_TIMEOUT",
    "JOB_TIMEOUT",
    "RankError",
    "RankTimeout",
    "PortInUse",
    "free_port",
    "save_fixture",
    "load_fixture",
    "Ranks",
    "pool",
    "close_pools",
    "serve",
]

START_TIMEOUT = 300.0  # seconds for every rank to import its framework and rendezvous (2 shared cores: slow)
JOB_TIMEOUT = 300.0  # seconds for every rank to answer one case
_LOG_TAIL = 3000  # characters of a rank's log quoted in an error


class RankError(RuntimeError):
    """A rank raised, exited or could not start; the message names the rank and quotes its error."""


class RankTimeout(RankError, TimeoutError):
    """A rank did not answer in time; the message names the ranks that did not arrive."""


class PortInUse(RuntimeError):
    """Raised by a rank's `init` when the rendezvous port is taken: the parent retries on another port."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (the ranks bind it; a lost race is retried)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def save_fixture(fx: Fixture, path: Path) -> dict:
    """Write a fixture's arrays to `path` (.npz); return the metadata `load_fixture` needs with it."""
    if not isinstance(fx, Fixture):
        raise ValueError(
            f"save_fixture: fx expected a detach_parity.shared.core.fixtures.Fixture, got {type(fx).__name__}"
        )
    np.savez(path, **{k: np.asarray(v) for k, v in fx.items()})
    return {"path": str(path), "scenario": fx.scenario, "dtype": fx.dtype, "seed": fx.seed, "case": fx.case}


def load_fixture(meta: Mapping) -> Fixture:
    """The fixture `save_fixture` wrote, rebuilt from its record and validated again."""
    with np.load(meta["path"]) as data:
        arrays = {k: data[k] for k in data.files}
    spec = registry.get(meta["scenario"])
    return Fixture(spec, meta["dtype"], arrays, seed=meta["seed"], case=meta["case"])


def _child_env(extra: Mapping[str, str]) -> dict[str, str]:
    # the ranks import the modules this process would import: its sys.path, in order (as
    # multiprocessing's spawn does), so a checkout or a mutated copy runs its own code
    env = dict(os.environ)
    paths = [os.getcwd() if p == "" else p for p in sys.path]
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(p for p in paths if p))
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra)
    return env


class Ranks:
    """`world` processes running `python -m <module>`, serving one job at a time.

    Args:
      module: the rank entry point, a module whose `__main__` calls `serve(init, run)`.
      world: number of ranks (processes).
      env: extra environment variables of the ranks.
      ports: callable giving the next rendezvous port to try (default `free_port`).
      attempts: ports tried before giving up when a rank reports PortInUse.
      start_timeout: seconds for every rank to be ready.
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
        self.procs: list[subprocess.Popen] = []
        self.dir: Path | None = None
        self._owner = os.getpid()
        self._jobs = 0
        self._buffers: list[bytes] = []
        self._lock = threading.Lock()

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
        """Start the ranks and wait until each has rendezvoused; returns self.

        Raises RankError (a rank failed to start: its traceback), RankTimeout (a rank not ready
        within start_timeout, named) or RankError after `attempts` ports found in use.
        """
        if self.procs:
            raise RankError(f"{self.label}: already started (pids {self.pids})")
        _sweep()
        self.dir = Path(tempfile.mkdtemp(prefix=f"{_PREFIX}{os.getpid()}-"))
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
                return self
            self._kill()  # someone else holds the port: try another
        tried = self.ports_tried
        self.close(grace=0)
        raise RankError(f"{self.label}: the rendezvous port was in use on all {self.attempts} attempts (ports {tried})")

    def _spawn(self, port: int) -> None:
        assert self.dir is not None
        env = _child_env(self.env)
        self.procs, self._buffers = [], []
        for rank in range(self.world):
            argv = [sys.executable, "-m", self.module, "--rank", str(rank), "--world", str(self.world)]
            argv += ["--port", str(port), "--parent", str(os.getpid())]
            with open(self.dir / f"rank{rank}.log", "ab") as log:
                proc = subprocess.Popen(
                    argv,
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=log,
                    env=env,
                    start_new_session=True,  # a Ctrl-C reaches the parent only; it ends the ranks
                )
            os.set_blocking(proc.stdout.fileno(), False)
            self.procs.append(proc)
            self._buffers.append(b"")

    # -- jobs ----------------------------------------------------------------------------------
    def submit(self, job: Mapping, timeout: float = JOB_TIMEOUT) -> list[dict]:
        """Send one job to every rank; return each rank's answer (rank order) once all succeeded.

        Raises RankError at the first rank that raised or exited (its traceback, or its exit code
        and log), RankTimeout naming the ranks that did not answer within `timeout`; either way
        the ranks are killed (a peer may be stuck in a collective) and `alive` becomes False.
        """
        with self._lock:
            if not self.alive:
                raise RankError(f"{self.label}: not running (start() first, or a previous failure ended it)")
            self._jobs += 1
            job = {**job, "id": self._jobs}
            line = (json.dumps(job) + "\n").encode()
            try:
                for proc in self.procs:
                    proc.stdin.write(line)
                    proc.stdin.flush()
            except (BrokenPipeError, OSError):
                pass  # a rank died: _collect reports its exit code and log
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
        if not self.alive:
            raise RankError(f"{self.label}: not running (start() first, or a previous failure ended it)")
        assert self.dir is not None
        job_dir = Path(tempfile.mkdtemp(prefix="job-", dir=self.dir))
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
        sel = selectors.DefaultSelector()
        for rank, proc in enumerate(self.procs):
            sel.register(proc.stdout, selectors.EVENT_READ, rank)
        try:
            while any(a is None for a in answers):
                for rank in range(self.world):
                    if answers[rank] is None:
                        answers[rank] = self._parse(rank, wanted)
                if any(a is not None and _failed(a) for a in answers) or all(a is not None for a in answers):
                    break  # a failure is reported at once: its peers may never answer
                for rank, proc in enumerate(self.procs):
                    if answers[rank] is None and proc.poll() is not None:
                        answers[rank] = self._parse(rank, wanted, drain=True) or {
                            "ok": False,
                            "ready": False,
                            "error": f"exited with code {proc.returncode} before answering",
                        }
                if any(a is not None and _failed(a) for a in answers):
                    break
                left = deadline - time.monotonic()
                if left <= 0:
                    missing = [r for r, a in enumerate(answers) if a is None]
                    arrived = [r for r, a in enumerate(answers) if a is not None]
                    logs = "\n".join(f"--- rank {r} log (tail) ---\n{self._log(r)}" for r in missing)
                    raise RankTimeout(
                        f"{self.label}: rank(s) {missing} did not arrive within the timeout in {what} "
                        f"(answered: {arrived})\n{logs}"
                    )
                for key, _ in sel.select(timeout=min(left, 0.2)):
                    self._read(key.data)
        finally:
            sel.close()
        return [a if a is not None else {"ok": False, "ready": False, "pending": True} for a in answers]

    def _read(self, rank: int) -> None:
        try:
            chunk = os.read(self.procs[rank].stdout.fileno(), 1 << 16)
        except BlockingIOError:
            return
        self._buffers[rank] += chunk

    def _parse(self, rank: int, wanted: Callable[[dict], bool], drain: bool = False) -> dict | None:
        if drain:
            while True:
                before = len(self._buffers[rank])
                self._read(rank)
                if len(self._buffers[rank]) == before:
                    break
        while b"\n" in self._buffers[rank]:
            line, self._buffers[rank] = self._buffers[rank].split(b"\n", 1)
            try:
                message = json.loads(line)
            except ValueError:
                continue  # not ours
            if isinstance(message, dict) and (wanted(message) or _failed(message)):
                return message
        return None

    def _errors(self, replies: Sequence[dict], ranks: Sequence[int], what: str) -> str:
        pending = [r for r in ranks if replies[r].get("pending")]
        ranks = [r for r in ranks if not replies[r].get("pending")]
        parts = [f"{self.label}: rank {r} {what}:\n{replies[r].get('error', '?')}" for r in ranks]
        if pending:
            parts.append(f"(rank(s) {pending} had not answered yet; ended with the others)")
        for r in ranks:
            if "exited with code" in str(replies[r].get("error", "")):
                parts.append(f"--- rank {r} log (tail) ---\n{self._log(r)}")
        return "\n".join(parts)

    def _log(self, rank: int) -> str:
        if self.dir is None:
            return ""
        path = self.dir / f"rank{rank}.log"
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""
        return text[-_LOG_TAIL:]

    # -- end -----------------------------------------------------------------------------------
    def _kill(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()  # by pid: only the processes this object started
        for proc in self.procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
            for stream in (proc.stdin, proc.stdout):
                try:
                    stream.close()
                except OSError:
                    pass

    def close(self, grace: float = 5.0) -> None:
        """End the ranks: close their stdin (they exit), kill any still running after `grace` s.

        Removes the pool's temporary folder. A copy of this object in a forked child ends nothing.
        """
        if self._owner != os.getpid():
            self.procs = []
            return
        for proc in self.procs:
            try:
                proc.stdin.close()
            except OSError:
                pass
        end = time.monotonic() + grace
        for proc in self.procs:
            try:
                proc.wait(timeout=max(0.0, end - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        self._kill()
        self.procs = []
        if self.dir is not None:
            shutil.rmtree(self.dir, ignore_errors=True)  # the folder start() created
            self.dir = None

    def __enter__(self) -> Ranks:
        return self if self.procs else self.start()

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Ranks({self.module!r}, world={self.world}, port={self.port}, pids={self.pids})"


_PREFIX = "detach-parity-ranks-"  # + the owner's pid: the folder of one Ranks, with its logs and job files


def _sweep() -> None:
    """Remove the folders of Ranks whose owner died without closing them (SIGKILL, a forked child's os._exit)."""
    for folder in Path(tempfile.gettempdir()).glob(f"{_PREFIX}*-*"):
        owner = folder.name[len(_PREFIX) :].split("-", 1)[0]
        if owner.isdigit() and folder.is_dir() and not _alive(int(owner)):
            shutil.rmtree(folder, ignore_errors=True)  # a live owner's, or a name not ours: never touched


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)  # signal 0: a question, not a signal
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process
    return True


def _failed(message: dict) -> bool:
    return message.get("ok") is False or message.get("ready") is False


_POOLS: dict[tuple, Ranks] = {}


def pool(module: str, world: int, *, env: Mapping[str, str] | None = None) -> Ranks:
    """The running ranks of (module, world, env) in this process, started on first use or after a failure."""
    key = (module, world, tuple(sorted((env or {}).items())))
    ranks = _POOLS.get(key)
    if ranks is None or not ranks.alive:
        ranks = Ranks(module, world, env=env).start()
        _POOLS[key] = ranks
    return ranks


def close_pools() -> None:
    """End every pool this process started (registered with atexit)."""
    for key in list(_POOLS):
        _POOLS.pop(key).close()


atexit.register(close_pools)


# -- rank side -----------------------------------------------------------------------------------
def _watch_parent(parent: int) -> None:
    def watch() -> None:
        while True:
            if os.getppid() != parent:
                os._exit(3)  # the parent died (even by SIGKILL): never outlive it
            time.sleep(0.5)

    threading.Thread(target=watch, name="watch-parent", daemon=True).start()


def serve(init: Callable[[int, int, int], None], run: Callable[[str, Fixture, str], Mapping[str, object]]) -> int:
    """The main loop of a rank process: `init(rank, world, port)`, then one job per stdin line.

    `init` joins the framework's process group (and raises PortInUse when the rendezvous port
    is taken); `run(scenario, fx, variant)` computes this rank's outputs, written as
    `<job out>/rank<r>.npz`. Every exception is answered with its traceback, and the loop ends
    when stdin closes (the parent closed it, or died). Returns the exit status.
    """
    parser = argparse.ArgumentParser(prog=f"python -m {sys.argv[0]}")
    for name in ("rank", "world", "port", "parent"):
        parser.add_argument(f"--{name}", type=int, required=True)
    args = parser.parse_args()
    answers = os.fdopen(os.dup(1), "w", buffering=1, encoding="utf-8")
    os.dup2(2, 1)  # anything printed to stdout (gloo does) goes to the log, not into an answer

    def answer(**message) -> None:
        answers.write(json.dumps(message) + "\n")
        answers.flush()

    _watch_parent(args.parent)
    try:
        init(args.rank, args.world, args.port)
    except PortInUse as exc:
        answer(ready=False, port_in_use=True, error=f"port {args.port} in use: {exc}")
        return 1
    except BaseException:
        answer(ready=False, error=traceback.format_exc())
        return 1
    answer(ready=True, pid=os.getpid())
    while True:
        line = sys.stdin.readline()
        if not line:
            return 0
        start = time.perf_counter()
        job = json.loads(line)
        try:
            fx = load_fixture(job["fixture"])
            outputs = run(job["scenario"], fx, job["variant"])
            np.savez(Path(job["out"]) / f"rank{args.rank}.npz", **{k: np.asarray(v) for k, v in outputs.items()})
        except Exception:
            answer(id=job["id"], ok=False, error=traceback.format_exc())
            continue
        answer(id=job["id"], ok=True, seconds=round(time.perf_counter() - start, 4))
