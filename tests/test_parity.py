"""The parity suite: every scenario × variant × fixture case × dtype, torch vs JAX vs oracle."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import all_cases, case_result


@pytest.mark.parametrize("scenario, variant, case, dtype", all_cases())
def test_case(scenario: str, variant: str, case: str, dtype: str) -> None:
    r = case_result(scenario, variant, dtype, case)
    assert r.error is None, r.error
    assert r.parity_ok, "\n".join(r.problems())
    assert r.oracle_ok, "\n".join(r.problems())
    # the lesson, on both frameworks: parity cannot pass with both sides equally wrong
    assert not r.pattern_problems, "\n".join(r.pattern_problems)
    # a float32 run really computed in float32 on both sides, whatever the x64 setting
    for framework in ("torch", "jax"):
        floats = {k: v.dtype for k, v in r.outputs[framework].items() if v.dtype.kind == "f"}
        assert floats, f"{r.label}: {framework} returned no float output"
        assert set(floats.values()) == {np.dtype(dtype)}, floats
    assert r.ok and r.verdict in ("PASS", "DIFFERS (expected)")
