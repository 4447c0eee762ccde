"""siamese_stop: BYOL's EMA write, its stop that JAX does not need, and SimSiam's stop that nobody can drop."""

from __future__ import annotations

import jax
import numpy as np
import pytest
import torch
from conftest import assert_same_to_rounding, case_result
from detach_parity.jax_impl import siamese_stop as jss
from detach_parity.shared.core import fixtures
from detach_parity.shared.scenarios.siamese_stop import NET
from detach_parity.torch_impl import siamese_stop as tss
from detach_parity.torch_impl._layout import grads_of
from flax import nnx

FRAMEWORKS = ("torch", "jax")


def _out(variant: str) -> dict:
    return case_result("siamese_stop", variant, "float64", "random").outputs


def test_byol_target_moves_only_by_the_ema_of_the_updated_online_network() -> None:
    fx = fixtures.make("siamese_stop", "float64")
    tau = fx.scalar("tau")
    out = _out("byol")
    for fw in FRAMEWORKS:
        for k in NET:
            want = tau * fx[f"params/target/{k}"] + (1 - tau) * out[fw][f"params/online/{k}"]
            np.testing.assert_allclose(out[fw][f"params/target/{k}"], want, rtol=1e-13, atol=1e-15, err_msg=f"{fw} {k}")


def test_jax_byol_stop_gradient_is_not_necessary_but_the_filter_is() -> None:
    """With the DiffState filter, an explicit stop_gradient changes nothing; without the filter the target learns."""
    fx = fixtures.make("siamese_stop", "float64")
    want = _out("byol")["jax"]
    with jax.enable_x64(True):
        model = jss.build_model(fx)
        x1, x2 = (jax.numpy.asarray(fx[v]) for v in ("x1", "x2"))

        def loss(m, stop):
            t1, t2 = m.target(x1), m.target(x2)
            if stop:
                t1, t2 = jax.lax.stop_gradient(t1), jax.lax.stop_gradient(t2)
            return sum(jss.symmetric_loss(m.predictor(m.online(x1)), m.predictor(m.online(x2)), t1, t2, "byol"))

        @nnx.jit
        def both(m):
            # with the filter and a stop; without the filter and without a stop
            return nnx.grad(loss, argnums=nnx.DiffState(0, jss.LEARNED))(m, True), nnx.grad(loss)(m, False)

        stopped, everything = both(model)
        for path, value in stopped.flat_state():
            key = "grads/" + "/".join(map(str, path))
            np.testing.assert_allclose(np.asarray(value.get_value()), want[key], rtol=1e-14, atol=1e-15, err_msg=key)
        assert np.any(np.asarray(everything["target"]["l1"]["kernel"].get_value()) != 0)


def test_torch_byol_without_no_grad_writes_target_gradients() -> None:
    fx = fixtures.make("siamese_stop", "float64")
    model = tss.build_model(fx)
    x1, x2 = (torch.tensor(np.array(fx[v])) for v in ("x1", "x2"))
    p1, p2 = model.predictor(model.online(x1)), model.predictor(model.online(x2))
    sum(tss.symmetric_loss(p1, p2, model.target(x1), model.target(x2), "byol")).backward()
    assert any(np.any(g != 0) for k, g in grads_of(model).items() if k.startswith("target/"))


def test_simsiam_stop_changes_the_online_gradient_not_the_predictors() -> None:
    stop, no_stop = _out("simsiam"), _out("simsiam_no_stop")
    for fw in FRAMEWORKS:
        for k in ("predictor/kernel", "predictor/bias"):  # the predictor sits on the prediction side only
            np.testing.assert_allclose(stop[fw][f"grads/{k}"], no_stop[fw][f"grads/{k}"], rtol=1e-13, atol=1e-15)
        gap = max(np.max(np.abs(stop[fw][f"grads/online/{k}"] - no_stop[fw][f"grads/online/{k}"])) for k in NET)
        assert gap > 1e-3, f"{fw}: dropping the stop should change the online network's gradient"
        assert_same_to_rounding(
            stop[fw]["loss"], no_stop[fw]["loss"], f"{fw}: two variants, one loss value (the stop changes the gradient)"
        )


@pytest.mark.parametrize("module", [tss, jss], ids=FRAMEWORKS)
def test_symmetric_loss_refuses_mismatched_shapes(module) -> None:
    z = torch.zeros(3, 2) if module is tss else jax.numpy.zeros((3, 2))
    with pytest.raises(ValueError, match=r"symmetric_loss: p1 has shape \(3, 2\) but t1 has shape \(2, 2\)"):
        module.symmetric_loss(z, z, z[:2], z, "simsiam")
    with pytest.raises(ValueError, match="siamese_stop: variant expected one of .*got 'moco'"):
        module.symmetric_loss(z, z, z, z, "moco")
    with pytest.raises(ValueError, match=r"ema_update: tau expected a number in \[0, 1\], got 1.5"):
        module.ema_update(None, None, 1.5)


def test_jax_builder_refuses_a_float64_fixture_outside_x64() -> None:
    with jax.enable_x64(False), pytest.raises(ValueError, match="build_model: a float64 fixture needs jax_enable_x64"):
        jss.build_model(fixtures.make("siamese_stop", "float64"))


def test_byol_targets_are_constants_whoever_differentiates_them() -> None:
    """Audit of issue 28 item 7: torch's targets() stops BYOL's target branch inside (no_grad); the JAX twin
    once left it to its caller's DiffState filter, so a user's own gradient of targets() trained the target
    network and reached the views through it. Both stop it inside now."""
    fx = fixtures.make("siamese_stop", "float64")
    model = tss.build_model(fx)
    views = [torch.tensor(np.array(fx[v]), requires_grad=True) for v in ("x1", "x2")]
    z1, z2 = model.online(views[0]), model.online(views[1])
    t1, t2 = tss.targets(model, z1, z2, views, "byol")
    sum(tss.symmetric_loss(model.predictor(z1), model.predictor(z2), t1, t2, "byol")).backward()
    torch_grads = grads_of(model)

    with jax.enable_x64(True):
        jmodel = jss.build_model(fx)
        jviews = tuple(jax.numpy.asarray(fx[v]) for v in ("x1", "x2"))

        def loss(m, views):
            z1, z2 = m.online(views[0]), m.online(views[1])
            t1, t2 = jss.targets(m, z1, z2, views, "byol")
            return sum(jss.symmetric_loss(m.predictor(z1), m.predictor(z2), t1, t2, "byol"))

        jax_grads, jax_views = nnx.grad(loss, argnums=(0, 1))(jmodel, jviews)  # every parameter, and the views
        jax_grads = {"/".join(map(str, p)): np.asarray(v.get_value()) for p, v in jax_grads.flat_state()}
    for grads in (torch_grads, jax_grads):
        assert all(np.all(g == 0.0) for k, g in grads.items() if k.startswith("target/"))
        assert all(np.any(g != 0.0) for k, g in grads.items() if k.startswith(("online/", "predictor/")))
    for t, j in zip(views, jax_views, strict=True):
        assert_same_to_rounding(np.asarray(j), t.grad.numpy(), "d loss / d view: the online branch alone")
