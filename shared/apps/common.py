"""What the subcommands share: the usage error, versions, argparse types.

A `UsageError` raised by a command is printed on stderr by shared.apps.cli and exits 2;
argparse types reject bad values before any work starts, with a message naming the
option, the expected and the actual value.
"""

from __future__ import annotations

import argparse
import importlib.metadata as md
import json
import os
import platform
import tempfile
from collections.abc import Mapping
from pathlib import Path

__all__ = ["UsageError", "versions", "non_negative_int", "positive_int", "json_path", "out_dir", "write_json"]


class UsageError(Exception):
    """Bad command-line input: printed, exit status 2."""


def versions() -> dict[str, str]:
    """Python and the installed versions of torch, jax, flax, optax and numpy ("missing" if absent)."""
    out = {"python": platform.python_version()}
    for dist in ("torch", "jax", "flax", "optax", "numpy"):
        try:
            out[dist] = md.version(dist)
        except md.PackageNotFoundError:
            out[dist] = "missing"
    return out


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None


def non_negative_int(text: str) -> int:
    """An int >= 0 (fixture seeds)."""
    value = _int(text)
    if not 0 <= value < 2**63:
        raise argparse.ArgumentTypeError(f"expected an integer in [0, 2**63), got {value}")
    return value


def positive_int(text: str) -> int:
    """An int >= 1 (repeats, parallel jobs)."""
    value = _int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {value}")
    return value


def json_path(text: str) -> str:
    """A file path that can be written: its folder exists and it is not a folder itself.

    Checked before any work is done, so a typo never costs a whole run.
    """
    path = Path(text)
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"expected a file path, got the folder {text!r}")
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        raise argparse.ArgumentTypeError(
            f"expected a path in an existing folder, got {text!r} ({parent} does not exist)"
        )
    if not os.access(parent, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise argparse.ArgumentTypeError(f"expected a writable path, got {text!r}")
    return text


def out_dir(text: str) -> str:
    """An output folder: created if missing, refused if an existing file is in the way."""
    path = Path(text)
    if path.exists() and not path.is_dir():
        raise argparse.ArgumentTypeError(f"expected a folder, got the existing file {text!r}")
    return text


def write_json(path: Path | str, payload: Mapping) -> None:
    """Write `payload` as JSON atomically: a temporary file in the same folder, renamed over `path`
    once complete, so a full disk, a file-size limit or an interrupt never leaves a truncated file
    (a previous file there stays as it was). A symlink at `path` is replaced, never written through.

    Raises OSError (the caller reports it: exit 2, never the code of a failed check).
    """
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes 0600; the result should read like any file written here
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(payload, fh, indent=2, sort_keys=True)
            fh.write("\n")
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
