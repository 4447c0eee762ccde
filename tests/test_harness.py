"""The comparator, the lesson checker and the oracle's finite differences can fail, and say why."""

from __future__ import annotations

import re

import numpy as np
import pytest
from detach_parity.shared.core import oracle
from detach_parity.shared.core.parity import Tolerance, check_pattern, compare

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
            r"demo\[v\]\.grads\['w'\]: \|torch-jax\| = 1e-08 > 2.01e-10 at \[1\] \(rtol=1e-10 atol=1e-12 per element",
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


def test_fd_grad_is_right_next_to_a_kink_and_refuses_to_guess_on_one() -> None:
    """A kink inside the first step (h·max(1, |x|) = 1e-3) used to average both slopes (CI, gradient_penalty seed 3701:
    ‖g‖ = |w|·c with w = 4.95e-4 gave 0.56 of the gradient); the step is refined until f is smooth."""
    for w in (4.95e-4, -1.5e-3, 3e-5):
        g = oracle.fd_grad(lambda p: float(abs(p["w"][0]) * 2.5 + np.maximum(p["w"][1], 0.0)), {"w": np.array([w, w])})
        np.testing.assert_allclose(g["w"], [2.5 * np.sign(w), float(w > 0)], rtol=1e-12, atol=0)
    jac = oracle.fd_jacobian(lambda v: np.abs(v) * 3.0, np.array([-2e-4, 7e-4]))
    np.testing.assert_allclose(jac, np.diag([-3.0, 3.0]), rtol=1e-12)
    # on the kink the derivative is each framework's convention, not a limit: an error naming the entry
    with pytest.raises(ValueError, match=r"not smooth at 'w'\[1\] = 0 .*on a kink"):
        oracle.fd_grad(lambda p: float(np.sum(np.maximum(p["w"], 0.0))), {"w": np.array([0.5, 0.0])})
    with pytest.raises(ValueError, match=r"not smooth at x\[0\] = 0"):
        oracle.fd_jacobian(np.abs, np.array([0.0, 1.0]))


def test_fd_grad_refines_a_strongly_curved_loss() -> None:
    """Cosine similarity of short vectors: smooth, but h = 1e-3 was off by 3e-4 relative (siamese_stop seed 101)."""
    x, t = np.array([3e-2, -1e-2, 2e-2]), np.array([0.4, 0.9, -0.2])

    def cos(v):
        return float(v @ t / (np.linalg.norm(v) * np.linalg.norm(t)))

    n = np.linalg.norm(x)
    exact = t / (n * np.linalg.norm(t)) - cos(x) * x / n**2
    np.testing.assert_allclose(oracle.fd_grad(lambda p: cos(p["x"]), {"x": x})["x"], exact, rtol=1e-9)


def test_fd_grad_judges_smoothness_and_rounding_at_the_functions_own_scale() -> None:
    """An adversarial pass: a threshold of 1e-6·(1 + |f'|) let a function of size 1e-6 hide its kinks (1.0 relative
    error), and 3e6 + f returned rounding noise (3e-7) silently; the scale is now the gradient's own."""
    x = np.array([0.4, -0.7])
    for c in (1e-6, 1e-9):  # a kink 3e-4 from the point, inside the first step, at a small scale: refined, right
        g = oracle.fd_grad(lambda p, c=c: c * float(np.sum(np.abs(p["x"] - x - 3e-4))), {"x": x})["x"]
        np.testing.assert_allclose(g, [-c, -c], rtol=1e-9)
        with pytest.raises(ValueError, match=r"not smooth at 'x'\[0\]"):  # 1e-8 from the kink: on it, at any scale
            oracle.fd_grad(lambda p, c=c: c * float(np.sum(np.abs(p["x"] - x - 1e-8))), {"x": x})
    g = oracle.fd_grad(lambda p: 1e-6 * float(np.sum(np.sin(100 * p["x"]))), {"x": x})["x"]  # small and curved
    np.testing.assert_allclose(g, 1e-4 * np.cos(100 * x), rtol=1e-8)
    jac = oracle.fd_jacobian(lambda v: 1e-7 * np.sin(200 * v), x)
    np.testing.assert_allclose(np.diag(jac), 2e-5 * np.cos(200 * x), rtol=1e-8)
    with pytest.raises(ValueError, match=r"\|f\| = 3e\+06 is too large against its change at 'x'\[0\]"):
        oracle.fd_grad(lambda p: 3e6 + float(np.sum(p["x"] ** 2)), {"x": x})
    g = oracle.fd_grad(lambda p: 1e2 + float(np.sum(p["x"] ** 2)), {"x": x})["x"]  # a moderate constant is fine
    np.testing.assert_allclose(g, 2 * x, rtol=1e-9)


def test_fd_jacobian_shape_and_value() -> None:
    x = np.array([0.5, -1.0])
    jac = oracle.fd_jacobian(lambda v: np.array([v[0] * v[1], v[0] ** 2, np.sin(v[1])]), x)
    np.testing.assert_allclose(jac, [[-1.0, 0.5], [1.0, 0.0], [0.0, np.cos(-1.0)]], rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize(
    "a, message",
    [
        ({"a": np.array([1 + 5j])}, r"expected bool, int or float arrays, got a complex128"),
        ({"a": np.array(["x"])}, r"expected bool, int or float arrays"),
    ],
)
def test_non_numeric_leaves_fail(a, message) -> None:
    c = compare(a, a, TOL)
    assert not c.ok and re.search(message, c.problems[0])


def test_bad_arguments_raise() -> None:
    with pytest.raises(ValueError, match=r"Tolerance.rtol: expected a finite number >= 0, got inf"):
        Tolerance(float("inf"), 0.0)
    with pytest.raises(ValueError, match=r"Tolerance.atol: expected a finite number >= 0, got -1"):
        Tolerance(0.0, -1)
    with pytest.raises(ValueError, match="nonfinite_ok expected a tuple of globs, got the string 'loss'"):
        compare(A, A, TOL, nonfinite_ok="loss")
    assert check_pattern({"g": np.zeros(0)}, [("g", "zero")]) == [
        "outputs['g']: expected a non-empty numeric array, got float64 (0,)"
    ]


def test_naive_variant_must_differ_only_where_declared(monkeypatch) -> None:
    """A diverging variant passes only if JAX differs on the declared keys and agrees elsewhere."""
    from detach_parity.jax_impl import p10_adam_weight_decay as jp
    from detach_parity.shared.core.runner import run_case

    good = run_case("p10_adam_weight_decay", "naive", "float64", case="handed")
    assert good.ok and good.verdict == "DIFFERS (expected)"
    real = jp.run
    # wrong on an undeclared key too: must fail, not pass as "differs"
    monkeypatch.setattr(jp, "run", lambda fx, v: {**real(fx, v), "loss": real(fx, v)["loss"] + 1.0})
    bad = run_case("p10_adam_weight_decay", "naive", "float64", case="handed")
    assert not bad.ok and any("['loss'" in p or ".loss" in p for p in bad.problems())
    # right on the declared keys (the naive port accidentally correct): must fail as well
    from detach_parity.torch_impl import p10_adam_weight_decay as tp

    monkeypatch.setattr(jp, "run", tp.run)
    same = run_case("p10_adam_weight_decay", "naive", "float64", case="handed")
    assert not same.ok and any("must differ there" in p for p in same.problems())


# The tolerance rule (shared/core/parity.py's docstring): element-wise in float64, leaf-scaled below.
F32 = Tolerance(rtol=2e-5, atol=1e-6)  # the float32 parity default
F64 = Tolerance(rtol=1e-10, atol=1e-12)  # the float64 parity default
WIDE, FLIPPED = [1e4, 1e-3], [1e4, -1e-3]  # a leaf spanning seven orders, its small element's sign flipped


def test_float64_is_checked_element_by_element() -> None:
    # the example fails in float64 under either rule; a sign flip at 1e-13 of the leaf's scale
    # passes the leaf-scaled bound (2e-9 <= 1e-12 + 1e-10 * 1e4) and fails element-wise
    wide, flipped = {"g": np.array([1e4, 1e-9])}, {"g": np.array([1e4, -1e-9])}
    c = compare(flipped, wide, F64, label="demo[v]", names=("jax", "torch"))
    assert not c.ok and c.leaves[0].elementwise
    assert re.search(r"\|jax-torch\| = 2e-09 > 1e-12 at \[1\] .* \|torch\| = 1e-09 there", c.problems[0])
    assert compare(flipped, wide, F64, elementwise=False).ok
    assert not compare({"g": np.array(FLIPPED)}, {"g": np.array(WIDE)}, F64).ok
    # an element is held to its own size: 1e-14 off on 1e-3 passes (bound 1e-12 + 1e-13), 1e-11 off on 0 does not
    assert compare({"g": np.array([1e4, 1e-3 + 1e-14])}, {"g": np.array(WIDE)}, F64).ok
    assert not compare({"g": np.array([1e4, 1e-3, 1e-11])}, {"g": np.array([1e4, 1e-3, 0.0])}, F64).ok
    assert c.used == pytest.approx(2e-9 / (1e-12 + 1e-10 * 1e-9))


def test_float32_is_checked_against_the_leaf_scale_by_design() -> None:
    a, b = {"g": np.array(FLIPPED, np.float32)}, {"g": np.array(WIDE, np.float32)}
    c = compare(a, b, F32)
    assert c.ok and not c.leaves[0].elementwise  # 2e-3 <= 1e-6 + 2e-5 * 1e4: below float32's resolution there
    assert c.used == pytest.approx(2e-3 / (1e-6 + 2e-5 * 1e4), rel=1e-3)
    assert not compare(a, b, F32, elementwise=True).ok  # the rule is the switch, not the numbers
    assert not compare({"g": np.array([1e4, 0.3], np.float32)}, b, F32).ok  # above the leaf's bound: fails
    # float32 framework output vs the float64 oracle: leaf-scaled too (the precision is float32's)
    assert compare(a, {"g": np.array(WIDE)}, F32, check_dtype=False).ok


def test_every_scenario_runs_in_float64() -> None:
    """The premise of leaf-scaled float32: the same code is also held element-wise in float64."""
    from detach_parity.shared.core import registry

    assert all("float64" in registry.get(n).dtypes for n in registry.names())


def test_non_string_keys_fail_and_never_crash() -> None:
    one = np.array([1.0])
    c = compare({1: one, "a": one}, {"a": one, (2, 3): one, "": one}, TOL, names=("torch", "jax"))
    assert not c.ok and [leaf.key for leaf in c.leaves] == ["a"]
    assert "output keys expected non-empty str, got ['1'] in torch" in c.problems[0]
    assert "output keys expected non-empty str, got [\"''\", '(2, 3)'] in jax" in c.problems[1]
    assert not compare({0: one}, {0: one}, TOL).ok  # the same bad keys on both sides: still a failure
    assert check_pattern({7: one, "g": one}, [("g", "nonzero")]) == [
        "outputs: output keys expected non-empty str, got ['7']"
    ]
    with pytest.raises(ValueError, match=r"nonfinite_ok expected str globs, got \[1\]"):
        compare(A, A, TOL, nonfinite_ok=(1,))
    with pytest.raises(ValueError, match=r"pattern rule: glob expected a str, got 3"):
        check_pattern(A, [(3, "zero")])
