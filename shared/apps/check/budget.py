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

The recorded forward grows with the batch, not the parameters: every submodule's output of both sides is
kept, beside the autograd graph and JAX's residuals. It is measured before the check on the batch's first
rows (`activations`: a float64 forward of a copy on 2 rows) and scaled to all of them. An MLP of 0.2 M
parameters on batches of 2,000 and 10,000 × 256 rows (2026-12-03) peaked 46.8 kB per row apart, 3.76×
the 12.4 kB its recorded outputs and float64 batch hold per row: `_PER_ACTIVATION` bytes for each.

The memory left is the tightest of MemAvailable and the limits on this process's cgroup and its
ancestors, in cgroup v2 (memory.max − memory.current) or v1 (memory.limit_in_bytes − memory.usage_in_bytes).
"""

from __future__ import annotations

import ctypes
import math
import os
import sys
from collections.abc import Callable, Mapping
from pathlib import Path

import numpy as np

from .match import PortInputError

__all__ = ["parameters", "estimate", "rows", "activations", "available", "release", "require", "room"]

_ITEMSIZE = {"float64": 8, "float32": 4}
_MARGIN = 1.1  # the estimate's spread across models (activations, a library's float32 islands)
_FIXED = 1 << 29  # 0.5 GB: the compiled programs and the libraries' working memory
_PER_ACTIVATION = 4  # bytes held per byte of the recorded float64 forward (both sides, the graph, residuals)
_UNLIMITED = 1 << 62  # cgroup v1 writes "no limit" as a page-rounded 2^63 - 1
CGROUP_ROOT = Path("/sys/fs/cgroup")
PROC_CGROUP = Path("/proc/self/cgroup")


def parameters(torch_structure: dict) -> int:
    """The torch model's parameter count from its structure (port.structure): a tied tensor counted once."""
    units = torch_structure["units"]
    return sum(math.prod(f["shape"]) for u in units for f in u["leaves"].values() if "tied_to" not in f)


def estimate(n_params: int, steps: int, dtypes: tuple[str, ...], activations: int = 0) -> int:
    """Bytes a check of `n_params` parameters with `steps` optimizer steps needs beyond the caller's process.

    activations: the bytes of the recorded float64 forward on the whole batch (its outputs and the batch,
    `activations`); each is held about `_PER_ACTIVATION` times over.
    """
    per = 16 if steps else 8  # itemsizes per parameter: with steps, the moments and one step of each side
    # the bfloat16 pass judges by the float64 pass's values, kept until it runs: the gradients and every step
    truth = n_params * 8 * (steps + 1) if "bfloat16" in dtypes else 0
    held = activations * _PER_ACTIVATION
    return n_params * max(_ITEMSIZE.get(d, 4) for d in dtypes) * per + truth + held + _FIXED


def rows(batch: Mapping[str, np.ndarray]) -> int | None:
    """The batch's common leading size (its rows), or None where its arrays share none."""
    sizes = {v.shape[0] if np.ndim(v) else None for v in batch.values()}
    return sizes.pop() if len(sizes) == 1 and None not in sizes else None


def activations(record: Callable[[dict], Mapping], batch: Mapping[str, np.ndarray], first: int = 2) -> int | None:
    """Bytes of the recorded float64 forward on the whole batch, from a run on its `first` rows.

    record(sub_batch) runs the torch side's recorded forward and returns its outputs ({path: [[arrays]]}).
    Returns None where it cannot be measured (no common leading axis; the run on fewer rows raised).
    """
    n = rows(batch)
    if n is None or n < 1:
        return None
    m = min(n, first)
    sub = {k: np.asarray(v[:m], np.float64) if v.dtype.kind == "f" else v[:m] for k, v in batch.items()}
    try:
        outputs = record(sub)
    except Exception:  # noqa: BLE001 - a loss written for the full batch: no measurement, said by the caller
        return None
    held = sum(np.asarray(a).nbytes for calls in outputs.values() for call in calls for a in call if a is not None)
    held += sum(v.nbytes for v in sub.values())
    return held * n // m


def room(nbytes: int) -> bool:
    """Whether `nbytes` more fit in the memory available now (True where it cannot be measured)."""
    free = available()
    return free is None or nbytes * _MARGIN < free


def _limits(root: Path, own: Path) -> list[tuple[Path, str, str]]:
    """(folder, limit file, usage file) of each memory cgroup this process sits in, innermost first, then
    each ancestor up to the mount. The mount shows either the host's hierarchy (the path is below it) or
    the container's own (the path is not there, the mount is the process's cgroup): both are walked."""
    try:
        lines = own.read_text().splitlines()
    except OSError:
        return []
    found = []
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, path = parts
        if controllers == "":  # cgroup v2: one unified hierarchy
            base, files = root, ("memory.max", "memory.current")
        elif "memory" in controllers.split(","):  # cgroup v1: the memory controller's own hierarchy
            base, files = root / "memory", ("memory.limit_in_bytes", "memory.usage_in_bytes")
        else:
            continue
        folder = base / path.strip("/")
        while True:
            found.append((folder, *files))
            if folder == base:
                break
            folder = folder.parent
    return found


def _cgroup_left(root: Path | None = None, own: Path | None = None) -> int | None:
    """Bytes this process's cgroups may still take (v1 or v2, the tightest limit up the hierarchy), None
    where none is set. root / own stand in for /sys/fs/cgroup and /proc/self/cgroup (tests)."""
    left = []
    for folder, limit_file, usage_file in _limits(root or CGROUP_ROOT, own or PROC_CGROUP):
        try:
            limit = (folder / limit_file).read_text().strip()
            used = int((folder / usage_file).read_text())
        except (OSError, ValueError):
            continue
        if limit != "max" and limit.isdigit() and int(limit) < _UNLIMITED:
            left.append(max(int(limit) - used, 0))
    return min(left) if left else None


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


def _size(nbytes: int) -> str:
    """`nbytes` in GB to a tenth, rounded up (MB below 1 GB)."""
    if nbytes >= 1 << 30:
        return f"{math.ceil(nbytes / (1 << 30) * 10) / 10} GB"
    return f"{math.ceil(nbytes / (1 << 20) * 10) / 10} MB"


def require(n_params: int, steps: int, dtypes: tuple[str, ...], free: int | None = None, activations: int = 0) -> int:
    """The estimate in bytes; PortInputError with the numbers when it exceeds the memory available.

    `free` stands in for `available()` (tests; None: measure now, and pass if it cannot be measured).
    activations: the recorded forward's bytes on the whole batch (`activations`).
    """
    need = estimate(n_params, steps, dtypes, activations)
    free = available() if free is None else free
    if free is not None and need * _MARGIN > free:
        held = activations * _PER_ACTIVATION
        forward = f", the recorded forward on the batch ~{_size(held)} of it" if held else ""
        raise PortInputError(
            f"torch_model: {n_params:,} parameters with {steps} step(s) in {' + '.join(dtypes)} need about "
            f"{_size(need)} (~{(need - held) // max(n_params, 1)} bytes per parameter{forward}), "
            f"{free / (1 << 30):.1f} GB are available: check with fewer --steps, a smaller batch, "
            "dtypes=('float64',), a smaller config of the same model, or on a machine with more memory"
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
