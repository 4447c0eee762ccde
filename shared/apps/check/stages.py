"""Where a check's time goes: seconds per stage, and inside each the JAX compile pipeline's share.

`check_port(..., profile=True)` and `detach-parity check --profile` report it. A stage is a `with
stages("torch"):` around the checker's calls; stages nest, and each second counts once, in the
innermost stage (its parent gets the rest). A "sticky" stage (the replays of the diagnosis, the
backward localisation) keeps what runs inside it: a replay's torch run counts as the replay's. With a
`counters` function (the JAX backend's profile counters: traces, lowerings, XLA compiles, programs
reused), each stage also gets the counters' change while it was innermost, so the profile says how
much of the JAX stage was tracing and compiling and how much was running.
"""

from __future__ import annotations

import contextlib
import time
from collections import Counter
from collections.abc import Callable, Iterator

__all__ = ["ORDER", "STICKY", "PIPELINE", "Stages", "outside"]

# the stages of a check, in the order a report lists them
ORDER = ("imports", "your file", "memory estimate", "determinism", "copies and weights", "torch", "jax",
         "comparison", "backward", "replays", "diagnosis", "line", "other")  # fmt: skip
STICKY = frozenset({"backward", "replays"})  # what runs inside them is theirs
# the JAX backend's counters a profile reports per stage: (seconds key, count key, what it is)
PIPELINE = (
    ("jax_trace_s", "jax_traces", "tracing"),
    ("jax_lower_s", "jax_lowers", "lowering"),
    ("jax_compile_s", "jax_compiles", "XLA compile"),
)
_COUNTED = ("jax_cache_hits", "programs_compiled", "programs_reused")


class Stages:
    """Seconds (and counter changes) per stage of one check, innermost stage first."""

    def __init__(self, counters: Callable[[], dict] | None = None, clock: Callable[[], float] = time.perf_counter):
        self.counters, self.clock = counters, clock
        self.seconds: Counter = Counter()
        self.counts: dict[str, Counter] = {}
        self._stack: list[list] = []  # [name, start, counters at start, inner seconds, inner counters]

    def _read(self) -> Counter:
        return Counter({k: v for k, v in self.counters().items() if not k.startswith("traced/")}) if self.counters \
            else Counter()  # fmt: skip

    @contextlib.contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        if name not in ORDER:
            raise ValueError(f"stages: expected one of {list(ORDER)}, got {name!r}")
        if self._stack and self._stack[-1][0] in STICKY:
            name = self._stack[-1][0]
        self._stack.append([name, self.clock(), self._read(), 0.0, Counter()])
        try:
            yield
        finally:
            name, start, before, inner_s, inner_c = self._stack.pop()
            spent, change = self.clock() - start, self._read()
            change.subtract(before)
            self.seconds[name] += spent - inner_s
            own = Counter(change)
            own.subtract(inner_c)
            self.counts.setdefault(name, Counter()).update(own)
            if self._stack:
                self._stack[-1][3] += spent
                self._stack[-1][4].update(change)

    def add(self, name: str, seconds: float) -> None:
        """Seconds spent outside any `with` (the CLI's imports and the user's file, timed by the caller)."""
        if name not in ORDER:
            raise ValueError(f"stages: expected one of {list(ORDER)}, got {name!r}")
        self.seconds[name] += seconds

    def profile(self, total_s: float) -> dict:
        """{"total_s", "stages": {stage: {"s", and per PIPELINE part its seconds and count}}, "counts": {...}}:
        the stages in ORDER, "other" the part of `total_s` no stage holds; "counts" the whole check's cache hits
        and the programs compiled and reused (jax_impl/backend/programs.py)."""
        stages = {}
        for name in ORDER:
            seconds = max(total_s - sum(self.seconds.values()), 0.0) if name == "other" else self.seconds.get(name)
            if seconds is None:
                continue
            row = {"s": round(seconds, 4)}
            counts = self.counts.get(name, Counter())
            for key_s, key_n, _ in PIPELINE:
                if counts.get(key_n):
                    row[key_s], row[key_n] = round(counts[key_s], 4), int(counts[key_n])
            stages[name] = row
        everything = sum(self.counts.values(), Counter())
        return {
            "total_s": round(total_s, 4),
            "stages": stages,
            "counts": {k: int(everything.get(k, 0)) for k in (*(n for _, n, _ in PIPELINE), *_COUNTED)},
        }


def outside(profile: dict, seconds: dict[str, float]) -> dict:
    """`profile` with stages timed outside the check added ({"imports": s, "your file": s}, the CLI's), in ORDER,
    and the total grown by them."""
    if any(name not in ORDER for name in seconds):
        raise ValueError(f"stages: expected names from {list(ORDER)}, got {sorted(seconds)}")
    rows = {**{name: {"s": round(s, 4)} for name, s in seconds.items()}, **profile["stages"]}
    total = profile["total_s"] + sum(seconds.values())
    return {**profile, "total_s": round(total, 4), "stages": {n: rows[n] for n in ORDER if n in rows}}
