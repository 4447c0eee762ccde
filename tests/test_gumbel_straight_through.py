"""gumbel_straight_through: equal to F.gumbel_softmax for the same noise; one-hot forward; the soft sample's gradient."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from conftest import assert_same_to_rounding, case_result
from detach_parity.jax_impl import gumbel_straight_through as jgs
from detach_parity.shared.core import fixtures
from detach_parity.shared.scenarios.gumbel_straight_through import softmax
from detach_parity.torch_impl import gumbel_straight_through as tgs

FRAMEWORKS = ("torch", "jax")


@pytest.mark.parametrize("hard", [True, False])
def test_equal_to_torch_gumbel_softmax_for_the_same_noise(hard: bool) -> None:
    """F.gumbel_softmax draws −log(Exp(1)); replaying the same draws through gumbel_softmax gives the same tensor."""
    logits = torch.randn(5, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(0), requires_grad=True)
    with torch.random.fork_rng():  # the suite's global RNG state is left as it was
        torch.manual_seed(7)
        want = F.gumbel_softmax(logits, tau=0.7, hard=hard)
        torch.manual_seed(7)
        gumbels = -torch.empty_like(logits).exponential_().log()
    got = tgs.gumbel_softmax(logits, gumbels, 0.7, hard=hard)
    assert_same_to_rounding(got.detach().numpy(), want.detach().numpy(), "our gumbel_softmax against F.gumbel_softmax")
    (g_want,) = torch.autograd.grad((want * torch.arange(4.0, dtype=torch.float64)).sum(), logits)
    (g_got,) = torch.autograd.grad((got * torch.arange(4.0, dtype=torch.float64)).sum(), logits)
    assert_same_to_rounding(g_got.numpy(), g_want.numpy(), "their gradients")


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_hard_forward_is_one_hot_and_soft_forward_is_not(dtype: str) -> None:
    hard, soft = (case_result("gumbel_straight_through", v, dtype, "random").outputs for v in ("hard", "soft"))
    for fw in FRAMEWORKS:
        y, index = hard[fw]["sample"], hard[fw]["index"]
        hot = np.eye(y.shape[1], dtype=bool)[index]
        assert np.all(y[~hot] == 0), f"{fw}: (0 − s) + s is exactly 0"
        np.testing.assert_allclose(y[hot], 1.0, rtol=0, atol=np.finfo(y.dtype).eps, err_msg=fw)  # (1 − s) + s
        np.testing.assert_array_equal(
            soft[fw]["sample"], soft[fw]["soft_sample"], err_msg=fw
        )  # exact: one value, two names
        np.testing.assert_array_equal(index, np.argmax(soft[fw]["soft_sample"], axis=1), err_msg=fw)  # exact: integers


def test_hard_gradient_is_the_soft_samples_at_the_one_hot_value() -> None:
    """∂L/∂logits = (s ⊙ (v − Σ s v)) / τ with v = ∂L/∂y taken at y = one_hot: the softmax Jacobian, in closed form."""
    a = fixtures.make("gumbel_straight_through", "float64").float64()
    out = case_result("gumbel_straight_through", "hard", "float64", "random").outputs
    s = softmax((a["logits"] + a["gumbels"]) / a["tau"])
    y = np.eye(s.shape[1])[np.argmax(s, axis=1)]
    residual = y @ a["params/decoder/kernel"] + a["params/decoder/bias"] - a["target"]
    v = residual @ a["params/decoder/kernel"].T / residual.size
    want = s * (v - np.sum(s * v, axis=1, keepdims=True)) / a["tau"]
    for fw in FRAMEWORKS:
        np.testing.assert_allclose(out[fw]["grads/logits"], want, rtol=1e-12, atol=1e-15, err_msg=fw)


@pytest.mark.parametrize("module", [tgs, jgs], ids=FRAMEWORKS)
def test_bad_input(module) -> None:
    lib = torch if module is tgs else jnp
    with pytest.raises(ValueError, match=r"gumbel_softmax: logits has shape \(3, 4\) but gumbels has shape \(3, 5\)"):
        module.gumbel_softmax(lib.zeros((3, 4)), lib.zeros((3, 5)), 1.0, hard=True)
    with pytest.raises(ValueError, match="gumbel_straight_through: variant expected one of .*got 'argmax'"):
        module.sample_categories(None, None, 1.0, "argmax")
    with pytest.raises(ValueError, match=r"gumbel_softmax: tau expected a number in \(0, inf\], got -1.0"):
        module.gumbel_softmax(lib.zeros((3, 4)), lib.zeros((3, 4)), -1.0, hard=True)
