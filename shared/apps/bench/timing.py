"""Interleaved timing, its statistics, the least-squares slope, and the time budget that caps rounds.

A bench on a shared 2-core machine must end in bounded time whatever else runs: every timed
group gets a deadline from `Budget`, and `interleaved` stops adding rounds once it has passed
(never below MIN_ROUNDS). The statistics say how many rounds were kept (`n`), whether the cap
cut them (`capped`), and whether the spread makes the median suspect (`noisy`).
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Mapping, Sequence

__all__ = ["NOISY", "MIN_ROUNDS", "GRACE", "Budget", "first_call", "interleaved", "slope"]

NOISY = 0.25  # a step whose interquartile range exceeds this fraction of its median is flagged noisy
MIN_ROUNDS = 3  # rounds kept even past a deadline: a median and quartiles of fewer mean little
GRACE = 0.1  # past the budget by this fraction of it (5 s at least), work that can be left out is skipped


class Budget:
    """The wall time the measuring may take, shared out between phases and their items.

    A phase gets its weight's share of what is left when it starts (time a phase leaves
    unused, or overruns, moves to the phases after it); each item of a phase gets an equal
    share of what the phase has left when the item starts. Once the budget is spent (left()
    is 0) the work still done is the minimum (MIN_ROUNDS, no compiles of optional columns);
    once it is overrun by its grace (`over()`), what can be left out is skipped: a machine
    loaded far beyond its cores cannot hold the command past end + grace + one item.
    Seconds are time.monotonic().
    Raises ValueError unless total_s is a finite number > 0.
    """

    def __init__(self, total_s: float, weights: Mapping[str, float]) -> None:
        if isinstance(total_s, bool) or not isinstance(total_s, int | float) or not 0 < total_s < math.inf:
            raise ValueError(f"budget: total_s expected a finite number of seconds > 0, got {total_s!r}")
        self.total_s = float(total_s)
        self.start = time.monotonic()
        self.end = self.start + self.total_s
        self._weights = dict(weights)
        self._phase_end = self.end

    def left(self) -> float:
        """Seconds of the whole budget left (0 once spent)."""
        return max(0.0, self.end - time.monotonic())

    def over(self) -> bool:
        """Whether the budget is overrun by its grace: GRACE of it, 5 s at least."""
        return time.monotonic() > self.end + max(5.0, GRACE * self.total_s)

    def elapsed(self) -> float:
        return time.monotonic() - self.start

    def phase(self, name: str) -> float:
        """Start phase `name` (a key of the weights); returns its deadline."""
        remaining = sum(self._weights.values())
        share = self._weights.pop(name) / remaining if remaining > 0 else 1.0
        self._phase_end = time.monotonic() + self.left() * share
        return self._phase_end

    def item(self, items_left: int) -> float:
        """The deadline of the next item of the current phase, `items_left` items counting this one."""
        now = time.monotonic()
        return now + max(0.0, self._phase_end - now) / max(1, items_left)


def first_call(step: Callable[[], object]) -> tuple[float, object, BaseException | None]:
    """Call step once: (seconds, its result, None), or (seconds, None, the exception) if it raised.

    The bench's probe of a step that may not work (a torch.compile whose compile fails): the
    caller reports the exception instead of crashing. KeyboardInterrupt and SystemExit pass.
    """
    start = time.perf_counter()
    try:
        out = step()
    except Exception as exc:  # noqa: BLE001 - any failure of a probed step is reported, not raised
        return time.perf_counter() - start, None, exc
    return time.perf_counter() - start, out, None


def _stats(times: Sequence[float], repeats: int) -> dict[str, float]:
    q = statistics.quantiles(times, n=4, method="inclusive") if len(times) > 1 else [times[0]] * 3
    median = statistics.median(times)
    spread = (q[2] - q[0]) / median if median > 0 else 0.0
    return {
        "median_s": median,
        "p25_s": q[0],
        "p75_s": q[2],
        "min_s": min(times),
        "n": len(times),
        "spread": spread,
        "noisy": spread > NOISY,
        "capped": len(times) < repeats,
    }


def interleaved(
    steps: Mapping[str, Callable[[], object]],
    repeats: int,
    target_s: float,
    deadline: float | None = None,
    first_call_s: Mapping[str, float] | None = None,
) -> dict[str, dict[str, float]]:
    """Time every step, interleaved: one block of each per round (A B A B ...), up to `repeats` rounds.

    The first call of each step is timed apart (`first_call_s`: JAX traces and compiles there,
    torch.compile compiles, torch eager warms its caches) unless the caller already made it
    and passes its seconds in first_call_s; the next call sets how many steps a block repeats
    (`inner`) to last at least target_s. With a deadline (time.monotonic() seconds), rounds
    stop once it has passed and MIN_ROUNDS (or `repeats`, if fewer) are done.
    Returns {label: {median_s, p25_s, p75_s, min_s, n, spread, noisy, capped, first_call_s,
    inner}}, seconds per step. Raises ValueError unless repeats is an int >= 1, target_s a
    finite number >= 0 and steps a non-empty mapping of label to callable.
    """
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
        raise ValueError(f"repeats expected an integer >= 1, got {repeats!r}")
    if isinstance(target_s, bool) or not isinstance(target_s, int | float) or not 0 <= target_s < math.inf:
        raise ValueError(f"target_s expected a finite number of seconds >= 0, got {target_s!r}")
    if not isinstance(steps, Mapping) or not all(callable(step) for step in steps.values()):
        raise ValueError(f"steps expected a mapping of label to callable, got {type(steps).__name__}")
    if not steps:
        raise ValueError("steps expected at least one step to time, got none")
    first, inner = dict(first_call_s or {}), {}
    for label, step in steps.items():
        if label not in first:
            start = time.perf_counter()
            step()
            first[label] = time.perf_counter() - start
        start = time.perf_counter()
        step()
        inner[label] = max(1, min(1000, math.ceil(target_s / max(time.perf_counter() - start, 1e-7))))
    times: dict[str, list[float]] = {label: [] for label in steps}
    for done in range(repeats):
        if deadline is not None and done >= min(MIN_ROUNDS, repeats) and time.monotonic() >= deadline:
            break
        for label, step in steps.items():
            start = time.perf_counter()
            for _ in range(inner[label]):
                step()
            times[label].append((time.perf_counter() - start) / inner[label])
    return {
        label: {**_stats(times[label], repeats), "first_call_s": first[label], "inner": inner[label]} for label in steps
    }


def slope(xs: Sequence[float], ys: Sequence[float]) -> float:
    """Least-squares slope of ys against xs.

    Raises ValueError with fewer than two distinct xs, unequal lengths or a non-finite value.
    """
    if len(xs) != len(ys) or len(set(xs)) < 2:
        raise ValueError(f"slope: expected >= 2 distinct x values and as many ys, got xs={xs}, ys={ys}")
    if not all(math.isfinite(v) for v in (*xs, *ys)):
        raise ValueError(f"slope: expected finite values, got xs={xs}, ys={ys}")
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum((x - mx) ** 2 for x in xs)
