"""dp_allreduce_mean: what the pattern cannot say: the single-device gradient to 1e-12, the naive port's factor W,
one real two-process JAX run (jax.distributed over gloo) agreeing with the forced-device one, bad input."""

from __future__ import annotations

import jax
import numpy as np
import pytest
from conftest import case_result
from detach_parity.jax_impl import _distributed as jax_distributed
from detach_parity.shared.core import fixtures
from detach_parity.shared.core.parity import compare, tolerance_for
from detach_parity.shared.core.runner import lesson, oracle_outputs
from detach_parity.torch_impl import _distributed as torch_distributed

NAME = "dp_allreduce_mean"


def _max(out: dict, prefix: str) -> float:
    values = [float(np.max(np.abs(v))) for k, v in out.items() if k.startswith(prefix)]
    assert values, f"no output {prefix}*"
    return max(values)


def test_equal_shards_and_the_global_masked_mean_give_the_full_batch_gradient() -> None:
    fx = fixtures.make(NAME, "float64")
    for variant in ("equal_shards", "masked_global_mean"):
        r = case_result(NAME, variant, "float64", "random")
        for framework in ("torch", "jax"):
            with jax.enable_x64(True):  # one device, in this process: the full batch
                full = lesson(framework, NAME).full_batch_grads(fx, variant)
            for key, g in full.items():
                np.testing.assert_allclose(r.outputs[framework][f"grads/{key}"], g, rtol=1e-12, atol=1e-14)
    r = case_result(NAME, "masked_mean_of_means", "float64", "random")
    for framework in ("torch", "jax"):  # unequal valid counts: the mean of shard means is another objective
        assert _max(r.outputs[framework], "gap/") > 1e-3


def test_pmean_after_grad_is_exactly_world_times_ddps_gradient() -> None:
    r = case_result(NAME, "pmean_after_grad", "float64", "random")
    world = fixtures.make(NAME, "float64").spec.constants["world"]
    keys = [k for k in r.outputs["torch"] if k.startswith("grads/")]
    assert keys
    for key in keys:  # jax.grad of replicated parameters is already the psum; pmean of it changes nothing
        np.testing.assert_allclose(r.outputs["jax"][key], world * r.outputs["torch"][key], rtol=1e-12, atol=1e-15)


def test_a_real_two_process_jax_run_matches_the_forced_devices() -> None:
    dist = jax_distributed
    fx = fixtures.make(NAME, "float64", seed=0)
    ranks = dist.ranks("processes")  # two processes, jax.distributed.initialize on 127.0.0.1, gloo collectives
    try:
        assert len(ranks.pids) == 2 and ranks.alive
        out = dist.on_ranks(NAME, fx, "masked_global_mean", mode="processes")
    finally:
        pids = ranks.pids
        ranks.close()  # joined here, not at exit
    assert not ranks.alive and pids
    forced = case_result(NAME, "masked_global_mean", "float64", "random").outputs["jax"]
    compare(out, forced, tolerance_for("float64", "parity"), label=NAME, names=("processes", "devices")).assert_ok()
    oracle = oracle_outputs(fx.spec, fx, "masked_global_mean")
    compare(
        out, oracle, tolerance_for("float64", "oracle"), label=NAME, names=("processes", "oracle"), check_dtype=False
    ).assert_ok()


def test_the_torch_side_runs_on_two_gloo_processes() -> None:
    case_result(NAME, "equal_shards", "float64", "random")  # the ranks are up
    ranks = torch_distributed.ranks()
    assert len(set(ranks.pids)) == 2 and ranks.alive and ranks.port


def test_bad_input_is_refused_with_the_field_named(monkeypatch) -> None:
    good = dict(fixtures.make(NAME, "float64", seed=0))
    b = len(good["mask"]) // 2
    equal = {**good, "mask": np.array([True] * b + [True] * b)}
    with pytest.raises(
        ValueError, match=r"field 'mask': the shards' valid counts expected to differ .*got \[\d+, \d+\]"
    ):
        fixtures.from_arrays(NAME, equal)
    empty = {**good, "mask": np.array([True] * b + [False] * b)}
    with pytest.raises(ValueError, match=rf"field 'mask': every shard needs a valid example, got counts \[{b}, 0\]"):
        fixtures.from_arrays(NAME, empty)
    odd = {k: (v[:-1] if v.ndim and v.shape[0] == 2 * b else v) for k, v in good.items()}
    with pytest.raises(ValueError, match=rf"field 'x': B = {2 * b - 1} expected divisible by the 2 ranks"):
        fixtures.from_arrays(NAME, odd)
    monkeypatch.setenv("DETACH_PARITY_JAX_RANKS", "threads")
    with pytest.raises(
        ValueError, match=r"DETACH_PARITY_JAX_RANKS: expected one of \['processes', 'devices'\], got 'threads'"
    ):
        lesson("jax", NAME).run(fixtures.make(NAME, "float64"), "equal_shards")
