"""One JSON report (`--json PATH`), written whole or not at all, and only over an earlier report of ours.

`write_json` writes a temporary file beside PATH and renames it over PATH once complete (PATH is
the user's explicit choice; a symlink there is replaced, never written through). Only an absent path
or an earlier report of this package (a JSON object with `versions`) is replaced.
"""

from __future__ import annotations

import errno
import importlib.metadata as md
import json
import os
import platform
import tempfile
from collections.abc import Mapping
from pathlib import Path

from .interrupts import check_interrupted

__all__ = ["versions", "our_json", "write_json", "current_umask"]


def versions() -> dict[str, str]:
    """Python and the installed versions of torch, jax, flax, optax and numpy ("missing" if absent)."""
    out = {"python": platform.python_version()}
    for dist in ("torch", "jax", "flax", "optax", "numpy"):
        try:
            out[dist] = md.version(dist)
        except md.PackageNotFoundError:
            out[dist] = "missing"
    return out


def current_umask() -> int:
    """This process's umask (read by setting it, then restoring it)."""
    umask = os.umask(0)
    os.umask(umask)
    return umask


def our_json(path: Path) -> bool:
    """Whether `path` is a plain file holding a JSON report of this package (an object with `versions`)."""
    if path.is_symlink() or not path.is_file():
        return False
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except (OSError, ValueError):
        return False
    return isinstance(data, dict) and isinstance(data.get("versions"), dict) and "jax" in data["versions"]


def write_json(path: Path | str, payload: Mapping) -> None:
    """Write `payload` as JSON atomically: a temporary file in the same folder, renamed over `path`
    once complete, so a full disk, a file-size limit or an interrupt never leaves a truncated file
    (a previous file there stays as it was). Only an absent path or an earlier report of this
    package (a JSON object with `versions`) is replaced: any other file, or a symlink, is left alone.

    Raises OSError (the caller reports it: exit 2, never the code of a failed check): FileExistsError
    for a file this package did not write; KeyboardInterrupt if a SIGINT arrived during the command
    (nothing is written).
    """
    path = Path(path)
    if (path.exists() or path.is_symlink()) and not our_json(path):
        raise FileExistsError(
            errno.EEXIST, "a file this command did not write is there (not a JSON report of detach-parity)", str(path)
        )
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    os.chmod(tmp, 0o666 & ~current_umask())  # mkstemp makes 0600; the result should read like any file written here
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(payload, fh, indent=2, sort_keys=True)
            fh.write("\n")
        check_interrupted()
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
