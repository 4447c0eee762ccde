"""Rules for the user's own module classes: `register_rule(MyDense, {"w": ("kernel", (1, 0)), "b": "bias"})`.

A rule says how a module's weights travel between the two models: for a torch class, each torch
attribute (its leaf) -> the NNX leaf that holds it at the twin module's path, and the permutation of
axes that turns torch's array into NNX's ((1, 0): a transpose; none: the same layout). For a Flax NNX
class (a port whose module stores a standard layer's weights under names of its own), each canonical
leaf of the torch rule -> the NNX leaf that holds it. The rule tables are the backends'
(torch_impl/_layout.py, jax_impl/backend/layout.py); this module checks the declaration once, for
both, and hands back a `Rule` that removes itself (`rule.remove()`, or `with register_rule(...):`),
so a test's rule does not leak into the next.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from ..backends import backend
from .match import PortInputError

__all__ = ["Rule", "register_rule", "registered"]

_ROOTS = {"torch.nn.modules.module.Module": "torch", "flax.nnx.module.Module": "jax"}
_LIVE: list[Rule] = []  # registered and not removed: registered()


@dataclass
class Rule:
    """A registered rule: `remove()` takes it out of its table again (also on leaving a `with`)."""

    module_type: type
    framework: str  # "torch" | "jax"
    leaves: dict[str, tuple[str, tuple[int, ...] | None]]
    _remove: Callable[[], None] = field(repr=False, default=lambda: None)

    def remove(self) -> None:
        """Unregister the rule (a second call does nothing)."""
        self._remove()
        self._remove = lambda: None
        _LIVE[:] = [r for r in _LIVE if r is not self]

    def __enter__(self) -> Rule:
        return self

    def __exit__(self, *exc) -> None:
        self.remove()


def _framework(module_type) -> str:
    names = [f"{c.__module__}.{c.__qualname__}" for c in getattr(module_type, "__mro__", ())]
    found = [_ROOTS[n] for n in names if n in _ROOTS]
    if not isinstance(module_type, type) or not found:
        raise PortInputError(
            f"register_rule: module_type expected a subclass of torch.nn.Module or flax.nnx.Module, got {module_type!r}"
        )
    return found[0]


def _leaf(key: str, spec) -> tuple[str, tuple[int, ...] | None]:
    """A leaf's spec as (target name, permutation or None); PortInputError naming the leaf otherwise."""
    name, perm = spec, None
    if isinstance(spec, tuple | list) and len(spec) == 2 and isinstance(spec[1], tuple | list):
        name, perm = spec[0], tuple(spec[1])
    if not isinstance(name, str) or not name:
        raise PortInputError(
            f"register_rule: leaves[{key!r}] expected a leaf name or (name, permutation), got {spec!r}"
        )
    if perm is not None and sorted(p if isinstance(p, int) else -1 for p in perm) != list(range(len(perm))):
        raise PortInputError(f"register_rule: leaves[{key!r}] permutation expected 0..n-1 in some order, got {perm!r}")
    return name, perm


def register_rule(module_type: type, leaves: Mapping[str, str | tuple[str, tuple[int, ...]]]) -> Rule:
    """Teach the checker a module class of your own: which weights it has and where the NNX port holds them.

    Args:
      module_type: a torch.nn.Module subclass (its instances and subclasses' follow the rule), or a
        flax.nnx.Module subclass that holds a standard layer's canonical leaves under other names.
      leaves: torch class: {torch attribute ("weight", "proj.weight"): NNX leaf name ("kernel"), or
        (NNX leaf name, permutation of the torch array's axes into NNX's layout: (1, 0) transposes)}.
        NNX class: {canonical leaf ("kernel", "bias"): its NNX leaf name, or (name, permutation)}.
    Returns:
      Rule: `.remove()` unregisters it; as a context manager, it is removed on leaving the `with`.
    Raises:
      PortInputError (a ValueError): a class that is neither, a class that already has a rule (a rule
        registered twice, or a built-in one such as nn.Linear's: the message names the class), empty or
        malformed leaves, two leaves with one name, a permutation that is not one.
    """
    framework = _framework(module_type)
    if not isinstance(leaves, Mapping) or not leaves or not all(isinstance(k, str) and k for k in leaves):
        raise PortInputError(
            f"register_rule: leaves expected a non-empty dict of leaf name -> spec, got {leaves!r:.80}"
        )
    table = {key: _leaf(key, spec) for key, spec in leaves.items()}
    names = [name for name, _ in table.values()]
    if len(set(names)) != len(names):
        raise PortInputError(f"register_rule: leaves expected distinct target names, got {names}")
    try:
        remove = backend(framework).port.register(module_type, table)
    except ValueError as exc:
        raise PortInputError(f"register_rule: {exc}") from None
    rule = Rule(module_type, framework, table, remove)
    _LIVE.append(rule)
    return rule


def registered() -> tuple[Rule, ...]:
    """The rules registered and not removed, oldest first (the diagnosis replays the leaves they declare)."""
    return tuple(_LIVE)
