"""feature_stats: monitoring leaves the gradient unchanged; the std convention trap, measured exactly."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from conftest import assert_same_to_rounding, case_result
from detach_parity.jax_impl import feature_stats as jf
from detach_parity.shared.core import fixtures
from detach_parity.shared.core.runner import oracle_outputs
from detach_parity.torch_impl import feature_stats as tf

GRADS = ("grads/encoder/kernel", "grads/encoder/bias", "grads/head/kernel", "grads/head/bias")


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_monitoring_leaves_the_gradient_unchanged(dtype: str) -> None:
    fx = fixtures.make("feature_stats", dtype)
    for mod, arr in ((tf, torch.tensor), (jf, jnp.asarray)):
        with jax.enable_x64(dtype == "float64"):  # as jax_impl's scenario_run: a float64 run computes in float64
            x, y = arr(np.array(fx["x"])), arr(np.array(fx["y"]))
            _, with_stats, stats = mod.train_step(mod.build_model(fx), x, y, "ported", monitor=True)
            _, without, none = mod.train_step(mod.build_model(fx), x, y, "ported", monitor=False)
        assert stats is not None and none is None
        if mod is jf:
            with_stats, without = jf.grads_of(with_stats), jf.grads_of(without)
        assert set(with_stats) == set(without) and len(with_stats) == 4
        for k in with_stats:
            assert np.asarray(with_stats[k]).dtype == np.dtype(dtype)
            assert_same_to_rounding(with_stats[k], without[k], f"{k}: with and without monitoring (two programs)")


def test_naive_port_is_smaller_by_the_exact_factor() -> None:
    b = fixtures.make("feature_stats", "float64").dims["B"]
    r = case_result("feature_stats", "naive_ddof0", "float64", "random").outputs
    ratio = r["jax"]["stats/std"] / r["torch"]["stats/std"]
    np.testing.assert_allclose(ratio, np.sqrt((b - 1) / b), rtol=1e-14)  # 0.894 at B = 5
    # and nothing else differs: the trap is confined to the monitored std
    for k in (*GRADS, "loss", "stats/mean"):
        np.testing.assert_allclose(r["jax"][k], r["torch"][k], rtol=1e-12, atol=1e-15)


def test_population_and_unbiased_related_by_sqrt_b_over_b_minus_1() -> None:
    b = fixtures.make("feature_stats", "float64").dims["B"]
    pop = case_result("feature_stats", "population", "float64", "random").outputs
    unb = case_result("feature_stats", "ported", "float64", "random").outputs
    for fw in ("torch", "jax"):
        np.testing.assert_allclose(pop[fw]["stats/std"] * np.sqrt(b / (b - 1)), unb[fw]["stats/std"], rtol=1e-14)


def test_detach_features_stops_encoder_keeps_head_gradient() -> None:
    det = case_result("feature_stats", "detach_features", "float64", "random").outputs
    ported = case_result("feature_stats", "ported", "float64", "random").outputs
    for fw in ("torch", "jax"):
        np.testing.assert_array_equal(det[fw]["grads/encoder/kernel"], 0.0)  # exact: the stop itself
        assert np.max(np.abs(ported[fw]["grads/encoder/kernel"])) > 1e-3  # what detaching promptly costs
        for key in ("grads/head/kernel", "stats/std"):  # two variants: the same values to rounding
            assert_same_to_rounding(det[fw][key], ported[fw][key], f"{fw} {key}")


def test_p01_hand_values() -> None:
    # P01: std over the last axis of x; feature_stats reduces over axis 0, hence x.T
    x = np.array([[3.4, 5.6, 7.8], [2.0, 3.0, 4.0], [0.1, 0.2, 0.3]]).T
    _, t_std = tf.feature_stats(torch.tensor(x), "ported")
    _, j_std = jf.feature_stats(jnp.asarray(x, dtype=jnp.float32), "ported")
    _, naive = jf.feature_stats(jnp.asarray(x, dtype=jnp.float32), "naive_ddof0")
    np.testing.assert_allclose(t_std.numpy(), [2.2, 1.0, 0.1], rtol=1e-12)
    np.testing.assert_allclose(np.asarray(j_std), [2.2, 1.0, 0.1], rtol=1e-6)
    np.testing.assert_allclose(np.asarray(naive), [1.7963, 0.8165, 0.0816], atol=5e-5)
    np.testing.assert_allclose(t_std.numpy() / np.asarray(naive), np.sqrt(3 / 2), rtol=1e-6)


def test_single_sample_std_is_nan_and_gradient_stays_finite() -> None:
    """Decision: the port keeps torch's NaN (the unbiased std of one sample is undefined)."""
    fx = fixtures.make("feature_stats", "float64")
    one = fixtures.from_arrays("feature_stats", {k: np.array(v[:1] if k in ("x", "y") else v) for k, v in fx.items()})
    with pytest.warns(UserWarning, match="degrees of freedom is <= 0"):
        t = tf.run(one, "ported")
    j = jf.run(one, "ported")
    assert np.all(np.isnan(t["stats/std"])) and np.all(np.isnan(j["stats/std"]))
    np.testing.assert_array_equal(jf.run(one, "naive_ddof0")["stats/std"], 0.0)  # jnp ddof=0: 0, not NaN
    want = oracle_outputs(one.spec, one, "ported")
    for k in GRADS:  # a NaN statistic of stopped features never reaches the gradient
        assert np.all(np.isfinite(t[k])) and np.any(t[k] != 0)
        np.testing.assert_allclose(t[k], want[k], rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(j[k], t[k], rtol=1e-12, atol=1e-15)


def test_mse_refuses_broadcasting() -> None:
    for mod, arr in ((tf, torch.zeros), (jf, jnp.zeros)):
        with pytest.raises(ValueError, match=r"mse: pred has shape \(4, 2\) but y has shape \(4,\)"):
            mod.mse(arr((4, 2)), arr((4,)))


def test_monitoring_statistics_carry_no_graph() -> None:
    """The statistics are read from stopped features: no graph node, nothing to backpropagate."""
    fx = fixtures.make("feature_stats", "float64")
    x, y = torch.tensor(np.array(fx["x"])), torch.tensor(np.array(fx["y"]))
    _, _, stats = tf.train_step(tf.build_model(fx), x, y, "ported", monitor=True)
    assert [(s.requires_grad, s.grad_fn) for s in stats] == [(False, None), (False, None)]


def test_jax_monitoring_statistics_have_no_gradient_path() -> None:
    """JAX twin: differentiated through, the statistics give the features a zero gradient."""
    features = jnp.array([[0.1, -0.4], [0.7, 0.2], [-0.3, 0.5]])
    g = jax.grad(lambda f: sum(jnp.sum(s) for s in jf.feature_stats(f, "ported")))(features)
    np.testing.assert_array_equal(np.asarray(g), np.zeros((3, 2)))  # exact: the stop itself
