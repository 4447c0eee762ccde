"""no_grad_inference: same values, no graph; what differs between the torch idioms, and why JAX needs none."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from conftest import assert_same_to_rounding, case_result
from detach_parity.jax_impl import no_grad_inference as jn
from detach_parity.shared.core import fixtures
from detach_parity.torch_impl import no_grad_inference as tn
from flax import nnx

VARIANTS = ("no_grad", "inference_mode", "detach")


def _torch_validate(variant: str, dtype: str = "float64"):
    fx = fixtures.make("no_grad_inference", dtype)
    model = tn.build_model(fx)
    x, labels = torch.from_numpy(np.array(fx["x"])), torch.from_numpy(np.array(fx["labels"]))
    return model, x, labels, tn.validate(model, x, labels, variant)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_three_idioms_give_the_values_of_the_grad_mode_forward(dtype: str) -> None:
    outs = {v: case_result("no_grad_inference", v, dtype, "random").outputs for v in VARIANTS}
    model, x, labels, _ = _torch_validate("no_grad", dtype)
    plain = model(x)  # grad mode: a graph is recorded, values are the same
    assert plain.grad_fn is not None
    for fw in ("torch", "jax"):
        for v in VARIANTS:
            for key, value in outs["no_grad"][fw].items():  # three variants: three programs, to rounding
                assert_same_to_rounding(outs[v][fw][key], value, f"{fw} {v} {key} against no_grad")
    assert_same_to_rounding(outs["detach"]["torch"]["logits"], plain.detach().numpy(), "detach against grad mode")


@pytest.mark.parametrize("variant", VARIANTS)
def test_torch_result_has_no_graph(variant: str) -> None:
    _, _, _, (logits, loss) = _torch_validate(variant)
    for t in (logits, loss):
        assert t.grad_fn is None and not t.requires_grad and t.is_leaf
    assert torch.is_inference(logits) == (variant == "inference_mode")


def test_inference_tensor_later_used_in_autograd_raises_no_grad_tensor_does_not() -> None:
    """C09: an inference-mode result cannot be saved for backward; a no_grad (or detached) one can."""
    w = torch.ones(3, dtype=torch.float64, requires_grad=True)
    _, _, _, (logits, _) = _torch_validate("inference_mode")
    with pytest.raises(RuntimeError, match="Inference tensors cannot be saved for backward"):
        (logits * w).sum().backward()
    for variant in ("no_grad", "detach"):
        w.grad = None
        _, _, _, (logits, _) = _torch_validate(variant)
        (logits * w).sum().backward()  # a constant factor: d/dw sum(logits * w) = logits.sum(0)
        np.testing.assert_allclose(w.grad.numpy(), logits.sum(0).numpy(), rtol=1e-15)


def test_jax_validation_result_enters_a_later_grad_freely() -> None:
    fx = fixtures.make("no_grad_inference", "float64")
    with jax.enable_x64(True):
        model = jn.build_model(fx)
        logits, _ = jn.validate(model, jnp.asarray(fx["x"]), jnp.asarray(fx["labels"]), "no_grad")
        g = jax.grad(lambda w: jnp.sum(logits * w))(jnp.ones(3))
    np.testing.assert_allclose(np.asarray(g), np.asarray(logits).sum(0), rtol=1e-15)


def test_grad_recorded_flag_can_say_one() -> None:
    """Positive controls: torch's grad-mode forward, and the JAX forward inside jax.grad, are recorded."""
    model, x, labels, _ = _torch_validate("no_grad")
    assert tn.grad_recorded(model(x)) == 1
    fx = fixtures.make("no_grad_inference", "float32")
    model_j = jn.build_model(fx)
    seen = []

    def loss(model):
        logits, value = jn.validate(model, jnp.asarray(fx["x"]), jnp.asarray(fx["labels"]), "no_grad")
        seen.append(jn.grad_recorded(logits))
        return value

    nnx.grad(loss)(model_j)
    assert seen == [1]


def test_jax_detach_variant_cuts_inside_a_grad() -> None:
    """The JAX "detach" port is stop_gradient: differentiated through, the loss gives every parameter 0."""
    fx = fixtures.make("no_grad_inference", "float32")
    grads = nnx.grad(lambda m: jn.validate(m, jnp.asarray(fx["x"]), jnp.asarray(fx["labels"]), "detach")[1])(
        jn.build_model(fx)
    )
    leaves = jax.tree.leaves(grads)
    assert leaves and all(np.all(np.asarray(g) == 0) for g in leaves)


def test_detach_records_then_cuts_no_grad_saves_nothing() -> None:
    """C20: same values and flags, but detach builds the graph (tensors saved for backward) before cutting."""
    saved = {}
    for variant in VARIANTS:
        count: list[int] = []
        with torch.autograd.graph.saved_tensors_hooks(lambda t, count=count: count.append(1) or t, lambda t: t):
            _torch_validate(variant)
        saved[variant] = len(count)
    assert saved["no_grad"] == saved["inference_mode"] == 0 < saved["detach"]


def test_no_grad_is_not_detach_everywhere() -> None:
    """C20: requires_grad=True inside no_grad still requires grad; in-place rules differ by mode."""
    w = torch.ones(3, requires_grad=True)
    with torch.no_grad():
        fresh = torch.zeros(2, requires_grad=True)
        w.add_(1.0)  # allowed: this is how optimizers step
        view = w[:2]
    assert fresh.requires_grad and w.tolist() == [2.0, 2.0, 2.0]
    with pytest.raises(RuntimeError, match="a leaf Variable that requires grad is being used in an in-place operation"):
        w.add_(1.0)
    with pytest.raises(RuntimeError, match="A view was created in no_grad mode and is being modified inplace"):
        view.mul_(2.0)


def test_validate_rejects_unknown_variant() -> None:
    model, x, labels, _ = _torch_validate("no_grad")
    msg = r"no_grad_inference: variant expected one of \['no_grad', 'inference_mode', 'detach'\], got 'eval'"
    with pytest.raises(ValueError, match=msg):
        tn.validate(model, x, labels, "eval")
    fx = fixtures.make("no_grad_inference", "float32")
    with pytest.raises(ValueError, match=msg):
        jn.validate(jn.build_model(fx), jnp.asarray(fx["x"]), jnp.asarray(fx["labels"]), "eval")
