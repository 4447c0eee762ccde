"""Every process the package starts, in one place: start, parent death, Ctrl-C, reaping.

Four kinds of children use it: the ranks of a data-parallel case (shared.core.launch), the workers of
`run --jobs N` (shared.apps.run_workers), the bench's measuring process (shared.apps.bench) and selfcheck's
forked pytest runs (shared.apps.selfcheck). It imports no framework: the core's ranks stand on it.

  * start: `spawn(argv)` runs a command with this process's sys.path (a checkout or a mutated copy runs
    its own code); `fork(body)` forks (selfcheck: the parent imported torch and JAX once). Either way the
    child is in a session of its own.
  * parent death: a child calls `follow_parent(pid)` first: Linux's PR_SET_PDEATHSIG delivers SIGTERM when
    the parent dies (even by SIGKILL), then the child checks that its parent is still `pid` (one that died
    before the prctl sends nothing: the child exits at once). Without prctl (another OS) a thread polls the
    parent. The signal follows the thread that started the child: start children from a thread that lives
    as long as they do (the main thread, here).
  * Ctrl-C: a child never receives the terminal's SIGINT (its own session); the parent ends its children
    when its KeyboardInterrupt unwinds (`end`; at exit, whatever still runs).
  * reaping: `end(children, grace)` closes their stdin, waits up to `grace` s, kills by pid whatever still
    runs and waits for each (no zombie). Only processes this process started, never by name; a copy of a
    Child in a forked process ends nothing.

The pipes speak in lines: `Child.send(bytes)` writes one, `Child.lines()` returns the complete lines
received so far without blocking, `readable(children, timeout)` waits for one; a child answers through
`answer_channel()`, its original standard output (fd 1 then points at stderr, so that a library printing
to stdout cannot corrupt an answer).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import selectors
import signal
import subprocess
import sys
import time
import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import IO

from .in_child import ORPHANED, _prctl, answer_channel, follow_parent

__all__ = [
    "ORPHANED",
    "Child",
    "python",
    "child_env",
    "spawn",
    "fork",
    "follow_parent",
    "answer_channel",
    "readable",
    "end",
]

_STARTED: weakref.WeakSet[Child] = weakref.WeakSet()


class Child:
    """A process this process started: spawned (`popen`) or forked (`pid` only).

    `poll()` / `wait()` return its exit status as subprocess does (negative: killed by that signal) and
    reap it; `kill()` signals it by pid, only while it runs and only from the process that started it.
    """

    def __init__(self, pid: int, name: str, popen: subprocess.Popen | None = None) -> None:
        self.pid, self.name, self.popen = pid, name, popen
        self.owner = os.getpid()
        self.returncode: int | None = None
        self._buffer = b""
        _STARTED.add(self)

    @property
    def ours(self) -> bool:
        return self.owner == os.getpid()

    def poll(self) -> int | None:
        """The exit status once the child has exited (it is reaped then), None while it runs."""
        if self.returncode is not None or not self.ours:
            return self.returncode
        if self.popen is not None:
            self.returncode = self.popen.poll()
            return self.returncode
        try:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
        except ChildProcessError:  # reaped elsewhere: its status is lost, it is gone
            self.returncode = -signal.SIGKILL
            return self.returncode
        if pid:
            self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    @property
    def running(self) -> bool:
        return self.poll() is None

    def wait(self, timeout: float | None = None) -> int | None:
        """Wait up to `timeout` s (None: for ever) for the exit; its status, or None if still running."""
        if self.popen is not None and self.ours and self.returncode is None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.returncode = self.popen.wait(timeout)
            return self.returncode
        end_at = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if not self.ours or (end_at is not None and time.monotonic() >= end_at):
                return None
            time.sleep(0.02)
        return self.returncode

    def kill(self, sig: int = signal.SIGKILL) -> None:
        """Send `sig` (default SIGKILL) to the child by pid, if it still runs and this process started it."""
        if self.ours and self.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, sig)

    def exit_text(self) -> str:
        """How it ended, in words: "exited with code 7", "was killed by signal 9 (SIGKILL)", "is running"."""
        code = self.poll()
        if code is None:
            return "is running"
        if code < 0:
            with contextlib.suppress(ValueError):
                return f"was killed by signal {-code} ({signal.Signals(-code).name})"
            return f"was killed by signal {-code}"
        return f"exited with code {code}"

    # -- the pipes of a spawned child (spawn(..., pipes=True)) -----------------------------------------
    def send(self, line: bytes) -> bool:
        """Write one line to the child's stdin; False if the child is gone (its pipe broke)."""
        try:
            self.popen.stdin.write(line if line.endswith(b"\n") else line + b"\n")  # type: ignore[union-attr]
            self.popen.stdin.flush()  # type: ignore[union-attr]
        except (OSError, ValueError):  # a broken pipe, or one already closed
            return False
        return True

    def lines(self) -> list[bytes]:
        """The complete lines the child wrote since the last call (never blocks)."""
        stream = self.popen.stdout if self.popen is not None else None
        while stream is not None and not stream.closed:
            try:
                chunk = os.read(stream.fileno(), 1 << 16)
            except OSError:  # nothing more now (EAGAIN), or a closed pipe
                break
            if not chunk:
                break
            self._buffer += chunk
        *complete, self._buffer = self._buffer.split(b"\n")
        return complete

    def close_stdin(self) -> None:
        if self.popen is not None and self.popen.stdin is not None:
            with contextlib.suppress(OSError):
                self.popen.stdin.close()

    def close_pipes(self) -> None:
        self.close_stdin()
        if self.popen is not None and self.popen.stdout is not None:
            with contextlib.suppress(OSError):
                self.popen.stdout.close()

    def __repr__(self) -> str:
        return f"Child({self.name!r}, pid={self.pid}, {self.exit_text()})"


def python(*args: str) -> list[str]:
    """The argv of a Python child running `args` (e.g. "-m", module) with this interpreter, in safe-path mode.

    `python -m x` puts the working folder first on the child's import path, so a `json.py` left there would
    be imported by every worker and rank instead of the standard library's; `-P` (Python 3.11) leaves it off.
    The child's path is this process's sys.path, given by child_env.
    """
    return [sys.executable, "-P", *args]


def child_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """This process's environment for a child, with its sys.path as PYTHONPATH (in order, as multiprocessing's
    spawn does: a checkout or a mutated copy runs its own code), unbuffered output, safe-path mode (the
    working folder is never added to a Python child's path: PYTHONSAFEPATH, as `python -P`), and `extra` on top."""
    env = dict(os.environ)
    paths = [os.getcwd() if p == "" else p for p in sys.path]
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(p for p in paths if p))
    env["PYTHONUNBUFFERED"] = "1"
    env["PYTHONSAFEPATH"] = "1"
    env.update(extra or {})
    return env


def spawn(
    argv: Sequence[str],
    name: str,
    *,
    env: Mapping[str, str] | None = None,
    pipes: bool = False,
    stderr: IO | int | None = None,
    cwd: str | os.PathLike | None = None,
) -> Child:
    """Start `argv` in a session of its own (child_env(env) as its environment).

    pipes: stdin and stdout are pipes (send / lines); otherwise they are this process's. stderr: where the
    child's stderr goes (default: this process's). The child should call `follow_parent(<this pid>)`.
    """
    popen = subprocess.Popen(
        list(argv),
        stdin=subprocess.PIPE if pipes else None,
        stdout=subprocess.PIPE if pipes else None,
        stderr=stderr,
        env=child_env(env),
        cwd=cwd,
        start_new_session=True,  # the terminal's Ctrl-C reaches the parent alone: it ends its children
    )
    if pipes:
        os.set_blocking(popen.stdout.fileno(), False)  # type: ignore[union-attr]
    return Child(popen.pid, name, popen)


def fork(body: Callable[[], int], name: str) -> Child:
    """Fork; the child runs `body()` in a session of its own and exits with its return value (3 if it raised).

    The child follows this process (follow_parent) and takes SIGTERM and SIGINT at their defaults (the
    parent's handlers, e.g. interrupt counting, are not its own).
    """
    parent = os.getpid()
    _prctl()  # looked up here, not in the child
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        code = 3
        try:
            os.setsid()
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            signal.signal(signal.SIGINT, signal.default_int_handler)
            follow_parent(parent)
            code = int(body())
        finally:
            os._exit(code)
    return Child(pid, name)


def readable(children: Iterable[Child], timeout: float) -> list[Child]:
    """The spawned children with output to read, waiting up to `timeout` s for one."""
    sel = selectors.DefaultSelector()
    try:
        for child in children:
            stream = child.popen.stdout if child.popen is not None else None
            if stream is not None and not stream.closed:
                sel.register(stream, selectors.EVENT_READ, child)
        if not sel.get_map():
            time.sleep(timeout)
            return []
        return [key.data for key, _ in sel.select(timeout=timeout)]
    finally:
        sel.close()


def end(children: Iterable[Child], grace: float = 0.0) -> None:
    """End children: close their stdin (a serving child exits), wait up to `grace` s in all, kill (SIGKILL)
    those still running, reap every one and close the pipes. A copy of a Child in a forked process is only
    forgotten: the process that started it ends it."""
    children = [c for c in children if c.ours]
    for child in children:
        child.close_stdin()
    end_at = time.monotonic() + grace
    for child in children:
        child.wait(max(0.0, end_at - time.monotonic()))
    for child in children:
        child.kill()
    for child in children:
        child.wait(10.0)
        child.close_pipes()


def _end_all() -> None:
    """End every child this process started that still runs (at exit)."""
    end([c for c in list(_STARTED) if c.ours and c.returncode is None])


atexit.register(_end_all)
