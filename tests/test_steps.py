"""make_step of every pair with a step: one training step, torch eager vs JAX jit.

Both steps are built on the same float32 fixture (seed 0, first case, first variant) and
called twice: the losses agree on both calls (so the state advances the same way), the
first agrees with the record's `step_loss` from the float64 oracle (so torch and JAX cannot
agree on a wrong step), and the steps the record says update something really move on.
"""

from __future__ import annotations

import numpy as np
import pytest
from detach_parity.shared.core.fixtures import make
from detach_parity.shared.core.parity import tolerance_for
from detach_parity.shared.core.registry import SCENARIOS, get
from detach_parity.shared.core.runner import lesson, oracle_outputs

STEPPED = [name for name, spec in SCENARIOS.items() if spec.has_step]
RTOL, ATOL = 1e-4, 1e-6


def _fixture(name: str):
    return make(name, "float32", seed=0, case=get(name).cases[0])


def _tolerance(name: str) -> tuple[float, float]:
    """rtol 1e-4, atol 1e-6, or the scenario's own float32 parity tolerance where it is looser (mixed_precision)."""
    tol = tolerance_for("float32", "parity", get(name).tolerances)
    return max(RTOL, tol.rtol), max(ATOL, tol.atol)


def test_every_seed_tutorial_scenario_has_a_step() -> None:
    assert STEPPED, "no scenario declares a step"
    missing = [n for n, s in SCENARIOS.items() if s.family == "scenarios" and not s.has_step]
    assert not missing, f"scenarios without a step_loss in their record: {missing}"


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.xdist_group(n)) for n in STEPPED])
def test_torch_and_jax_steps_agree(name: str) -> None:
    fx, spec = _fixture(name), get(name)
    variant = spec.variants[0]
    t_step, j_step = lesson("torch", name).make_step(fx, variant), lesson("jax", name).make_step(fx, variant)
    rtol, atol = _tolerance(name)
    calls = []
    for call in ("first", "second"):
        t_out = t_step()
        assert not t_out.requires_grad and t_out.grad_fn is None, f"{name} torch {call} call: the loss keeps a graph"
        t_loss, j_loss = t_out.numpy(), np.asarray(j_step())
        for side, loss in (("torch", t_loss), ("jax", j_loss)):
            assert loss.shape == () and loss.dtype == np.float32, (
                f"{name} {side} {call} call: loss {loss.shape} {loss.dtype}"
            )
            assert np.isfinite(loss), f"{name} {side} {call} call: loss {loss}"
        np.testing.assert_allclose(j_loss, t_loss, rtol=rtol, atol=atol, err_msg=f"{name}: {call} call, JAX vs torch")
        calls.append(t_loss)
    expect = spec.step_loss(oracle_outputs(spec, fx, variant), fx.float64())
    np.testing.assert_allclose(calls[0], expect, rtol=rtol, atol=atol, err_msg=f"{name}: first loss vs the oracle")
    if spec.step_updates:
        assert calls[0] != calls[1], f"{name}: the second step should start from the updated state"
    else:
        np.testing.assert_array_equal(
            calls[0], calls[1], err_msg=f"{name}: a step that updates nothing moved"
        )  # exact: one program, the same state, twice


@pytest.mark.parametrize("framework", ["torch", "jax"])
def test_make_step_refuses_a_wrong_fixture_or_variant(framework: str) -> None:
    basics = lesson(framework, "basics")
    with pytest.raises(ValueError, match="variant expected one of .*got 'no_such_variant'"):
        basics.make_step(_fixture("basics"), "no_such_variant")
    with pytest.raises(
        ValueError,
        match="basics.make_step: fx expected a float32 Fixture of 'basics', got a float32 Fixture of 'data_vs_detach'",
    ):
        basics.make_step(_fixture("data_vs_detach"), "z_stopped")
    with pytest.raises(
        ValueError, match="fx expected a float32 Fixture of 'basics', got a float64 Fixture of 'basics'"
    ):
        basics.make_step(make("basics", "float64"), "z_stopped")
