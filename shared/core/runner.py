"""Run one case (scenario × variant × fixture case × dtype): torch, JAX, oracle, lesson.

A case passes when
  * torch and JAX agree within the parity tolerance, and each matches the float64
    oracle within the oracle tolerance; for a variant declared in `diverges` (a
    naive port), JAX must differ from torch and from the oracle on the declared
    keys, and agree with both on every other key;
  * every float output is in the fixture dtype on both sides (a float32 run really
    computed in float32);
  * the expected zero / non-zero pattern of the variant holds on both sides.

Where the pieces are: loading the lessons in shared/core/lessons.py, the judgement of a
case (`CaseResult`) in shared/core/verdict.py; both are exported here too.
"""

from __future__ import annotations

import fnmatch
import time
import traceback
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager

import numpy as np

from . import fixtures, registry
from .lessons import FRAMEWORKS, lesson, source_path
from .parity import Comparison, check_pattern, compare
from .records import Scenario
from .tolerance import tolerance_for
from .verdict import CaseResult

__all__ = [
    "FRAMEWORKS",
    "CaseResult",
    "lesson",
    "source_path",
    "oracle_outputs",
    "naive_outputs",
    "run_case",
    "iter_cases",
]


def _float64(out: dict) -> dict[str, np.ndarray]:
    return {
        k: np.asarray(v) if np.asarray(v).dtype.kind in "iub" else np.asarray(v, dtype=np.float64)
        for k, v in out.items()
    }


def naive_outputs(spec: Scenario, fx, variant: str) -> dict[str, np.ndarray]:
    """The record's `naive_oracle`: float64 outputs of what a diverging variant's JAX side computes.

    Raises ValueError for a variant that does not diverge, or a naive oracle that returned nothing.
    """
    if variant not in spec.diverges:
        raise ValueError(f"{spec.name}: variant expected one of the diverging {sorted(spec.diverges)}, got {variant!r}")
    if spec.naive_oracle is None:
        raise ValueError(
            f"{spec.name}: naive_oracle expected for the diverging variant {variant!r} "
            "(what the naive port computes on its declared keys), got None"
        )
    out = spec.naive_oracle(fx, variant)
    if not out:
        raise ValueError(f"naive oracle {spec.name}[{variant}]: returned no outputs")
    return _float64(out)


def oracle_outputs(spec: Scenario, fx, variant: str) -> dict[str, np.ndarray]:
    """The float64 oracle's outputs of a scenario variant on a fixture.

    Raises ValueError for an unknown variant or an oracle that returned no output.
    """
    spec.check_variant(variant)
    out = spec.oracle(fx, variant)
    if not out:
        raise ValueError(f"oracle {spec.name}[{variant}]: returned no outputs")
    return _float64(out)


def _split(out: dict[str, np.ndarray], globs: tuple[str, ...]) -> tuple[dict, dict]:
    hit = {k: v for k, v in out.items() if any(fnmatch.fnmatchcase(k, g) for g in globs)}
    return hit, {k: v for k, v in out.items() if k not in hit}


@contextmanager
def _stage(stages: dict[str, float], name: str, counters: Callable[[], Mapping[str, float]] | None = None):
    """Add the seconds of the block to stages[name]; with `counters`, also the change of each counter."""
    before = dict(counters()) if counters else {}
    start = time.perf_counter()
    try:
        yield
    finally:
        stages[name] = stages.get(name, 0.0) + time.perf_counter() - start
        for key, value in (counters() if counters else {}).items():
            stages[key] = stages.get(key, 0.0) + value - before.get(key, 0.0)


def run_case(
    spec: Scenario | str,
    variant: str,
    dtype: str,
    seed: int = 0,
    case: str | None = None,
    counters: Callable[[], Mapping[str, float]] | None = None,
) -> CaseResult:
    """Run torch, JAX and the oracle on one fixture and check parity, oracle, dtypes and lesson.

    `res.stages` holds the seconds of each stage: imports (a lesson's first load), fixtures, torch, jax,
    oracle, naive_oracle, comparison. `counters` (for `run --profile`: the JAX backend's cumulative
    counters, e.g. traces and compile seconds) adds each counter's change over the jax stage.
    Exceptions raised by an implementation are caught and reported as verdict ERROR.
    """
    spec = registry.get(spec)
    spec.check_variant(variant)
    case = spec.cases[0] if case is None else case
    res = CaseResult(spec.name, variant, case, dtype, seed, diverges=tuple(spec.diverges.get(variant, ())))
    label = res.label
    start = time.perf_counter()
    stages = res.stages
    try:
        with _stage(stages, "imports"):  # the first case of a scenario imports its lessons (and the frameworks)
            torch_side, jax_side = lesson("torch", spec.name), lesson("jax", spec.name)
        with _stage(stages, "fixtures"):
            fx = fixtures.make(spec, dtype, seed=seed, case=case)
        with _stage(stages, "torch"):
            out_t = torch_side.run(fx, variant)
        with _stage(stages, "jax", counters):
            out_j = jax_side.run(fx, variant)
        with _stage(stages, "oracle"):
            out_o = oracle_outputs(spec, fx, variant)
        with _stage(stages, "naive_oracle"):
            out_n = naive_outputs(spec, fx, variant) if res.diverges else {}
    except Exception as exc:  # reported, never swallowed: the case fails
        res.error = f"{label} {dtype}: {type(exc).__name__}: {exc}\n{traceback.format_exc(limit=-3)}"
        res.seconds = time.perf_counter() - start
        return res
    judged = time.perf_counter()
    res.outputs = {"torch": out_t, "jax": out_j, "oracle": out_o}
    if res.diverges:
        res.outputs["naive_oracle"] = out_n
    ptol = tolerance_for(dtype, "parity", spec.tolerances)
    otol = tolerance_for(dtype, "oracle", spec.tolerances)
    nonfinite = spec.nonfinite_ok

    def jax_vs(ref: dict, tol, names, *, check_dtype, keys) -> Comparison:
        return compare(
            {k: out_j[k] for k in keys if k in out_j},
            {k: ref[k] for k in keys if k in ref},
            tol,
            label=label,
            names=names,
            check_dtype=check_dtype,
            nonfinite_ok=nonfinite,
        )

    res.torch_oracle = compare(
        out_t, out_o, otol, label=label, names=("torch", "oracle"), check_dtype=False, nonfinite_ok=nonfinite
    )
    if res.diverges:
        res.structure = compare(out_j, out_t, ptol, label=label, names=("jax", "torch"), nonfinite_ok=nonfinite)
        for glob in res.diverges:
            if not any(fnmatch.fnmatchcase(k, glob) for k in out_t):
                res.pattern_problems.append(f"{label}: diverging key glob {glob!r} matches no output key")
        hit, rest = _split(out_t, res.diverges)
        res.divergent = jax_vs(out_t, ptol, ("jax", "torch"), check_dtype=True, keys=hit)
        res.divergent_oracle = jax_vs(out_n, otol, ("jax", "naive oracle"), check_dtype=False, keys=hit)
        missing = sorted(set(hit) - set(out_n))
        if missing:
            res.pattern_problems.append(f"{label}: naive_oracle gives no value for the diverging keys {missing}")
        res.naive_gap = compare(
            {k: out_n[k] for k in hit if k in out_n},
            {k: out_o[k] for k in hit if k in out_o},
            otol,
            label=label,
            names=("naive oracle", "oracle"),
            check_dtype=False,
            nonfinite_ok=nonfinite,
        )
        if rest:
            res.torch_jax = jax_vs(out_t, ptol, ("jax", "torch"), check_dtype=True, keys=rest)
            res.jax_oracle = jax_vs(out_o, otol, ("jax", "oracle"), check_dtype=False, keys=rest)
        else:  # every output is declared divergent: nothing else to agree on
            res.torch_jax = Comparison(label=label, ok=True)
            res.jax_oracle = Comparison(label=label, ok=True)
    else:
        res.torch_jax = compare(out_j, out_t, ptol, label=label, names=("jax", "torch"), nonfinite_ok=nonfinite)
        res.jax_oracle = compare(
            out_j, out_o, otol, label=label, names=("jax", "oracle"), check_dtype=False, nonfinite_ok=nonfinite
        )
    for name, out in (("torch", out_t), ("jax", out_j)):
        res.pattern_problems += check_pattern(out, spec.pattern[variant], label=f"{label} {name}")
        for key, arr in out.items():
            if arr.dtype.kind in "fc" and arr.dtype != np.dtype(dtype):
                res.dtype_problems.append(f"{label} {name}[{key!r}]: expected dtype {dtype}, got {arr.dtype}")
    stages["comparison"] = time.perf_counter() - judged
    res.seconds = time.perf_counter() - start
    return res


def iter_cases(
    scenarios: list[str] | None = None,
    variant: str | None = None,
    dtypes: tuple[str, ...] | None = None,
    family: str | None = None,
) -> Iterator[tuple[Scenario, str, str, str]]:
    """(spec, variant, case, dtype) for every selected case, in registry order.

    Raises:
      ValueError: unknown scenario, or a variant that none of the selected scenarios has.
    """
    if isinstance(scenarios, str):
        raise ValueError(f"scenarios expected a list of names, got the string {scenarios!r}")
    # a name given twice runs once
    selected = [registry.get(n) for n in dict.fromkeys(scenarios or registry.names(family))]
    if family is not None:
        selected = [s for s in selected if s.family == family]
    if variant is not None and scenarios:  # named explicitly: each must have the variant, none is dropped
        for spec in selected:
            if variant not in spec.variants:
                raise ValueError(
                    f"scenario {spec.name!r} has no variant {variant!r}; its variants: {list(spec.variants)}"
                )
    if variant is not None and not any(variant in s.variants for s in selected):
        valid = sorted({v for s in selected for v in s.variants})
        raise ValueError(f"variant expected one of {valid}, got {variant!r}")
    for spec in selected:
        for v in spec.variants:
            if variant is not None and v != variant:
                continue
            for case in spec.cases:
                for dt in spec.dtypes:
                    if dtypes is None or dt in dtypes:
                        yield spec, v, case, dt
