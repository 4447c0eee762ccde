"""maml: FOMAML's meta-gradient is the sum of query gradients; second order adds the Hessian term (C13)."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest
import torch
from conftest import case_result
from detach_parity.jax_impl import maml as jmaml
from detach_parity.shared.core import fixtures
from detach_parity.shared.core.oracle import fd_jacobian
from detach_parity.shared.scenarios.maml import PARAMS, mse_grad
from detach_parity.torch_impl import maml as tmaml
from detach_parity.torch_impl._layout import params_of
from torch.func import functional_call

CASES = ("n1", "n3")
TIGHT = {"float32": {"rtol": 2e-5, "atol": 1e-6}, "float64": {"rtol": 1e-12, "atol": 1e-14}}


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_first_order_meta_gradient_is_sum_of_query_gradients(dtype: str, case: str) -> None:
    out = case_result("maml", "first_order", dtype, case).outputs
    for fw in ("torch", "jax"):
        for k in PARAMS:
            np.testing.assert_allclose(
                out[fw][f"meta_grads/{k}"], out[fw][f"query_grads/{k}"].sum(axis=0), **TIGHT[dtype], err_msg=f"{fw} {k}"
            )


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_second_order_differs_by_the_oracle_hessian_term(dtype: str, case: str) -> None:
    so = case_result("maml", "second_order", dtype, case).outputs
    fo = case_result("maml", "first_order", dtype, case).outputs
    tol = {"float32": 2e-4, "float64": 1e-7}[dtype]
    for k in PARAMS:
        # the oracle's Hessian term: finite differences through the inner loop minus the held-gradient version
        want = so["oracle"][f"meta_grads/{k}"] - fo["oracle"][f"meta_grads/{k}"]
        scale = np.max(np.abs(so["oracle"][f"meta_grads/{k}"]))
        assert np.max(np.abs(want)) > 0.1 * scale, f"{k}: the second-order term should be a visible share"
        for fw in ("torch", "jax"):
            got = so[fw][f"meta_grads/{k}"].astype(np.float64) - so[fw][f"query_grads/{k}"].sum(axis=0)
            assert np.max(np.abs(got - want)) <= tol * scale, f"{fw} {k}"
            # same forward pass in both variants: the adapted parameters do not depend on the stop
            np.testing.assert_allclose(so[fw][f"adapted/{k}"], fo[fw][f"adapted/{k}"], **TIGHT[dtype])


def test_one_step_hessian_term_in_closed_form() -> None:
    """n = 1: dθ'/dθ = I - α H_sup(θ), so meta_so = Σ_t (I - α H_t) ∇L_q(θ'_t) = meta_fo - α Σ_t H_t ∇L_q(θ'_t)."""
    fx = fixtures.make("maml", "float64", case="n1")
    a = fx.float64()
    theta = {k: a[f"params/{k}"] for k in PARAMS}
    sizes = [theta[k].size for k in PARAMS]

    def unflat(v: np.ndarray) -> dict[str, np.ndarray]:
        parts = np.split(v, np.cumsum(sizes)[:-1])
        return {k: p.reshape(theta[k].shape) for k, p in zip(PARAMS, parts, strict=True)}

    def flat_grad(v: np.ndarray, t: int) -> np.ndarray:
        g = mse_grad(unflat(v), a["support_x"][t], a["support_y"][t])
        return np.concatenate([g[k].ravel() for k in PARAMS])

    theta_flat = np.concatenate([theta[k].ravel() for k in PARAMS])
    out = case_result("maml", "second_order", "float64", "n1").outputs
    term = np.zeros_like(theta_flat)
    for t in range(fx.dims["T"]):
        hess = fd_jacobian(lambda v, t=t: flat_grad(v, t), theta_flat)  # [P, P], symmetric
        q = np.concatenate([out["oracle"][f"query_grads/{k}"][t].ravel() for k in PARAMS])
        term -= fx.scalar("alpha") * hess @ q
    term = unflat(term)
    for fw in ("torch", "jax"):
        for k in PARAMS:
            got = out[fw][f"meta_grads/{k}"] - out[fw][f"query_grads/{k}"].sum(axis=0)
            np.testing.assert_allclose(got, term[k], rtol=1e-7, atol=1e-9, err_msg=f"{fw} {k}")


def _maml_torch_func(fx, variant: str) -> dict[str, np.ndarray]:
    """The same meta-gradient with torch.func: functional_call + nested torch.func.grad, as in JAX.

    First order is spelled here with .detach() on the inner gradient (tmaml.adapt spells it as
    create_graph=False): both mean the inner gradient is a constant.
    """
    model = tmaml.build_model(fx)
    params = {k: p.detach() for k, p in model.named_parameters()}
    sx, sy, qx, qy = (torch.tensor(np.array(fx[k])) for k in ("support_x", "support_y", "query_x", "query_y"))
    alpha, steps = fx.scalar("alpha"), int(fx["inner_steps"])

    def loss(p, x, y):
        return tmaml.mse_loss(functional_call(model, p, (x,)), y)

    def adapt(p, x, y):
        for _ in range(steps):
            g = torch.func.grad(loss)(p, x, y)
            if variant == "first_order":
                g = {k: v.detach() for k, v in g.items()}
            p = {k: p[k] - alpha * g[k] for k in p}
        return p

    def meta(p, support_y):
        return sum(loss(adapt(p, sx[t], support_y[t]), qx[t], qy[t]) for t in range(sx.shape[0]))

    g_params, g_sy = torch.func.grad(meta, argnums=(0, 1))(params, sy)
    out = {f"meta_grads/{k}": v for k, v in params_of(model, g_params).items()}
    out["data_grads/support_y"] = g_sy.numpy()
    return out


@pytest.mark.parametrize("variant", ["second_order", "first_order"])
def test_torch_func_twin_agrees(variant: str) -> None:
    fx = fixtures.make("maml", "float64", case="n3")
    twin = _maml_torch_func(fx, variant)
    out = case_result("maml", variant, "float64", "n3").outputs
    for fw in ("torch", "jax"):
        for key, value in twin.items():
            np.testing.assert_allclose(value, out[fw][key], rtol=1e-12, atol=1e-14, err_msg=f"{fw} {key}")
    if variant == "first_order":  # detach inside torch.func.grad stops the path exactly, as stop_gradient does
        assert np.all(twin["data_grads/support_y"] == 0)


@pytest.mark.parametrize("module", [tmaml, jmaml], ids=["torch", "jax"])
def test_mse_loss_refuses_broadcasting(module) -> None:
    lib = torch if module is tmaml else jnp
    with pytest.raises(ValueError, match=r"mse_loss: pred has shape \(4, 1\) but y has shape \(4,\)"):
        module.mse_loss(lib.zeros((4, 1)), lib.zeros(4))


def test_canonical_named_matches_the_module_layout_and_refuses_bad_dicts() -> None:
    from detach_parity.torch_impl._layout import params_of

    model = tmaml.build_model(fixtures.make("maml", "float64", case="n1"))
    named = dict(model.named_parameters())
    got, want = params_of(model, named), params_of(model)
    assert list(got) == list(want) and all(np.array_equal(got[k], want[k]) for k in want)
    with pytest.raises(KeyError, match="no tensor for parameter 'l2.bias'"):
        params_of(model, {k: v for k, v in named.items() if k != "l2.bias"})
    with pytest.raises(ValueError, match=r"'l1.weight' expected shape \(8, 1\), got \(1, 8\)"):
        params_of(model, {**named, "l1.weight": named["l1.weight"].T})
    with pytest.raises(ValueError, match=r"tensors \['extra'\] match no parameter of MLP"):
        params_of(model, {**named, "extra": torch.zeros(1)})


def test_random_case_follows_the_seed_and_named_cases_ignore_it() -> None:
    """--seed once changed nothing here: n1 and n3 are fixed tasks. `random` draws tasks, θ and n from the seed."""
    one, two = (fixtures.make("maml", "float64", seed=s, case="random") for s in (1, 2))
    assert not np.array_equal(one["support_x"], two["support_x"])
    assert not np.array_equal(one["params/l1/kernel"], two["params/l1/kernel"])
    steps = {int(fixtures.make("maml", "float64", seed=s, case="random")["inner_steps"]) for s in range(30)}
    assert steps == {1, 2, 3}
    for case in CASES:
        a, b = (fixtures.make("maml", "float64", seed=s, case=case) for s in (1, 2))
        np.testing.assert_array_equal(a["support_x"], b["support_x"])  # exact: a named case ignores the seed


def test_inner_steps_has_an_upper_bound() -> None:
    """100 inner steps took 190 s to compile: the fixture refuses n > 10 (Finn et al. evaluate up to 10)."""
    fx = fixtures.make("maml", "float64", case="n1")
    arrays = {k: np.array(v) for k, v in fx.items()}
    arrays["inner_steps"] = np.array(11)
    with pytest.raises(ValueError, match=r"field 'inner_steps': expected values in \[1, 10\], got 11"):
        fixtures.from_arrays("maml", arrays)


def test_the_lessons_bound_their_inner_steps_as_the_record_does() -> None:
    """adapt() checks its steps against its own module's bound (a lesson reads no record); the schema agrees."""
    from detach_parity.shared.scenarios.maml import SCHEMA

    assert tmaml.MAX_INNER_STEPS == jmaml.MAX_INNER_STEPS == SCHEMA["inner_steps"].high == 10
    assert "registry" not in vars(tmaml) and "registry" not in vars(jmaml)
