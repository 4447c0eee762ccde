"""Whether a check fits in this machine's memory, said before it starts (never the OOM killer mid-check).

The estimate is measured, not derived: the worked transformer at 6.7 M parameters, float64 + float32
and 5 optimizer steps, peaked 377 bytes per parameter above the process before the check (2026-12-02,
2 cores). Per pass of itemsize s it holds both frameworks' working copies, start copies and the
transferred weights (~10 s), gradients (~3 s), optimizer moments (~4 s) and per compared step both
sides' snapshots and their canonical forms (~3 s); `estimate` is n · s · (17 + 3k) summed over the passes.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

from .match import PortInputError

__all__ = ["estimate", "available", "require"]

_ITEMSIZE = {"float64": 8, "float32": 4}
_MARGIN = 1.1  # the estimate's spread across models (activations, a library's float32 islands)


def estimate(n_params: int, steps: int, dtypes: tuple[str, ...]) -> int:
    """Bytes a check of `n_params` parameters with `steps` optimizer steps needs beyond the caller's process."""
    return sum(n_params * _ITEMSIZE[d] * (17 + 3 * steps) for d in dtypes)


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
