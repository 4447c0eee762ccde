"""gradient_reversal: −λ times the domain gradient, the clipped cotangent, and the traps of custom backward rules."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from conftest import assert_same_to_rounding, case_result
from detach_parity.jax_impl import gradient_reversal as jgr
from detach_parity.shared.core import fixtures
from detach_parity.torch_impl import gradient_reversal as tgr

FRAMEWORKS = ("torch", "jax")


def _out(variant: str) -> dict:
    return case_result("gradient_reversal", variant, "float64", "random").outputs


def test_features_receive_minus_lambda_times_the_domain_gradient() -> None:
    lam = fixtures.make("gradient_reversal", "float64").scalar("lam")
    rev, plain = _out("reversal"), _out("no_reversal")
    for fw in FRAMEWORKS:
        np.testing.assert_allclose(rev[fw]["feature_grads/received"], -lam * rev[fw]["feature_grads/head"], rtol=1e-15)
        for k in ("feature/kernel", "feature/bias"):  # the whole feature extractor: −λ × the plain multi-task gradient
            np.testing.assert_allclose(
                rev[fw][f"grads/domain_loss/{k}"], -lam * plain[fw][f"grads/domain_loss/{k}"], rtol=1e-12, err_msg=fw
            )
        for k in ("domain/kernel", "domain/bias", "label/kernel", "feature/bias"):  # the rest is untouched
            key = f"grads/{'label_loss' if k.startswith(('label', 'feature')) else 'domain_loss'}/{k}"
            assert_same_to_rounding(
                rev[fw][key], plain[fw][key], f"{fw} {key}: untouched by the reversal (two variants)"
            )


def test_clipped_cotangent_is_clipped_elementwise() -> None:
    fx = fixtures.make("gradient_reversal", "float64")
    lo, hi = fx.scalar("clip_lo"), fx.scalar("clip_hi")
    out = _out("clipped")
    for fw in FRAMEWORKS:
        head, received = out[fw]["feature_grads/head"], out[fw]["feature_grads/received"]
        np.testing.assert_array_equal(
            received, np.clip(head, lo, hi), err_msg=fw
        )  # exact: clip selects values of one run
        inside = (head >= lo) & (head <= hi)
        assert inside.any() and (~inside).any(), f"{fw}: the fixture should clip some entries and not others"


def test_torch_function_works_under_torch_func_but_has_no_forward_mode() -> None:
    x, lam = torch.tensor([0.5, -2.0], dtype=torch.float64), torch.tensor(0.3, dtype=torch.float64)
    g = torch.func.grad(lambda v: (tgr.reverse_gradient(v, lam) ** 2).sum())(x)  # setup_context makes this legal
    torch.testing.assert_close(g, -0.3 * 2 * x)
    with pytest.raises(RuntimeError, match="jvp"):
        torch.func.jvp(lambda v: tgr.reverse_gradient(v, lam), (x,), (torch.ones_like(x),))


def test_jax_custom_vjp_cannot_be_forward_differentiated_and_needs_one_cotangent_per_primal() -> None:
    x, lam = jnp.array([0.5, -2.0]), jnp.array(0.3)
    g = jax.grad(lambda v: (jgr.reverse_gradient(v, lam) ** 2).sum())(x)
    np.testing.assert_allclose(g, -0.3 * 2 * np.asarray(x), rtol=1e-6)
    with pytest.raises(TypeError, match="can't apply forward-mode autodiff"):
        jax.jvp(lambda v: jgr.reverse_gradient(v, lam), (x,), (jnp.ones_like(x),))

    @jax.custom_vjp
    def short(v, weight):
        return v

    short.defvjp(lambda v, weight: (v, weight), lambda weight, ct: -weight * ct)  # a bare array, not a 2-tuple
    with pytest.raises(TypeError, match="must produce a tuple of length equal to the number of arguments"):
        jax.grad(lambda v: short(v, lam).sum())(x)


@pytest.mark.parametrize("module", [tgr, jgr], ids=FRAMEWORKS)
def test_bad_input(module) -> None:
    with pytest.raises(ValueError, match="gradient_reversal: variant expected one of .*got 'grl'"):
        module.domain_input(None, {}, "grl")
    lib = torch if module is tgr else jnp
    with pytest.raises(ValueError, match=r"domain_input: lam expected a number in \[0, inf\], got -0.5"):
        module.domain_input(lib.zeros(3), {"lam": lib.asarray(-0.5)}, "reversal")
    arrays = {k: np.array(v) for k, v in fixtures.make("gradient_reversal", "float64").items()}
    arrays["clip_lo"] = np.array(arrays["clip_hi"] + 1.0)
    with pytest.raises(ValueError, match="field 'clip_lo' expected < clip_hi"):
        fixtures.from_arrays("gradient_reversal", arrays)
