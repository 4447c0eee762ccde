"""Run one case (scenario × variant × fixture case × dtype): torch, JAX, oracle, lesson.

A case passes when
  * torch and JAX agree within the parity tolerance (or, for a variant listed in
    `diverges`, JAX differs from torch: the naive port is shown to be wrong);
  * torch and JAX each match the float64 oracle within the oracle tolerance
    (for `diverges` variants: torch matches, JAX does not);
  * every float output is in the fixture dtype on both sides (a float32 run really
    computed in float32);
  * the expected zero / non-zero pattern of the variant holds on both sides.
"""

from __future__ import annotations

import importlib
import time
import traceback
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np

from shared import fixtures, oracle
from shared.parity import Comparison, check_pattern, compare, tolerance_for
from shared.registry import Scenario, get

__all__ = ["CaseResult", "run_case", "iter_cases", "impl"]


def impl(framework: str, scenario: str):
    """The module `torch_impl.<scenario>` or `jax_impl.<scenario>`."""
    if framework not in ("torch", "jax"):
        raise ValueError(f"framework expected 'torch' or 'jax', got {framework!r}")
    return importlib.import_module(f"{framework}_impl.{scenario}")


@dataclass
class CaseResult:
    scenario: str
    variant: str
    case: str
    dtype: str
    seed: int
    diverges: bool = False
    torch_jax: Comparison | None = None
    torch_oracle: Comparison | None = None
    jax_oracle: Comparison | None = None
    pattern_problems: list[str] = field(default_factory=list)
    dtype_problems: list[str] = field(default_factory=list)
    error: str | None = None
    seconds: float = 0.0
    outputs: dict[str, dict[str, np.ndarray]] = field(default_factory=dict, repr=False)

    @property
    def label(self) -> str:
        return f"{self.scenario}[{self.variant}]"

    @property
    def parity_ok(self) -> bool:
        """torch vs JAX as the registry expects: equal, or different for a naive port."""
        if self.torch_jax is None:
            return False
        if self.diverges:
            return not self.torch_jax.ok and not _structural(self.torch_jax)
        return self.torch_jax.ok

    @property
    def oracle_ok(self) -> bool:
        if self.torch_oracle is None or self.jax_oracle is None:
            return False
        jax_expected = not self.jax_oracle.ok if self.diverges else self.jax_oracle.ok
        return self.torch_oracle.ok and jax_expected

    @property
    def lesson_ok(self) -> bool:
        return self.error is None and not self.pattern_problems

    @property
    def ok(self) -> bool:
        return self.error is None and self.parity_ok and self.oracle_ok and self.lesson_ok and not self.dtype_problems

    @property
    def verdict(self) -> str:
        if self.error is not None:
            return "ERROR"
        if not self.ok:
            return "FAIL"
        return "DIFFERS (expected)" if self.diverges else "PASS"

    def problems(self) -> list[str]:
        out = [self.error] if self.error else []
        for comp, name in (
            (self.torch_jax, "torch vs jax"),
            (self.torch_oracle, "torch vs oracle"),
            (self.jax_oracle, "jax vs oracle"),
        ):
            if comp is None:
                continue
            if self.diverges and comp is not self.torch_oracle:
                if comp.ok:
                    out.append(f"{comp.label}: {name} agree, but this naive variant must differ")
                elif _structural(comp):
                    out.extend(comp.problems)
            elif not comp.ok:
                out.extend(comp.problems)
        return out + self.pattern_problems + self.dtype_problems

    def to_json(self) -> dict:
        return {
            "scenario": self.scenario,
            "variant": self.variant,
            "case": self.case,
            "dtype": self.dtype,
            "seed": self.seed,
            "diverges": self.diverges,
            "verdict": self.verdict,
            "ok": self.ok,
            "parity": self.torch_jax.to_json() if self.torch_jax else None,
            "torch_oracle": self.torch_oracle.to_json() if self.torch_oracle else None,
            "jax_oracle": self.jax_oracle.to_json() if self.jax_oracle else None,
            "lesson_ok": self.lesson_ok,
            "problems": self.problems(),
            "seconds": round(self.seconds, 4),
        }


def _structural(comp: Comparison) -> bool:
    """True when a comparison failed for shape / key / dtype reasons rather than values."""
    return any(("keys only" in p or "shape" in p or "dtype" in p or "empty" in p) for p in comp.problems)


def run_case(spec: Scenario | str, variant: str, dtype: str, seed: int = 0, case: str | None = None) -> CaseResult:
    """Run torch, JAX and the oracle on one fixture and check parity, oracle, dtypes and lesson.

    Exceptions raised by an implementation are caught and reported as verdict ERROR.
    """
    spec = get(spec) if isinstance(spec, str) else spec
    spec.check_variant(variant)
    case = spec.cases[0] if case is None else case
    res = CaseResult(spec.name, variant, case, dtype, seed, diverges=variant in spec.diverges)
    label = res.label
    start = time.perf_counter()
    try:
        fx = fixtures.make(spec.name, dtype, seed=seed, case=case)
        out_t = impl("torch", spec.name).run(fx, variant)
        out_j = impl("jax", spec.name).run(fx, variant)
        out_o = oracle.compute(spec.name, fx, variant)
    except Exception as exc:  # reported, never swallowed: the case fails
        res.error = f"{label} {dtype}: {type(exc).__name__}: {exc}\n{traceback.format_exc(limit=-3)}"
        res.seconds = time.perf_counter() - start
        return res
    res.outputs = {"torch": out_t, "jax": out_j, "oracle": out_o}
    res.torch_jax = compare(
        out_j,
        out_t,
        tolerance_for(dtype, "parity", spec.tolerances),
        label=label,
        names=("jax", "torch"),
        nonfinite_ok=spec.nonfinite_ok,
    )
    otol = tolerance_for(dtype, "oracle", spec.tolerances)
    res.torch_oracle = compare(
        out_t, out_o, otol, label=label, names=("torch", "oracle"), check_dtype=False, nonfinite_ok=spec.nonfinite_ok
    )
    res.jax_oracle = compare(
        out_j, out_o, otol, label=label, names=("jax", "oracle"), check_dtype=False, nonfinite_ok=spec.nonfinite_ok
    )
    for name, out in (("torch", out_t), ("jax", out_j)):
        res.pattern_problems += check_pattern(out, spec.pattern[variant], label=f"{label} {name}")
        for key, arr in out.items():
            if arr.dtype.kind == "f" and arr.dtype != np.dtype(dtype):
                res.dtype_problems.append(f"{label} {name}[{key!r}]: expected dtype {dtype}, got {arr.dtype}")
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
    from shared.registry import names

    selected = [get(n) for n in (scenarios or names(family))]
    if family is not None:
        selected = [s for s in selected if s.family == family]
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
