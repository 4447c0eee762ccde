"""Strict comparison of two output dicts, and the expected zero / non-zero pattern.

Outputs are flat dicts `{"grads/trunk/kernel": ndarray, "loss": ndarray, ...}`.
`compare` fails (never passes) on: an empty dict, a key that is not a non-empty str,
missing or extra keys, a shape or dtype mismatch, a non-finite value not declared
allowed, or an error above the tolerance for a leaf. Failure messages name the leaf:
`dqn_target[residual_gradient].grads['q/l1/kernel']: max|torch-jax| = 3.1e-07 > 1e-12`.
The bounds (`Tolerance`, the per-dtype `TOLERANCES`, `tolerance_for`) are defined in
shared/core/tolerance.py and exported here too, with the comparator that applies them.

Which error is too large (decided by measurement, tests/test_harness.py holds it):
  * float64 (both arrays float64): element-wise, |a_i - b_i| <= atol + rtol * |b_i| for
    every element, so a small element of a leaf that spans orders of magnitude is held to
    its own size: [1e4, 1e-3] vs [1e4, -1e-3] fails.
  * float32 and narrower: leaf-scaled, max|a - b| <= atol + rtol * max|b|. Float32 rounding
    is relative to the scale of what was summed, not to each result: an element that comes
    out of cancellation carries an error of about eps32 * (the leaf's scale). So the
    float32 example above passes, by design; the float64 run of the same code (every
    registered scenario runs in float64) is the check that resolves such an element.
  Evidence (every case of the suite, 236 cases, 6308 compared leaves: torch vs JAX, each
  vs the oracle, JAX vs the naive oracle): the element-wise rule newly fails 0 of the 3154
  float64 leaves (the largest share of its bound used: 0.013, maml meta-gradients vs finite
  differences) but 19 of the 3154 float32 leaves in 4 of the 118 float32 cases, all
  rounding (mixed_precision grads/encoder/kernel up to 21x its bound, grads/head/kernel;
  p05_layernorm_eps grads/x 3x), none a port error; a floor of 1 % of the leaf's max|b|
  under |b_i| still fails 18 of them.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import numpy as np

from .tolerance import TOLERANCES, Tolerance, tolerance_for

__all__ = ["Tolerance", "TOLERANCES", "LeafDiff", "Comparison", "compare", "check_pattern", "tolerance_for"]


@dataclass
class LeafDiff:
    """One compared leaf: max|a - b|, that over max|b|, the bound where the tolerance was tightest,
    pass or fail, and `used`: the largest |a_i - b_i| over its bound (<= 1 passes)."""

    key: str
    max_abs: float
    max_rel: float
    bound: float
    ok: bool
    used: float = 0.0
    elementwise: bool = False


@dataclass
class Comparison:
    """Result of one `compare`: ok only if there was something to compare and every leaf passed."""

    label: str
    ok: bool
    leaves: list[LeafDiff] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    nonfinite: list[str] = field(default_factory=list)  # keys with NaN / inf on either side

    @property
    def used(self) -> float:
        """Largest |a - b| / bound over the leaves: the share of the tolerance used (<= 1 passes)."""
        return max((leaf.used for leaf in self.leaves), default=0.0)

    @property
    def max_abs(self) -> float:
        return max((leaf.max_abs for leaf in self.leaves), default=float("nan"))

    @property
    def max_rel(self) -> float:
        return max((leaf.max_rel for leaf in self.leaves), default=float("nan"))

    def assert_ok(self) -> None:
        if not self.ok:
            raise AssertionError("\n".join(self.problems) or f"{self.label}: comparison failed")

    def to_json(self) -> dict:
        return {
            "label": self.label,
            "ok": self.ok,
            "max_abs": _json_float(self.max_abs),
            "max_rel": _json_float(self.max_rel),
            "nonfinite": list(self.nonfinite),
            "problems": list(self.problems),
        }


def _json_float(x: float) -> float | None:
    return None if not np.isfinite(x) else float(x)


def _leaf_name(label: str, key: str) -> str:
    head, _, rest = key.partition("/")
    return f"{label}.{head}[{rest!r}]" if rest else f"{label}.{head}"


def compare(
    a: Mapping[str, np.ndarray],
    b: Mapping[str, np.ndarray],
    tol: Tolerance,
    *,
    label: str = "outputs",
    names: tuple[str, str] = ("a", "b"),
    check_dtype: bool = True,
    nonfinite_ok: Iterable[str] = (),
    elementwise: bool | None = None,
) -> Comparison:
    """Compare output dict `a` against reference `b`, leaf by leaf.

    Args:
      a, b: flat dicts of numpy arrays keyed by non-empty str (b is the reference for the
        relative error).
      tol: Tolerance applied per leaf: per element for float64 leaves, scaled by max|b|
        of the leaf otherwise (module docstring).
      elementwise: force the element-wise (True) or leaf-scaled (False) rule; None picks
        element-wise exactly when both arrays of a leaf are float64.
      label: names the case in messages, e.g. "dqn_target[residual_gradient]".
      names: how a and b are called in messages, e.g. ("torch", "jax").
      check_dtype: require identical dtypes (off for framework vs float64 oracle).
      nonfinite_ok: glob patterns of keys whose NaN / inf are expected; they must
        then be non-finite at the same positions on both sides.
    Returns:
      Comparison; `ok` is False for empty or mismatched outputs.
    """
    na, nb = names
    result = Comparison(label=label, ok=True)
    if isinstance(nonfinite_ok, str):
        raise ValueError(f"compare: nonfinite_ok expected a tuple of globs, got the string {nonfinite_ok!r}")
    allowed = tuple(nonfinite_ok)
    bad_globs = [p for p in allowed if not isinstance(p, str)]
    if bad_globs:
        raise ValueError(f"compare: nonfinite_ok expected str globs, got {bad_globs!r}")

    def fail(msg: str) -> None:
        result.ok = False
        result.problems.append(msg)

    if not isinstance(a, Mapping) or not isinstance(b, Mapping):
        fail(f"{label}: outputs must be dicts, got {type(a).__name__} and {type(b).__name__}")
        return result
    if not a or not b:
        fail(f"{label}: empty outputs ({na}: {len(a)} keys, {nb}: {len(b)} keys): nothing was compared")
        return result
    for name, d in ((na, a), (nb, b)):
        bad = [k for k in d if not isinstance(k, str) or not k]
        if bad:
            fail(f"{label}: output keys expected non-empty str, got {sorted(map(repr, bad))} in {name}")
    ka, kb = ({k for k in d if isinstance(k, str) and k} for d in (a, b))
    only_a, only_b = sorted(ka - kb), sorted(kb - ka)
    if only_a:
        fail(f"{label}: keys only in {na}: {only_a}")
    if only_b:
        fail(f"{label}: keys only in {nb}: {only_b}")
    for key in sorted(ka & kb):
        x, y = np.asarray(a[key]), np.asarray(b[key])
        leaf = _leaf_name(label, key)
        if x.shape != y.shape:
            fail(f"{leaf}: shape {na} {x.shape} != {nb} {y.shape}")
            continue
        if check_dtype and x.dtype != y.dtype:
            fail(f"{leaf}: dtype {na} {x.dtype} != {nb} {y.dtype}")
            continue
        if x.size == 0:
            fail(f"{leaf}: empty array: nothing was compared")
            continue
        if x.dtype.kind not in "biuf" or y.dtype.kind not in "biuf":
            fail(f"{leaf}: expected bool, int or float arrays, got {na} {x.dtype} and {nb} {y.dtype}")
            continue
        if x.dtype.kind == "b" or y.dtype.kind == "b" or (x.dtype.kind in "iu" and y.dtype.kind in "iu"):
            same = bool(np.array_equal(x, y))
            miss = 0.0 if same else float("inf")
            result.leaves.append(LeafDiff(key, miss, miss, 0.0, same, used=miss))
            if not same:
                fail(f"{leaf}: {na} {x.tolist()} != {nb} {y.tolist()} (exact comparison)")
            continue
        x64, y64 = x.astype(np.float64), y.astype(np.float64)
        fin_x, fin_y = np.isfinite(x64), np.isfinite(y64)
        if not (fin_x.all() and fin_y.all()):
            result.nonfinite.append(key)
            declared = any(fnmatch.fnmatchcase(key, p) for p in allowed)
            if not declared:
                fail(f"{leaf}: non-finite values ({na}: {int((~fin_x).sum())}, {nb}: {int((~fin_y).sum())})")
                continue
            same_mask = np.array_equal(fin_x, fin_y) and np.array_equal(x64[~fin_x], y64[~fin_y], equal_nan=True)
            if not same_mask:
                fail(f"{leaf}: non-finite values at different positions or of different kind")
                continue
            x64, y64 = np.where(fin_x, x64, 0.0), np.where(fin_y, y64, 0.0)
        d = np.abs(x64 - y64)
        diff = float(np.max(d))
        scale = float(np.max(np.abs(y64)))
        rel = diff / scale if scale > 0 else (0.0 if diff == 0 else float("inf"))
        per_element = (x.dtype == y.dtype == np.float64) if elementwise is None else elementwise
        if per_element:
            bounds = tol.atol + tol.rtol * np.abs(y64)
            with np.errstate(divide="ignore", invalid="ignore"):
                shares = np.where(d == 0, 0.0, d / bounds)
            worst = np.unravel_index(int(np.argmax(shares)), shares.shape)
            bound, used = float(bounds[worst]), float(shares[worst])
        else:
            bound = tol.bound(scale)
            used = 0.0 if diff == 0 else (diff / bound if bound > 0 else float("inf"))
        ok = used <= 1.0
        result.leaves.append(LeafDiff(key, diff, rel, bound, ok, used=used, elementwise=per_element))
        if ok:
            continue
        if per_element:
            at = list(map(int, worst))
            fail(
                f"{leaf}: |{na}-{nb}| = {float(d[worst]):.3g} > {bound:.3g} at {at} ({tol} per element, "
                f"|{nb}| = {abs(float(y64[worst])):.3g} there; max|{na}-{nb}| = {diff:.3g})"
            )
        else:
            fail(f"{leaf}: max|{na}-{nb}| = {diff:.3g} > {bound:.3g} ({tol}, max|{nb}| = {scale:.3g})")
    return result


def check_pattern(
    outputs: Mapping[str, np.ndarray], rules: Iterable[tuple[str, str]], *, label: str = "outputs"
) -> list[str]:
    """Check the expected zero / non-zero pattern: the lesson of a scenario.

    Args:
      outputs: flat output dict of one framework.
      rules: (glob, expectation) pairs; expectation "zero" means every element is
        exactly 0 (a stopped path gives exact zeros, not small numbers), "nonzero"
        means at least one element is non-zero and all are finite.
    Returns:
      A list of problems, empty when the pattern holds. A rule whose glob matches
      no key is a problem too, so a renamed output cannot make the lesson vacuous.
    """
    problems = []
    rules = list(rules)
    if not rules:
        return [f"{label}: no expected pattern declared"]
    bad = [k for k in outputs if not isinstance(k, str) or not k]
    if bad:
        problems.append(f"{label}: output keys expected non-empty str, got {sorted(map(repr, bad))}")
    named = [k for k in outputs if isinstance(k, str) and k]
    for glob, expect in rules:
        if not isinstance(glob, str):
            raise ValueError(f"pattern rule: glob expected a str, got {glob!r}")
        keys = [k for k in named if fnmatch.fnmatchcase(k, glob)]
        if not keys:
            problems.append(f"{label}: pattern {glob!r} ({expect}) matches no output key; keys: {sorted(named)}")
            continue
        for key in keys:
            arr = np.asarray(outputs[key])
            if arr.size == 0 or arr.dtype.kind not in "biuf":
                problems.append(f"{label}[{key!r}]: expected a non-empty numeric array, got {arr.dtype} {arr.shape}")
                continue
            arr = arr.astype(np.float64)
            if expect == "zero":
                if not np.all(arr == 0):
                    problems.append(f"{label}[{key!r}]: expected exactly zero, max|x| = {np.max(np.abs(arr)):.3g}")
            elif expect == "nonzero":
                if not np.all(np.isfinite(arr)) or not np.any(arr != 0):
                    problems.append(
                        f"{label}[{key!r}]: expected non-zero and finite, got max|x| = {np.max(np.abs(arr)):.3g}"
                    )
            else:
                raise ValueError(f"pattern rule for {glob!r}: expectation expected 'zero' or 'nonzero', got {expect!r}")
    return problems
