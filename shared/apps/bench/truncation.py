"""Section 3 of the bench: truncated BPTT peak memory and step time as the sequence grows (claim C11).

A GRU trained for T = 64 ... 1024 with a fixed k and with k = T, a backward per window
(`windows`) or one backward of the summed loss (`one_backward`); the steps and their memory
are the pair `torch_impl/backend/bench.py` / `jax_impl/backend/bench.py` (`tbptt_step`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from ..backends import backend
from .sizes import fixture
from .timing import interleaved, slope

__all__ = ["MAX_TBPTT_REPEATS", "tbptt_points", "tbptt_repeats", "tbptt_section"]

MAX_TBPTT_REPEATS = 5  # its longest steps take a third of a second


def tbptt_repeats(repeats: int) -> int:
    """Rounds for the tbptt sweep: at most MAX_TBPTT_REPEATS."""
    return max(1, min(repeats, MAX_TBPTT_REPEATS))


def tbptt_points(cfg: Mapping) -> list[tuple[int, str, int]]:
    """(T, form, k) of every point of the sweep, in the order they are measured."""
    k = cfg["k"]
    return [(t, form, kk) for t in cfg["T"] for form, kk in (("windows", k), ("one_backward", k), ("windows", t))]


def tbptt_section(
    cfg: Mapping,
    repeats: int,
    target_s: float,
    deadline_of: Callable[[int], float],
    progress: Callable[[str], None],
    keep: Callable[[int, int], bool] = lambda t_steps, done: True,
) -> dict:
    """Time and measure every point of the sweep; deadline_of(points left) gives each point's deadline.

    keep(T, lengths done) is asked before each new sequence length: False drops it and every
    longer one (the time budget is spent); config.T lists the lengths measured.
    """
    torch_bench, jax_bench = backend("torch").bench, backend("jax").bench
    k_fixed, rows = cfg["k"], []
    dims = {key: cfg[key] for key in ("B", "I", "H", "O")}
    points = tbptt_points(cfg)
    fixtures: dict[int, object] = {}
    for i, (t_steps, form, k) in enumerate(points):
        progress(f"tbptt T={t_steps} {form} k={k}")
        if t_steps not in fixtures and not keep(t_steps, len(fixtures)):
            break
        fx = fixtures.setdefault(t_steps, fixture("tbptt", {**dims, "T": t_steps, "G": 3 * dims["H"]}))
        t_step, t_peak = torch_bench.tbptt_step(fx, form, k)
        j_step, j_peak = jax_bench.tbptt_step(fx, form, k)
        timed = interleaved({"torch": t_step, "jax": j_step}, repeats, target_s, deadline_of(len(points) - i))
        peaks = {"torch": t_peak(), "jax": j_peak()}
        for fw in ("torch", "jax"):
            label = "k=T" if k == t_steps else f"k={k}"
            rows.append({"framework": fw, "form": form, "k": label, "T": t_steps, "peak_bytes": peaks[fw]} | timed[fw])
    growth = {}
    for fw in ("torch", "jax"):
        for form, label in (("windows", f"k={k_fixed}"), ("one_backward", f"k={k_fixed}"), ("windows", "k=T")):
            sel = [r for r in rows if (r["framework"], r["form"], r["k"]) == (fw, form, label)]
            ts = [r["T"] for r in sel]
            peak = [r["peak_bytes"] for r in sel]
            growth[f"{fw} {form} {label}"] = {
                "bytes_per_step": slope(ts, peak),
                "seconds_per_step": slope(ts, [r["min_s"] for r in sel]),  # the fastest round: least disturbed
                "peak_ratio": peak[-1] / peak[0],
                "time_ratio": sel[-1]["min_s"] / sel[0]["min_s"],
                "T_ratio": ts[-1] / ts[0],
            }
    measured = list(fixtures)
    return {"config": {**dims, "k": k_fixed, "T": measured, "cell": "gru"}, "rows": rows, "growth": growth}
