"""dp_no_sync: no_sync and syncing every micro-batch take the same step, the off-by-one loop does not;
optax.MultiSteps' float32 accumulator; bad input."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from conftest import case_result
from detach_parity.shared.core import fixtures
from detach_parity.shared.core.runner import lesson

NAME = "dp_no_sync"


def test_no_sync_takes_the_step_of_syncing_every_micro_batch() -> None:
    a = case_result(NAME, "no_sync", "float64", "random")
    b = case_result(NAME, "sync_every_micro_batch", "float64", "random")
    fx = fixtures.make(NAME, "float64")
    for framework in ("torch", "jax"):
        moved = [k for k in a.outputs[framework] if k.startswith("moved/")]
        assert moved
        for key in moved:
            np.testing.assert_allclose(a.outputs[framework][key], b.outputs[framework][key], rtol=1e-12, atol=1e-15)
        with jax.enable_x64(True):  # one device, in this process: the step on the full batch
            full = lesson(framework, NAME).full_batch_grads(fx)
        for key, g in full.items():
            np.testing.assert_allclose(
                a.outputs[framework][f"moved/{key}"], -fx.scalar("lr") * g, rtol=1e-11, atol=1e-15
            )


def test_the_step_on_the_first_micro_batch_leaves_an_unsynchronised_gradient() -> None:
    r = case_result(NAME, "step_on_first_micro_batch", "float64", "random")
    fx = fixtures.make(NAME, "float64")
    for framework in ("torch", "jax"):
        out = r.outputs[framework]
        assert max(np.max(np.abs(v)) for k, v in out.items() if k.startswith("gap/")) > 1e-3
        # M - 1 micro-batches of rank 0 wait in the accumulator: not what a synchronised step would hold
        assert max(np.max(np.abs(v)) for k, v in out.items() if k.startswith("pending/")) > 1e-3
    assert int(fx["micro_batches"]) >= 2


@pytest.mark.parametrize("framework", ["torch", "jax"])
def test_is_step_the_last_micro_batch_or_the_off_by_one_first(framework: str) -> None:
    is_step = lesson(framework, NAME).is_step
    assert [is_step(i, 3, "no_sync") for i in range(6)] == [False, False, True] * 2
    assert [is_step(i, 3, "step_on_first_micro_batch") for i in range(6)] == [True, False, False] * 2
    with pytest.raises(ValueError, match="variant expected one of"):
        is_step(0, 3, "no_such_variant")


def test_optax_multisteps_accumulates_in_float32_unless_told() -> None:
    # why jax_impl/dp_no_sync.py passes accumulator_dtype: a float64 run would round every micro-batch
    with jax.enable_x64(True):
        params = {"w": jnp.zeros(2, jnp.float64)}
        assert optax.MultiSteps(optax.sgd(0.1), every_k_schedule=2).init(params).acc_grads["w"].dtype == jnp.float32
        told = optax.MultiSteps(optax.sgd(0.1), every_k_schedule=2, accumulator_dtype=jnp.float64)
        assert told.init(params).acc_grads["w"].dtype == jnp.float64


def test_bad_input_is_refused_with_the_field_named() -> None:
    good = dict(fixtures.make(NAME, "float64", seed=0))
    n = len(good["x"])  # M = B: 2·B rows needed, B given
    with pytest.raises(ValueError, match=rf"field 'x': B = {n} expected divisible by 2 ranks x micro_batches M = {n}"):
        fixtures.from_arrays(NAME, {**good, "micro_batches": np.array(n)})
    with pytest.raises(ValueError, match=r"field 'micro_batches': expected values in \[2, inf\], got 1"):
        fixtures.from_arrays(NAME, {**good, "micro_batches": np.array(1)})
