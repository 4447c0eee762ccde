"""Whether a check fits in this machine's memory, said before it starts (never the OOM killer mid-check).

The estimate is measured, not derived. A check compares as it goes: one dtype after the other, and in
each pass one step of each side alive at a time (checker.py), so its peak is the widest pass and does
not grow with the steps. The worked transformer (float64 + float32, 5 optimizer steps, 2026-12-02,
2 cores) peaked 177 bytes per parameter above the process at 6.7 M parameters and 353 at 1.8 M
(before compare-as-you-go: 364 and 531); between the two sizes the peak grows by ~123 bytes per
parameter, i.e. ~16 itemsizes: both frameworks' working copies, gradients and Adam moments, the
transferred weights and one step of each side. `estimate` is n · s · 16 for the widest itemsize s
(n · s · 8 without steps: no moments, no steps) plus a fixed 0.5 GB (the compiles, the recorded
forward). A float64 difference keeps the steps from the first one on for the diagnosis, while `room` says
there is memory for them.
"""

from __future__ import annotations

import ctypes
import math
import os
import sys
from pathlib import Path

from .match import PortInputError

__all__ = ["parameters", "estimate", "available", "release", "require", "room"]

_ITEMSIZE = {"float64": 8, "float32": 4}
_MARGIN = 1.1  # the estimate's spread across models (activations, a library's float32 islands)
_FIXED = 1 << 29  # 0.5 GB: the compiled programs and the recorded forward of a small batch


def parameters(torch_structure: dict) -> int:
    """The torch model's parameter count from its structure (port.structure): a tied tensor counted once."""
    units = torch_structure["units"]
    return sum(math.prod(f["shape"]) for u in units for f in u["leaves"].values() if "tied_to" not in f)


def estimate(n_params: int, steps: int, dtypes: tuple[str, ...]) -> int:
    """Bytes a check of `n_params` parameters with `steps` optimizer steps needs beyond the caller's process."""
    per = 16 if steps else 8  # itemsizes per parameter: with steps, the moments and one step of each side
    return n_params * max(_ITEMSIZE[d] for d in dtypes) * per + _FIXED


def room(nbytes: int) -> bool:
    """Whether `nbytes` more fit in the memory available now (True where it cannot be measured)."""
    free = available()
    return free is None or nbytes * _MARGIN < free


def _cgroup_left() -> int | None:
    """Bytes this process's cgroup (v2) may still take: a container's limit, where one is set."""
    root = Path("/sys/fs/cgroup")
    try:
        limit = (root / "memory.max").read_text().strip()
        used = int((root / "memory.current").read_text())
    except (OSError, ValueError):
        return None
    return None if limit == "max" else int(limit) - used


def available() -> int | None:
    """Bytes of memory available now (MemAvailable, capped by the cgroup's limit); None where unknown."""
    left = []
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                left.append(int(line.split()[1]) * 1024)
    except (OSError, ValueError, IndexError):
        pass
    if (cg := _cgroup_left()) is not None:
        left.append(cg)
    if not left and hasattr(os, "sysconf"):
        try:
            left.append(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
        except (ValueError, OSError):
            pass
    return min(left) if left else None


def require(n_params: int, steps: int, dtypes: tuple[str, ...], free: int | None = None) -> int:
    """The estimate in bytes; PortInputError with the numbers when it exceeds the memory available.

    `free` stands in for `available()` (tests; None: measure now, and pass if it cannot be measured).
    """
    need = estimate(n_params, steps, dtypes)
    free = available() if free is None else free
    if free is not None and need * _MARGIN > free:
        gb = 1 << 30
        raise PortInputError(
            f"torch_model: {n_params:,} parameters with {steps} step(s) in {' + '.join(dtypes)} need about "
            f"{math.ceil(need / gb * 10) / 10} GB (~{need // max(n_params, 1)} bytes per parameter), "
            f"{free / gb:.1f} GB are available: check with fewer --steps, dtypes=('float64',), a smaller "
            "config of the same model, or on a machine with more memory"
        )
    return need


def release() -> None:
    """Hand the memory freed so far back to the OS (glibc's malloc_trim; nothing elsewhere).

    A check frees each step's arrays as soon as they are judged, but glibc keeps the freed pages of
    arrays of many sizes in its heap, where the next step's arrays do not fit them: without a trim the
    process's peak grows by about a step's arrays per step. Changes no setting: it only returns free pages.
    """
    if not sys.platform.startswith("linux"):
        return
    try:
        ctypes.CDLL(None).malloc_trim(0)
    except (OSError, AttributeError):  # musl and other C libraries have no malloc_trim
        pass
