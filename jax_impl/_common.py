"""Helpers shared by the JAX scenarios; mirrored by torch_impl/_common.py."""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from shared.contracts import check_call, finish
from shared.fixtures import Fixture

__all__ = ["scenario_run", "check_variant", "array", "numpy", "flat", "load_params", "params_of", "fill_zero_grads"]


def scenario_run(scenario: str) -> Callable:
    """Decorate `run(fx, variant)`: check the arguments, compute in the fixture's dtype.

    float64 needs `jax_enable_x64`; it is switched on only for the call (a context
    manager, so it never leaks into other code), and off for float32 so that a
    float32 run really computes in float32 whatever the global setting.
    """

    def wrap(run: Callable) -> Callable:
        @functools.wraps(run)
        def checked(fx: Fixture, variant: str) -> dict[str, np.ndarray]:
            check_call(scenario, fx, variant)
            with jax.enable_x64(fx.dtype == "float64"):
                out = run(fx, variant)
                return finish(scenario, variant, {k: numpy(v) for k, v in out.items()})

        return checked

    return wrap


def check_variant(scenario: str, variant: str) -> str:
    """Return `variant` if `scenario` registers it, else raise ValueError listing the valid names.

    Public helpers that branch on `variant` call this first, so a typo'd name fails
    instead of falling into an else branch (run() checks it through scenario_run).
    """
    from shared.registry import get  # late: the registry imports the scenario records

    return get(scenario).check_variant(variant)


def array(fx: Fixture, key: str) -> jax.Array:
    """A fixture field as a JAX array of the same dtype."""
    return jnp.asarray(fx[key])


def numpy(x) -> np.ndarray:
    """A JAX array (or scalar) as a numpy array."""
    return np.asarray(jax.device_get(x))


def flat(tree: Mapping) -> dict[str, np.ndarray]:
    """A nested dict or nnx.State as a flat dict keyed by '/'-joined paths."""
    if isinstance(tree, nnx.State):
        return {"/".join(map(str, path)): numpy(v.get_value()) for path, v in tree.flat_state()}
    out = {}
    for k, v in tree.items():
        if isinstance(v, Mapping):
            out.update({f"{k}/{kk}": vv for kk, vv in flat(v).items()})
        else:
            out[str(k)] = numpy(v)
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
    for path, var in state.flat_state():
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


def fill_zero_grads(grads: Mapping[str, np.ndarray], params: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Gradients for every parameter: those not differentiated (nnx.DiffState) become explicit zeros.

    The mirror of torch_impl._common.grads_or_zeros / _layout.canonical_grads (pitfall P11).
    Raises ValueError if `grads` holds a key that is not a parameter.
    """
    extra = sorted(set(grads) - set(params))
    if extra:
        raise ValueError(f"fill_zero_grads: gradients {extra} match no parameter; parameters {sorted(params)}")
    return {k: np.asarray(grads[k]) if k in grads else np.zeros_like(v) for k, v in params.items()}
