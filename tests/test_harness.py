"""The comparator, the lesson checker and the oracle's finite differences can fail, and say why."""

from __future__ import annotations

import numpy as np
import pytest

from shared import oracle
from shared.parity import Tolerance, check_pattern, compare

TOL = Tolerance(rtol=1e-10, atol=1e-12)
A = {"grads/w": np.array([1.0, 2.0]), "loss": np.array(0.5)}


def test_identical_outputs_pass() -> None:
    c = compare(A, {k: v.copy() for k, v in A.items()}, TOL, label="demo[v]", names=("torch", "jax"))
    assert c.ok and c.max_abs == 0 and len(c.leaves) == 2


@pytest.mark.parametrize(
    "a, b, message",
    [
        ({}, {}, r"demo\[v\]: empty outputs \(torch: 0 keys, jax: 0 keys\)"),
        (A, {}, r"empty outputs"),
        (A, {"loss": np.array(0.5)}, r"keys only in torch: \['grads/w'\]"),
        ({"loss": np.array(0.5)}, A, r"keys only in jax: \['grads/w'\]"),
        (A, {**A, "grads/w": np.array([[1.0, 2.0]])}, r"demo\[v\]\.grads\['w'\]: shape torch \(2,\) != jax \(1, 2\)"),
        (A, {**A, "grads/w": np.array([1.0, 2.0], np.float32)}, r"dtype torch float64 != jax float32"),
        (A, {**A, "grads/w": np.array([1.0, np.nan])}, r"non-finite values \(torch: 0, jax: 1\)"),
        ({**A, "grads/w": np.array([np.nan, 2.0])}, {**A, "grads/w": np.array([np.nan, 2.0])}, r"non-finite"),
        (
            A,
            {**A, "grads/w": np.array([1.0, 2.0 + 1e-8])},
            r"demo\[v\]\.grads\['w'\]: max\|torch-jax\| = 1e-08 > 2.01e-10",
        ),
        ({"n": np.zeros(0)}, {"n": np.zeros(0)}, r"empty array"),
        ({"a": np.array([1, 2])}, {"a": np.array([1, 3])}, r"exact comparison"),
    ],
)
def test_mismatches_fail_with_named_leaf(a, b, message: str) -> None:
    c = compare(a, b, TOL, label="demo[v]", names=("torch", "jax"))
    assert not c.ok
    with pytest.raises(AssertionError, match=message):
        c.assert_ok()


def test_declared_nonfinite_must_match_positions() -> None:
    a = {"p": np.array([np.nan, 1.0])}
    assert compare(a, {"p": np.array([np.nan, 1.0])}, TOL, nonfinite_ok=("p",)).ok
    assert not compare(a, {"p": np.array([1.0, np.nan])}, TOL, nonfinite_ok=("p",)).ok


def test_pattern_checks() -> None:
    out = {"grads/trunk/kernel": np.zeros((2, 2)), "grads/head/kernel": np.ones(2)}
    assert check_pattern(out, [("grads/trunk/*", "zero"), ("grads/head/*", "nonzero")]) == []
    problems = check_pattern(out, [("grads/trunk/*", "nonzero"), ("grads/head/*", "zero")])
    assert len(problems) == 2 and "expected exactly zero" in problems[1]
    # tiny is not zero: a stopped path gives exact zeros
    assert check_pattern({"g": np.array([1e-30])}, [("g", "zero")])
    # a rule that matches nothing is a failure, never a vacuous pass
    assert "matches no output key" in check_pattern(out, [("grads/renamed/*", "zero")])[0]
    assert check_pattern(out, []) == ["outputs: no expected pattern declared"]
    assert check_pattern({"g": np.array([np.nan])}, [("g", "nonzero")])


def test_fd_grad_matches_closed_form() -> None:
    rng = np.random.default_rng(0)
    w, x = rng.normal(size=3), rng.normal(size=(4, 3))
    g = oracle.fd_grad(lambda p: float(np.sum(np.tanh(x @ p["w"]) ** 2)), {"w": w})["w"]
    t = np.tanh(x @ w)
    np.testing.assert_allclose(g, x.T @ (2 * t * (1 - t**2)), rtol=1e-9, atol=1e-12)


def test_fd_grad_is_exactly_zero_for_a_constant_path() -> None:
    g = oracle.fd_grad(lambda p: 1.2345 + 0.0 * 0, {"w": np.array([0.3, -2.0])})["w"]
    assert np.all(g == 0.0)


def test_fd_jacobian_shape_and_value() -> None:
    x = np.array([0.5, -1.0])
    jac = oracle.fd_jacobian(lambda v: np.array([v[0] * v[1], v[0] ** 2, np.sin(v[1])]), x)
    np.testing.assert_allclose(jac, [[-1.0, 0.5], [1.0, 0.0], [0.0, np.cos(-1.0)]], rtol=1e-9, atol=1e-12)
