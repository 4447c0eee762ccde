"""multitask: the isolated task no longer trains the trunk, its head still learns (claim C12)."""

from __future__ import annotations

import jax
import numpy as np
import pytest
import torch
from conftest import case_result
from detach_parity.jax_impl import multitask as jm
from detach_parity.shared.core import fixtures
from detach_parity.shared.core.oracle import fd_grad
from detach_parity.shared.scenarios.multitask import PARAMS, task_losses
from detach_parity.torch_impl import multitask as tm
from detach_parity.torch_impl._layout import grads_of
from flax import nnx

TRUNK = ("grads/trunk/kernel", "grads/trunk/bias")
HEADS = ("grads/head1/kernel", "grads/head1/bias", "grads/head2/kernel", "grads/head2/bias")


def _single_task_trunk_grads(fx, task: int) -> dict[str, dict[str, np.ndarray]]:
    """Trunk gradient of one task's loss alone: torch autograd, JAX grad, float64 finite differences."""
    model = tm.build_model(fx)
    x, y1, labels = (torch.tensor(np.array(fx[k])) for k in ("x", "y1", "labels"))
    losses = tm.task_losses(*_pair(model(x, "none"), y1, labels))
    losses[task - 1].backward()
    grads = grads_of(model)  # the layout helper owns the [out, in] -> [in, out] transpose
    out = {"torch": {TRUNK[0]: grads["trunk/kernel"], TRUNK[1]: grads["trunk/bias"]}}

    with jax.enable_x64(True):  # float64 fixture: JAX computes in float64 only inside this context
        jmodel = jm.build_model(fx)
        xj, y1j, labels_j = (jax.numpy.asarray(fx[k]) for k in ("x", "y1", "labels"))
        grads = nnx.grad(lambda m: jm.task_losses(*_pair(m(xj, "none"), y1j, labels_j))[task - 1])(jmodel)
        out["jax"] = {
            TRUNK[0]: np.asarray(grads["trunk"]["kernel"][...]),
            TRUNK[1]: np.asarray(grads["trunk"]["bias"][...]),
        }

    a = fx.float64()
    params = {k: a[f"params/{k}"] for k in PARAMS}
    fd = fd_grad(
        lambda q: task_losses(q, a["x"], a["y1"], a["labels"])[task - 1], params, wrt=["trunk/kernel", "trunk/bias"]
    )
    out["oracle"] = {TRUNK[0]: fd["trunk/kernel"], TRUNK[1]: fd["trunk/bias"]}
    return out


def _pair(outputs, y1, labels):
    pred1, logits2 = outputs
    return pred1, y1, logits2, labels


@pytest.mark.parametrize("variant, kept_task", [("isolate_task2", 1), ("isolate_task1", 2)])
def test_isolated_trunk_gradient_is_the_other_task_alone(variant: str, kept_task: int) -> None:
    fx = fixtures.make("multitask", "float64")
    ref = _single_task_trunk_grads(fx, kept_task)
    out = case_result("multitask", variant, "float64", "random").outputs
    for fw in ("torch", "jax"):
        for key in TRUNK:
            np.testing.assert_allclose(out[fw][key], ref[fw][key], rtol=1e-12, atol=1e-14)
            np.testing.assert_allclose(out[fw][key], ref["oracle"][key], rtol=1e-7, atol=1e-9)
    # and it is not the total's trunk gradient: the stop removed a real contribution
    none = case_result("multitask", "none", "float64", "random").outputs
    assert np.max(np.abs(none["torch"][TRUNK[0]] - out["torch"][TRUNK[0]])) > 1e-3


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_heads_learn_the_same_and_trunk_parts_add_up(dtype: str) -> None:
    iso2 = case_result("multitask", "isolate_task2", dtype, "random").outputs
    iso1 = case_result("multitask", "isolate_task1", dtype, "random").outputs
    none = case_result("multitask", "none", dtype, "random").outputs
    rtol = 1e-12 if dtype == "float64" else 1e-5
    for fw in ("torch", "jax"):
        for key in HEADS:  # the stop is on the head's input: head gradients are unchanged, and non-zero
            np.testing.assert_allclose(iso2[fw][key], none[fw][key], rtol=rtol, atol=rtol * 1e-2)
            np.testing.assert_allclose(iso1[fw][key], none[fw][key], rtol=rtol, atol=rtol * 1e-2)
            assert np.max(np.abs(iso2[fw][key])) > 1e-3
        for key in TRUNK:  # trunk(task1 + task2) = trunk(task1 alone) + trunk(task2 alone)
            np.testing.assert_allclose(iso2[fw][key] + iso1[fw][key], none[fw][key], rtol=rtol, atol=rtol * 1e-2)
        np.testing.assert_allclose(iso2[fw]["loss"], none[fw]["loss"], rtol=rtol)  # same forward values


def test_non_scalar_output_cannot_be_differentiated_in_either_framework() -> None:
    """A3's snippet calls backward() on a [B] output: both frameworks refuse (C12)."""
    fx = fixtures.make("multitask", "float32")
    pred1, _ = tm.build_model(fx)(torch.tensor(np.array(fx["x"])), "isolate_task2")
    with pytest.raises(RuntimeError, match="grad can be implicitly created only for scalar outputs"):
        pred1.backward()
    jmodel = jm.build_model(fx)
    with pytest.raises(TypeError, match="scalar"):
        nnx.grad(lambda m: m(jax.numpy.asarray(fx["x"]), "isolate_task2")[0])(jmodel)


@pytest.mark.parametrize("impl", [tm, jm], ids=["torch", "jax"])
def test_prediction_of_shape_b1_is_refused(impl) -> None:
    lib = torch.tensor if impl is tm else jax.numpy.asarray
    pred1, y1 = lib(np.zeros((4, 1))), lib(np.zeros(4))
    logits2, labels = lib(np.zeros((4, 3))), lib(np.zeros(4, dtype=np.int64))
    with pytest.raises(ValueError, match=r"task_losses: pred1 has shape \(4, 1\) but y1 has shape \(4,\)"):
        impl.task_losses(pred1, y1, logits2, labels)
