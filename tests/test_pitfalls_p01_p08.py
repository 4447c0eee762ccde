"""Pitfalls P01–P08: `ported` matches torch and the oracle, `naive` differs by the measured amount.

The handed numbers come from PITFALLS.md (torch 2.13.0, jax 0.10.2, flax 0.12.8) and are
copied here: the suite never reads ../shared/.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
import torch
from conftest import assert_same_to_rounding, case_result
from detach_parity.shared.core import fixtures
from detach_parity.shared.core.runner import lesson, oracle_outputs, run_case
from flax import nnx

P01_P08 = (
    "p01_std_convention",
    "p02_norm_at_zero",
    "p03_subgradient_kinks",
    "p04_gelu",
    "p05_layernorm_eps",
    "p06_batchnorm_stats",
    "p07_linear_layout",
    "p08_gru_bias",
)
DTYPES = ("float32", "float64")


def handed(name: str, variant: str = "naive", dtype: str = "float64") -> tuple[dict, dict]:
    """(torch outputs, JAX outputs) of the handed case."""
    out = case_result(name, variant, dtype, "handed").outputs
    return out["torch"], out["jax"]


@pytest.mark.parametrize("case", ["handed", "random"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", P01_P08)
def test_ported_matches_torch_and_oracle_naive_differs(name: str, dtype: str, case: str) -> None:
    ported = case_result(name, "ported", dtype, case)
    assert ported.verdict == "PASS", "\n".join(ported.problems())
    assert ported.torch_jax.ok and ported.torch_oracle.ok and ported.jax_oracle.ok
    naive = case_result(name, "naive", dtype, case)
    assert naive.verdict == "DIFFERS (expected)", "\n".join(naive.problems())
    # wrong exactly on the declared keys (divergent), right on every other key (torch_jax, jax_oracle)
    assert naive.torch_oracle.ok and not naive.divergent.ok
    # the right wrong answer: JAX matches the naive oracle there, and the naive oracle is not the oracle
    assert naive.divergent_oracle.ok and not naive.naive_gap.ok
    assert naive.torch_jax.ok and naive.jax_oracle.ok
    # exact: torch runs the same code in both variants (one program, twice); the naive mistake is on the JAX side
    for key, value in ported.outputs["torch"].items():
        np.testing.assert_array_equal(naive.outputs["torch"][key], value)


# P01 std convention -------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
def test_p01_std_values_and_ratio(dtype: str) -> None:
    t, j = handed("p01_std_convention", dtype=dtype)
    rtol = 1e-6 if dtype == "float32" else 1e-12
    np.testing.assert_allclose(t["std"], [2.2, 1.0, 0.1], rtol=rtol)
    np.testing.assert_allclose(j["std"], [1.7963, 0.8165, 0.0816], atol=5e-5)
    np.testing.assert_allclose(t["std"] / j["std"], math.sqrt(3 / 2), rtol=rtol)
    assert math.sqrt(3 / 2) == pytest.approx(1.224745, abs=1e-6)


def test_p01_single_element_std() -> None:
    with pytest.warns(UserWarning):
        assert math.isnan(torch.tensor([5.0]).std().item())  # N − 1 = 0
    assert float(jnp.std(jnp.array([5.0]))) == 0.0  # the naive port hides it
    assert math.isnan(float(jnp.std(jnp.array([5.0]), ddof=1)))  # the port keeps torch's NaN


def test_p01_ported_std_gradient_is_torchs_zero_on_a_constant_row() -> None:
    """Issue 14 item 7: jnp.std's gradient is 0 / 0 = NaN on a constant row, torch's is 0.

    The fixture refuses constant rows (the oracle divides by std); a user calling row_std does not.
    """
    from detach_parity.jax_impl import p01_std_convention as j01
    from detach_parity.torch_impl import p01_std_convention as t01

    x = np.array([[2.0, 2.0, 2.0], [3.4, 5.6, 7.8]])
    xt = torch.tensor(x, requires_grad=True)
    t01.row_std(xt, "ported").sum().backward()
    with jax.enable_x64(True):
        xj = jnp.asarray(x)
        std = j01.row_std(xj, "ported")
        grad = jax.grad(lambda v: j01.row_std(v, "ported").sum())(xj)
        naive = jax.grad(lambda v: j01.row_std(v, "naive").sum())(xj)
        assert_same_to_rounding(std, jnp.std(xj, axis=-1, ddof=1), "row_std against jnp.std: the same values")
    np.testing.assert_array_equal(np.asarray(grad)[0], [0.0, 0.0, 0.0])  # exact: the lesson is 0, not NaN
    np.testing.assert_allclose(np.asarray(grad), xt.grad.numpy(), rtol=1e-12, atol=1e-15)
    assert np.all(np.isnan(np.asarray(naive)[0]))  # the naive port, as documented


# P02 gradient of a norm at the zero vector -----------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
def test_p02_zero_gradient_pinned_naive_nan(dtype: str) -> None:
    fx = fixtures.make("p02_norm_at_zero", dtype, case="handed")
    np.testing.assert_array_equal(fx["x"], [0.0, 0.0, 0.0])  # exact: the handed case
    for out in (handed("p02_norm_at_zero", "ported", dtype)[0], handed("p02_norm_at_zero", "ported", dtype)[1]):
        np.testing.assert_array_equal(out["grads/norm"], np.zeros(3))  # exact: the lesson is 0, not NaN
        np.testing.assert_array_equal(out["grads/sq_norm"], np.zeros(3))  # exact: 2·0
        np.testing.assert_allclose(out["grads/penalized"], -fx["t"])  # x − t + λ·0
    _, naive = handed("p02_norm_at_zero", "naive", dtype)
    for key in ("grads/norm", "grads/sq_norm", "grads/penalized"):
        assert np.isnan(naive[key]).all(), key


def test_p02_global_norm_gradient_is_nan_at_zero() -> None:
    # optax.tree.norm is what optax.global_norm (deprecated alias) and clip_by_global_norm compute
    g = jax.grad(lambda v: optax.tree.norm({"a": v, "b": 2 * v}))(jnp.zeros(3))
    assert np.isnan(np.asarray(g)).all()


# P03 subgradients at kinks --------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
def test_p03_torch_convention_pinned(dtype: str) -> None:
    t, j = handed("p03_subgradient_kinks", "ported", dtype)
    for out in (t, j):  # exact: the lesson is the subgradient chosen at a kink; 0, ±1/2, ±1 are exact
        np.testing.assert_array_equal(out["grads/l1"], [0.0, 1.0, -1.0, 0.0])
        np.testing.assert_array_equal(out["grads/clamp"], [1.0, 1.0, 1.0, 1.0])  # x on 0 and on ±0.5
    _, naive = handed("p03_subgradient_kinks", "naive", dtype)
    np.testing.assert_array_equal(naive["grads/l1"], [1.0, 1.0, -1.0, 1.0])  # exact: the subgradient at a kink
    np.testing.assert_array_equal(naive["grads/clamp"], [1.0, 0.5, 0.5, 1.0])  # exact: the subgradient at a kink


def test_p03_relu_and_maximum_already_agree() -> None:
    x = torch.zeros(1, requires_grad=True)
    (g_relu,) = torch.autograd.grad(torch.relu(x).sum(), [x])
    (g_max,) = torch.autograd.grad(torch.maximum(x, torch.zeros(1)).sum(), [x])
    assert g_relu.item() == float(jax.grad(jax.nn.relu)(0.0)) == 0.0
    assert g_max.item() == float(jax.grad(lambda v: jnp.maximum(v, 0.0))(0.0)) == 0.5


# P04 GELU ----------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
def test_p04_gelu_at_one(dtype: str) -> None:
    t, naive = handed("p04_gelu", "naive", dtype)
    _, ported = handed("p04_gelu", "ported", dtype)
    assert t["y"][0] == pytest.approx(0.841345, abs=5e-7)
    assert ported["y"][0] == pytest.approx(0.841345, abs=5e-7)
    assert naive["y"][0] == pytest.approx(0.841192, abs=5e-7)
    assert abs(t["grads/x"][0] - naive["grads/x"][0]) == pytest.approx(3.51e-4, rel=1e-2)


def test_p04_a_mutated_naive_port_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 15 item 2: a naive port replaced by sin(x) * 1e3 once still said "DIFFERS (expected)"."""
    from detach_parity.jax_impl import p04_gelu as j04

    assert run_case("p04_gelu", "naive", "float64", case="handed").verdict == "DIFFERS (expected)"
    real, traced = j04.gelu, j04.gelu_and_grad.__wrapped__
    monkeypatch.setattr(j04, "gelu", lambda x, v: jnp.sin(x) * 1e3 if v == "naive" else real(x, v))
    # a new function under a new jit: the cached trace of the real gelu must not answer
    monkeypatch.setattr(j04, "gelu_and_grad", jax.jit(lambda x, variant: traced(x, variant), static_argnames="variant"))
    r = run_case("p04_gelu", "naive", "float64", case="handed")
    assert r.verdict == "FAIL"
    assert not r.divergent.ok  # it still differs from torch ...
    assert not r.divergent_oracle.ok  # ... but it is not the tanh GELU
    assert any("not the right wrong answer" in p for p in r.problems())


# P05 LayerNorm epsilon -----------------------------------------------------------------------


def test_p05_defaults() -> None:
    import inspect

    assert torch.nn.LayerNorm(3).eps == 1e-5
    assert inspect.signature(nnx.LayerNorm.__init__).parameters["epsilon"].default == 1e-6


@pytest.mark.parametrize("dtype", DTYPES)
def test_p05_outputs_01_gradients_23_percent(dtype: str) -> None:
    fx = fixtures.make("p05_layernorm_eps", "float64", case="handed")
    assert 0.005 < float(np.std(fx["x"])) < 0.012  # "std ≈ 0.01"
    t, j = handed("p05_layernorm_eps", "naive", dtype)
    assert np.max(np.abs(t["y"] - j["y"])) == pytest.approx(0.116, abs=2e-3)
    rel = np.max(np.abs(t["grads/x"] - j["grads/x"])) / np.max(np.abs(t["grads/x"]))
    assert rel == pytest.approx(0.2248, abs=2e-3)


def _constant(name: str, field: str) -> fixtures.Fixture:
    arrays = {k: np.array(v) for k, v in fixtures.make(name, "float64", case="handed").items()}
    arrays[field] = np.full_like(arrays[field], 0.25)
    return fixtures.from_arrays(name, arrays)


@pytest.mark.parametrize(("name", "field"), [("p05_layernorm_eps", "x"), ("p06_batchnorm_stats", "x")])
def test_normalisation_of_a_constant_input_has_finite_gradients(name: str, field: str) -> None:
    """Issue 14 item 7: every sqrt the ports differentiate, at zero variance: eps keeps it finite, as in torch."""
    fx = _constant(name, field)
    t, j = lesson("torch", name).run(fx, "ported"), lesson("jax", name).run(fx, "ported")
    for key, value in t.items():
        assert np.all(np.isfinite(j[key])), key
        np.testing.assert_allclose(j[key], value, rtol=1e-10, atol=1e-12, err_msg=key)


# P06 BatchNorm running statistics ------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
def test_p06_running_stats_numbers(dtype: str) -> None:
    t, naive = handed("p06_batchnorm_stats", "naive", dtype)
    _, ported = handed("p06_batchnorm_stats", "ported", dtype)
    for out in (t, ported):
        np.testing.assert_allclose(out["running_mean"], [0.3, 0.2], rtol=1e-6)
        np.testing.assert_allclose(out["running_var"], [0.9 + 1 / 3, 0.9 + 0.1 * 14 / 3], rtol=1e-6)
        np.testing.assert_allclose(out["eval_out"], [[2.4312, 2.3951]], atol=5e-5)
    np.testing.assert_allclose(naive["running_mean"], [2.7, 1.8], rtol=1e-6)  # momentum=0.1 copied
    np.testing.assert_allclose(naive["running_var"], [2.35, 3.25], rtol=1e-6)
    # running statistics are not gradients: the training pass is identical
    np.testing.assert_allclose(naive["train_out"], t["train_out"], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(naive["grads/x"], t["grads/x"], rtol=1e-5, atol=1e-6)


def test_p06_momentum_alone_leaves_biased_variance() -> None:
    bn = nnx.BatchNorm(2, momentum=0.9, rngs=nnx.Rngs(0))  # 1 − m, without the N/(N−1) factor
    bn(jnp.array([[1.0, 2.0], [2.0, 0.0], [4.0, 1.0], [5.0, 5.0]]), use_running_average=False)
    np.testing.assert_allclose(np.asarray(bn.mean[...]), [0.3, 0.2], rtol=1e-6)
    np.testing.assert_allclose(np.asarray(bn.var[...]), [1.15, 1.25], rtol=1e-6)


# P07 Linear layout -------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
def test_p07_square_layer_wrong_loss_no_error(dtype: str) -> None:
    t, naive = handed("p07_linear_layout", "naive", dtype)
    _, ported = handed("p07_linear_layout", "ported", dtype)
    assert float(t["loss"]) == pytest.approx(3.996944, abs=1e-5)  # x Wᵀ + b: what torch computes
    assert float(ported["loss"]) == pytest.approx(3.996944, abs=1e-5)
    assert float(naive["loss"]) == pytest.approx(2.168056, abs=1e-5)  # x W + b, no error raised


def test_p07_non_square_layer_fails_loudly() -> None:
    rng = np.random.default_rng(1)
    arrays = {
        "x": rng.normal(size=(2, 3)),
        "y": rng.normal(size=(2, 4)),
        "state_dict/weight": rng.normal(size=(4, 3)),
        "state_dict/bias": rng.normal(size=4),
    }
    fx = fixtures.from_arrays("p07_linear_layout", arrays)
    assert set(lesson("torch", "p07_linear_layout").run(fx, "naive")) == {"loss", "pred", "grads/kernel", "grads/bias"}
    assert lesson("jax", "p07_linear_layout").run(fx, "ported")["grads/kernel"].shape == (3, 4)
    with pytest.raises(ValueError, match="'kernel' expected shape"):
        lesson("jax", "p07_linear_layout").run(fx, "naive")


@pytest.mark.parametrize("framework", ["torch", "jax"])
def test_p07_mse_refuses_broadcasting(framework: str) -> None:
    mod = lesson(framework, "p07_linear_layout")
    make = torch.zeros if framework == "torch" else jnp.zeros
    with pytest.raises(ValueError, match=r"mse: pred has shape \(4, 1\) but target has shape \(4,\)"):
        mod.mse(make((4, 1)), make((4,)))


# P08 GRU b_hn -------------------------------------------------------------------------------


def _p08_arrays(b_hn: tuple[float, float] | None = None, rows: int | None = None) -> dict[str, np.ndarray]:
    fx = fixtures.make("p08_gru_bias", "float64", case="handed")
    arrays = {k: np.array(v) for k, v in fx.items()}
    if b_hn is not None:
        arrays["state_dict/bias_hh"][4:] = b_hn
    if rows is not None:  # a checkpoint whose gate rows are not 3H
        for key in ("state_dict/weight_ih", "state_dict/weight_hh", "state_dict/bias_ih", "state_dict/bias_hh"):
            arrays[key] = arrays[key][:rows]
    return arrays


@pytest.mark.parametrize("dtype", DTYPES)
def test_p08_hidden_states_differ_with_b_hn(dtype: str) -> None:
    fx = fixtures.make("p08_gru_bias", dtype, case="handed")
    assert np.all(fx["state_dict/bias_hh"][4:] != 0)
    t, naive = handed("p08_gru_bias", "naive", dtype)
    assert np.max(np.abs(t["h"] - naive["h"])) == pytest.approx(0.0889, abs=1e-3)


def test_p08_naive_fold_is_exact_when_b_hn_is_zero() -> None:
    fx = fixtures.from_arrays("p08_gru_bias", _p08_arrays(b_hn=(0.0, 0.0)))
    t = lesson("torch", "p08_gru_bias").run(fx, "naive")
    j = lesson("jax", "p08_gru_bias").run(fx, "naive")
    want = oracle_outputs(fx.spec, fx, "ported")  # the right GRU, b_hn = 0
    for key in t:
        np.testing.assert_allclose(t[key], want[key], rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(j[key], t[key], rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("framework", ["torch", "jax"])
def test_p08_gate_rows_must_be_3h(framework: str) -> None:
    fx = fixtures.from_arrays("p08_gru_bias", _p08_arrays(rows=5))
    with pytest.raises(ValueError, match=r"G expected 3H = 6, got 5"):
        lesson(framework, "p08_gru_bias").run(fx, "ported")
