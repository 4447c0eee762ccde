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
from detach_parity.shared.core import fixtures
from detach_parity.shared.core.checks import truncation_length
from detach_parity.shared.core.runner import lesson

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
    ("maml", "inner_steps", 0, (), "[1, 10]"),
    ("maml", "inner_steps", 11, (), "[1, 10]"),
    ("maml", "inner_steps", -3, (), "[1, 10]"),
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
        call(lesson(framework, scenario), framework)


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
        call(lesson(framework, scenario), framework, "nope_typo")


def test_jitted_jax_helper_refuses_a_typod_variant_at_trace_time() -> None:
    """grad_clipping's jitted train_step takes variant as a static argument: the check runs while tracing."""
    jg = lesson("jax", "grad_clipping")
    with pytest.raises(ValueError, match=r"grad_clipping: variant expected one of \[.+\], got 'torch_fromula'"):
        jg.train_step(None, None, None, None, None, None, None, None, "torch_fromula")


def test_data_vs_detach_write_refuses_a_typod_how() -> None:
    for framework in FRAMEWORKS:
        (out,) = _tensors(framework, (3,))
        with pytest.raises(ValueError, match=r"write_zeros: how expected one of \[.+\], got 'detach_clon'"):
            lesson(framework, "data_vs_detach").write_zeros(out, "detach_clon")


# Public helpers check their arguments the way fixtures are checked (issue 15 item 7) ------------


def _fw_arrays(framework: str, fx, *keys):
    """Fixture fields as new arrays of the framework (own memory, the fixture's dtype)."""
    if framework == "torch":
        return [torch.tensor(np.array(fx[k])) for k in keys]
    return [jnp.asarray(fx[k]) for k in keys]


def _dqn_targets(framework: str, **changes):
    m = lesson(framework, "dqn_target")
    fx = fixtures.make("dqn_target", "float32")
    online, target = m.build_networks(fx)
    keys = ("rewards", "dones", "next_obs")
    batch = dict(zip(keys, _fw_arrays(framework, fx, *keys), strict=True))
    gamma = changes.pop("gamma", fx.scalar("gamma"))
    for key, value in changes.items():
        batch[key] = torch.tensor(value) if framework == "torch" else jnp.asarray(value)
    return m.td_targets(online, target, batch, gamma, "target_network")


def _dones(b: int, bad: float) -> np.ndarray:
    out = np.zeros(b, dtype=np.float32)
    out[1] = bad
    return out


def _tbptt_unroll(framework: str, k):
    m = lesson(framework, "tbptt")
    fx = fixtures.make("tbptt", "float32")
    x, h0 = _fw_arrays(framework, fx, "x", "h0")
    if framework == "torch":
        return m.unroll(m.build_model(fx, "elman"), x, h0, k)
    model, params = m.build_model(fx, "elman")
    return m.unroll(model, params, x, h0, k)


def _maml_adapt(framework: str, steps):
    m = lesson(framework, "maml")
    fx = fixtures.make("maml", "float32", case="n1")
    x, y = _fw_arrays(framework, fx, "support_x", "support_y")
    model = m.build_model(fx)
    if framework == "torch":
        return m.adapt(model, dict(model.named_parameters()), x[0], y[0], 0.01, steps, "second_order")
    from flax import nnx

    graphdef, params = nnx.split(model)
    return m.adapt(graphdef, params, x[0], y[0], 0.01, steps, "second_order")


def _soft_update(framework: str, scenario: str, tau):
    m = lesson(framework, scenario)
    fx = fixtures.make(scenario, "float32")
    if scenario == "dqn_target":
        online, target = m.build_networks(fx)
    else:
        online, target = m.build_layer(fx, "online"), m.build_layer(fx, "target")
    return m.soft_update(online, target, tau)


def _ce(framework: str, scenario: str, bad_label: int):
    (logits,) = _tensors(framework, (3, 4))
    labels = np.array([0, bad_label, 1])
    labels = torch.tensor(labels) if framework == "torch" else jnp.asarray(labels)
    m = lesson(framework, scenario)
    if scenario == "multitask":
        return m.task_losses(*_tensors(framework, (3,), (3,)), logits, labels)
    return m.cross_entropy(logits, labels)


def _array(framework: str, values) -> object:
    values = np.asarray(values, dtype=np.float32)
    return torch.tensor(values) if framework == "torch" else jnp.asarray(values)


def _p11_step(framework: str, lr, wd):
    m = lesson(framework, "p11_none_vs_zero_grad")
    params = {"x": _array(framework, [1.0, 2.0]), "y": _array(framework, [3.0, 4.0])}
    grads = {"x": _array(framework, [1.0, 2.0]), "y": None if framework == "torch" else _array(framework, [0.0, 0.0])}
    return m.sgd_step(params, grads, lr, wd)


def _clip(framework: str, max_norm):
    m = lesson(framework, "grad_clipping")
    if framework == "torch":
        p = torch.nn.Parameter(torch.ones(3))
        p.grad = torch.ones(3)
        return m.clip_by_global_norm_torch([p], max_norm)
    return m.clip_by_global_norm_torch(max_norm)


# (call(framework), message): the same message from both frameworks
ARGUMENTS = [
    (lambda f: _tbptt_unroll(f, 0), r"unroll: k expected an integer in [1, T = 24], got 0"),
    (lambda f: _tbptt_unroll(f, -5), r"unroll: k expected an integer in [1, T = 24], got -5"),
    (lambda f: _tbptt_unroll(f, 2.5), r"unroll: k expected an integer in [1, T = 24], got 2.5"),
    (lambda f: _tbptt_unroll(f, True), r"unroll: k expected an integer in [1, T = 24], got True"),
    (lambda f: _tbptt_unroll(f, 25), r"unroll: k expected an integer in [1, T = 24], got 25"),
    (lambda f: _maml_adapt(f, 0), r"adapt: steps expected an integer in [1, 10], got 0"),
    (lambda f: _maml_adapt(f, 100), r"adapt: steps expected an integer in [1, 10], got 100"),
    (lambda f: _maml_adapt(f, 2.0), r"adapt: steps expected an integer in [1, 10], got 2.0"),
    (lambda f: _dqn_targets(f, gamma=-0.5), r"td_targets: gamma expected a number in [0, 1], got -0.5"),
    (lambda f: _dqn_targets(f, gamma=1.5), r"td_targets: gamma expected a number in [0, 1], got 1.5"),
    (lambda f: _dqn_targets(f, dones=_dones(6, 0.5)), r"td_targets: dones expected values in {0, 1}, got 0.5 at index (1,)"),
    (lambda f: _dqn_targets(f, rewards=np.zeros((6, 1), np.float32)),
     r"td_targets: rewards expected rank 1 [B], got shape (6, 1)"),
    (lambda f: _soft_update(f, "dqn_target", 1.5), r"soft_update: tau expected a number in [0, 1], got 1.5"),
    (lambda f: _soft_update(f, "p17_soft_update_order", -0.1), r"soft_update: tau expected a number in [0, 1], got -0.1"),
    (lambda f: lesson(f, "p17_soft_update_order").build_layer(fixtures.make("p17_soft_update_order", "float32"), "onlin"),
     r"build_layer: net expected one of ['online', 'target'], got 'onlin'"),
    (lambda f: _p11_step(f, 0.0, 0.1), r"sgd_step: lr expected a number in (0, inf], got 0.0"),
    (lambda f: _p11_step(f, 0.1, -0.1), r"sgd_step: wd expected a number in [0, inf], got -0.1"),
    (lambda f: _clip(f, -1.0), r"clip_by_global_norm_torch: max_norm expected a number in (0, inf], got -1.0"),
    (lambda f: _ce(f, "frozen_backbone", 4), r"cross_entropy: labels expected values in [0, 4), got 4 at index (1,)"),
    (lambda f: _ce(f, "no_grad_inference", -1), r"cross_entropy: labels expected values in [0, 4), got -1 at index (1,)"),
    (lambda f: _ce(f, "multitask", 7), r"task_losses: labels expected values in [0, 4), got 7 at index (1,)"),
    (lambda f: lesson(f, "actor_critic").select_actions(*_tensors(f, (2, 3)), _array(f, [[0.5, 0.0, 0.5], [0.5] * 3])),
     r"select_actions: noise expected values in (0, 1), got 0.0 at index (0, 1)"),
    (lambda f: lesson(f, "gan").bce_with_logits(*_tensors(f, (2, 1)), _array(f, [[1.0], [2.0]])),
     r"bce_with_logits: labels expected values in [0, 1], got 2.0 at index (1, 0)"),
    (lambda f: lesson(f, "grad_clipping").masked_loss(*_tensors(f, (2, 1, 1), (2, 1, 1)), _array(f, [[1.0], [0.5]]), 1.0),
     r"masked_loss: mask expected values in {0, 1}, got 0.5 at index (1, 0)"),
    (lambda f: lesson(f, "linear_regression").predict(*_tensors(f, (2, 1), (), (3, 2)), "full"),
     r"predict: w expected rank 1 [D], got shape (2, 1)"),
    (lambda f: lesson(f, "linear_regression").predict(*_tensors(f, (3,), (), (3, 2)), "full"),
     r"predict: x_features has shape (2,) but w has shape (3,)"),
]  # fmt: skip


@pytest.mark.parametrize("framework", FRAMEWORKS)
@pytest.mark.parametrize(("call", "msg"), ARGUMENTS, ids=[re.sub(r"\W+", "_", m)[:60] for _, m in ARGUMENTS])
def test_public_helper_checks_its_arguments(call, msg: str, framework: str) -> None:
    """k = 0 ran as k = 1 in JAX and raised ZeroDivisionError in torch; k = −5, 2.5, True ran as 5, 5, 1;
    γ < 0, dones = 0.5 and [B, 1] rewards gave a [B, B] target; 100 inner steps compiled for minutes."""
    with pytest.raises(ValueError, match=re.escape(msg)):
        call(framework)


def test_mixed_precision_optimizer_checks_its_hyper_parameters() -> None:
    fx = fixtures.make("mixed_precision", "float32")
    jm, tm = lesson("jax", "mixed_precision"), lesson("torch", "mixed_precision")
    hp = {k: jnp.asarray(fx[k]) for k in ("lr", "b1", "b2", "eps")}
    msg = "make_optimizer: b2 expected a number in [0, 1), got 1.0"
    with pytest.raises(ValueError, match=re.escape(msg)):
        jm.make_optimizer({**hp, "b2": jnp.asarray(1.0)}, True)
    arrays = {k: np.array(v) for k, v in fx.items()}
    with pytest.raises(ValueError, match="field 'b2'"):  # torch's twin takes the fixture: refused there
        fixtures.from_arrays("mixed_precision", {**arrays, "b2": np.array(1.0, np.float32)})
    tm.make_optimizer(tm.build_model(fx), fx, "dynamic")  # the valid fixture passes


def test_tbptt_gru_gate_columns_must_be_3h() -> None:
    """G ≠ 3H was accepted and failed later in jnp.split with an error naming no field."""
    arrays = _arrays("tbptt")
    for key in [k for k in arrays if k.startswith("params/gru/")]:
        shape = fixtures.make("tbptt", "float64").spec.schema[key].shape
        if "G" in shape:
            axis = shape.index("G")
            arrays[key] = np.take(arrays[key], range(arrays[key].shape[axis] - 1), axis=axis)
    msg = "field 'params/gru/cell/hh/kernel': expected G = 3H = 9 gate columns (r|z|n), got G = 8"
    with pytest.raises(ValueError, match=re.escape(msg)):
        fixtures.from_arrays("tbptt", arrays)


# every JAX builder that takes a fixture: (scenario, call(module, fx))
JAX_BUILDERS = [
    ("frozen_backbone", lambda m, fx: m.build_model(fx)),
    ("frozen_backbone", lambda m, fx: m.make_optimizer(m.build_model(fx), fx, "freeze_params")),
    ("multitask", lambda m, fx: m.build_model(fx)),
    ("dqn_target", lambda m, fx: m.build_networks(fx)),
    ("actor_critic", lambda m, fx: m.build_model(fx)),
    ("maml", lambda m, fx: m.build_model(fx)),
    ("attention_detach", lambda m, fx: m.build_model(fx)),
    ("gan", lambda m, fx: m.build_model(fx)),
    ("gan", lambda m, fx: m.make_optimizers(m.build_model(fx), fx)),
    ("tbptt", lambda m, fx: m.build_model(fx, "gru")),
    ("grad_clipping", lambda m, fx: m.build_model(fx)),
    ("no_grad_inference", lambda m, fx: m.build_model(fx)),
    ("feature_stats", lambda m, fx: m.build_model(fx)),
    ("mixed_precision", lambda m, fx: m.build_model(fx)),
    ("p05_layernorm_eps", lambda m, fx: m.make_layer_norm(fx, "ported")),
    ("p06_batchnorm_stats", lambda m, fx: m.make_batch_norm(fx, "ported")),
    ("p07_linear_layout", lambda m, fx: m.load_linear(fx, "ported")),
    ("p08_gru_bias", lambda m, fx: m.make_cell(fx, "ported")),
    ("p09_lstm_layout", lambda m, fx: m.build_model(fx, "ported")),
    ("p17_soft_update_order", lambda m, fx: m.build_layer(fx, "online")),
]


def _float_leaves(built) -> set:
    import jax
    from flax import nnx

    leaves = []
    for item in built if isinstance(built, tuple) else (built,):
        if isinstance(item, nnx.Module | nnx.Optimizer):
            item = nnx.state(item)
        leaves += [leaf for leaf in jax.tree.leaves(item) if hasattr(leaf, "dtype")]
    return {str(leaf.dtype) for leaf in leaves if jnp.issubdtype(leaf.dtype, jnp.floating)}


@pytest.mark.parametrize(("scenario", "call"), JAX_BUILDERS, ids=[f"{s}-{i}" for i, (s, _) in enumerate(JAX_BUILDERS)])
def test_jax_builder_refuses_float64_outside_x64(scenario: str, call) -> None:
    """A builder called outside run() on a float64 fixture returned float32 parameters: now it refuses,
    and inside jax.enable_x64 it builds float64; a float32 fixture builds float32 either way."""
    import jax

    m = lesson("jax", scenario)
    case = "n1" if scenario == "maml" else None
    fx64, fx32 = (fixtures.make(scenario, dt, case=case) for dt in ("float64", "float32"))
    with jax.enable_x64(False):
        with pytest.raises(ValueError, match=re.escape("a float64 fixture needs jax_enable_x64")):
            call(m, fx64)
        assert _float_leaves(call(m, fx32)) == {"float32"}
    with jax.enable_x64(True):
        assert _float_leaves(call(m, fx64)) == {"float64"}
