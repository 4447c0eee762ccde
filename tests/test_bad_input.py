"""Bad input into the 15 regular scenarios: a clear ValueError naming the field, expected and actual value.

Fixture errors happen on construction, before any framework code; losses are called
directly on tiny arrays (the shape check raises before any compile); public helpers
that take a `variant` refuse a typo'd one, in both frameworks alike.
"""

from __future__ import annotations

import re

import jax.numpy as jnp
import numpy as np
import pytest
import torch

from shared.core import fixtures
from shared.core.checks import truncation_length
from shared.core.runner import impl

FRAMEWORKS = ("torch", "jax")


def _arrays(scenario: str) -> dict[str, np.ndarray]:
    """The first case of the scenario's float64 fixture (seed 0) as plain, writable arrays."""
    return {k: np.array(v) for k, v in fixtures.make(scenario, "float64").items()}


def _set(arrays: dict[str, np.ndarray], field: str, value, index: tuple[int, ...]) -> None:
    arr = arrays[field]
    if index:
        arr[index] = value
    else:
        arrays[field] = np.array(value, dtype=arr.dtype)


# (scenario, field, bad value, index it is written at, expected range: a str.format template, {C} = the size of C)
OUT_OF_RANGE = [
    ("frozen_backbone", "labels", -1, (0,), "[0, C={C})"),
    ("frozen_backbone", "labels", "C", (1,), "[0, C={C})"),
    ("frozen_backbone", "lr", -1.0, (), "(0, inf]"),
    ("frozen_backbone", "weight_decay", -0.1, (), "[0, inf]"),
    ("frozen_backbone", "b1", 1.5, (), "[0, 1)"),
    ("frozen_backbone", "eps", -1.0, (), "(0, inf]"),
    ("frozen_backbone", "steps", 0, (), "[1, inf]"),
    ("frozen_backbone", "steps", -3, (), "[1, inf]"),
    ("multitask", "labels", "C", (0,), "[0, C={C})"),
    ("dqn_target", "actions", "A", (2,), "[0, A={A})"),
    ("dqn_target", "dones", 0.5, (0,), "{{0, 1}}"),
    ("dqn_target", "gamma", 5.0, (), "[0, 1]"),
    ("dqn_target", "gamma", -1.0, (), "[0, 1]"),
    ("dqn_target", "tau", 7.0, (), "[0, 1]"),
    ("dqn_target", "lr", 0.0, (), "(0, inf]"),
    ("actor_critic", "actions", -1, (0,), "[0, A={A})"),
    ("actor_critic", "noise", 1.5, (0, 0), "(0, 1)"),
    ("actor_critic", "noise", 0.0, (1, 0), "(0, 1)"),
    ("actor_critic", "vf_coef", -0.5, (), "[0, inf]"),
    ("maml", "inner_steps", 0, (), "[1, inf]"),
    ("maml", "inner_steps", -3, (), "[1, inf]"),
    ("maml", "alpha", 0.0, (), "(0, inf]"),
    ("gan", "lr", -1e-3, (), "(0, inf]"),
    ("gan", "b2", 1.0, (), "[0, 1)"),
    ("gan", "eps", 0.0, (), "(0, inf]"),
    ("grad_clipping", "max_norm", -1.0, (0,), "(0, inf]"),
    ("grad_clipping", "mask", 0.5, (0, 0, 0), "{{0, 1}}"),
    ("grad_clipping", "window", 0, (), "[1, inf]"),
    ("grad_clipping", "window", -1, (), "[1, inf]"),
    ("grad_clipping", "lr", 0.0, (), "(0, inf]"),
    ("no_grad_inference", "labels", "C", (0,), "[0, C={C})"),
    ("mixed_precision", "backoff_factor", 2.0, (), "(0, 1)"),
    ("mixed_precision", "growth_factor", 1.0, (), "(1, inf]"),
    ("mixed_precision", "growth_interval", 0, (), "[1, inf]"),
    ("mixed_precision", "steps", 0, (), "[1, inf]"),
    ("mixed_precision", "overflow_at", 0, (), "[1, inf]"),
    ("mixed_precision", "lr", -1.0, (), "(0, inf]"),
]


@pytest.mark.parametrize(("scenario", "field", "value", "index", "expected"), OUT_OF_RANGE)
def test_out_of_range_field_is_refused(scenario: str, field: str, value, index: tuple[int, ...], expected: str) -> None:
    fx = fixtures.make(scenario, "float64")
    if isinstance(value, str):  # a shape letter: the first index past the axis
        value = fx.dims[value]
    arrays = _arrays(scenario)
    _set(arrays, field, value, index)
    shown = arrays[field][index] if index else arrays[field][()]
    msg = (
        f"fixture '{scenario}' field '{field}': expected values in {expected.format(**fx.dims)}, "
        f"got {shown} at index {index}"
    )
    with pytest.raises(ValueError, match=re.escape(msg)):
        fixtures.from_arrays(scenario, arrays)


# relations the schema cannot state, and non-finite values where a scenario has no range
BAD_FIXTURES = [
    ("grad_clipping", {"window": np.array(5)}, "field 'window': expected a divisor of T=12, got 5"),
    ("grad_clipping", {"window": np.array(7)}, "field 'window': expected a divisor of T=12, got 7"),
    ("mixed_precision", {"overflow_at": np.array(99)}, "field 'overflow_at': expected a value in [1, steps=6], got 99"),
    ("basics", {"x": np.array([1.0, np.nan, 2.0])}, "field 'x': expected finite values, got nan at index (1,)"),
    ("data_vs_detach", {"c": np.array([np.inf, 1.0, 1.0])}, "field 'c': expected finite values, got inf at index (0,)"),
]


@pytest.mark.parametrize(("scenario", "changes", "msg"), BAD_FIXTURES)
def test_bad_fixture_is_refused(scenario: str, changes: dict, msg: str) -> None:
    arrays = _arrays(scenario)
    for key, value in changes.items():
        if arrays[key].shape != value.shape:  # keep the rest of the field, change its leading entries
            full = arrays[key].copy()
            full[: value.shape[0]] = value
            value = full
        arrays[key] = value.astype(arrays[key].dtype)
    with pytest.raises(ValueError, match=re.escape(f"fixture '{scenario}': {msg}") + "|" + re.escape(msg)):
        fixtures.from_arrays(scenario, arrays)


def test_finite_fields_of_every_remaining_scenario_are_checked() -> None:
    """linear_regression, attention_detach, tbptt, feature_stats have no ranged field: a NaN is still refused."""
    for scenario, field in (("linear_regression", "b"), ("attention_detach", "target"), ("tbptt", "h0")):
        arrays = _arrays(scenario)
        arrays[field] = np.full_like(arrays[field], np.nan)
        with pytest.raises(ValueError, match=rf"field '{field}': expected finite values, got nan"):
            fixtures.from_arrays(scenario, arrays)
    arrays = _arrays("feature_stats")
    arrays["y"][0, 0] = -np.inf
    with pytest.raises(ValueError, match=r"field 'y': expected finite values, got -inf at index \(0, 0\)"):
        fixtures.from_arrays("feature_stats", arrays)


def test_grad_clipping_regime_count_is_fixed() -> None:
    """R = len(REGIMES) = 4, not a free letter: a fifth regime would be silently dropped."""
    arrays = _arrays("grad_clipping")
    arrays["max_norm"] = np.concatenate([arrays["max_norm"], [1.0]])
    with pytest.raises(ValueError, match=r"field 'max_norm': expected shape \[4\], got \(5,\)"):
        fixtures.from_arrays("grad_clipping", arrays)


def test_tbptt_window_longer_than_the_sequence_is_refused() -> None:
    assert truncation_length("k=10", 24) == 10 and truncation_length("k=T", 5) == 5
    assert truncation_length("k=1", 5) == 1
    with pytest.raises(ValueError, match=r"variant 'k=10' expected 1 <= k <= T = 5 \(field 'x'\), got k=10"):
        truncation_length("k=10", 5)
    for bad in ("k=0", "k=-1", "k=2.5", "10", None):
        with pytest.raises(ValueError, match="truncation: variant"):
            truncation_length(bad, 24)


def _tensors(framework: str, *shapes, dtype: str = "float"):
    """Zero arrays of the given shapes in the framework (int64 labels when dtype == "int")."""
    if framework == "torch":
        return [torch.zeros(s, dtype=torch.int64 if dtype == "int" else torch.float32) for s in shapes]
    return [jnp.zeros(s, dtype=jnp.int32 if dtype == "int" else jnp.float32) for s in shapes]


def _ints(framework: str, *shapes):
    return _tensors(framework, *shapes, dtype="int")


# (scenario, call(module, framework), message)
LOSS_SHAPES = [
    ("basics", lambda m, f: m.loss_via_z(*_tensors(f, (3,), (3, 1)), "z_stopped"),
     r"loss_via_z: x has shape \(3,\) but c has shape \(3, 1\)"),
    ("basics", lambda m, f: m.loss_total(*_tensors(f, (3,), (3,), (3, 1)), "none"),
     r"loss_total: x has shape \(3,\) but d has shape \(3, 1\)"),
    ("linear_regression", lambda m, f: m.mse_loss(*_tensors(f, (4,), (4, 1))),
     r"mse_loss: y_hat has shape \(4,\) but y has shape \(4, 1\)"),
    ("frozen_backbone", lambda m, f: m.cross_entropy(*_tensors(f, (4,)), *_ints(f, (4,))),
     r"cross_entropy: logits expected rank 2 \[B, C\], got shape \(4,\)"),
    ("frozen_backbone", lambda m, f: m.cross_entropy(*_tensors(f, (5, 3)), *_ints(f, (4,))),
     r"cross_entropy: logits_batch has shape \(5,\) but labels has shape \(4,\)"),
    ("multitask", lambda m, f: m.task_losses(*_tensors(f, (4,), (4,), (4,)), *_ints(f, (4,))),
     r"task_losses: logits2 expected rank 2 \[B, C\], got shape \(4,\)"),
    ("multitask", lambda m, f: m.task_losses(*_tensors(f, (4, 1), (4,), (4, 3)), *_ints(f, (4,))),
     r"task_losses: pred1 has shape \(4, 1\) but y1 has shape \(4,\)"),
    ("dqn_target", lambda m, f: m.td_loss(*_tensors(f, (4, 1), (4,))),
     r"td_loss: q has shape \(4, 1\) but target has shape \(4,\)"),
    ("actor_critic",
     lambda m, f: m.a2c_losses(*_tensors(f, (6, 3), (4,)), *_ints(f, (4,)), *_tensors(f, (4,)), "advantage_stopped"),
     r"a2c_losses: values has shape \(4,\) but logits_batch has shape \(6,\)"),
    ("actor_critic",
     lambda m, f: m.a2c_losses(*_tensors(f, (4,), (4,)), *_ints(f, (4,)), *_tensors(f, (4,)), "advantage_stopped"),
     r"a2c_losses: logits expected rank 2 \[B, A\], got shape \(4,\)"),
    ("maml", lambda m, f: m.mse_loss(*_tensors(f, (2, 1), (2,))),
     r"mse_loss: pred has shape \(2, 1\) but y has shape \(2,\)"),
    ("attention_detach", lambda m, f: m.mse_loss(*_tensors(f, (3, 2), (3, 1))),
     r"mse_loss: context has shape \(3, 2\) but target has shape \(3, 1\)"),
    ("gan", lambda m, f: m.bce_with_logits(*_tensors(f, (4, 1), (4,))),
     r"bce_with_logits: logits has shape \(4, 1\) but labels has shape \(4,\)"),
    ("tbptt", lambda m, f: m.step_loss(*_tensors(f, (2, 1), (2,))),
     r"step_loss: y has shape \(2, 1\) but target has shape \(2,\)"),
    ("grad_clipping", lambda m, f: m.masked_loss(*_tensors(f, (4, 2, 1), (4, 2, 1), (2,)), 1.0),
     r"masked_loss: y_steps has shape \(4, 2\) but mask has shape \(2,\)"),
    ("grad_clipping", lambda m, f: m.masked_loss(*_tensors(f, (4, 2, 1), (4, 2, 1), (4, 2, 1)), 1.0),
     r"masked_loss: y_steps has shape \(4, 2\) but mask has shape \(4, 2, 1\)"),
    ("no_grad_inference", lambda m, f: m.cross_entropy(*_tensors(f, (4, 3, 1)), *_ints(f, (4,))),
     r"cross_entropy: logits expected rank 2 \[B, C\], got shape \(4, 3, 1\)"),
    ("feature_stats", lambda m, f: m.mse(*_tensors(f, (4, 2), (4,))),
     r"mse: pred has shape \(4, 2\) but y has shape \(4,\)"),
    ("mixed_precision", lambda m, f: m.mse(*_tensors(f, (4, 2), (4, 1))),
     r"mse: pred has shape \(4, 2\) but y has shape \(4, 1\)"),
    ("data_vs_detach", lambda m, f: m.step(*_tensors(f, (3,), (3, 1)), "detach_clone"),
     r"step: x has shape \(3,\) but c has shape \(3, 1\)"),
]  # fmt: skip


@pytest.mark.parametrize("framework", FRAMEWORKS)
@pytest.mark.parametrize(("scenario", "call", "msg"), LOSS_SHAPES)
def test_loss_refuses_mismatched_shapes(scenario: str, call, msg: str, framework: str) -> None:
    with pytest.raises(ValueError, match=msg):
        call(impl(framework, scenario), framework)


def _method(cls, framework: str):
    """The forward method of a model class, unbound: torch `forward`, Flax NNX `__call__`."""
    return cls.forward if framework == "torch" else cls.__call__


def _tiny_a2c(m, f, variant):
    logits, values = _tensors(f, (4, 3), (4,))
    return m.a2c_losses(logits, values, *_ints(f, (4,)), *_tensors(f, (4,)), variant)


# (scenario, call(module, framework, variant)); the check is the first statement, so placeholders suffice
TYPO_HELPERS = [
    ("basics", lambda m, f, v: m.loss_via_z(*_tensors(f, (3,), (3,)), v)),
    ("basics", lambda m, f, v: m.loss_total(*_tensors(f, (3,), (3,), (3,)), v)),
    ("basics", lambda m, f, v: m.forward(*_tensors(f, (3,)), v)),
    ("linear_regression", lambda m, f, v: m.predict(*_tensors(f, (2,), (), (3, 2)), v)),
    ("frozen_backbone", lambda m, f, v: m.make_optimizer(None, None, v)),
    ("multitask", lambda m, f, v: _method(m.MultiTaskNet, f)(None, *_tensors(f, (3, 2)), v)),
    ("dqn_target", lambda m, f, v: m.td_targets(None, None, None, None, v)),
    ("actor_critic", _tiny_a2c),
    ("maml", lambda m, f, v: m.meta_loss(None, None, None, 0.1, 1, v)),
    ("attention_detach", lambda m, f, v: _method(m.Attention, f)(None, *_tensors(f, (3, 2), (3, 3)), v)),
    ("gan", lambda m, f, v: m.discriminator_loss(None, None, None, None, v)),
    ("no_grad_inference", lambda m, f, v: m.validate(None, None, None, v)),
    ("feature_stats", lambda m, f, v: m.feature_stats(*_tensors(f, (4, 3)), v)),
    ("mixed_precision", lambda m, f, v: m.make_scaler(None, v)),
    ("tbptt", lambda m, f, v: m.run(fixtures.make("tbptt", "float32"), v)),
    ("grad_clipping", lambda m, f, v: m.run(fixtures.make("grad_clipping", "float32"), v)),
    ("data_vs_detach", lambda m, f, v: m.run(fixtures.make("data_vs_detach", "float32"), v)),
]


@pytest.mark.parametrize("framework", FRAMEWORKS)
@pytest.mark.parametrize(("scenario", "call"), TYPO_HELPERS)
def test_public_helper_refuses_a_typod_variant(scenario: str, call, framework: str) -> None:
    msg = rf"{scenario}: variant expected one of \[.+\], got 'nope_typo'"
    with pytest.raises(ValueError, match=msg):
        call(impl(framework, scenario), framework, "nope_typo")


def test_jitted_jax_helper_refuses_a_typod_variant_at_trace_time() -> None:
    """grad_clipping's jitted train_step takes variant as a static argument: the check runs while tracing."""
    jg = impl("jax", "grad_clipping")
    with pytest.raises(ValueError, match=r"grad_clipping: variant expected one of \[.+\], got 'torch_fromula'"):
        jg.train_step(None, None, None, None, None, None, None, None, "torch_fromula")


def test_data_vs_detach_write_refuses_a_typod_how() -> None:
    for framework in FRAMEWORKS:
        (out,) = _tensors(framework, (3,))
        with pytest.raises(ValueError, match=r"write_zeros: how expected one of \[.+\], got 'detach_clon'"):
            impl(framework, "data_vs_detach").write_zeros(out, "detach_clon")
