"""The claim checks in JAX / Flax NNX / optax, one module per theme; `CHECKS[name]()` runs one (shared/core/backend.py Claims).

Each theme module's `__all__` lists its checks in id order (shared/apps/claims checks this).
"""

from . import aliasing, freezing, losses, modes, recurrence

__all__ = ["THEMES", "CHECKS"]

THEMES = {"aliasing": aliasing, "freezing": freezing, "losses": losses, "modes": modes, "recurrence": recurrence}
CHECKS = {name: getattr(module, name) for module in THEMES.values() for name in module.__all__}
