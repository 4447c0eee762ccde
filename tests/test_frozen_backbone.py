"""frozen_backbone: frozen leaves bit-identical, head moved, and the naive JAX port's decay measured."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import case_result
from detach_parity.shared.core import fixtures

BACKBONE = ("backbone/l1/kernel", "backbone/l1/bias", "backbone/l2/kernel", "backbone/l2/bias")


@pytest.mark.parametrize("variant", ["freeze_params", "detach_features"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_frozen_backbone_bit_identical_head_moves(variant: str, dtype: str) -> None:
    fx = fixtures.make("frozen_backbone", dtype)
    r = case_result("frozen_backbone", variant, dtype, "random")
    for fw in ("torch", "jax"):
        out = r.outputs[fw]
        for k in BACKBONE:  # negative control: bit for bit
            np.testing.assert_array_equal(out[f"params/{k}"], fx[f"params/{k}"])
        for k in ("head/kernel", "head/bias"):  # positive control: really trained
            assert np.max(np.abs(out[f"params/{k}"] - fx[f"params/{k}"])) > 1e-3


def test_naive_stop_gradient_decays_by_lr_wd_per_step() -> None:
    fx = fixtures.make("frozen_backbone", "float64")
    factor = (1 - fx.scalar("lr") * fx.scalar("weight_decay")) ** int(fx["steps"])
    r = case_result("frozen_backbone", "naive_stop_gradient", "float64", "random")
    for fw in ("torch", "jax"):
        for k in BACKBONE:
            np.testing.assert_allclose(r.outputs[fw][f"params/{k}"], factor * fx[f"params/{k}"], rtol=1e-13)


def test_two_freezing_idioms_agree_and_differ_from_finetune() -> None:
    a = case_result("frozen_backbone", "freeze_params", "float64", "random").outputs
    b = case_result("frozen_backbone", "detach_features", "float64", "random").outputs
    c = case_result("frozen_backbone", "full_finetune", "float64", "random").outputs
    for fw in ("torch", "jax"):
        for k in a[fw]:
            np.testing.assert_allclose(a[fw][k], b[fw][k], rtol=1e-13, atol=1e-15)
        # same step-1 head gradient as full fine-tuning, different backbone fate
        np.testing.assert_allclose(a[fw]["grads/head/kernel"], c[fw]["grads/head/kernel"], rtol=1e-13)
        assert np.any(c[fw]["moved/backbone/l1/kernel"] != 0)
