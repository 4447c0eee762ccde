"""Float32 islands: a float64 reference that computes parts in float32 (HF's Llama RMSNorm, rotary cos / sin,
labels= loss) is judged at float32 precision from there, and only there (issue: a correct Llama port was
reported DIFFERS at 1.35e-7 in float64, "unexplained", while a broken one read the same).

The reference here is an RMSNorm written as HF writes LlamaRMSNorm (`weight`, `variance_epsilon`, the
sum of squares in float32), between two Linears; its NNX port computes in float64 throughout.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import torch
from detach_parity import check_port
from detach_parity.shared.apps.backends import backend
from flax import nnx
from torch import nn

BATCH = {"x": np.random.default_rng(0).standard_normal((4, 5)) * 0.1, "y": np.zeros((4, 3))}


class HFStyleRMSNorm(nn.Module):
    """transformers' LlamaRMSNorm, as written there: its class is no torch class the rule table names."""

    def __init__(self, size: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.variance_epsilon = eps

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        dtype = hidden.dtype
        hidden = hidden.to(torch.float32)  # float32 even in a float64 model
        hidden = hidden * torch.rsqrt(hidden.pow(2).mean(-1, keepdim=True) + self.variance_epsilon)
        return self.weight * hidden.to(dtype)


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1, self.norm, self.fc2 = nn.Linear(5, 8), HFStyleRMSNorm(8), nn.Linear(8, 3)

    def forward(self, x):
        return self.fc2(self.norm(self.fc1(x)))


class Port(nnx.Module):
    def __init__(self, epsilon: float = 1e-6) -> None:
        rngs = nnx.Rngs(0)
        self.fc1, self.fc2 = nnx.Linear(5, 8, rngs=rngs), nnx.Linear(8, 3, rngs=rngs)
        self.norm = nnx.RMSNorm(8, epsilon=epsilon, rngs=rngs)

    def __call__(self, x):
        return self.fc2(self.norm(self.fc1(x)))


def torch_loss(model, batch):
    return ((model(batch["x"]) - batch["y"]) ** 2).mean()


def jax_loss(model, batch):
    return jnp.mean((model(batch["x"]) - batch["y"]) ** 2)


def _check(port: Port, **kwargs):
    return check_port(Net(), port, BATCH, torch_loss=torch_loss, jax_loss=jax_loss, steps=0, **kwargs)


def test_a_norm_of_another_library_is_recognised_by_what_it_is() -> None:
    units = {u["path"]: u for u in backend("torch").port.structure(Net())["units"]}
    assert units["norm"]["type"] == "HFStyleRMSNorm" and not units["norm"]["bare"]
    assert set(units["norm"]["leaves"]) == {"scale"}  # weight -> scale, as nn.RMSNorm's; no bias
    modules = {m["path"]: m for m in backend("torch").port.structure(Net())["modules"]}
    assert modules["norm"]["config"]["eps"] == 1e-6 and modules["norm"]["config"]["kind"] == "norm"


def test_a_correct_port_matches_with_the_island_explained() -> None:
    report = _check(Port())
    assert report.ok and report.verdict() == "match, explained", report.table()
    explained = report.explained
    assert explained and all(r.dtype == "float64" and r.explained for r in explained)
    assert "the reference computes `norm` in float32" in explained[0].explained
    # upstream of the island float64's bound holds: the first Linear's output is not explained
    assert not any(r.key == "fc1" for r in explained)
    assert {r.section for r in explained} >= {"outputs", "grads"}
    assert max(r.max_rel for r in explained) < 1e-5  # float32 rounding, not a bug
    assert "explained: float64 pass: the reference computes `norm` in float32" in "\n".join(report.lines())
    assert report.to_json()["verdict"] == "match, explained"


def test_a_bug_larger_than_float32_inside_the_island_is_still_caught() -> None:
    report = _check(Port(epsilon=1e-3))
    assert not report.ok and report.verdict() == "differs"
    assert "P05" in report.named(), report.table()  # the epsilon, read from variance_epsilon


def test_the_float32_pass_is_judged_as_before() -> None:
    report = _check(Port())
    assert [r for r in report.rows if r.dtype == "float32"] and not [
        r for r in report.explained if r.dtype == "float32"
    ]


def test_float32_steps_that_differ_only_where_the_float64_gradient_is_rounding_are_explained() -> None:
    """Adam turns any gradient into steps of ~lr: on entries whose float64 gradient is below float32's resolution
    (attention's key bias, which softmax ignores) float32 steps are noise; elsewhere a difference still differs."""
    from detach_parity.shared.apps.check.compare import Judge, Pass
    from detach_parity.shared.apps.check.match import Plan
    from detach_parity.shared.apps.check.noise import NOISE, noise_entries

    grads = {"attn/bias": np.array([3e-2, -1e-17, 2e-18, 4e-2]), "head/kernel": np.array([[0.0, 1e-3]])}
    noise = noise_entries(grads)
    assert list(noise) == ["attn/bias"]  # an exact zero is not noise: float32 keeps it zero and Adam leaves it
    np.testing.assert_array_equal(noise["attn/bias"], [False, True, True, False])  # a mask of one fixed input: exact
    weights = {"attn/bias": np.zeros(4, np.float32), "head/kernel": np.zeros((1, 2), np.float32)}
    p = Pass("float32", expected=weights, actual=weights)
    t = {"loss": np.float32(1.0), "values": {"attn/bias": np.array([0.1, 0.01, -0.01, 0.2], np.float32)}}
    lr_noise = {"loss": np.float32(1.0), "values": {"attn/bias": np.array([0.1, -0.01, 0.01, 0.2], np.float32)}}
    real = {"loss": np.float32(1.0), "values": {"attn/bias": np.array([0.1, -0.01, 0.01, 0.25], np.float32)}}
    rows = Judge(p, Plan(), True, noise=noise).step(1, t, lr_noise)
    bias = next(r for r in rows if r.key == "attn/bias")
    assert bias.ok and bias.explained == NOISE + " (2 entries of 4)"
    rows = Judge(p, Plan(), True, noise=noise).step(1, t, real)  # off the noise entries: a real difference
    bias = next(r for r in rows if r.key == "attn/bias")
    assert not bias.ok and not bias.explained and bias.max_abs > 0.04
    assert not next(
        r for r in Judge(p, Plan(), True).step(1, t, lr_noise) if r.key == "attn/bias"
    ).ok  # no float64 facts
