"""per_example_grads: the per-example gradients average to the batch gradient; DP-SGD clips each one before the sum."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
import torch
from conftest import case_result
from detach_parity.jax_impl import per_example_grads as jp
from detach_parity.shared.apps import selfcheck
from detach_parity.shared.core import fixtures
from detach_parity.shared.core.oracle import fd_grad
from detach_parity.shared.scenarios.per_example_grads import PARAMS, example_grads
from detach_parity.torch_impl import per_example_grads as tp


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_per_example_gradients_average_to_the_batch_gradient(dtype: str) -> None:
    out = case_result("per_example_grads", "dp_sgd", dtype, "random").outputs
    rtol, atol = (1e-13, 1e-15) if dtype == "float64" else (1e-5, 1e-7)
    for fw in ("torch", "jax"):
        for k in PARAMS:
            np.testing.assert_allclose(out[fw][f"per_example/{k}"].mean(0), out[fw][f"grads/{k}"], rtol=rtol, atol=atol)


def test_closed_form_oracle_is_the_finite_difference_gradient_of_each_example() -> None:
    a = fixtures.make("per_example_grads", "float64").float64()
    p = {k: a[f"params/{k}"] for k in PARAMS}
    per = example_grads(p, a["x"], a["y"])
    for i in range(len(a["y"])):

        def loss_i(q, i=i):
            h = np.tanh(a["x"][i] @ q["l1/kernel"] + q["l1/bias"])
            return 0.5 * float((h @ q["l2/kernel"] + q["l2/bias"])[0] - a["y"][i]) ** 2

        for k, g in fd_grad(loss_i, p).items():
            np.testing.assert_allclose(per[k][i], g, rtol=1e-8, atol=1e-10)


def test_dp_sgd_clips_each_example_before_the_sum() -> None:
    dp = case_result("per_example_grads", "dp_sgd", "float64", "random").outputs
    after = case_result("per_example_grads", "clip_after_sum", "float64", "random").outputs
    fx = fixtures.make("per_example_grads", "float64")
    c, sigma, b = fx.scalar("l2_norm_clip"), fx.scalar("noise_multiplier"), fx.dims["B"]
    for fw in ("torch", "jax"):
        norms = dp[fw]["norms"]
        assert 0 < int(dp[fw]["num_clipped"]) == int(np.sum(norms > c)) < b  # some clipped, some not
        factors = np.minimum(1.0, c / norms)
        for k in PARAMS:  # each example contributes at most C: the sum of the scaled gradients, plus the noise
            clipped = np.tensordot(factors, dp[fw][f"per_example/{k}"], axes=1)
            np.testing.assert_allclose(
                dp[fw][f"dp_grads/{k}"], (clipped + sigma * c * fx[f"noise/{k}"]) / b, rtol=1e-12
            )
        assert int(after[fw]["num_clipped"]) == 1  # the summed gradient is longer than C
        gap = max(np.max(np.abs(dp[fw][f"dp_grads/{k}"] - after[fw][f"dp_grads/{k}"])) for k in PARAMS)
        assert gap > 1e-2  # not the same step


def test_torch_func_grad_of_an_unused_parameter_is_zero_and_clip_grad_norm_adds_1e_6() -> None:
    """Two claims of the porting notes: functional_call forgotten -> zeros, silently; torch's clip is not optax's."""
    model = torch.nn.Linear(2, 1, dtype=torch.float64)
    params = dict(model.named_parameters())
    grads = torch.func.grad(lambda p, x: model(x).sum())(params, torch.ones(1, 2, dtype=torch.float64))
    assert all(torch.all(g == 0) for g in grads.values())
    g = torch.tensor([3.0, 4.0], dtype=torch.float64)  # norm 5, clipped to 1
    w = torch.nn.Parameter(torch.zeros(2, dtype=torch.float64))
    w.grad = g.clone()
    torch.nn.utils.clip_grad_norm_([w], max_norm=1.0)
    with jax.enable_x64(True):
        ref = np.asarray(optax.clip_by_global_norm(1.0).update(jnp.asarray(g.numpy()), None)[0])
    np.testing.assert_allclose(ref, [0.6, 0.8], rtol=1e-15)
    np.testing.assert_allclose(w.grad.numpy(), ref * 5.0 / (5.0 + 1e-6), rtol=1e-15)
    assert np.max(np.abs(w.grad.numpy() - ref)) > 1e-8  # far above float64 parity


@pytest.mark.parametrize("impl", [tp, jp], ids=["torch", "jax"])
def test_inputs_and_targets_of_different_batch_are_refused(impl) -> None:
    fx = fixtures.make("per_example_grads", "float32")
    lib = torch.tensor if impl is tp else jnp.asarray
    x, y = lib(np.array(fx["x"])), lib(np.array(fx["y"])[:-1])
    b = fx.dims["B"]
    with pytest.raises(
        ValueError, match=rf"per_example_grads: x_batch has shape \({b},\) but y has shape \({b - 1},\)"
    ):
        impl.per_example_grads(impl.build_model(fx), x, y)
    with pytest.raises(ValueError, match="variant expected one of"):
        impl.dp_gradient({}, {}, {}, "dp")


def test_torch_per_example_and_dp_gradients_carry_no_graph() -> None:
    """torch.func's idiom detaches the parameters; the noise is data: the DP step's gradient is a plain tensor."""
    fx = fixtures.make("per_example_grads", "float32")
    model = tp.build_model(fx)
    x, y = torch.tensor(np.array(fx["x"])), torch.tensor(np.array(fx["y"]))
    per_example = tp.per_example_grads(model, x, y)
    assert not any(g.requires_grad for g in per_example.values())
    noise = {
        k: torch.tensor(np.random.default_rng(0).normal(size=tuple(g.shape[1:])), dtype=torch.float32)
        for k, g in per_example.items()
    }
    dp, _ = tp.dp_gradient(per_example, noise, {"l2_norm_clip": 1.0, "noise_multiplier": 0.5}, "dp_sgd")
    assert not any(g.requires_grad for g in dp.values())
    out = tp.run(fx, "dp_sgd")
    assert out["dp_grads/l2/bias"].dtype == np.float32


def test_selfcheck_finds_the_per_example_sites(tmp_path) -> None:
    """functional_call -> the module's own parameters; l2_norm_clip -> inf (no clipping): each a mutant."""
    for side in ("torch_impl", "jax_impl"):
        (tmp_path / side).mkdir()
    src = "p = torch.func.functional_call(m, params, (x[None],))\nc = clip(g, l2_norm_clip=c)\n"
    (tmp_path / "torch_impl" / "demo.py").write_text(src, encoding="utf-8")
    found = [(s.construct, s.original, s.replacement) for s in selfcheck.find_sites(tmp_path)]
    assert found == [
        ("functional_call(model, params, args)", "torch.func.functional_call(m, params, (x[None],))", "m(x[None])"),
        ("l2_norm_clip= (per-example clipping)", "c", 'float("inf")'),
    ]
