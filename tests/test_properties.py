"""Property tests: for random seeds (and so random small shapes), float64 parity and the oracle hold.

Default profile: one random seed per scenario (the suite stays fast). Heavy profile:
`pytest -m slow` runs 20 seeds per scenario and variant.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shared.core.registry import SCENARIOS
from shared.core.runner import run_case

RANDOM = [name for name, spec in SCENARIOS.items() if "random" in spec.cases]
SETTINGS = {"deadline": None, "derandomize": True, "suppress_health_check": [HealthCheck.too_slow]}


def check_seed(name: str, seed: int, variants) -> None:
    for variant in variants:
        r = run_case(name, variant, "float64", seed=seed, case="random")
        assert r.ok, "\n".join(r.problems())


@pytest.mark.parametrize("name", RANDOM, ids=RANDOM)
@settings(max_examples=1, **SETTINGS)
@given(seed=st.integers(min_value=1, max_value=2**31 - 1))
def test_random_seed_float64(name: str, seed: int) -> None:
    spec = SCENARIOS[name]
    check_seed(name, seed, spec.variants[:1])


@pytest.mark.slow
@pytest.mark.parametrize("name", RANDOM, ids=RANDOM)
@settings(max_examples=20, **SETTINGS)
@given(seed=st.integers(min_value=1, max_value=2**31 - 1))
def test_random_seeds_every_variant_heavy(name: str, seed: int) -> None:
    check_seed(name, seed, SCENARIOS[name].variants)
