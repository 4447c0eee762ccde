"""Shared pytest fixtures: every parity case is computed once per session and reused."""

from __future__ import annotations

import functools

import pytest

from shared.runner import CaseResult, iter_cases, run_case


@functools.cache
def case_result(scenario: str, variant: str, dtype: str, case: str, seed: int = 0) -> CaseResult:
    """The CaseResult of one case, computed once per worker (JAX compiles are the cost)."""
    return run_case(scenario, variant, dtype, seed=seed, case=case)


def all_cases(family: str | None = None) -> list:
    """pytest params for every registered case, grouped per scenario for pytest-xdist."""
    return [
        pytest.param(
            spec.name, v, case, dt, id=f"{spec.name}[{v}]-{case}-{dt}", marks=pytest.mark.xdist_group(spec.name)
        )
        for spec, v, case, dt in iter_cases(family=family)
    ]
