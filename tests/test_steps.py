"""torch_impl/steps.py and jax_impl/steps.py: one training step per scenario, torch eager vs JAX jit.

Both steps are built on the same float32 fixture (seed 0, first case, first variant) and
called twice: the losses agree on both calls (so the state advances the same way), and
the steps that update something really move on.
"""

from __future__ import annotations

import numpy as np
import pytest

from jax_impl import steps as jax_steps
from shared.fixtures import make
from shared.parity import tolerance_for
from shared.registry import get, names
from torch_impl import steps as torch_steps

SCENARIOS = names("scenarios")
# steps that update parameters or a carry: their second loss differs from the first
UPDATES = ("frozen_backbone", "dqn_target", "gan", "grad_clipping", "mixed_precision")
RTOL, ATOL = 1e-4, 1e-6
# the first step's loss from the float64 oracle's outputs (o) and fixture (a): a check that does
# not pass when torch and JAX are equally wrong
ORACLE_LOSS = {
    "basics": lambda o, a: (a["d"] * o["y"] + a["c"] * o["z"]).sum(),  # loss_total
    "linear_regression": lambda o, a: o["loss"],
    "frozen_backbone": lambda o, a: o["loss"],
    "multitask": lambda o, a: o["loss"],
    "dqn_target": lambda o, a: o["loss"],
    "actor_critic": lambda o, a: o["loss"],
    "maml": lambda o, a: o["query_loss"].sum(),  # summed over tasks
    "attention_detach": lambda o, a: o["loss"],
    "gan": lambda o, a: o["d_step/loss"] + o["g_step/loss"],
    "tbptt": lambda o, a: o["elman/loss"] + o["gru/loss"],
    "grad_clipping": lambda o, a: o["above/loss"][0],  # the first window, regime "above"
    "no_grad_inference": lambda o, a: o["loss"],
    "feature_stats": lambda o, a: o["loss"],
    "mixed_precision": lambda o, a: o["loss"],
    "data_vs_detach": lambda o, a: (a["c"] * o["out"]).sum(),
}


def _fixture(name: str):
    return make(name, "float32", seed=0, case=get(name).cases[0])


def _tolerance(name: str) -> tuple[float, float]:
    """rtol 1e-4, atol 1e-6, or the scenario's own float32 parity tolerance where it is looser (mixed_precision)."""
    tol = tolerance_for("float32", "parity", get(name).tolerances)
    return max(RTOL, tol.rtol), max(ATOL, tol.atol)


def test_steps_cover_the_scenarios_in_order() -> None:
    assert list(ORACLE_LOSS) == SCENARIOS
    assert list(torch_steps.STEPS) == SCENARIOS
    assert list(jax_steps.STEPS) == SCENARIOS
    for t_build, j_build in zip(torch_steps.STEPS.values(), jax_steps.STEPS.values(), strict=True):
        assert t_build.__name__ == j_build.__name__
        assert t_build.__doc__ and t_build.__doc__ == j_build.__doc__


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.xdist_group(n)) for n in SCENARIOS])
def test_torch_and_jax_steps_agree(name: str) -> None:
    fx = _fixture(name)
    t_step, j_step = torch_steps.scenario_step(name, fx), jax_steps.scenario_step(name, fx)
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
    spec = get(name)
    expect = ORACLE_LOSS[name](spec.oracle(fx, spec.variants[0]), fx.float64())
    np.testing.assert_allclose(calls[0], expect, rtol=rtol, atol=atol, err_msg=f"{name}: first loss vs the oracle")
    if name in UPDATES:
        assert calls[0] != calls[1], f"{name}: the second step should start from the updated state"


@pytest.mark.parametrize("steps", [torch_steps, jax_steps], ids=["torch", "jax"])
def test_unknown_name_or_variant_raises(steps) -> None:
    with pytest.raises(ValueError, match="name expected one of .*got 'no_such_scenario'"):
        steps.scenario_step("no_such_scenario", _fixture("basics"))
    with pytest.raises(ValueError, match="name expected one of .*got 'p01_std_convention'"):
        steps.scenario_step("p01_std_convention", make("p01_std_convention", "float32"))  # a pitfall has no step
    with pytest.raises(ValueError, match="variant expected one of .*got 'no_such_variant'"):
        steps.scenario_step("basics", _fixture("basics"), "no_such_variant")


@pytest.mark.parametrize("steps", [torch_steps, jax_steps], ids=["torch", "jax"])
def test_wrong_fixture_raises(steps) -> None:
    with pytest.raises(
        ValueError,
        match="scenario_step: fx expected a float32 Fixture of 'basics', got a float32 Fixture of 'data_vs_detach'",
    ):
        steps.scenario_step("basics", _fixture("data_vs_detach"))
    with pytest.raises(
        ValueError, match="fx expected a float32 Fixture of 'basics', got a float64 Fixture of 'basics'"
    ):
        steps.scenario_step("basics", make("basics", "float64"))
