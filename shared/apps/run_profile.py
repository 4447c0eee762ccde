"""`detach-parity run --profile`: where a run's time went, per stage, over every case and process.

Stages (shared.core.runner.run_case): imports (a lesson's first load, the frameworks with it),
fixtures, torch, jax, oracle, naive_oracle, comparison. The jax stage is split with the JAX backend's
counters (jax_impl/backend/profile.py): tracing, lowering to MLIR, XLA compile (persistent-cache
hits included) and what is left, execution and Python. Seconds are summed over the cases, so with
--jobs N they add up to about N times the wall time.
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Mapping

from rich.table import Table

from .backends import backend

__all__ = ["STAGES", "counters", "summary", "table", "lines"]

STAGES = ("imports", "fixtures", "torch", "jax", "oracle", "naive_oracle", "comparison")
_JAX_PARTS = (
    ("jax_trace_s", "jax: tracing"),
    ("jax_lower_s", "jax: lowering to MLIR"),
    ("jax_compile_s", "jax: XLA compile"),
)


def counters() -> Callable[[], Mapping[str, float]]:
    """Start the JAX backend's listeners in this process and return its counters (run_case's `counters`)."""
    jax_side = backend("jax").profile
    jax_side.listen()
    return jax_side.counters


def summary(results: list, wall_s: float) -> dict:
    """The profile of a run: seconds per stage (jax split), trace / lowering / compile counts, top traces.

    Raises ValueError when no result carries stages (nothing was profiled: no check on empty input).
    """
    totals: collections.Counter = collections.Counter()
    for r in results:
        totals.update(r.stages)
    if not results or not any(r.stages for r in results):
        raise ValueError(f"profile: expected results with stages, got {len(results)} result(s) without")
    stages = {s: totals.get(s, 0.0) for s in STAGES}
    parts = {key: totals.get(key, 0.0) for key, _ in _JAX_PARTS}
    stages_jax = {
        **{name: parts[key] for key, name in _JAX_PARTS},
        "jax: execution and Python": max(stages["jax"] - sum(parts.values()), 0.0),
    }
    traced = {k.removeprefix("traced/"): int(v) for k, v in totals.items() if k.startswith("traced/")}
    return {
        "wall_s": round(wall_s, 3),
        "cases": len(results),
        # microseconds: a stage of 8 small cases takes well under a millisecond on a fast CPU (rounded to
        # milliseconds it read 0, as if it had never been counted)
        "stages_s": {k: round(v, 6) for k, v in stages.items()},
        "jax_split_s": {k: round(v, 6) for k, v in stages_jax.items()},
        "jax_counts": {
            k: int(totals.get(k, 0)) for k in ("jax_traces", "jax_lowers", "jax_compiles", "jax_cache_hits")
        },
        "most_traced": dict(sorted(traced.items(), key=lambda kv: (-kv[1], kv[0]))[:10]),
    }


def table(profile: Mapping) -> Table:
    """The profile as a table: each stage's seconds and share of the cases' total."""
    total = sum(profile["stages_s"].values()) or 1.0
    t = Table(
        title=f"where the time went: {profile['cases']} cases, {profile['wall_s']:.1f} s wall", header_style="bold"
    )
    for col, just in (("stage", "left"), ("seconds", "right"), ("share", "right")):
        t.add_column(col, justify=just)
    for stage, seconds in profile["stages_s"].items():
        if stage == "jax":
            for name, part in profile["jax_split_s"].items():
                t.add_row(name, f"{part:.1f}", f"{part / total:.0%}")
        else:
            t.add_row(stage, f"{seconds:.1f}", f"{seconds / total:.0%}")
    return t


def lines(profile: Mapping) -> list[str]:
    """The counts under the table: traces (jit cache misses), lowerings, compiles, the most traced functions."""
    c = profile["jax_counts"]
    top = ", ".join(f"{name} {n}" for name, n in profile["most_traced"].items())
    return [
        f"JAX: {c['jax_traces']} traces (jit cache misses: a new function, shape, dtype or static argument), "
        f"{c['jax_lowers']} lowerings, {c['jax_compiles']} compiles ({c['jax_cache_hits']} from the persistent cache)",
        f"most traced: {top or 'none'}",
    ]
