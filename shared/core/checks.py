"""Argument checks shared by both frameworks: one helper per kind, one message for both.

Shape guards of every loss (pitfall P14): a TD target of shape [B] against Q(s, a) of
shape [B, 1] broadcasts to [B, B] and gives a wrong loss; torch only warns, jnp.mean is
silent. Every loss in the package calls `check_same_shape` first. `check_variant`: a
public helper that branches on a variant refuses a name its scenario does not register.
"""

from __future__ import annotations

import numpy as np

from shared.core import registry

__all__ = ["check_variant", "check_same_shape", "check_rank", "check_truncation", "truncation_length"]


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

    target_steps: the targets' T, which must equal x's T. Returns k as an int.
    Raises ValueError naming k (or targets), the expected and the actual value.
    """
    if isinstance(k, bool) or not isinstance(k, int | np.integer) or not 1 <= k <= t_steps:
        raise ValueError(f"{name}: k expected an integer in [1, T = {t_steps}], got {k!r}")
    if target_steps is not None and target_steps != t_steps:
        raise ValueError(f"{name}: targets expected T = {t_steps} steps, as x, got {target_steps}")
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
