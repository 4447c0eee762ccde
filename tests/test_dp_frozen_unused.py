"""dp_frozen_unused: where DDP raised (the optimizers' own step counts), the frozen leaves' bits on every rank,
and that only DDP's 'Expected to have finished reduction' error is taken for the lesson."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import case_result
from detach_parity.shared.core import fixtures
from detach_parity.torch_impl import dp_frozen_unused as tdp

NAME = "dp_frozen_unused"


def test_the_optimizers_step_counts_show_where_ddp_raised() -> None:
    # torch 2.13: undeclared, the second forward raises; static_graph=True, the third; JAX never
    expected = {"find_unused_parameters": 3, "static_graph": 2, "unused_not_declared": 1}
    for variant, torch_steps in expected.items():
        r = case_result(NAME, variant, "float64", "random")
        assert int(r.outputs["torch"]["steps_done"]) == torch_steps, variant
        assert int(r.outputs["jax"]["steps_done"]) == 3, variant


def test_frozen_and_unused_leaves_keep_their_bits_on_every_rank_and_the_head_syncs() -> None:
    r = case_result(NAME, "find_unused_parameters", "float32", "random")
    for framework in ("torch", "jax"):
        out = r.outputs[framework]
        for key, value in out.items():
            if key.startswith(("moved/backbone", "moved/probe", "rank_gap/")):
                assert np.array_equal(value, np.zeros_like(value)), (framework, key)  # bit-identical: not 1e-30
        assert np.max(np.abs(out["moved/head/kernel"])) > 1e-3  # the positive control: the head trained
    drift = case_result(NAME, "unused_not_declared", "float32", "random").outputs["torch"]
    lr = fixtures.make(NAME, "float32").scalar("lr")
    assert np.max(drift["rank_gap/head/kernel"]) > lr  # one AdamW step on unsynchronised gradients: ~2·lr apart


class _FakeDDP:
    """Stands in for DDP's forward: raises `error` at the second call."""

    def __init__(self, model, error: Exception) -> None:
        self.module, self.error, self.calls = model, error, 0

    def __call__(self, x):
        self.calls += 1
        if self.calls == 2:
            raise self.error
        return self.module(x)


def test_train_stops_only_at_ddps_unfinished_reduction_error() -> None:
    fx = fixtures.make(NAME, "float64", seed=1)
    model = tdp.build_model(fx)
    x, y, t = (torch.tensor(np.array(fx[k])) for k in ("x", "y", "t"))
    unfinished = RuntimeError(f"{tdp.UNFINISHED} before starting a new one.")
    loss0, grads0, done = tdp.train(_FakeDDP(model, unfinished), tdp.make_optimizer(model, fx), x, y, t, 3)
    assert done == 1 and float(loss0) > 0 and np.max(np.abs(grads0["head/kernel"])) > 0
    assert not np.any(grads0["backbone/kernel"]) and not np.any(grads0["probe/kernel"])  # no .grad: zeros
    other = tdp.build_model(fx)
    with pytest.raises(RuntimeError, match="something else"):
        tdp.train(_FakeDDP(other, RuntimeError("something else")), tdp.make_optimizer(other, fx), x, y, t, 3)


def test_bad_input_is_refused_with_the_field_named() -> None:
    good = dict(fixtures.make(NAME, "float64", seed=0))
    with pytest.raises(ValueError, match=r"field 'steps': expected values in \[3, inf\], got 2"):
        fixtures.from_arrays(NAME, {**good, "steps": np.array(2)})
    with pytest.raises(ValueError, match=r"field 'weight_decay': expected values in \(0, inf\]"):
        fixtures.from_arrays(NAME, {**good, "weight_decay": np.array(0.0)})
