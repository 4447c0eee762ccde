"""Name the line, the frame it is named in: a library's operation fed a value the port handed down is named where
it was handed in; a value a module returns from a submodule, at the module's own line; the batch builds a loss
without being paired; a parameter read through a stop; an RMSprop written in optax; a part whose state differs.

Each port is written in this file (found by its text). Measured on blind round 9 (docs/blind-round9.md).
"""

from __future__ import annotations

import os

import jax
import jax.numpy as jnp
import numpy as np
import optax
import torch
from detach_parity import check_port
from flax import nnx
from torch import nn

D = 6
THIS = os.path.basename(__file__)
BATCH = {"x": np.random.default_rng(1).normal(size=(2, 3, D)), "y": np.random.default_rng(2).normal(size=(2, 3, D))}


def line_of(text: str) -> int:
    found = [i for i, line in enumerate(open(__file__, encoding="utf-8"), start=1) if text in line]
    assert found, text
    return found[0]


class TorchMlp(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(D, 2 * D), nn.Linear(2 * D, D)

    def forward(self, x):
        return self.fc2(torch.tanh(self.fc1(x)))


class TorchBlock(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm, self.mlp = nn.LayerNorm(D), TorchMlp()
        self.gain = nn.Parameter(torch.linspace(0.5, 1.5, D))

    def forward(self, x):
        return x + self.mlp(self.norm(x)) * self.gain


class Mlp(nnx.Module):
    def __init__(self, rngs) -> None:
        self.fc1, self.fc2 = nnx.Linear(D, 2 * D, rngs=rngs), nnx.Linear(2 * D, D, rngs=rngs)

    def __call__(self, x):
        return self.fc2(jnp.tanh(self.fc1(x)))


class JaxBlock(nnx.Module):
    def __init__(self, bug: str = "") -> None:
        rngs = nnx.Rngs(0)
        self.norm, self.mlp = nnx.LayerNorm(D, epsilon=1e-5, rngs=rngs), Mlp(rngs)
        self.gain = nnx.Param(jnp.linspace(0.5, 1.5, D))
        self.bug = bug

    def __call__(self, x):
        gain = jax.lax.stop_gradient(self.gain[...]) if self.bug == "stop" else self.gain[...]  # port: gain read
        if self.bug == "unnormed":
            return x + self.mlp(x) * gain  # port: the MLP fed the stream
        if self.bug == "residual":
            return self.mlp(self.norm(x))  # port: no residual, no gain
        return x + self.mlp(self.norm(x)) * gain


def torch_mse(model, batch):
    return nn.functional.mse_loss(model(batch["x"]), batch["y"])


def jax_mse(model, batch):
    return jnp.mean((model(batch["x"]) - batch["y"]) ** 2)


def jax_mse_summed(model, batch):
    return jnp.mean(jnp.sum((model(batch["x"]) - batch["y"]) ** 2, axis=-1))  # port: summed over features


def _check(bug: str = "", loss=jax_mse, **kwargs):
    torch.manual_seed(0)
    kwargs.setdefault("steps", 0)
    return check_port(TorchBlock(), JaxBlock(bug), BATCH, torch_loss=torch_mse, jax_loss=loss,
                      dtypes=("float64",), **kwargs)  # fmt: skip


def _line(report) -> tuple[str, int]:
    assert not report.ok and report.line is not None, report.named()
    return os.path.basename(report.line["port"][0]), report.line["port"][1]


def test_a_stock_layer_fed_the_stream_is_named_where_the_block_hands_it_in() -> None:
    # the first operation torch never computed is fc1's dot inside nnx.Linear; the fault is the block's line
    assert _line(_check("unnormed")) == (THIS, line_of("# port: the MLP fed the stream"))


def test_a_value_returned_from_a_submodule_is_named_at_the_modules_own_call() -> None:
    assert _line(_check("residual")) == (THIS, line_of("# port: no residual, no gain"))


def test_a_loss_built_from_the_batch_is_its_line_and_the_factor() -> None:
    report = _check(loss=jax_mse_summed)
    assert _line(report) == (THIS, line_of("# port: summed over features"))
    assert "factor 6" in report.line["relation"], report.line


def test_a_parameter_read_through_a_stop_is_the_line_of_the_stop() -> None:
    report = _check("stop")
    assert report.first_parting("float64").section == "grads"
    assert _line(report) == (THIS, line_of("# port: gain read"))


def torch_rmsprop(params):
    return torch.optim.RMSprop(params, lr=1e-2, alpha=0.9, eps=1e-3, centered=True)


def test_rmsprop_with_its_eps_inside_the_square_root_is_the_line_that_built_it() -> None:
    wrong = optax.chain(optax.scale_by_stddev(decay=0.9, eps=1e-3), optax.scale(-1e-2))  # port: eps in the sqrt
    report = _check(steps=2, torch_optimizer=torch_rmsprop, jax_optimizer=wrong)
    assert report.line is not None and report.line.get("optimizer") == "scale_by_stddev", report.line


def test_rmsprop_written_as_torch_computes_it_matches() -> None:
    right = optax.chain(optax.scale_by_stddev(decay=0.9, eps=1e-3, eps_in_sqrt=False), optax.scale(-1e-2))
    report = _check(steps=2, torch_optimizer=torch_rmsprop, jax_optimizer=right)
    assert report.ok, report.named()
