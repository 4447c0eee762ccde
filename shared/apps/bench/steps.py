"""Section 1 of the bench: every scenario's training step in the five columns a user could pick.

torch eager and torch.compile; JAX as the scenario writes it (jax.jit or nnx.jit), through
nnx.cached_partial, and as one jax.jit of the nnx.split state. The plain steps are each pair's
`make_step`; the tuned ones are built by the pair `torch_impl/backend/bench.py` / `jax_impl/backend/bench.py`
(`tuned_steps`). A tuned step that fails on its first call (a compile error), or whose first
loss is not the plain step's, gets no timing and a reason in `unavailable`: never a crash.
"""

from __future__ import annotations

import time
from collections.abc import Mapping

from ...core.fixtures import Fixture
from ...core.runner import lesson
from ..backends import backend
from .payload import COLUMNS, TUNED
from .timing import first_call, interleaved

__all__ = ["LOSS_RTOL", "overhead", "step_row", "compile_allowed"]

LOSS_RTOL = 1e-3  # a tuned step's first loss against the plain step's (compiled kernels reorder float32 sums)


def overhead(fx: Fixture, repeats: int, target_s: float, deadline: float) -> dict[str, dict]:
    """The fixed cost of one call: torch eager op, jax.jit, nnx.jit with a model and optimizer, cached_partial."""
    steps = {**backend("torch").bench.dispatch_steps(fx), **backend("jax").bench.dispatch_steps(fx)}
    return interleaved(steps, repeats, max(target_s, 1e-3), deadline)


def step_row(
    fx: Fixture,
    variant: str,
    repeats: int,
    target_s: float,
    deadline: float,
    tune: bool = True,
    leave_out: Mapping[str, str] | None = None,
    codegen: bool = True,
) -> dict:
    """Time one scenario's step (fixture fx, the given variant) in every column; returns its payload row.

    tune False (the time budget is spent) leaves the tuned columns out (their compiles cost
    seconds), with that reason; leave_out: {tuned column: why it is not measured here}; codegen False
    (quick mode): torch.compile captures the step but builds no kernels (the backends' tuned_steps).
    Raises what a plain make_step raises (a bad fixture or variant); a tuned step's failure is
    recorded, not raised.
    """
    name = fx.scenario
    candidates: dict[str, object] = {fw: lesson(fw, name).make_step(fx, variant) for fw in ("torch", "jax")}
    for fw in ("torch", "jax"):
        tuned = backend(fw).bench.tuned_steps(fx, variant, codegen)
        if not tune:  # built (cheap), never called: a reason it has already stands
            why = "not compiled: the time budget (--budget) was spent before this step"
            tuned = {col: t if isinstance(t, str) else why for col, t in tuned.items()}
        candidates.update(tuned)
    for col, why in (leave_out or {}).items():
        if not isinstance(candidates.get(col, ""), str):
            candidates[col] = why
    unavailable = {col: c for col, c in candidates.items() if isinstance(c, str)}
    built = {col: c for col, c in candidates.items() if not isinstance(c, str)}
    steps = {col: (c[0] if col in TUNED else c) for col, c in built.items()}
    facts = {col: c[1] for col, c in built.items() if col in TUNED}

    first_s, first_loss = {}, {}
    for col in [c for c in COLUMNS if c in steps]:
        seconds, out, error = first_call(steps[col])
        if error is not None and col not in TUNED:
            raise error
        if error is not None:
            message = (str(error).strip().splitlines() or [""])[0].split(". ")[0][:200]
            unavailable[col] = f"{type(error).__name__} on the first call, after {seconds:.1f} s: {message}"
            del steps[col]
            continue
        first_s[col], first_loss[col] = seconds, float(out)
    for col in [c for c in TUNED if c in steps]:
        plain = first_loss["torch" if col.startswith("torch") else "jax"]
        if abs(first_loss[col] - plain) > LOSS_RTOL * max(1.0, abs(plain)):
            unavailable[col] = f"its first loss {first_loss[col]!r} is not the plain step's {plain!r}"
            del steps[col]

    timed = interleaved(steps, repeats, target_s, deadline, first_call_s=first_s)
    for col, fact in facts.items():
        if col in timed:
            timed[col].update(fact())
    return _row(fx, variant, timed, unavailable)


def _row(fx: Fixture, variant: str, timed: Mapping[str, dict], unavailable: Mapping[str, str]) -> dict:
    torch_s = timed["torch"]["median_s"]
    best = {
        fw: min((c for c in timed if c.startswith(fw)), key=lambda c: timed[c]["median_s"]) for fw in ("torch", "jax")
    }
    return {
        "variant": variant,
        "case": fx.case,
        "fields": {k: list(v.shape) for k, v in fx.items()},
        **{col: timed[col] for col in COLUMNS if col in timed},
        "unavailable": {col: unavailable[col] for col in COLUMNS if col in unavailable},
        "jax_over_torch": timed["jax"]["median_s"] / torch_s,
        "ratios": {col: timed[col]["median_s"] / torch_s for col in COLUMNS[1:] if col in timed},
        "best": {**best, "jax_over_torch": timed[best["jax"]]["median_s"] / timed[best["torch"]]["median_s"]},
    }


def compile_allowed(deadline: float) -> bool:
    """Whether the tuned columns may compile: the item's share of the budget is not spent."""
    return deadline - time.monotonic() > 0.05
