"""Property tests: for random seeds, float64 parity, the oracle and the lesson hold; naive oracles are strict.

Seeds are drawn by hypothesis at random on every run (derandomize off, no example database): a
failure prints its seed (`Falsifying example: test_...(name='p12_masked_attention_row', seed=N)`),
and `detach-parity run NAME --seed N` reproduces it. Hypothesis always tries the simplest value
first; seed 0 is test_parity's and is filtered out, so every example is a new random seed.
Default profile: one random seed per scenario, its first variant. Heavy profile (`pytest -m slow`):
200 seeds per scenario, every variant, in four parts of 50 (`-k` picks a family, a scenario or a part).
"""

from __future__ import annotations

import fnmatch
import itertools

import jax
import numpy as np
import pytest
from conftest import case_result
from detach_parity.shared.core import runner
from detach_parity.shared.core.registry import SCENARIOS
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

RANDOM = [name for name, spec in SCENARIOS.items() if "random" in spec.cases]
SETTINGS = {
    "deadline": None,
    "derandomize": False,  # True drew the same seed on every run
    "database": None,  # nothing written; the printed seed reproduces a failure
    "suppress_health_check": [HealthCheck.too_slow],
}
SEEDS = st.integers(min_value=0, max_value=2**32 - 1).filter(lambda seed: seed != 0)  # 0: test_parity's seed
HEAVY_SEEDS = 200


def check_seed(name: str, seed: int, variants) -> None:
    for variant in variants:
        r = runner.run_case(name, variant, "float64", seed=seed, case="random")
        assert r.ok, f"detach-parity run {name} --variant {variant} --dtype float64 --seed {seed}:\n" + "\n".join(
            r.problems()
        )


@pytest.mark.parametrize("name", RANDOM, ids=RANDOM)
@settings(max_examples=1, **SETTINGS)
@given(seed=SEEDS)
def test_random_seed_float64(name: str, seed: int) -> None:
    check_seed(name, seed, SCENARIOS[name].variants[:1])


# Seeds that failed once, each with what it found: kept so that the fix stays a fix.
FOUND = [
    ("gradient_penalty", "create_graph", 3701),  # CI: a norm's kink 4.95e-4 from the point, inside the fd step
    ("gradient_penalty", "create_graph", 896502738),  # seed scan: every ReLU off for real and fake, ∂L/∂b_1 = 0
    ("siamese_stop", "simsiam_no_stop", 101),  # cosine of a short vector: h = 1e-3 off by 3e-4 relative
    ("siamese_stop", "simsiam_no_stop", 121),
    ("siamese_stop", "byol", 121),
    ("dqn_target", "online_semi_gradient", 2537),  # heavy profile: XLA's float64 dot broke a tie by one ulp
]


@pytest.mark.parametrize("name, variant, seed", FOUND, ids=[f"{n}[{v}]-{s}" for n, v, s in FOUND])
def test_seeds_that_failed_once(name: str, variant: str, seed: int) -> None:
    check_seed(name, seed, [variant])


_heavy_cases = itertools.count(1)
# the heavy profile in parts: HEAVY_SEEDS per scenario in HEAVY_PARTS tests of their own, so that
# `-n N` spreads one scenario over workers and `-k` picks a family, a scenario or a part
# (`pytest -m slow -k pitfalls`, `-k "dqn_target and part0"`); ids read family-scenario-partK
HEAVY_PARTS = 4
HEAVY = [
    pytest.param(name, id=f"{SCENARIOS[name].family}-{name}-part{part}")
    for name in RANDOM
    for part in range(HEAVY_PARTS)
]


@pytest.mark.slow
@pytest.mark.parametrize("name", HEAVY)
@settings(max_examples=HEAVY_SEEDS // HEAVY_PARTS, **SETTINGS)
@given(seed=SEEDS)
def test_random_seeds_every_variant_heavy(name: str, seed: int) -> None:
    if next(_heavy_cases) % 50 == 0:
        # random shapes compile new programs for every seed: thousands of executables in one process
        # exhaust the kernel's memory maps (LLVM "Unable to allocate section memory"); start afresh
        jax.clear_caches()
    check_seed(name, seed, SCENARIOS[name].variants)


def test_seeds_are_drawn_at_random() -> None:
    """The settings above really draw new seeds: five one-example runs do not all see the same seed."""
    seen: list[int] = []

    @settings(max_examples=1, **SETTINGS)
    @given(seed=SEEDS)
    def draw(seed: int) -> None:
        seen.append(seed)

    for _ in range(5):
        draw()
    assert len(seen) == 5 and 0 not in seen
    assert len(set(seen)) > 1, f"the same seed every time: {seen}"


# A naive variant must be the right wrong answer (issue 15 item 2) ------------------------------

DIVERGING = [(name, v) for name, spec in SCENARIOS.items() for v in spec.diverges]


def _mutated(value: np.ndarray) -> np.ndarray:
    """Another wrong answer: sin(x)·1e3 + 1 (finite where x was NaN), a flipped bool, an int + 1."""
    if value.dtype.kind == "b":
        return ~value
    if value.dtype.kind in "iu":
        return value + 1
    with np.errstate(invalid="ignore"):
        return np.where(np.isfinite(value), np.sin(value) * 1e3 + 1.0, 1e3).astype(value.dtype)


class _Replay:
    """An implementation that returns the stored outputs of a case, JAX's mutated on the declared keys."""

    def __init__(self, outputs: dict, globs: tuple[str, ...] | None) -> None:
        self.outputs, self.globs = outputs, globs

    def run(self, fx, variant):
        out = {k: np.array(v) for k, v in self.outputs.items()}
        if self.globs is not None:
            for key in out:
                if any(fnmatch.fnmatchcase(key, g) for g in self.globs):
                    out[key] = _mutated(out[key])
        return out


@pytest.mark.parametrize("name, variant", DIVERGING, ids=[f"{n}[{v}]" for n, v in DIVERGING])
def test_a_different_naive_answer_fails(name: str, variant: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every diverging variant: the real naive port is DIFFERS (expected); any other wrong answer on the
    declared keys fails as "not the right wrong answer" (before naive_oracle, sin(x)·1e3 passed)."""
    spec = SCENARIOS[name]
    dtype, case = "float64", spec.cases[0]
    stored = case_result(name, variant, dtype, case)
    assert stored.verdict == "DIFFERS (expected)", "\n".join(stored.problems())
    for globs in (None, spec.diverges[variant]):
        replay = {"torch": _Replay(stored.outputs["torch"], None), "jax": _Replay(stored.outputs["jax"], globs)}
        monkeypatch.setattr(runner, "lesson", lambda framework, module, replay=replay: replay[framework])
        r = runner.run_case(name, variant, dtype, case=case)
        if globs is None:  # the replay itself changes nothing
            assert r.verdict == "DIFFERS (expected)", "\n".join(r.problems())
        else:
            assert r.verdict == "FAIL" and not r.divergent_oracle.ok
            assert any("not the right wrong answer" in p for p in r.problems())
