"""Pitfalls P18 (default initialisation) and P19 (drift over 1,000 steps): the numbers behind each lesson."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from conftest import case_result
from detach_parity.jax_impl import p18_default_init as j18
from detach_parity.jax_impl import p19_drift as j19
from detach_parity.shared.core import fixtures
from detach_parity.shared.core.oracle import fd_grad
from detach_parity.shared.scenarios.p18_default_init import TRUNCNORM_STD
from detach_parity.shared.scenarios.p19_drift import PARAMS as P19_PARAMS
from detach_parity.shared.scenarios.p19_drift import grads_and_loss
from detach_parity.torch_impl import p18_default_init as t18
from detach_parity.torch_impl import p19_drift as t19
from flax import nnx

# P18 default initialisation -----------------------------------------------------------------


def test_p18_noise_maps_are_the_libraries_initialisers() -> None:
    """torch nn.Linear = U(±1/√fan_in)·(its own uniform draws); JAX variance_scaling / lecun_normal = the noise maps."""
    fan_in, fan_out = 7, 5
    torch.manual_seed(3)
    layer = torch.nn.Linear(fan_in, fan_out, dtype=torch.float64)
    torch.manual_seed(3)  # the same generator state: kaiming_uniform_ draws the weight, then uniform_ the bias
    u_w = torch.empty(fan_out, fan_in, dtype=torch.float64).uniform_(-1, 1)
    u_b = torch.empty(fan_out, dtype=torch.float64).uniform_(-1, 1)
    np.testing.assert_allclose(layer.weight.detach(), u_w / math.sqrt(fan_in), rtol=1e-12, atol=1e-16)
    np.testing.assert_allclose(layer.bias.detach(), u_b / math.sqrt(fan_in), rtol=1e-12, atol=1e-16)
    with jax.enable_x64(True):
        key = jax.random.key(0)
        ported = jax.nn.initializers.variance_scaling(1 / 3, "fan_in", "uniform")(key, (fan_in, fan_out), jnp.float64)
        u = jax.random.uniform(key, (fan_in, fan_out), jnp.float64, -1)
        np.testing.assert_allclose(ported, u / math.sqrt(fan_in), rtol=1e-14)
        nnx_default = nnx.Linear(fan_in, fan_out, param_dtype=jnp.float64, rngs=nnx.Rngs(0))
        z = jax.random.truncated_normal(nnx.Rngs(0).params(), -2, 2, (fan_in, fan_out), jnp.float64)
        np.testing.assert_allclose(nnx_default.kernel[...], z / math.sqrt(fan_in) / TRUNCNORM_STD, rtol=1e-14)
        assert np.all(np.asarray(nnx_default.bias[...]) == 0)


def test_p18_how_much_the_default_distributions_differ() -> None:
    """torch: weight and bias U(±1/√n), std 1/√(3n); NNX: kernel std 1/√n (√3 ≈ 1.73× wider), bias exactly 0."""
    n = 256
    torch.manual_seed(0)
    t = torch.nn.Linear(n, n)
    j = nnx.Linear(n, n, rngs=nnx.Rngs(0))
    t_std, j_std = float(t.weight.detach().std()), float(jnp.std(j.kernel[...]))
    assert t_std == pytest.approx(1 / math.sqrt(3 * n), rel=0.01)
    assert j_std == pytest.approx(1 / math.sqrt(n), rel=0.01)
    assert j_std / t_std == pytest.approx(math.sqrt(3), rel=0.015)
    assert float(t.weight.detach().abs().max()) <= 1 / math.sqrt(n)  # a hard bound; NNX reaches 2 / (√n · 0.88)
    assert float(jnp.abs(j.kernel[...]).max()) > 1.9 / math.sqrt(n)
    assert float(t.bias.detach().std()) == pytest.approx(1 / math.sqrt(3 * n), rel=0.1) and np.all(
        np.asarray(j.bias[...]) == 0
    )


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_p18_ported_copies_torch_naive_trains_differently(dtype: str) -> None:
    ported = case_result("p18_default_init", "ported", dtype, "random").outputs
    naive = case_result("p18_default_init", "naive", dtype, "random").outputs
    for key, value in ported["torch"].items():  # exact: torch is the reference, one program run twice
        np.testing.assert_array_equal(naive["torch"][key], value)
    np.testing.assert_allclose(ported["jax"]["init/l1/kernel"], ported["torch"]["init/l1/kernel"], rtol=1e-6)
    assert np.all(naive["jax"]["init/l1/bias"] == 0) and np.all(naive["torch"]["init/l1/bias"] != 0)
    gap = np.abs(naive["jax"]["losses"] - naive["torch"]["losses"]) / naive["torch"]["losses"]
    assert gap[0] > 0.05  # different from the first loss on: no step can match


def test_p18_init_params_refuse_an_unknown_variant() -> None:
    fx = fixtures.make("p18_default_init", "float32")
    for impl in (t18, j18):
        with pytest.raises(ValueError, match="variant expected one of"):
            impl.init_params(fx, "copied")


# P19 drift over 1,000 steps ------------------------------------------------------------------


def test_p19_closed_form_oracle_is_the_finite_difference_gradient() -> None:
    a = fixtures.make("p19_drift", "float64").float64()
    p = {k: a[f"params/{k}"] for k in P19_PARAMS}
    g, _ = grads_and_loss(p, a["x"], a["y"])
    for k, v in fd_grad(lambda q: grads_and_loss(q, a["x"], a["y"])[1], p).items():
        np.testing.assert_allclose(g[k], v, rtol=1e-8, atol=1e-11)


def _rel(out: dict, ref: dict) -> float:
    """Largest |a − b| over every parameter, relative to the largest |b| of its leaf."""
    keys = [k for k in ref if k.startswith("params/")]
    return max(float(np.max(np.abs(out[k] - ref[k])) / np.max(np.abs(ref[k]))) for k in keys)


def test_p19_the_drift_rule() -> None:
    """Float32 noise is the size of a reordered torch run's drift and vanishes in float64; the bug is neither."""
    fx = fixtures.make("p19_drift", "float32")
    perm = np.random.default_rng(1).permutation(fx.dims["B"])
    model = t19.build_model(fx)
    x, y = torch.tensor(np.array(fx["x"])[perm]), torch.tensor(np.array(fx["y"])[perm])
    t19.train(model, t19.make_optimizer(model, fx, "ported"), x, y, int(fx["steps"]))
    reordered = {f"params/{k}": v for k, v in t19.params_of(model).items()}
    out = {
        (v, dt): case_result("p19_drift", v, dt, "random").outputs
        for v in ("ported", "naive")
        for dt in ("float32", "float64")
    }
    noise = _rel(reordered, out["ported", "float32"]["torch"])
    drift = _rel(out["ported", "float32"]["jax"], out["ported", "float32"]["torch"])
    bug = _rel(out["naive", "float32"]["jax"], out["naive", "float32"]["torch"])
    assert 0 < noise < 1e-5 and drift <= 10 * noise, (noise, drift)  # rule (1): as large as reordering
    assert bug >= 100 * noise, (noise, bug)
    assert _rel(out["ported", "float64"]["jax"], out["ported", "float64"]["torch"]) < 1e-12  # rule (2): it vanishes
    bug64 = _rel(out["naive", "float64"]["jax"], out["naive", "float64"]["torch"])
    assert bug64 == pytest.approx(bug, rel=0.05)  # a bug does not care about the dtype


def test_p19_one_step_matches() -> None:
    """After one step the naive port is within float32 parity of torch: a one-step check cannot see the bug."""
    fx = fixtures.make("p19_drift", "float32")
    model = t19.build_model(fx)
    t19.train(
        model,
        t19.make_optimizer(model, fx, "ported"),
        torch.tensor(np.array(fx["x"])),
        torch.tensor(np.array(fx["y"])),
        1,
    )
    jmodel = j19.build_model(fx)
    j19.train(jmodel, j19.make_optimizer(jmodel, fx, "naive"), jnp.asarray(fx["x"]), jnp.asarray(fx["y"]), 1)
    one = _rel(
        {f"params/{k}": v for k, v in j19.params_of(jmodel).items()},
        {f"params/{k}": v for k, v in t19.params_of(model).items()},
    )
    assert one < 2e-5  # the float32 parity rtol: it passes
    thousand = _rel(
        case_result("p19_drift", "naive", "float32", "random").outputs["jax"],
        case_result("p19_drift", "naive", "float32", "random").outputs["torch"],
    )
    assert thousand > 100 * one


@pytest.mark.parametrize("impl", [t19, j19], ids=["torch", "jax"])
def test_p19_targets_of_another_shape_are_refused(impl) -> None:
    fx = fixtures.make("p19_drift", "float32")
    lib = torch.tensor if impl is t19 else jnp.asarray
    model = impl.build_model(fx)
    b = fx.dims["B"]
    with pytest.raises(ValueError, match=rf"train: pred has shape \({b}, 1\) but y has shape \({b},\)"):
        impl.train(
            model, impl.make_optimizer(model, fx, "ported"), lib(np.array(fx["x"])), lib(np.array(fx["y"])[:, 0]), 1
        )


@pytest.mark.parametrize("scenario", ["p18_default_init", "p19_drift"])
def test_torch_losses_carry_no_graph(scenario: str) -> None:
    """The losses a training loop returns are values: no step's graph outlives it (1,000 graphs otherwise)."""
    fx = fixtures.make(scenario, "float32")
    x, y = torch.tensor(np.array(fx["x"])), torch.tensor(np.array(fx["y"]))
    if scenario == "p18_default_init":
        losses = t18.train(t18.build_model(fx, "ported"), x, y, fx.scalar("lr"), 3)
    else:
        model = t19.build_model(fx)
        losses = t19.train(model, t19.make_optimizer(model, fx, "ported"), x, y, 3)
    assert losses.shape == (3,) and not losses.requires_grad and losses.grad_fn is None
