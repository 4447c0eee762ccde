"""Helpers shared by the JAX scenarios; mirrored by torch_impl/_common.py."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator, Mapping, Sequence
from types import MappingProxyType
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from ..shared.core.checks import check_rank, check_same_shape, check_values
from ..shared.core.contracts import check_call, finish
from ..shared.core.fixtures import Fixture, require
from ..shared.core.schema import FLOAT_DTYPES

__all__ = [
    "numerics",
    "scenario_run",
    "scenario_step",
    "StepCall",
    "step_of",
    "field",
    "numpy",
    "flat",
    "nested",
    "params_of",
    "load_params",
    "grads_of",
    "cross_entropy",
    "transformation",
    "MLP",
]


@contextlib.contextmanager
def numerics(dtype: str) -> Iterator[None]:
    """Compute in `dtype` at full precision inside the block; the caller's settings are restored after.

    x64 on for float64 and off for float32 (a float32 run really computes in float32
    whatever the caller's jax_enable_x64), and jax_default_matmul_precision "highest"
    (full float32 matmuls where an accelerator's default would take bfloat16 or TF32
    passes), both through JAX's own context managers (thread-local, nothing global).
    Raises ValueError for a dtype other than float32 / float64.
    Reference: JAX docs, jax.default_matmul_precision and jax.enable_x64.
    """
    if dtype not in FLOAT_DTYPES:
        raise ValueError(f"numerics: dtype expected one of {list(FLOAT_DTYPES)}, got {dtype!r}")
    with jax.enable_x64(dtype == "float64"), jax.default_matmul_precision("highest"):
        yield


def scenario_run(scenario: str) -> Callable:
    """Decorate `run(fx, variant)`: check the arguments, compute in the fixture's dtype.

    The call runs inside numerics(fx.dtype): x64 on for float64 and off for float32,
    matmuls at "highest" precision, the caller's settings restored after.
    Every output (a JAX array, a numpy array) becomes a numpy array.
    """

    def wrap(run: Callable) -> Callable:
        @functools.wraps(run)
        def checked(fx: Fixture, variant: str) -> dict[str, np.ndarray]:
            check_call(scenario, fx, variant)
            with numerics(fx.dtype):
                out = run(fx, variant)
                return finish(scenario, variant, {k: numpy(v) for k, v in out.items()})

        return checked

    return wrap


def scenario_step(scenario: str) -> Callable:
    """Decorate `make_step(fx, variant)`: check the arguments, then build the step.

    `make_step` sets a scenario up once (model from the fixture, optimizer, inputs) and
    returns a zero-argument callable that performs exactly one step of what `run` trains or
    differentiates and returns that step's loss, a 0-d float32 jax.Array, before the step's
    update; every call takes one more step. The bench times it; tests/test_steps.py checks
    it against the oracle's `step_loss`. JAX steps call the scenario's jitted functions
    (compiled on the first call) and return after jax.block_until_ready on all they compute.
    Building and every call of the step run inside numerics("float32"), the caller's
    settings restored after each.
    Raises ValueError unless fx is a float32 Fixture of `scenario` (float64 would need x64
    for the step's whole lifetime) and `variant` is registered.
    """

    def wrap(make_step: Callable) -> Callable:
        @functools.wraps(make_step)
        def checked(fx: Fixture, variant: str) -> Callable[[], jax.Array]:
            require(fx, scenario, "float32", f"{scenario}.make_step")
            fx.spec.check_variant(variant)
            with numerics(fx.dtype):
                step = make_step(fx, variant)

            @functools.wraps(step)
            def scoped() -> jax.Array:
                with numerics(fx.dtype):
                    return step()

            return scoped

        return checked

    return wrap


class StepCall(NamedTuple):
    """One call of a scenario's training step: fn(*nodes, *args, **kwargs), its loss at `loss` in the result.

    nodes: the modules and optimizers the call reads and updates (the step's state); args: the
    arrays it takes; kwargs: settings that never change (the variant, static under jit); loss:
    the index path of the loss in fn's result ((0,): its first item; (): the result itself). A
    lesson's `step_calls(fx, variant)` lists them; make_step runs them (step_of) and the bench
    tunes them (jax_impl/backend/bench.py: nnx.cached_partial, one jax.jit over nnx.split).
    """

    fn: Callable
    nodes: tuple = ()
    args: tuple = ()
    kwargs: Mapping[str, object] = MappingProxyType({})
    loss: tuple[int, ...] = (0,)

    def __call__(self) -> jax.Array:
        """Make the call and wait for everything it computes; return its loss."""
        out = jax.block_until_ready(self.fn(*self.nodes, *self.args, **self.kwargs))
        for i in self.loss:
            out = out[i]
        return out


def step_of(calls: Sequence[StepCall]) -> Callable[[], jax.Array]:
    """make_step's step from its calls: each call in order; returns the sum of their losses.

    Each call waits (jax.block_until_ready) on all it computes, so a timed step includes its
    work. Raises ValueError for no calls.
    """
    if not calls:
        raise ValueError("step_of: calls expected at least one StepCall, got none")

    def step() -> jax.Array:
        losses = [call() for call in calls]
        return sum(losses[1:], losses[0])

    return step


def field(fx: Fixture, key: str) -> jax.Array:
    """A fixture field as a JAX array of the same dtype."""
    return jnp.asarray(fx[key])


def numpy(x) -> np.ndarray:
    """A JAX array (or scalar) as a numpy array; a bfloat16 / float16 one as float32 (the same numbers exactly,
    as the torch twin gives them: numpy has no bfloat16 of its own)."""
    a = np.asarray(jax.device_get(x))
    return a.astype(np.float32) if a.dtype in (np.dtype(jnp.bfloat16), np.dtype(jnp.float16)) else a


def flat(tree: Mapping) -> dict[str, np.ndarray]:
    """A nested dict or nnx.State as a flat dict keyed by '/'-joined paths."""
    if isinstance(tree, nnx.State):
        return {"/".join(map(str, path)): numpy(v.get_value()) for path, v in nnx.to_flat_state(tree)}
    out = {}
    for k, v in tree.items():
        if isinstance(v, Mapping):
            out.update({f"{k}/{kk}": vv for kk, vv in flat(v).items()})
        else:
            out[str(k)] = numpy(v)
    return out


def nested(arrays: Mapping[str, np.ndarray]) -> dict:
    """Flat arrays keyed by '/'-joined paths as a nested dict of JAX arrays (the inverse of flat):
    {"cell/ih/kernel": a} -> {"cell": {"ih": {"kernel": jnp.asarray(a)}}}, for models that are plain functions."""
    out: dict = {}
    for key, value in arrays.items():
        *path, leaf = key.split("/")
        node = out
        for part in path:
            node = node.setdefault(part, {})
        node[leaf] = jnp.asarray(value)
    return out


def params_of(model: nnx.Module) -> dict[str, np.ndarray]:
    """The nnx.Param leaves of a module, flat and canonical (kernels already [in, out])."""
    return flat(nnx.state(model, nnx.Param))


def load_params(model: nnx.Module, params: Mapping[str, np.ndarray]) -> nnx.Module:
    """Set every nnx.Param of `model` from canonical arrays (no transpose: Flax is canonical).

    Scenarios pass `nnx.eval_shape(lambda: Model(...))`: the fixture supplies every leaf,
    so the random initialisation is never computed (about 1 s of XLA compiles saved per model).

    Raises:
      KeyError: a parameter has no array.  ValueError: a shape differs, or extra arrays.
    """
    state = nnx.state(model, nnx.Param)
    seen = set()
    for path, var in nnx.to_flat_state(state):
        key = "/".join(map(str, path))
        if key not in params:
            raise KeyError(f"load_params: no array for parameter {key!r}; given {sorted(params)}")
        value = jnp.asarray(params[key])
        if value.shape != var.get_value().shape:
            raise ValueError(f"load_params: {key!r} expected shape {var.get_value().shape}, got {value.shape}")
        var.set_value(value)
        seen.add(key)
    extra = sorted(set(params) - seen)
    if extra:
        raise ValueError(f"load_params: arrays {extra} match no parameter of {type(model).__name__}")
    nnx.update(model, state)
    return model


def grads_of(grads: Mapping, params: Mapping[str, np.ndarray] | None = None) -> dict[str, np.ndarray]:
    """Gradients (the nnx.State or nested dict that nnx.grad / jax.grad return) flat and canonical.

    With `params` (a flat dict, e.g. from params_of), every parameter gets an entry: one that
    was not differentiated (nnx.DiffState) becomes explicit zeros, the mirror of
    torch_impl._layout.grads_of, where a None .grad becomes zeros (pitfall P11).
    Raises ValueError if `grads` holds a key that is not one of `params`.
    """
    out = flat(grads)
    if params is None:
        return out
    extra = sorted(set(out) - set(params))
    if extra:
        raise ValueError(f"grads_of: gradients {extra} match no parameter; parameters {sorted(params)}")
    return {k: out[k] if k in out else np.zeros_like(v) for k, v in params.items()}


def cross_entropy(logits: jax.Array, labels: jax.Array) -> jax.Array:
    """Mean softmax cross-entropy of logits [B, C] against int labels [B].

    Raises ValueError unless logits is 2-D with the labels' batch size B and every label is in [0, C)
    (out of range, torch raises IndexError and optax silently gives a wrong loss).
    """
    check_rank("cross_entropy", "logits", logits.shape, "BC")
    check_same_shape("cross_entropy", logits_batch=logits.shape[:1], labels=labels.shape)
    check_values("cross_entropy", "labels", labels, low=0, high=logits.shape[-1], high_open=True)
    return optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()


@functools.cache
def transformation(factory: Callable, *args, **kwargs) -> optax.GradientTransformation:
    """factory(*args, **kwargs) (an optax constructor: optax.adamw, optax.sgd ...), one object per setting.

    nnx.jit keys its compile cache on an nnx.Optimizer's transformation: a new but equal one
    would compile the step again (some seconds per run). Settings must be hashable (floats).
    """
    return factory(*args, **kwargs)


# -- networks the scenarios share (the lesson is in what each scenario does with them) ----------------


class MLP(nnx.Module):
    """out [..., O] = l2(tanh(l1(x [..., D]))): two nnx.Linear layers, parameters in the given dtype."""

    def __init__(self, d: int, h: int, o: int, dtype: jnp.dtype, rngs: nnx.Rngs) -> None:
        self.l1 = nnx.Linear(d, h, param_dtype=dtype, rngs=rngs)
        self.l2 = nnx.Linear(h, o, param_dtype=dtype, rngs=rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.l2(jnp.tanh(self.l1(x)))
