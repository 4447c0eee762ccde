"""Bad input into the pitfall modules p01-p17: a clear ValueError naming the field, expected and actual value.

Fixture errors happen on construction, before any framework code; losses are called
directly on tiny arrays; public helpers that take a `variant` refuse a typo'd one, in
both frameworks alike.
"""

from __future__ import annotations

import inspect
import re

import jax.numpy as jnp
import numpy as np
import pytest
import torch
from detach_parity.shared.core import fixtures, registry
from detach_parity.shared.core.runner import lesson

PITFALLS = [name for name in registry.names() if name[0] == "p" and name[1:3].isdigit()]
FRAMEWORKS = ("torch", "jax")


def _arrays(scenario: str, **changes) -> dict[str, np.ndarray]:
    """The handed float64 fixture as plain arrays, with `changes` applied."""
    arrays = {k: np.array(v) for k, v in fixtures.make(scenario, "float64", case="handed").items()}
    arrays.update({k: np.asarray(v) for k, v in changes.items()})
    return arrays


# (scenario, changed fields, the message: field, expected, actual)
BAD_FIXTURES = [
    ("p01_std_convention", {"x": np.ones((3, 1)) * [[1.0], [2.0], [3.0]]}, r"x: expected N >= 2 .* got N = 1"),
    ("p01_std_convention", {"x": [[1.0, 1.0, 1.0], [1.0, 2.0, 4.0]]}, r"x: expected every row to vary.*row 0"),
    ("p02_norm_at_zero", {"lam": -0.1}, r"field 'lam': expected values in \[0, inf\], got -0.1"),
    ("p03_subgradient_kinks", {"lo": 0.7, "hi": -0.2}, r"lo, hi: expected lo <= hi, got lo = 0.7 > hi = -0.2"),
    ("p06_batchnorm_stats", {"momentum": 1.5}, r"field 'momentum': expected values in \[0, 1\], got 1.5"),
    ("p06_batchnorm_stats", {"running_var": [1.0, -1.0]}, r"field 'running_var': expected values in \[0, inf\]"),
    ("p06_batchnorm_stats", {"x": [[1.0, 2.0]], "c": [[1.0, 1.0]]}, r"x: expected a batch of B >= 2.*got B = 1"),
    ("p10_adam_weight_decay", {"lr": 0.0}, r"field 'lr': expected values in \(0, inf\], got 0"),
    ("p10_adam_weight_decay", {"lr": -1.0}, r"field 'lr': expected values in \(0, inf\], got -1"),
    ("p10_adam_weight_decay", {"b1": 1.0}, r"field 'b1': expected values in \[0, 1\), got 1"),
    ("p10_adam_weight_decay", {"b2": 1.5}, r"field 'b2': expected values in \[0, 1\), got 1.5"),
    ("p10_adam_weight_decay", {"eps": -1.0}, r"field 'eps': expected values in \(0, inf\], got -1"),
    ("p10_adam_weight_decay", {"weight_decay": -0.1}, r"field 'weight_decay': expected values in \[0, inf\]"),
    ("p10_adam_weight_decay", {"steps": 0}, r"field 'steps': expected values in \[1, inf\], got 0"),
    ("p11_none_vs_zero_grad", {"lr": -0.1}, r"field 'lr': expected values in \(0, inf\], got -0.1"),
    ("p11_none_vs_zero_grad", {"weight_decay": -1.0}, r"field 'weight_decay': expected values in \[0, inf\]"),
    ("p12_masked_attention_row", {"mask": np.ones((3, 3))}, r"field 'mask': expected dtype bool, got float64"),
    ("p15_loss_scale_overflow", {"init_scale": 0.0}, r"field 'init_scale': expected values in \(0, inf\], got 0"),
    ("p15_loss_scale_overflow", {"growth_factor": 1.0}, r"field 'growth_factor': expected values in \(1, inf\]"),
    ("p15_loss_scale_overflow", {"backoff_factor": 2.0}, r"field 'backoff_factor': expected values in \(0, 1\), got 2"),
    ("p15_loss_scale_overflow", {"growth_interval": 0}, r"field 'growth_interval': expected values in \[1, inf\]"),
    ("p15_loss_scale_overflow", {"b1": -0.1}, r"field 'b1': expected values in \[0, 1\), got -0.1"),
    ("p17_soft_update_order", {"tau": 7.0}, r"field 'tau': expected values in \[0, 1\], got 7"),
    ("p17_soft_update_order", {"tau": -0.5}, r"field 'tau': expected values in \[0, 1\], got -0.5"),
]


@pytest.mark.parametrize(
    ("scenario", "changes", "message"),
    BAD_FIXTURES,
    ids=[f"{s}-{','.join(c)}-{i}" for i, (s, c, _) in enumerate(BAD_FIXTURES)],
)
def test_bad_fixture_refused_on_construction(scenario: str, changes: dict, message: str) -> None:
    arrays = _arrays(scenario, **changes)
    with pytest.raises(ValueError, match=message):
        fixtures.from_arrays(scenario, arrays)


def test_p09_gate_columns_must_be_4h() -> None:
    arrays = _arrays("p09_lstm_layout")
    for key in [k for k in arrays if k.startswith("params/")]:
        arrays[key] = arrays[key][..., :-1]  # G = 4H − 1
    h = arrays["h0"].shape[-1]
    with pytest.raises(ValueError, match=rf"expected G = 4H = {4 * h} gate columns .*got G = {4 * h - 1}"):
        fixtures.from_arrays("p09_lstm_layout", arrays)


@pytest.mark.parametrize("scenario", ["p03_subgradient_kinks", "p13_where_nan", "p02_norm_at_zero"])
def test_lesson_inputs_stay_accepted(scenario: str) -> None:
    """Kinks at lo = hi's neighbours, x <= 0 under where, the zero vector: the lesson, not bad input."""
    fx = fixtures.from_arrays(scenario, _arrays(scenario))
    if scenario == "p03_subgradient_kinks":
        fx = fixtures.from_arrays(scenario, _arrays(scenario, lo=0.5, hi=0.5))  # an empty-width interval is fine
        assert fx.scalar("lo") == fx.scalar("hi") == 0.5
    elif scenario == "p13_where_nan":
        assert fx["x"].tolist() == [-1.0, 0.0, 4.0]
    else:
        assert not np.any(fx["x"])


def _array(framework: str, values, dtype=np.float32):
    values = np.asarray(values, dtype=dtype)
    return torch.tensor(values) if framework == "torch" else jnp.asarray(values)


# (scenario, loss, arguments as numpy arrays, the message)
BAD_LOSSES = [
    (
        "p07_linear_layout",
        "mse",
        (np.zeros((2, 1)), np.zeros(2)),
        r"mse: pred has shape \(2, 1\) but target has shape \(2,\)",
    ),
    ("p09_lstm_layout", "lstm_loss", (np.zeros((2, 3)), np.zeros((3, 2))), r"lstm_loss: h has shape \(2, 3\) but c"),
    ("p10_adam_weight_decay", "mse_loss", (np.zeros(3), np.zeros((3, 1))), r"mse_loss: pred has shape \(3,\) but y"),
    ("p14_td_loss_broadcast", "td_loss", (np.zeros((4, 1)), np.zeros(4)), r"td_loss: q has shape \(4, 1\) but target"),
    (
        "p15_loss_scale_overflow",
        "fp16_loss",
        (np.zeros(3), np.zeros((2, 3)), np.zeros((2, 1))),
        r"fp16_loss: pred has shape \(2,\) but y has shape \(2, 1\)",
    ),
    (
        "p12_masked_attention_row",
        "masked_loss",
        (np.zeros((3, 2)), np.zeros((3, 1)), np.ones((3, 3), bool)),
        r"masked_loss: out has shape \(3, 2\) but w has shape \(3, 1\)",
    ),
    (
        "p12_masked_attention_row",
        "masked_loss",
        (np.zeros((3, 2)), np.zeros((3, 2)), np.ones(3, bool)),
        r"masked_loss: mask has shape \(3,\) but out has shape \(3, 2\); expected .*mask \[T, S\]",
    ),
    (
        "p12_masked_attention_row",
        "masked_loss",
        (np.zeros((3, 2)), np.zeros((3, 2)), np.ones((1, 3), bool)),
        r"masked_loss: mask has shape \(1, 3\) but out has shape \(3, 2\)",
    ),
]


@pytest.mark.parametrize("framework", FRAMEWORKS)
@pytest.mark.parametrize(
    ("scenario", "loss", "args", "message"),
    BAD_LOSSES,
    ids=[f"{s}.{f}-{i}" for i, (s, f, _, _) in enumerate(BAD_LOSSES)],
)
def test_loss_refuses_mismatched_shapes(framework: str, scenario: str, loss: str, args: tuple, message: str) -> None:
    fn = getattr(lesson(framework, scenario), loss)
    with pytest.raises(ValueError, match=message):
        fn(*(_array(framework, a, a.dtype if a.dtype == bool else np.float32) for a in args))


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_p02_penalized_refuses_mismatched_target(framework: str) -> None:
    fn = lesson(framework, "p02_norm_at_zero").penalized
    x, t = _array(framework, np.zeros(3)), _array(framework, np.ones(2))
    with pytest.raises(ValueError, match=r"penalized: x has shape \(3,\) but t has shape \(2,\)"):
        fn(x, t, 0.1, "ported")


def _variant_helpers() -> list:
    """(scenario, framework, qualified name) of every public function or method taking `variant`, except run."""
    found = []
    for scenario in PITFALLS:
        for framework in FRAMEWORKS:
            module = lesson(framework, scenario)
            for name in module.__all__:
                obj = getattr(module, name)
                members = (
                    [(f"{name}.{m}", getattr(obj, m)) for m in ("forward", "__call__") if m in vars(obj)]
                    if inspect.isclass(obj)
                    else [(name, obj)]
                )
                for qual, fn in members:
                    if qual != "run" and "variant" in inspect.signature(fn).parameters:
                        found.append((scenario, framework, qual))
    return found


VARIANT_HELPERS = _variant_helpers()


def test_variant_helpers_are_mirrored() -> None:
    """Every torch helper taking a variant has a JAX twin taking one (forward <-> __call__)."""
    torch_side = {(s, q.replace(".forward", ".__call__")) for s, f, q in VARIANT_HELPERS if f == "torch"}
    jax_side = {(s, q) for s, f, q in VARIANT_HELPERS if f == "jax"}
    assert torch_side <= jax_side, torch_side - jax_side
    assert len(torch_side) >= 12 and len(jax_side) >= 16  # the counts when written


@pytest.mark.parametrize(("scenario", "framework", "qual"), VARIANT_HELPERS, ids=["/".join(t) for t in VARIANT_HELPERS])
def test_public_helper_refuses_typoed_variant(scenario: str, framework: str, qual: str) -> None:
    obj = lesson(framework, scenario)
    for part in qual.split("."):
        obj = getattr(obj, part)
    params = [p for p in inspect.signature(obj).parameters if p != "variant"]
    variants = registry.get(scenario).variants
    message = re.escape(f"{scenario}: variant expected one of {list(variants)}, got 'portd'")
    with pytest.raises(ValueError, match=message):
        obj(*[None] * len(params), variant="portd")  # the check comes first: no other argument is read


def _fw(framework: str, values) -> object:
    values = np.asarray(values, dtype=np.float32)
    return torch.tensor(values) if framework == "torch" else jnp.asarray(values)


# (call(module, framework), message): the same message from both frameworks (issue 15 item 7)
PITFALL_ARGUMENTS = [
    ("p02_norm_at_zero", lambda m, f: m.penalized(_fw(f, [1.0, 2.0]), _fw(f, [0.0, 0.0]), -0.5, "ported"),
     "penalized: lam expected a number in [0, inf], got -0.5"),
    ("p03_subgradient_kinks", lambda m, f: m.clamp(_fw(f, [0.0, 1.0]), 0.5, -0.5, "ported"),
     "clamp: hi expected a number in [0.5, inf], got -0.5"),
    ("p12_masked_attention_row", lambda m, f: m.masked_softmax(_fw(f, np.zeros((2, 3))), _fw(f, [1, 0, 1]) > 0, "ported"),
     "masked_softmax: scores has shape (2, 3) but mask has shape (3,)"),
]  # fmt: skip


@pytest.mark.parametrize("framework", ["torch", "jax"])
@pytest.mark.parametrize(("scenario", "call", "message"), PITFALL_ARGUMENTS, ids=[s for s, _, _ in PITFALL_ARGUMENTS])
def test_pitfall_helper_checks_its_arguments(scenario: str, call, message: str, framework: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        call(lesson(framework, scenario), framework)
