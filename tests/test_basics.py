"""basics: framework semantics of detach() vs stop_gradient, beyond the parity numbers."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from conftest import case_result
from detach_parity.jax_impl import basics as jb
from detach_parity.torch_impl import basics as tb


def test_article_values_and_lesson() -> None:
    stopped = case_result("basics", "z_stopped", "float64", "article")
    none = case_result("basics", "none", "float64", "article")
    # exact: sums and products of small integers are exact in IEEE arithmetic on every CPU; 0 is the stop itself
    for r in (stopped, none):
        np.testing.assert_array_equal(r.outputs["torch"]["z"], [2.0, 4.0, 6.0])
        np.testing.assert_array_equal(r.outputs["jax"]["z"], [2.0, 4.0, 6.0])
    np.testing.assert_array_equal(stopped.outputs["torch"]["grads/x_via_z"], [0.0, 0.0, 0.0])
    np.testing.assert_array_equal(none.outputs["jax"]["grads/x_via_z"], [2.0, 2.0, 2.0])
    np.testing.assert_array_equal(stopped.outputs["jax"]["grads/x_total"], [2.0, 2.0, 2.0])
    np.testing.assert_array_equal(none.outputs["torch"]["grads/x_total"], [4.0, 4.0, 4.0])


def test_torch_flags_and_grad_fn() -> None:
    x = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
    y, z = tb.forward(x, "z_stopped")
    assert y.requires_grad and y.grad_fn is not None
    assert not z.requires_grad and z.grad_fn is None and z.is_leaf


def test_torch_detach_shares_storage() -> None:
    x = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
    y, z = tb.forward(x, "z_stopped")
    assert z.data_ptr() == y.data_ptr()
    z[0] = 100.0  # an in-place write through the detached tensor shows in y
    assert y.tolist() == [100.0, 4.0, 6.0]


def test_torch_backward_on_detached_raises() -> None:
    x = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
    _, z = tb.forward(x, "z_stopped")
    with pytest.raises(RuntimeError, match="element 0 of tensors does not require grad and does not have a grad_fn"):
        z.sum().backward()


def test_jax_same_program_is_silently_zero() -> None:
    x = jnp.array([1.0, 2.0, 3.0])
    g = jax.grad(lambda v: jnp.sum(jb.forward(v, "z_stopped")[1]))(x)
    np.testing.assert_array_equal(np.asarray(g), [0.0, 0.0, 0.0])  # exact: the stop itself


def test_run_rejects_bad_variant_and_foreign_fixture() -> None:
    from detach_parity.shared.core import fixtures

    fx = fixtures.make("basics", "float64")
    for run in (tb.run, jb.run):
        with pytest.raises(ValueError, match=r"variant expected one of \['z_stopped', 'none'\], got 'detach'"):
            run(fx, "detach")
        with pytest.raises(ValueError, match="expected a fixture of 'basics', got one of 'linear_regression'"):
            run(fixtures.make("linear_regression", "float64"), "none")
