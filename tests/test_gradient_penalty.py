"""gradient_penalty: the penalty's gradient is all second order; torch can forget it, JAX cannot; the zero-norm row."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from conftest import assert_same_to_rounding, case_result
from detach_parity.jax_impl import gradient_penalty as jgp
from detach_parity.shared.core import fixtures
from detach_parity.shared.scenarios.gradient_penalty import CRITIC, ZERO_ROW, input_grad
from detach_parity.torch_impl import gradient_penalty as tgp
from flax import nnx

FRAMEWORKS = ("torch", "jax")


def _out(variant: str, dtype: str = "float64") -> dict:
    return case_result("gradient_penalty", variant, dtype, "random").outputs


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_zero_norm_row_is_exactly_zero_and_finite(dtype: str) -> None:
    a = fixtures.make("gradient_penalty", "float64").float64()
    p = {k.removeprefix("params/"): v for k, v in a.items() if k.startswith("params/")}
    x_hat = a["eps"] * a["real"] + (1 - a["eps"]) * (a["z"] @ p["generator/kernel"] + p["generator/bias"])
    norms = np.linalg.norm(input_grad(p, x_hat), axis=1)
    for fw in FRAMEWORKS:
        out = _out("create_graph", dtype)[fw]
        assert out["grad_norms"][ZERO_ROW] == 0.0 and np.all(out["grad_norms"][np.arange(len(norms)) != ZERO_ROW] > 0)
        np.testing.assert_allclose(out["grad_norms"], norms, rtol=1e-5 if dtype == "float32" else 1e-13, err_msg=fw)
        assert all(np.all(np.isfinite(v)) for v in out.values()), fw


def test_without_create_graph_torch_keeps_the_penalty_value_and_drops_its_gradient() -> None:
    second, first = _out("create_graph"), _out("no_create_graph")
    for fw in FRAMEWORKS:
        assert_same_to_rounding(first[fw]["loss"], second[fw]["loss"], f"{fw}: two variants, one penalty value")
    # JAX: no switch to forget, both variants are second order
    for k in CRITIC:
        np.testing.assert_allclose(first["jax"][f"grads/{k}"], second["jax"][f"grads/{k}"], rtol=1e-13, atol=1e-15)
    # torch without create_graph: exactly the gradient of the Wasserstein term alone
    fx = fixtures.make("gradient_penalty", "float64")
    model = tgp.build_model(fx)
    fake = model.generator(torch.tensor(np.array(fx["z"]))).detach()
    (model.critic(fake).mean() - model.critic(torch.tensor(np.array(fx["real"]))).mean()).backward()
    for k, g in {f"critic/{n}": p.grad for n, p in model.critic.named_parameters()}.items():
        key = f"grads/{k.replace('.weight', '/kernel').replace('.bias', '/bias')}"
        want = (g.T if g.ndim == 2 else g).numpy()
        np.testing.assert_allclose(first["torch"][key], want, rtol=1e-13, atol=1e-15, err_msg=key)
    assert np.max(np.abs(first["torch"]["grads/critic/l1/kernel"] - second["torch"]["grads/critic/l1/kernel"])) > 1e-2


def test_jnp_linalg_norm_at_the_zero_row_poisons_every_critic_gradient() -> None:
    """The ported optax.safe_norm gives the zero-norm row gradient 0 (torch's); jnp.linalg.norm gives NaN (P02)."""
    fx = fixtures.make("gradient_penalty", "float64")
    with jax.enable_x64(True):
        model = jgp.build_model(fx)
        x_hat = jnp.asarray(
            fx["eps"] * fx["real"]
            + (1 - fx["eps"]) * (fx["z"] @ fx["params/generator/kernel"] + fx["params/generator/bias"])
        )

        @nnx.jit
        def grads(critic):
            def naive(c):
                g = jax.grad(lambda x: c(x).sum())(x_hat)
                return ((jnp.linalg.norm(g, axis=1) - 1) ** 2).mean()

            return nnx.grad(naive)(critic), nnx.grad(lambda c: jgp.gradient_penalty(c, x_hat, "create_graph")[0])(
                critic
            )

        naive, ported = grads(model.critic)
    assert np.isnan(np.asarray(naive["l1"]["kernel"].get_value())).all()
    assert np.isfinite(np.asarray(ported["l1"]["kernel"].get_value())).all()


def test_torch_input_gradient_without_create_graph_is_a_constant() -> None:
    fx = fixtures.make("gradient_penalty", "float64")
    model = tgp.build_model(fx)
    x_hat = torch.tensor(np.array(fx["real"]))
    penalty, _ = tgp.gradient_penalty(model.critic, x_hat.clone(), "no_create_graph")
    assert not penalty.requires_grad  # backward() through it would raise; summed with a real loss it adds nothing
    penalty, _ = tgp.gradient_penalty(model.critic, x_hat.clone(), "create_graph")
    assert penalty.requires_grad


@pytest.mark.parametrize("module", [tgp, jgp], ids=FRAMEWORKS)
def test_bad_input(module) -> None:
    lib = torch if module is tgp else jnp
    with pytest.raises(ValueError, match=r"interpolates: real has shape \(4, 2\) but fake has shape \(3, 2\)"):
        module.interpolates(lib.zeros((4, 2)), lib.zeros((3, 2)), lib.zeros((4, 1)))
    with pytest.raises(ValueError, match="gradient_penalty: variant expected one of .*got 'two_sided'"):
        module.gradient_penalty(None, None, "two_sided")
    with pytest.raises(ValueError, match=r"critic_loss: gp_weight expected a number in \[0, inf\], got -10.0"):
        module.critic_loss(None, {}, -10.0, "create_graph")
