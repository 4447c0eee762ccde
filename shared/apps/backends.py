"""The one dispatch point of the applications: one accessor per framework (shared/core/backend.py).

    backend("torch") -> torch_impl/backend/    backend("jax") -> jax_impl/backend/

Only this module imports a framework's backend (an import-linter contract in pyproject.toml);
each import is inside its accessor, so that an application which needs one framework, or none,
loads only that. Lessons are reached by scenario name through shared.core.runner.lesson.
"""

from __future__ import annotations

from collections.abc import Callable

from ..core.backend import Backend
from ..core.runner import FRAMEWORKS

__all__ = ["torch_backend", "jax_backend", "backend"]


def torch_backend() -> Backend:
    """The PyTorch backend (imports torch)."""
    from ...torch_impl import backend as torch_side

    return torch_side


def jax_backend() -> Backend:
    """The JAX / Flax NNX / optax backend (imports JAX)."""
    from ...jax_impl import backend as jax_side

    return jax_side


_ACCESSORS: dict[str, Callable[[], Backend]] = {"torch": torch_backend, "jax": jax_backend}


def backend(framework: str) -> Backend:
    """The backend of `framework`, one of FRAMEWORKS. Raises ValueError for anything else."""
    if framework not in FRAMEWORKS:
        raise ValueError(f"framework expected one of {list(FRAMEWORKS)}, got {framework!r}")
    return _ACCESSORS[framework]()
