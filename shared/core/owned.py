"""Temporary folders that say whether their owner still lives, in any PID namespace.

A process that shares the temporary directory with others (another container sharing /tmp, say) cannot
judge a folder's owner by its pid: that pid means nothing in another PID namespace, or names someone else.
So the owner of an `OwnedFolder` holds an advisory lock (fcntl.flock) on the file `.owner` in it for as
long as the folder is in use; the kernel drops the lock when the owner dies, however it dies. `sweep`
removes a folder only when it can take that lock itself and the file says it was claimed (it is written
once the owner holds the lock): a folder whose lock is held, whose lock file is missing or empty (being
created, or not of this layout) is never touched.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import socket
import tempfile
from pathlib import Path

__all__ = ["LOCK", "OwnedFolder", "sweep", "owner_alive"]

LOCK = ".owner"  # in an owned folder: locked by its owner for the folder's life; "<pid> <host>" once claimed


class OwnedFolder:
    """A fresh folder `<prefix><pid>-XXXX` in the temporary directory, locked by this process until `release`.

    Creating one first sweeps the folders of `prefix` whose owner is gone (`sweep`).
    """

    def __init__(self, prefix: str, root: Path | None = None) -> None:
        self.prefix = prefix
        self.root = Path(tempfile.gettempdir()) if root is None else Path(root)
        sweep(prefix, self.root)
        self.path = Path(tempfile.mkdtemp(prefix=f"{prefix}{os.getpid()}-", dir=self.root))
        self._fd: int | None = os.open(self.path / LOCK, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        fcntl.flock(self._fd, fcntl.LOCK_EX)  # blocks only while a sweeper looks (it sees an empty file: not ours)
        os.write(self._fd, f"{os.getpid()} {socket.gethostname()}\n".encode())
        self.owner = os.getpid()

    def release(self) -> None:
        """Remove the folder, then drop the lock. In a forked copy of this object: nothing (not its owner)."""
        if self._fd is None or self.owner != os.getpid():
            return
        shutil.rmtree(self.path, ignore_errors=True)  # the folder this object created
        os.close(self._fd)
        self._fd = None

    def __repr__(self) -> str:
        return f"OwnedFolder({str(self.path)!r})"


def owner_alive(folder: Path) -> bool | None:
    """True: the owner holds the lock; False: claimed once and the lock is free (the owner is gone);
    None: not an owned folder of this layout, or one being created (no lock file, or an empty one)."""
    with _lock(folder) as state:
        return state


@contextlib.contextmanager
def _lock(folder: Path):
    try:
        fd = os.open(Path(folder) / LOCK, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        yield None
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield True
            return
        yield False if os.fstat(fd).st_size else None  # held by us now, until the folder is handled
    finally:
        os.close(fd)


def sweep(prefix: str, root: Path | None = None) -> list[Path]:
    """Remove the folders `<prefix>*` under root (the temporary directory) whose owner is gone; returns them."""
    root = Path(tempfile.gettempdir()) if root is None else Path(root)
    removed = []
    for folder in sorted(root.glob(f"{prefix}*")):
        if folder.is_symlink() or not folder.is_dir():
            continue
        with _lock(folder) as state:
            if state is False:  # claimed, and its lock was free: we hold it while removing
                shutil.rmtree(folder, ignore_errors=True)
                removed.append(folder)
    return removed
