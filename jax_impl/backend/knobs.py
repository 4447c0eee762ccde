"""Port checker, JAX half, counterfactuals: the knobs a run of the port can apply; the mirror of
torch_impl/backend/knobs.py.

What it does: each knob changes how the NNX port computes for one run (the matmul precision), so that
if the port with the knob matches torch, the knob names the bug.
Gradient flow: unchanged; a knob changes precision only.
Port note: a knob holds for the body of its with only (JAX's own context managers).
Shapes: as the user's model.
Reference: the checker's catalogue (shared/apps/check/catalogue/), one record per knob.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import jax

__all__ = ["knobs", "knob"]

# the counterfactuals of the port (precision), each named by one record of the checker's catalogue
# (shared/apps/check/catalogue/), which says what it changes and which pitfall it confirms
_KNOBS = ("matmul_default",)


def knobs() -> frozenset[str]:
    """The counterfactuals `run_loss` / `train` can apply on this side, by name (no matmul_default on a
    CPU, where JAX computes float32 matmuls in full float32 whatever the precision setting)."""
    on_cpu = jax.default_backend() == "cpu"
    return frozenset(k for k in _KNOBS if not (on_cpu and k == "matmul_default"))


@contextlib.contextmanager
def knob(name: str | None) -> Iterator[None]:
    """Applies the knob `name` to JAX for the body of the with; restores what it patched.

    Raises ValueError naming the knob when it is not one of `knobs()`.
    """
    if name is None:
        yield
    elif name == "matmul_default":
        with jax.default_matmul_precision("default"):
            yield
    else:
        raise ValueError(f"knob expected one of {sorted(_KNOBS)} or None, got {name!r}")
