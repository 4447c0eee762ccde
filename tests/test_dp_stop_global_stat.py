"""dp_stop_global_stat: the stop changes only what flows through the center, and torch's in-place all_reduce
passes exactly 1/W of the center's gradient (its own share), in closed form."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import case_result
from detach_parity.shared.core import fixtures

NAME = "dp_stop_global_stat"
VARIANTS = ("stop_global_mean", "through_global_mean", "inplace_all_reduce")


def test_the_head_and_the_center_do_not_depend_on_the_stop() -> None:
    results = {v: case_result(NAME, v, "float64", "random") for v in VARIANTS}
    for framework in ("torch", "jax"):
        first = results[VARIANTS[0]].outputs[framework]
        for variant in VARIANTS[1:]:
            out = results[variant].outputs[framework]
            for key in ("center", "loss", "grads/head/kernel", "grads/head/bias"):  # same value, same head
                np.testing.assert_allclose(out[key], first[key], rtol=1e-12, atol=1e-15, err_msg=f"{variant} {key}")
        through = results["through_global_mean"].outputs[framework]
        assert np.max(np.abs(through["grads/l1/kernel"] - first["grads/l1/kernel"])) > 1e-4  # the center's path


def test_torch_inplace_all_reduce_passes_one_share_of_the_centers_gradient() -> None:
    # the probe enters the center as (1 - m)·probe through every rank's share; in place, autograd sees one share
    world = fixtures.make(NAME, "float64").spec.constants["world"]
    inplace = case_result(NAME, "inplace_all_reduce", "float64", "random").outputs
    through = case_result(NAME, "through_global_mean", "float64", "random").outputs
    np.testing.assert_allclose(world * inplace["torch"]["grads/probe"], through["torch"]["grads/probe"], rtol=1e-10)
    np.testing.assert_allclose(inplace["jax"]["grads/probe"], through["jax"]["grads/probe"], rtol=1e-12)  # psum
    assert np.max(np.abs(through["torch"]["grads/probe"])) > 1e-4


def test_bad_input_is_refused_with_the_field_named() -> None:
    good = dict(fixtures.make(NAME, "float64", seed=0))
    odd = {k: (v[:-1] if v.ndim and v.shape[0] == len(good["x"]) else v) for k, v in good.items()}
    with pytest.raises(ValueError, match=rf"field 'x': B = {len(good['x']) - 1} expected divisible by the 2 ranks"):
        fixtures.from_arrays(NAME, odd)
