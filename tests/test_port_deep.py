"""The checker's bookkeeping is linear in the model's size (issue: a 2,000-layer model took 161 s), and
its JAX forward is traced once per pass (issue 27: the recorded forward and the gradient's were two).

Measured in executed Python bytecodes (sys.settrace opcode events), not seconds: the count is the
same on any machine and under any load. Four times the layers must cost about four times the
opcodes; the former walks (every module against every ruled module, every unit against every
leaf, every key against every parameter) cost sixteen times.
"""

from __future__ import annotations

import sys

import jax.numpy as jnp
import numpy as np
import optax
import pytest
import torch
from detach_parity.shared.apps.backends import backend
from detach_parity.shared.apps.check import check_port, flow
from flax import nnx
from torch import nn

SMALL, LARGE = 150, 600  # layers: LARGE = 4 × SMALL


def _opcodes(fn) -> int:
    count = 0

    def tracer(frame, event, arg):
        nonlocal count
        frame.f_trace_opcodes = True
        if event == "opcode":
            count += 1
        return tracer

    sys.settrace(tracer)
    try:
        fn()
    finally:
        sys.settrace(None)
    return count


def _growth(make, work) -> float:
    small, large = make(SMALL), make(LARGE)
    return _opcodes(lambda: work(large)) / _opcodes(lambda: work(small))


def _torch(n: int) -> nn.Module:
    return nn.Sequential(*[nn.Sequential(nn.Linear(2, 2), nn.LayerNorm(2)) for _ in range(n)])


def _nnx(n: int) -> nnx.Module:
    class Deep(nnx.Module):
        def __init__(self) -> None:
            self.layers = nnx.List([nnx.Linear(2, 2, rngs=nnx.Rngs(0)) for _ in range(n)])

    return Deep()


def test_the_torch_walk_is_linear_in_depth() -> None:
    growth = _growth(_torch, backend("torch").port.structure)
    assert 3.0 < growth < 6.0, growth  # quadratic: about 16


def test_reading_an_nnx_model_by_units_is_linear() -> None:
    port = backend("jax").port

    def read(model):
        return port.read(model, [f"layers/{i}" for i in range(len(model.layers))])

    growth = _growth(_nnx, read)
    assert 3.0 < growth < 6.0, growth
    back = read(_nnx(3))
    assert sorted(back) == ["layers/0", "layers/1", "layers/2"] and set(back["layers/1"]) == {"kernel", "bias"}
    assert np.shape(back["layers/1"]["kernel"]) == (2, 2)


def test_grouping_the_flow_lines_is_linear() -> None:
    def keys(n: int) -> list[str]:
        return [f"blocks/{i}/{leaf}" for i in range(n) for leaf in ("kernel", "bias")]

    growth = _growth(keys, lambda k: flow._group(k, k))
    assert 3.0 < growth < 6.0, growth
    assert flow._group(keys(3), keys(3)) == ["blocks/*"]  # every parameter under the prefix: one line
    assert flow._group(keys(3)[:2], keys(3)) == ["blocks/0/*"]


def test_a_vanishing_gradient_is_not_a_stop() -> None:
    """Through a deep tanh stack torch keeps subnormal gradients that XLA flushes to zero: below the smallest
    normal number a gradient is no evidence of flow (a correct 1,000-layer port was called a missing stop)."""
    tiny = np.finfo(np.float64).tiny
    assert flow.state(np.array([0.0, 5e-324, -2e-310]), True, "torch") == "zero"
    assert flow.state(np.array([0.0, 0.0, 0.0]), True, "jax") == "zero"
    assert flow.state(np.array([0.0, tiny]), True, "torch") == "flows"  # a normal number flows
    assert flow.state(np.array([0.0, 1e-40], dtype=np.float32), True, "torch") == "zero"  # float32's own bound


@pytest.mark.parametrize("steps", [0, 3])
def test_each_pass_traces_the_jax_forward_once(steps: int) -> None:
    """The outputs are recorded inside the gradient's own forward: per dtype, the jitted program calls the
    user's loss once, with or without the K steps (one program for the run and every step); before, a
    recorded copy ran a second forward in the same program."""
    torch.manual_seed(0)
    t = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2))
    j = nnx.Sequential(nnx.Linear(3, 4, rngs=nnx.Rngs(0)), jnp.tanh, nnx.Linear(4, 2, rngs=nnx.Rngs(1)))
    calls = []

    def jax_loss(m, b):
        calls.append(1)
        return ((m(b["x"]) - b["y"]) ** 2).mean()

    batch = {"x": np.random.default_rng(0).normal(size=(5, 3)), "y": np.zeros((5, 2))}
    optimizers = {"torch_optimizer": lambda p: torch.optim.SGD(p, lr=0.1), "jax_optimizer": optax.sgd(0.1)}
    report = check_port(t, j, batch, torch_loss=lambda m, b: ((m(b["x"]) - b["y"]) ** 2).mean(), jax_loss=jax_loss,
                        steps=steps, **(optimizers if steps else {}))  # fmt: skip
    assert report.ok, report.table()
    assert {r.step for r in report.rows if r.section == "steps"} == set(range(1, steps + 1))
    assert len(calls) == 2, calls  # float64 and float32: one trace each
