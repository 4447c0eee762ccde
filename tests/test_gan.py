"""gan: the D step leaks generator gradients only without the stop; each step moves only its network."""

from __future__ import annotations

import fnmatch

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from conftest import assert_same_to_rounding, case_result
from detach_parity.jax_impl import gan as jgan
from detach_parity.shared.core import fixtures
from detach_parity.shared.scenarios.gan import PARAMS
from detach_parity.torch_impl import gan as tgan
from detach_parity.torch_impl._layout import grads_of
from flax import nnx

VARIANTS = ("fake_stopped", "fake_not_stopped")
DTYPES = ("float32", "float64")
GEN = [k for k in PARAMS if k.startswith("gen/")]
DISC = [k for k in PARAMS if k.startswith("disc/")]


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_each_step_moves_only_its_network(dtype: str, variant: str) -> None:
    fx = fixtures.make("gan", dtype)
    for fw, out in case_result("gan", variant, dtype, "random").outputs.items():
        if fw == "oracle":
            continue
        for k in GEN:  # the D step leaves G bit-identical, the G step moves it
            np.testing.assert_array_equal(out[f"d_step/params/{k}"], fx[f"params/{k}"], err_msg=f"{fw} {k}")
            assert np.all(out[f"g_step/params/{k}"] != out[f"d_step/params/{k}"]), f"{fw} {k}"
        for k in DISC:  # the G step's gradient passes through D, D stays bit-identical
            assert np.any(out[f"g_step/grads/{k}"] != 0), f"{fw} {k}"
            np.testing.assert_array_equal(out[f"g_step/params/{k}"], out[f"d_step/params/{k}"], err_msg=f"{fw} {k}")


@pytest.mark.parametrize("dtype", DTYPES)
def test_variants_differ_only_in_the_leaked_generator_gradient(dtype: str) -> None:
    a = case_result("gan", "fake_stopped", dtype, "random").outputs
    b = case_result("gan", "fake_not_stopped", dtype, "random").outputs
    for fw in ("torch", "jax"):
        for key in a[fw]:
            if fnmatch.fnmatchcase(key, "d_step/grads/gen/*"):
                assert np.all(a[fw][key] == 0) and np.any(b[fw][key] != 0), f"{fw} {key}"
            else:  # two variants are two programs (XLA may fuse them differently): equal to rounding
                assert_same_to_rounding(a[fw][key], b[fw][key], f"{fw} {key}: with and without the stop")


@pytest.mark.parametrize("variant", VARIANTS)
def test_first_adam_step_is_lr_times_sign(variant: str) -> None:
    """Adam's first step with bias correction: Δθ = -lr · g / (|g| + eps), betas (0.5, 0.999) or not."""
    fx = fixtures.make("gan", "float64")
    lr, eps = fx.scalar("lr"), fx.scalar("eps")
    out = case_result("gan", variant, "float64", "random").outputs
    for fw in ("torch", "jax"):
        for step, keys in (("d_step", DISC), ("g_step", GEN)):
            for k in keys:
                g = out[fw][f"{step}/grads/{k}"]
                np.testing.assert_allclose(
                    out[fw][f"{step}/moved/{k}"], -lr * g / (np.abs(g) + eps), rtol=1e-8, err_msg=f"{fw} {step} {k}"
                )


def _torch_setup(variant: str = "fake_not_stopped"):
    fx = fixtures.make("gan", "float64")
    model = tgan.build_model(fx)
    d_opt, g_opt = tgan.make_optimizers(model, fx)
    return fx, model, d_opt, g_opt, torch.tensor(np.array(fx["real"])), torch.tensor(np.array(fx["z"]))


def test_torch_leaked_gradient_joins_the_generator_update_without_zero_grad() -> None:
    """One zero_grad per iteration (not per step): G's .grad = leaked D-step gradient + its own."""
    _, model, d_opt, _, real, z = _torch_setup()
    model.zero_grad(set_to_none=True)
    tgan.discriminator_loss(model.gen, model.disc, real, z, "fake_not_stopped").backward()
    d_opt.step()
    tgan.generator_loss(model.gen, model.disc, z).backward()  # accumulates onto the leaked gradient
    grads = grads_of(model)
    out = case_result("gan", "fake_not_stopped", "float64", "random").outputs["torch"]
    for k in GEN:
        want = out[f"d_step/grads/{k}"] + out[f"g_step/grads/{k}"]
        np.testing.assert_allclose(grads[k], want, rtol=1e-12, atol=1e-15)
        assert np.max(np.abs(grads[k] - out[f"g_step/grads/{k}"])) > 1e-3 * np.max(np.abs(want))


@pytest.mark.parametrize("variant", VARIANTS)
def test_torch_reusing_fake_needs_the_detach(variant: str) -> None:
    """The DCGAN loop reuses `fake` for the G step: without the detach, the D step's backward freed G's graph."""
    _, model, d_opt, g_opt, real, z = _torch_setup()
    fake = model.gen(z)
    d_in = fake.detach() if variant == "fake_stopped" else fake
    logits_real, logits_fake = model.disc(real), model.disc(d_in)
    model.zero_grad(set_to_none=True)
    d_loss = tgan.bce_with_logits(logits_real, torch.ones_like(logits_real)) + tgan.bce_with_logits(
        logits_fake, torch.zeros_like(logits_fake)
    )
    d_loss.backward()
    d_opt.step()
    model.zero_grad(set_to_none=True)
    logits = model.disc(fake)
    g_loss = tgan.bce_with_logits(logits, torch.ones_like(logits))
    if variant == "fake_not_stopped":
        with pytest.raises(RuntimeError, match="backward through the graph a second time"):
            g_loss.backward()
        return
    g_loss.backward()
    out = case_result("gan", variant, "float64", "random").outputs["torch"]
    for k, g in grads_of(model).items():
        assert_same_to_rounding(g, out[f"g_step/grads/{k}"], f"{k}: the test's own backward against the scenario's")


def test_jax_gradient_for_the_discriminator_alone_ignores_the_stop() -> None:
    """jax.grad computes what argnums names: D's gradient is the same with or without stop_gradient."""
    fx = fixtures.make("gan", "float64")
    out = case_result("gan", "fake_not_stopped", "float64", "random").outputs["jax"]
    with jax.enable_x64(True):
        model = jgan.build_model(fx)
        real, z = jnp.asarray(fx["real"]), jnp.asarray(fx["z"])
        for variant in VARIANTS:
            grads = nnx.grad(jgan.discriminator_loss, argnums=1)(model.gen, model.disc, real, z, variant)
            for path, value in grads.flat_state():
                key = "disc/" + "/".join(map(str, path))
                np.testing.assert_allclose(np.asarray(value.get_value()), out[f"d_step/grads/{key}"], rtol=1e-13)


@pytest.mark.parametrize("module", [tgan, jgan], ids=["torch", "jax"])
def test_bce_refuses_broadcasting(module) -> None:
    lib = torch if module is tgan else jnp
    with pytest.raises(ValueError, match=r"bce_with_logits: logits has shape \(4, 1\) but labels has shape \(4,\)"):
        module.bce_with_logits(lib.zeros((4, 1)), lib.ones(4))
