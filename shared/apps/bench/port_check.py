"""`detach-parity bench --port-check NAME:SIZE`: one check of a worked port at scale, timed and weighed.

What it measures: `check_port` on the worked port NAME (shared/apps/check/ports.py) at SIZE, correct
variant, float64 + float32 and K optimizer steps: wall time, CPU time (both frameworks' threads) and
the peak resident memory above the process before the check (sampled every 50 ms from /proc, the
peak of the whole process being ru_maxrss, which a caller's earlier work would mask). `gpt2:base` is
transformers' default GPT2Config (124 M parameters, random init): the scale issue 25 asks the
checker to reach on a laptop-sized machine (≤ 5 min, ≤ 16 GB on 2 cores).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from ..backends import backend
from ..check import budget, check_port, ports
from ..common import UsageError

__all__ = ["parse", "measure"]


def parse(text: str) -> tuple[str, str]:
    """ "gpt2:base" -> ("gpt2", "base"); "cnn" -> ("cnn", "small"). UsageError naming the expected forms."""
    name, _, size = text.partition(":")
    if name not in ports.WORKED + ports.REAL:
        raise UsageError(
            f"--port-check: expected NAME[:SIZE], NAME one of {list(ports.WORKED + ports.REAL)}, got {text!r}"
        )
    return name, size or "small"


def _rss() -> int | None:
    try:
        return int(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None  # not Linux: no peak is reported, never a made-up one


def measure(name: str, size: str, steps: int = 5, progress: Callable[[str], None] | None = None) -> dict:
    """One check of the worked port `name` at `size`; the measurements as a JSON-ready dict.

    Returns {"measured_at", "cpus", "load_before" (1-min load average), "port", "size", "parameters", "steps", "dtypes", "ok", "wall_s", "cpu_s", "peak_gb" (above
    the process before the check; None where /proc is missing), "bytes_per_parameter", "caller_gb",
    "seconds" (the check's own per-pass times), "batch": {key: shape}}.
    Raises PortInputError (bad size, a check that cannot fit: refused with its estimate).
    """
    args = ports.case(name, "correct", size)
    params = budget.parameters(backend("torch").port.structure(args["torch_model"]))
    base = _rss()
    peak = [base or 0]
    done = threading.Event()

    def watch() -> None:
        while not done.wait(0.05):
            peak[0] = max(peak[0], _rss() or 0)

    sampler = threading.Thread(target=watch, daemon=True)
    sampler.start()
    wall, cpu = time.perf_counter(), time.process_time()
    try:
        model_t, model_j, batch = args.pop("torch_model"), args.pop("jax_model"), args.pop("batch")
        report = check_port(model_t, model_j, batch, steps=steps, progress=progress, **args)
    finally:
        done.set()
        sampler.join()
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    peak_bytes = None if base is None else max(peak[0], _rss() or 0) - base
    gb = 1 << 30
    return {
        "measured_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "cpus": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "load_before": round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else None,
        "port": name,
        "size": size,
        "parameters": params,
        "steps": steps,
        "dtypes": report.settings["dtypes"],
        "ok": report.ok,
        "wall_s": round(wall, 1),
        "cpu_s": round(cpu, 1),
        "peak_gb": None if peak_bytes is None else round(peak_bytes / gb, 2),
        "bytes_per_parameter": None if peak_bytes is None else round(peak_bytes / params),
        "caller_gb": None if base is None else round(base / gb, 2),
        "seconds": {k: round(v, 1) for k, v in report.seconds.items()},
        "batch": {k: list(v.shape) for k, v in batch.items()},
    }
