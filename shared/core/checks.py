"""Argument checks shared by both frameworks: one helper per kind, one message for both.

Shape guards of every loss (pitfall P14): a TD target of shape [B] against Q(s, a) of
shape [B, 1] broadcasts to [B, B] and gives a wrong loss; torch only warns, jnp.mean is
silent. Every loss in the package calls `check_same_shape` first. `check_variant`: a
public helper that branches on a variant refuses a name its scenario does not register.

Values are checked the way fixtures are (shared/core/schema.py, the same interval notation):
`check_int` (counts such as k or the inner steps), `check_scalar` (hyper-parameters such as
γ or τ), `check_values` (arrays such as dones in {0, 1} or labels in [0, C)), and `check_x64`
(a JAX builder handed a float64 fixture outside x64 would silently build float32 arrays).
A value inside jax.jit or jax.grad is a tracer, unknown until the program runs: the value
checks pass it through (`is_traced`); the caller that made it, run() from its validated
fixture, or an eager call of the same helper, is where it is checked.
"""

from __future__ import annotations

import numpy as np

from . import registry
from .schema import Field

__all__ = [
    "check_variant",
    "check_same_shape",
    "check_rank",
    "check_truncation",
    "truncation_length",
    "is_traced",
    "check_int",
    "check_scalar",
    "check_values",
    "check_x64",
]


def is_traced(value: object) -> bool:
    """True for a JAX tracer (a value inside jax.jit / jax.grad / jax.vmap): its value is not known yet."""
    return any(cls.__name__.endswith("Tracer") for cls in type(value).__mro__)


def _as_numpy(value: object) -> np.ndarray:
    if hasattr(value, "detach") and hasattr(value, "cpu"):  # a torch tensor, maybe requiring grad
        value = value.detach().cpu()
    return np.asarray(value)


def check_int(who: str, name: str, value: object, low: int, high: int | None = None) -> object:
    """`value` as an int if it is one (not a bool, not a float) in [low, high]; a traced value as is.

    Example: check_int("maml.adapt", "steps", 0, 1, 10) raises
    "maml.adapt: steps expected an integer in [1, 10], got 0".
    """
    if is_traced(value):
        return value
    interval = f"[{low}, {'inf' if high is None else high}]"
    ok = not isinstance(value, bool) and isinstance(value, int | np.integer)
    if not ok or value < low or (high is not None and value > high):
        raise ValueError(f"{who}: {name} expected an integer in {interval}, got {value!r}")
    return int(value)


def check_scalar(
    who: str,
    name: str,
    value: object,
    low: float | None = None,
    high: float | None = None,
    *,
    low_open: bool = False,
    high_open: bool = False,
) -> object:
    """`value` if it is one finite real number (a Python number or a 0-d array / tensor) in the interval.

    Example: check_scalar("dqn_target.td_targets", "gamma", -0.5, 0.0, 1.0) raises
    "dqn_target.td_targets: gamma expected a number in [0, 1], got -0.5". A traced value is returned as is.
    """
    if is_traced(value):
        return value
    field = Field((), low=low, high=high, low_open=low_open, high_open=high_open)
    arr = None if isinstance(value, bool | str) else _as_numpy(value)
    if arr is not None and arr.shape != ():  # described, not repr'd: the message is the same in both frameworks
        raise ValueError(
            f"{who}: {name} expected a number in {field.range_text({})}, got an array of shape {arr.shape}"
        )
    if arr is None or arr.dtype.kind not in "iuf":
        raise ValueError(f"{who}: {name} expected a number in {field.range_text({})}, got {value!r}")
    if not np.isfinite(arr) or field.out_of_range(arr, {}).any():
        raise ValueError(f"{who}: {name} expected a number in {field.range_text({})}, got {arr.item()!r}")
    return value


def check_values(
    who: str,
    name: str,
    values: object,
    *,
    choices: tuple[float, ...] | None = None,
    low: float | None = None,
    high: float | None = None,
    low_open: bool = False,
    high_open: bool = False,
) -> object:
    """`values` if every element is finite and in `choices` or the interval; a traced array as is.

    Example: check_values("dqn_target.td_targets", "dones", [0, 0.5], choices=(0, 1)) raises
    "dqn_target.td_targets: dones expected values in {0, 1}, got 0.5 at index (1,)".
    """
    if is_traced(values):
        return values
    field = Field((), low=low, high=high, low_open=low_open, high_open=high_open, choices=choices)
    arr = _as_numpy(values)
    if arr.dtype.kind not in "biuf":
        raise ValueError(f"{who}: {name} expected numbers in {field.range_text({})}, got dtype {arr.dtype}")
    bad = field.out_of_range(arr, {}) | (~np.isfinite(arr) if arr.dtype.kind == "f" else False)
    if bad.any():
        idx = tuple(int(i) for i in np.argwhere(bad)[0])
        raise ValueError(f"{who}: {name} expected values in {field.range_text({})}, got {arr[idx]} at index {idx}")
    return values


def check_x64(who: str, dtype: str, x64_enabled: bool) -> None:
    """Refuse a float64 fixture where JAX computes in 32 bits (x64 off): it would build float32 arrays.

    Raises ValueError naming `who` and how to call it (run() enables x64 for its call only).
    """
    if dtype == "float64" and not x64_enabled:
        raise ValueError(
            f"{who}: a float64 fixture needs jax_enable_x64, got it off (JAX would build float32 arrays); "
            "call it inside `with jax.enable_x64(True):` as run() does, or use a float32 fixture"
        )


def check_variant(scenario: str, variant: str) -> str:
    """Return `variant` if `scenario` registers it, else raise ValueError listing the valid names.

    Public helpers that branch on `variant` call this first, so a typo'd name fails
    instead of falling into an else branch (run() checks it through scenario_run).
    """
    return registry.get(scenario).check_variant(variant)


def check_same_shape(loss: str, **shapes: tuple[int, ...]) -> None:
    """Raise ValueError unless every named shape is identical.

    Example: check_same_shape("td_loss", q=(4, 1), target=(4,)) raises
    "td_loss: q has shape (4, 1) but target has shape (4,); expected identical shapes
    (no broadcasting in a loss)".
    """
    items = [(name, tuple(int(d) for d in shape)) for name, shape in shapes.items()]
    first_name, first = items[0]
    for name, shape in items[1:]:
        if shape != first:
            raise ValueError(
                f"{loss}: {first_name} has shape {first} but {name} has shape {shape}; "
                "expected identical shapes (no broadcasting in a loss)"
            )


def check_rank(loss: str, name: str, shape: tuple[int, ...], axes: str) -> None:
    """Raise ValueError unless `shape` has one axis per letter of `axes`.

    Example: check_rank("cross_entropy", "logits", (4,), "BC") raises
    "cross_entropy: logits expected rank 2 [B, C], got shape (4,)".
    """
    shape = tuple(int(d) for d in shape)
    if len(shape) != len(axes):
        raise ValueError(f"{loss}: {name} expected rank {len(axes)} [{', '.join(axes)}], got shape {shape}")


def check_truncation(name: str, k: object, t_steps: int, target_steps: int | None = None, divides: bool = True) -> int:
    """A truncation length k for `name`, checked: an int in [1, T], dividing T when `divides`.

    target_steps: the targets' T, which must equal x's T. Returns k as an int (a traced k as is).
    Raises ValueError naming k (or targets), the expected and the actual value.
    """
    if target_steps is not None and target_steps != t_steps:
        raise ValueError(f"{name}: targets expected T = {t_steps} steps, as x, got {target_steps}")
    if is_traced(k):  # inside jax.jit: checked by the caller that made it (run: truncation_length)
        return k
    if isinstance(k, bool) or not isinstance(k, int | np.integer) or not 1 <= k <= t_steps:
        raise ValueError(f"{name}: k expected an integer in [1, T = {t_steps}], got {k!r}")
    if divides and t_steps % k:
        raise ValueError(f"{name}: k expected to divide T = {t_steps}, got k = {k}")
    return int(k)


def truncation_length(variant: str, t_steps: int) -> int:
    """The truncation length k named by a variant: "k=1" -> 1, "k=10" -> 10, "k=T" -> T.

    Raises ValueError for a variant that names no length, or k > T (a window longer than
    the sequence would silently be full BPTT).
    """
    text = variant[2:] if isinstance(variant, str) and variant.startswith("k=") else ""
    if text != "T" and not text.isdigit():
        raise ValueError(f"truncation: variant expected 'k=<int>' or 'k=T', got {variant!r}")
    k = t_steps if text == "T" else int(text)
    if not 1 <= k <= t_steps:
        raise ValueError(f"truncation: variant {variant!r} expected 1 <= k <= T = {t_steps} (field 'x'), got k={k}")
    return k
