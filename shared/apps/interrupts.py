"""Ctrl-C in the commands: counted even when a library swallows it, and held back while a commit renames.

`interrupt_guard` counts every SIGINT while a command runs, even when a library catches the
KeyboardInterrupt on its way up (JAX may, inside a callback); the writers call `check_interrupted()`
before they commit, so an interrupted command writes nothing and exits 130. The command's child
processes never see the terminal's Ctrl-C (shared.core.children: a session of their own); the
command ends them as its KeyboardInterrupt unwinds.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator

__all__ = ["interrupt_guard", "interrupted", "check_interrupted", "signals_deferred"]

_interrupts = 0


def _on_sigint(signum, frame) -> None:
    global _interrupts
    _interrupts += 1
    raise KeyboardInterrupt


@contextlib.contextmanager
def interrupt_guard() -> Iterator[None]:
    """Count every SIGINT while a command runs (the previous handler is restored after).

    Each SIGINT still raises KeyboardInterrupt, as Python's own handler does; the count
    survives when a library catches that exception on its way up, so `interrupted()` and
    `check_interrupted()` still know. A process that ignores SIGINT (nohup, a background job)
    keeps ignoring it. Main thread only; elsewhere a no-op.
    """
    global _interrupts
    _interrupts = 0
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.getsignal(signal.SIGINT)
    if previous is not signal.SIG_IGN:
        signal.signal(signal.SIGINT, _on_sigint)
    try:
        yield
    finally:
        if previous is not signal.SIG_IGN:
            signal.signal(signal.SIGINT, previous if previous is not None else signal.default_int_handler)


def interrupted() -> bool:
    """True when a SIGINT arrived since the current `interrupt_guard` began."""
    return _interrupts > 0


def check_interrupted() -> None:
    """Raise KeyboardInterrupt if a SIGINT arrived (even one that was swallowed): call before committing output."""
    if _interrupts:
        raise KeyboardInterrupt


@contextlib.contextmanager
def signals_deferred() -> Iterator[None]:
    """SIGINT and SIGTERM held back (delivered after) while a few renames complete."""
    deferred = {signal.SIGINT, signal.SIGTERM}
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = signal.pthread_sigmask(signal.SIG_BLOCK, deferred)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)
