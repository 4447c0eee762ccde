"""How one case is judged: `CaseResult`, everything a case produced and the verdict on it.

shared.core.runner fills it (and exports it too); the tables, the site and the JSON reports read it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .parity import Comparison

__all__ = ["CaseResult"]


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
    # seconds per stage (imports, fixtures, torch, jax, oracle, naive_oracle, comparison) and, where the
    # run was profiled, the deltas of the JAX backend's counters over the jax stage (`run --profile`)
    stages: dict[str, float] = field(default_factory=dict, repr=False)
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
