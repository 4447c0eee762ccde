"""distillation: the stop decides who learns, the mode decides which statistics the teacher uses and moves."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from conftest import case_result
from detach_parity.jax_impl import distillation as jds
from detach_parity.shared.core import fixtures
from detach_parity.shared.scenarios.distillation import PARAMS
from detach_parity.torch_impl import distillation as tds
from flax import nnx

FRAMEWORKS = ("torch", "jax")
STUDENT = [k for k in PARAMS if k.startswith("student/")]
TEACHER = [k for k in PARAMS if k.startswith("teacher/")]


def _out(variant: str) -> dict:
    return case_result("distillation", variant, "float64", "random").outputs


def test_the_stop_decides_whether_the_teacher_learns_not_what_the_student_learns() -> None:
    stopped, leaked = _out("distill"), _out("teacher_not_stopped")
    fx = fixtures.make("distillation", "float64")
    for fw in FRAMEWORKS:
        for k in STUDENT:
            np.testing.assert_allclose(stopped[fw][f"grads/{k}"], leaked[fw][f"grads/{k}"], rtol=1e-13, atol=1e-15)
        for k in TEACHER:
            assert np.all(stopped[fw][f"moved/{k}"] == 0) and np.any(leaked[fw][f"moved/{k}"] != 0), f"{fw} {k}"
            np.testing.assert_allclose(
                leaked[fw][f"moved/{k}"], -fx.scalar("lr") * leaked[fw][f"grads/{k}"], rtol=1e-12
            )


def test_train_mode_teacher_uses_the_batch_and_moves_its_running_mean() -> None:
    a = fixtures.make("distillation", "float64").float64()
    h = a["x"] @ a["params/teacher/l1/kernel"] + a["params/teacher/l1/bias"]
    train, evaluated = _out("teacher_train_mode"), _out("distill")
    for fw in FRAMEWORKS:
        np.testing.assert_allclose(
            train[fw]["teacher_stats/mean_moved"], 0.1 * (h.mean(0) - a["running_mean"]), rtol=1e-12, err_msg=fw
        )
        assert np.max(np.abs(train[fw]["soft_targets"] - evaluated[fw]["soft_targets"])) > 1e-3, fw


def test_dropout_makes_a_train_mode_teacher_random_under_no_grad_too() -> None:
    """no_grad / stop_gradient do not switch modes: only eval() makes two forwards of a dropout teacher agree."""
    x = torch.ones(4, 8, dtype=torch.float64)
    drop = torch.nn.Dropout(0.5)
    with torch.no_grad(), torch.random.fork_rng():  # the suite's global RNG state is left as it was
        assert not torch.equal(drop.train()(x), drop(x))
        assert torch.equal(drop.eval()(x), drop(x))  # exact: eval dropout is the identity
    layer = nnx.Dropout(0.5, rngs=nnx.Rngs(dropout=0))
    assert not np.array_equal(layer(jnp.ones((4, 8))), layer(jnp.ones((4, 8))))
    layer.eval()
    np.testing.assert_array_equal(layer(jnp.ones((4, 8))), jnp.ones((4, 8)))  # exact: eval dropout is the identity


def test_kl_div_mean_is_not_batchmean() -> None:
    """F.kl_div(reduction="mean") divides by B·C: 1/C of the batch-mean KL that Hinton's loss (and optax's mean) is."""
    gen = torch.Generator().manual_seed(0)
    s, t = (torch.randn(4, 3, dtype=torch.float64, generator=gen) for _ in range(2))
    log_s, log_t = F.log_softmax(s, -1), F.log_softmax(t, -1)
    batchmean = F.kl_div(log_s, log_t, reduction="batchmean", log_target=True)
    torch.testing.assert_close(F.kl_div(log_s, log_t, reduction="mean", log_target=True) * 3, batchmean)
    soft, _ = tds.distillation_loss(s, t, torch.zeros(4, dtype=torch.int64), 1.0, 1.0)  # T = 1, α = 1
    torch.testing.assert_close(soft, batchmean)


@pytest.mark.parametrize("module", [tds, jds], ids=FRAMEWORKS)
def test_bad_input(module) -> None:
    lib = torch if module is tds else jnp
    with pytest.raises(
        ValueError, match=r"distillation_loss: student has shape \(4, 3\) but teacher has shape \(4, 2\)"
    ):
        module.distillation_loss(lib.zeros((4, 3)), lib.zeros((4, 2)), lib.zeros(4, dtype=lib.int32), 2.0, 0.5)
    with pytest.raises(ValueError, match="distillation: variant expected one of .*got 'frozen_teacher'"):
        module.teacher_logits(None, None, "frozen_teacher")
    with pytest.raises(ValueError, match=r"distillation_loss: temperature expected a number in \(0, inf\], got 0.0"):
        module.distillation_loss(lib.zeros((4, 3)), lib.zeros((4, 3)), lib.zeros(4, dtype=lib.int32), 0.0, 0.5)
