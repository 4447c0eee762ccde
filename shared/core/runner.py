"""Run one case (scenario × variant × fixture case × dtype): torch, JAX, oracle, lesson.

A case passes when
  * torch and JAX agree within the parity tolerance, and each matches the float64
    oracle within the oracle tolerance; for a variant declared in `diverges` (a
    naive port), JAX must differ from torch and from the oracle on the declared
    keys, and agree with both on every other key;
  * every float output is in the fixture dtype on both sides (a float32 run really
    computed in float32);
  * the expected zero / non-zero pattern of the variant holds on both sides.
"""

from __future__ import annotations

import fnmatch
import importlib
import importlib.util
import time
import traceback
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from . import fixtures, registry
from .backend import Lesson
from .parity import Comparison, check_pattern, compare, tolerance_for
from .records import Scenario

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

FRAMEWORKS = ("torch", "jax")
_PACKAGE = __package__.rsplit(".", 2)[0]  # detach_parity: the grandparent of shared.core


def _module_name(framework: str, module: str) -> str:
    if framework not in FRAMEWORKS:
        raise ValueError(f"framework expected one of {list(FRAMEWORKS)}, got {framework!r}")
    if not isinstance(module, str) or not all(part.isidentifier() for part in module.split(".")):
        raise ValueError(f"module expected a Python module name, got {module!r}")
    return f"{_PACKAGE}.{framework}_impl.{module}"


def lesson(framework: str, scenario: str) -> Lesson:
    """The lesson of a registered scenario: `torch_impl/<scenario>.py` or `jax_impl/<scenario>.py`.

    The one loader of the lessons (the registry names them; `Lesson` in shared/core/backend.py
    says what they provide). The tools of a framework are not lessons: the applications reach
    them through shared.apps.backends. Raises ValueError for an unknown framework or scenario.
    """
    if scenario not in registry.SCENARIOS:
        raise ValueError(f"scenario expected a registered scenario, got {scenario!r}")
    return importlib.import_module(_module_name(framework, scenario))


def source_path(framework: str, module: str) -> Path:
    """The file of `torch_impl/<module>.py` or `jax_impl/<module>.py` (dotted: `backend.port`), not imported.

    For the tools that read the sources (show, site, selfcheck, the claims' integrity check).
    Raises ValueError for an unknown framework or module.
    """
    package = importlib.util.find_spec(_module_name(framework, module).rsplit(".", module.count(".") + 1)[0])
    folders = [Path(p) for p in (package.submodule_search_locations or [])] if package else []
    # the file itself, found from the framework package's folder: importing a backend's subpackage
    # to locate one of its files would import the framework
    found = [f for d in folders for f in (d.joinpath(*module.split(".")).with_suffix(".py"),) if f.is_file()]
    if not found:
        raise ValueError(f"{framework}_impl.{module}: module not found")
    return found[0]


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


@dataclass
class CaseResult:
    """Everything one case produced and how it was judged.

    For a variant declared in the scenario's `diverges` (a naive port), on the declared
    keys only: `divergent` compares JAX with torch (it must fail: the naive port is wrong
    there), `divergent_oracle` compares JAX with the record's `naive_oracle` (it must
    pass: the naive port is the right wrong answer, not any wrong answer), and
    `naive_gap` compares the naive oracle with the oracle (it must fail: the declared
    difference is real in float64). `torch_jax` and `jax_oracle` cover every other key
    (they must pass: the naive port is right everywhere else).
    """

    scenario: str
    variant: str
    case: str
    dtype: str
    seed: int
    diverges: tuple[str, ...] = ()
    torch_jax: Comparison | None = None
    torch_oracle: Comparison | None = None
    jax_oracle: Comparison | None = None
    divergent: Comparison | None = None
    divergent_oracle: Comparison | None = None
    naive_gap: Comparison | None = None
    structure: Comparison | None = None
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
        """torch vs JAX as the registry expects: equal, or different exactly on the declared keys."""
        if self.torch_jax is None:
            return False
        if self.diverges:
            d = self.divergent
            return (
                self.structure is not None
                and not _structural(self.structure)
                and self.torch_jax.ok
                and d is not None
                and not d.ok
                and not _structural(d)
            )
        return self.torch_jax.ok

    @property
    def oracle_ok(self) -> bool:
        if self.torch_oracle is None or self.jax_oracle is None:
            return False
        if self.diverges:
            d, gap = self.divergent_oracle, self.naive_gap
            return (
                self.torch_oracle.ok
                and self.jax_oracle.ok
                and d is not None
                and d.ok
                and gap is not None
                and not gap.ok
                and not _structural(gap)
            )
        return self.torch_oracle.ok and self.jax_oracle.ok

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

    @property
    def shown(self) -> Comparison | None:
        """The torch-vs-JAX comparison a table shows: the declared difference for a naive port."""
        return self.divergent if self.diverges else self.torch_jax

    def problems(self) -> list[str]:
        out = [self.error] if self.error else []
        for comp in (self.structure, self.torch_jax, self.torch_oracle, self.jax_oracle):
            if comp is not None and not comp.ok and (comp is not self.structure or _structural(comp)):
                out.extend(comp.problems)
        for comp, name in ((self.divergent, "torch vs jax"), (self.naive_gap, "the naive oracle vs the oracle")):
            if comp is None:
                continue
            if comp.ok:
                out.append(
                    f"{comp.label}: {name} agree on {list(self.diverges)}, but this naive variant must differ there"
                )
            elif _structural(comp):
                out.extend(comp.problems)
        if self.divergent_oracle is not None and not self.divergent_oracle.ok:
            out.append(f"{self.label}: the naive port is not the right wrong answer on {list(self.diverges)}:")
            out.extend(self.divergent_oracle.problems)
        return out + self.pattern_problems + self.dtype_problems

    def to_json(self) -> dict:
        def js(comp: Comparison | None) -> dict | None:
            return comp.to_json() if comp else None

        return {
            "scenario": self.scenario,
            "variant": self.variant,
            "case": self.case,
            "dtype": self.dtype,
            "seed": self.seed,
            "diverges": list(self.diverges),
            "verdict": self.verdict,
            "ok": self.ok,
            "parity": js(self.torch_jax),
            "torch_oracle": js(self.torch_oracle),
            "jax_oracle": js(self.jax_oracle),
            "divergent": js(self.divergent),
            "divergent_oracle": js(self.divergent_oracle),
            "naive_gap": js(self.naive_gap),
            "lesson_ok": self.lesson_ok,
            "problems": self.problems(),
            "seconds": round(self.seconds, 4),
        }


def _structural(comp: Comparison) -> bool:
    """True when a comparison failed for shape / key / dtype reasons rather than values."""
    return any(("keys only" in p or "shape" in p or "dtype" in p or "empty" in p) for p in comp.problems)


def _split(out: dict[str, np.ndarray], globs: tuple[str, ...]) -> tuple[dict, dict]:
    hit = {k: v for k, v in out.items() if any(fnmatch.fnmatchcase(k, g) for g in globs)}
    return hit, {k: v for k, v in out.items() if k not in hit}


def run_case(spec: Scenario | str, variant: str, dtype: str, seed: int = 0, case: str | None = None) -> CaseResult:
    """Run torch, JAX and the oracle on one fixture and check parity, oracle, dtypes and lesson.

    Exceptions raised by an implementation are caught and reported as verdict ERROR.
    """
    spec = registry.get(spec)
    spec.check_variant(variant)
    case = spec.cases[0] if case is None else case
    res = CaseResult(spec.name, variant, case, dtype, seed, diverges=tuple(spec.diverges.get(variant, ())))
    label = res.label
    start = time.perf_counter()
    try:
        fx = fixtures.make(spec, dtype, seed=seed, case=case)
        out_t = lesson("torch", spec.name).run(fx, variant)
        out_j = lesson("jax", spec.name).run(fx, variant)
        out_o = oracle_outputs(spec, fx, variant)
        out_n = naive_outputs(spec, fx, variant) if res.diverges else {}
    except Exception as exc:  # reported, never swallowed: the case fails
        res.error = f"{label} {dtype}: {type(exc).__name__}: {exc}\n{traceback.format_exc(limit=-3)}"
        res.seconds = time.perf_counter() - start
        return res
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
