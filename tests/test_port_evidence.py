"""A verdict only on evidence that can show the difference (issue 26, item 5): steps that moved nothing are
not called a match."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import optax
import torch
from detach_parity import check_port
from flax import nnx
from torch import nn

RNG = np.random.default_rng(11)
BATCH = {"x": RNG.normal(size=(4, 3)), "y": RNG.normal(size=(4, 2))}
EVERY = 8  # micro-batches per update


def torch_loss(m, b):
    return ((m(b["x"]) - b["y"]) ** 2).mean()


def jax_loss(m, b):
    return jnp.mean((m(b["x"]) - b["y"]) ** 2)


def torch_accumulating():
    """(loss / n).backward() on each micro-batch, one SGD step every EVERY calls (the optimizer of each model)."""
    state = {}

    def step(model, batch):
        opt, calls = state.setdefault(id(model), [torch.optim.SGD(model.parameters(), lr=0.1), 0])
        loss = torch_loss(model, batch)
        (loss / EVERY).backward()
        state[id(model)][1] = calls = calls + 1
        if calls % EVERY == 0:
            opt.step()
            opt.zero_grad()
        return loss.detach()

    return step


def jax_accumulating(mean: bool):
    """optax.MultiSteps over EVERY micro-batches; use_grad_mean=False sums where torch averages (the bug). Its
    accumulator in the model's dtype: MultiSteps accumulates in float32 unless told (grad_accumulation's lesson)."""
    optimizers = {}

    def step(model, batch):
        dtype = model.kernel.get_value().dtype
        tx = optax.MultiSteps(optax.sgd(0.1), every_k_schedule=EVERY, use_grad_mean=mean, accumulator_dtype=dtype)
        opt = optimizers.setdefault(id(model), nnx.Optimizer(model, tx, wrt=nnx.Param))
        loss, grads = nnx.value_and_grad(jax_loss)(model, batch)
        opt.update(model, grads)
        return loss

    return step


def _check(mean: bool, steps: int):
    return check_port(
        nn.Linear(3, 2), nnx.Linear(3, 2, rngs=nnx.Rngs(0)), BATCH, torch_loss=torch_loss, jax_loss=jax_loss,
        torch_step=torch_accumulating(), jax_step=jax_accumulating(mean), steps=steps,
    )  # fmt: skip


def test_steps_that_moved_no_weight_are_not_called_a_match() -> None:
    """Five steps of an eight-micro-batch accumulation update nothing on either side: a port that sums where
    torch averages has the same five steps as a correct one, and neither is a match of the update."""
    for mean in (True, False):
        report = _check(mean, steps=5)
        assert report.verdict() == "match, steps unchecked" and report.unmoved == 5, report.table()
        text = report.table()
        assert "none of the 5 steps moved a trainable weight" in text and "no update" in text
        assert "the update is unchecked" in text and report.to_json()["verdict"] == "match, steps unchecked"
        assert [s["unchecked"] for s in report.summary() if s["section"] == "steps"] == [True, True]
    # steps past the accumulation: the update happens, the correct port matches and the sum differs
    assert _check(True, steps=EVERY).verdict() == "match"
    summed = _check(False, steps=EVERY)
    assert summed.verdict() == "differs" and summed.first_parting().step == EVERY, summed.table()
