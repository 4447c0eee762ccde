"""data_vs_detach: the torch hazards (a raise, a silent wrong gradient) and JAX's immutable arrays."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from conftest import assert_same_to_rounding, case_result
from detach_parity.jax_impl import data_vs_detach as jd
from detach_parity.shared.core import fixtures
from detach_parity.torch_impl import data_vs_detach as td


def true_grad(dtype: str) -> np.ndarray:
    a = fixtures.make("data_vs_detach", dtype).float64()
    s = 1.0 / (1.0 + np.exp(-a["x"]))
    return a["c"] * s * (1.0 - s)  # c·σ'(x), closed form


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_data_write_gives_silently_wrong_gradient_in_torch_only(dtype: str) -> None:
    r = case_result("data_vs_detach", "data_inplace", dtype, "random").outputs
    right = true_grad(dtype)
    assert np.min(np.abs(right)) > 1e-2  # the right gradient is far from 0 everywhere
    np.testing.assert_array_equal(r["torch"]["grads/x"], 0.0)  # wrong, and no error was raised
    np.testing.assert_array_equal(r["torch"]["out_after_write"], 0.0)  # .data wrote through to out
    np.testing.assert_allclose(r["jax"]["grads/x"], right, rtol=1e-6)  # JAX: the same program is right
    np.testing.assert_array_equal(r["jax"]["out_after_write"], r["jax"]["out"])  # exact: an immutable array, untouched
    # the oracle of data_inplace is torch's wrong value, the right one is detach_clone's
    clone = case_result("data_vs_detach", "detach_clone", dtype, "random").outputs
    np.testing.assert_allclose(clone["oracle"]["grads/x"], right, rtol=1e-15)
    np.testing.assert_array_equal(r["oracle"]["grads/x"], 0.0)  # exact: the oracle computes torch's zero


def test_detach_inplace_write_makes_backward_raise() -> None:
    x = torch.tensor([0.5, -1.0, 2.0], requires_grad=True)
    with pytest.raises(RuntimeError, match="modified by an inplace operation") as err:
        td.step(x, torch.ones(3), "detach_inplace")
    assert "output 0 of Sigmoid" in str(err.value) and "is at version 1; expected version 0" in str(err.value)


def test_version_counter_is_what_tells_them_apart() -> None:
    x = torch.tensor([0.5, -1.0, 2.0], requires_grad=True)
    out = torch.sigmoid(x)
    td.write_zeros(out, "data_inplace")
    assert out._version == 0 and out.tolist() == [0.0, 0.0, 0.0]  # written, and autograd cannot tell
    out = torch.sigmoid(x)
    td.write_zeros(out, "detach_inplace")
    assert out._version == 1 and out.tolist() == [0.0, 0.0, 0.0]  # written, and recorded
    out = torch.sigmoid(x)
    snap = td.write_zeros(out, "detach_clone")
    assert out._version == 0 and snap.data_ptr() != out.data_ptr() and min(out.tolist()) > 0.1


def test_clone_gives_right_gradient_and_leaves_out_untouched() -> None:
    r = case_result("data_vs_detach", "detach_clone", "float64", "random").outputs
    for fw in ("torch", "jax"):
        np.testing.assert_allclose(r[fw]["grads/x"], true_grad("float64"), rtol=1e-14)
        np.testing.assert_array_equal(r[fw]["out_after_write"], r[fw]["out"])  # exact: the write never reached out


def test_jax_every_spelling_is_the_same_safe_program() -> None:
    x, c = jnp.asarray([0.5, -1.0, 2.0]), jnp.asarray([1.0, 2.0, 0.5])
    results = [jd.step(x, c, how) for how in ("detach_clone", "data_inplace", "detach_inplace")]
    for loss, grad, before, written, after in results:
        assert_same_to_rounding(loss, results[0][0], "three spellings: one loss")
        np.testing.assert_array_equal(np.asarray(written), 0.0)  # exact: zeros were written
        np.testing.assert_array_equal(np.asarray(after), np.asarray(before))  # exact: the original is untouched
        assert_same_to_rounding(grad, results[0][1], "three spellings: one gradient")
        assert np.all(np.asarray(grad) > 0.05)


def test_unknown_spelling_is_refused() -> None:
    for mod, arr in ((td, torch.zeros(3)), (jd, jnp.zeros(3))):
        with pytest.raises(ValueError, match=r"how expected one of \['detach_clone', .*\], got 'data'"):
            mod.write_zeros(arr, "data")


def test_write_zeros_handles_are_cut_from_the_graph() -> None:
    """Every handle is stopped; only detach_inplace shares out's storage and version counter.

    The write is never recorded in out's graph (grad_fn stays SigmoidBackward0): the version
    bump alone is what makes the later backward raise.
    """
    for how, shares in (("detach_clone", False), ("detach_inplace", True)):
        out = torch.sigmoid(torch.tensor([1.0, 2.0], dtype=torch.float64, requires_grad=True))
        written = td.write_zeros(out, how)
        assert (written.requires_grad, written.grad_fn) == (False, None), how
        assert (written.data_ptr() == out.data_ptr(), out._version) == (shares, int(shares)), how
        assert type(out.grad_fn).__name__ == "SigmoidBackward0", how


def test_jax_write_has_no_gradient_path_from_out() -> None:
    """JAX twin: the functional write overwrites every entry, so written is stopped without stop_gradient."""
    x = jnp.array([1.0, 2.0])
    for how in ("detach_clone", "data_inplace", "detach_inplace"):
        jac = jax.jacobian(lambda v, how=how: jd.write_zeros(jax.nn.sigmoid(v), how))(x)
        np.testing.assert_array_equal(np.asarray(jac), np.zeros((2, 2)))  # exact: a written constant has no derivative
