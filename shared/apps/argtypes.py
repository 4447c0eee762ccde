"""The argparse types of the commands: bad values are refused before any work starts, with a message
naming the expected and the actual value (argparse adds the option)."""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from pathlib import Path

from .json_file import our_json

__all__ = ["non_negative_int", "positive_int", "bounded_int", "json_path", "out_dir"]


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


def bounded_int(low: int, high: int, why: str = "") -> Callable[[str], int]:
    """An argparse type: an int in [low, high]; `why` says where the upper bound comes from."""

    def parse(text: str) -> int:
        value = _int(text)
        if not low <= value <= high:
            reason = f" ({why})" if why else ""
            raise argparse.ArgumentTypeError(f"expected an integer in [{low}, {high}]{reason}, got {value}")
        return value

    return parse


def json_path(text: str) -> str:
    """A file path that can be written: its folder exists, it is not a folder, and it is absent or an
    earlier report of this package (the rule of `write_json`).

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
    if (path.exists() or path.is_symlink()) and not our_json(path):  # write_json's rule, before the work
        raise argparse.ArgumentTypeError(
            f"expected a new path or an earlier JSON report of detach-parity, got {text!r} (a file this "
            "package did not write: it is left alone)"
        )
    return text


def out_dir(text: str) -> str:
    """An output folder, first look: not an existing file, its parent folder exists.

    The full check (empty, or an earlier output of the command; never the package) is
    OutputFolder's, done before any work starts.
    """
    path = Path(text)
    if path.exists() and not path.is_dir():
        raise argparse.ArgumentTypeError(f"expected a folder, got the existing file {text!r}")
    parent = path.absolute().parent
    if not parent.is_dir():
        raise argparse.ArgumentTypeError(
            f"expected a folder in an existing folder, got {text!r} ({parent} does not exist)"
        )
    return text
