"""linear_regression: A3 §1.2 by hand (C03), exactly, in both dtypes and frameworks."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import assert_same_to_rounding, case_result
from detach_parity.shared.core.checks import check_same_shape


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_article_values_exact(dtype: str) -> None:
    r = case_result("linear_regression", "full", dtype, "article")
    for fw in ("torch", "jax"):
        out = r.outputs[fw]
        assert float(out["loss"]) == 4.0
        assert out["grads/w"].tolist() == [8.0]
        assert out["grads/x"].tolist() == [[12.0]]
        assert float(out["grads/b"]) == 4.0


def test_x_stopped_changes_only_dx() -> None:
    full = case_result("linear_regression", "full", "float64", "random")
    stopped = case_result("linear_regression", "x_stopped", "float64", "random")
    for fw in ("torch", "jax"):
        a, b = full.outputs[fw], stopped.outputs[fw]
        for key in ("loss", "grads/w", "grads/b"):
            assert_same_to_rounding(a[key], b[key], f"{fw} {key}: two variants, the stop on x changes only dx")
        assert np.all(b["grads/x"] == 0) and np.any(a["grads/x"] != 0)


def test_loss_refuses_broadcasting() -> None:
    with pytest.raises(ValueError, match=r"mse_loss: y_hat has shape \(4, 1\) but y has shape \(4,\)"):
        check_same_shape("mse_loss", y_hat=(4, 1), y=(4,))
