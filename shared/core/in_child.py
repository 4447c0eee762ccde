"""What a child the package started calls in itself (shared.core.children starts them): follow the parent,
answer on the original standard output. It imports no framework."""

from __future__ import annotations

import ctypes
import functools
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import IO

__all__ = ["ORPHANED", "follow_parent", "answer_channel"]

ORPHANED = 1  # exit status of a child whose parent was gone when it looked
_PR_SET_PDEATHSIG = 1  # linux/prctl.h


def follow_parent(parent: int, sig: int = signal.SIGTERM) -> None:
    """In a child: never outlive `parent` (the pid the parent gave), even one killed by SIGKILL.

    Linux: PR_SET_PDEATHSIG(sig); then, since a parent that died before that call sends nothing, the child
    exits at once (status ORPHANED) unless its parent is still `parent`. Elsewhere a daemon thread polls
    the parent every half second.
    """
    prctl = _prctl()
    armed = prctl is not None and prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0) == 0
    if os.getppid() != parent:
        os._exit(ORPHANED)
    if not armed:

        def watch() -> None:
            while os.getppid() == parent:
                time.sleep(0.5)
            os._exit(ORPHANED)

        threading.Thread(target=watch, name="follow-parent", daemon=True).start()


@functools.cache
def _prctl() -> Callable[..., int] | None:
    """libc's prctl on Linux, else None (looked up before a fork: a forked child of a threaded process
    should not load libraries)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


def answer_channel() -> IO[str]:
    """In a spawned child: a line-buffered text stream on its original stdout (the pipe its parent reads);
    fd 1 then points at stderr, so that a library printing to stdout (gloo does) cannot corrupt an answer."""
    answers = os.fdopen(os.dup(1), "w", buffering=1, encoding="utf-8")
    sys.stdout.flush()
    os.dup2(2, 1)
    return answers
