"""The record types of the registry: `Scenario` and `Porting` (see shared/registry.py).

Kept apart from registry.py so that a scenario module can import them without
loading the whole registry.

"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

import numpy as np

from shared.fixtures import Field
from shared.parity import Tolerance

__all__ = ["Porting", "Scenario", "FAMILIES"]

FAMILIES = ("scenarios", "pitfalls")


@dataclass(frozen=True)
class Porting:
    """Porting notes: the torch idiom, the JAX idiom, the trap between them."""

    torch: str
    jax: str
    trap: str


@dataclass(frozen=True)
class Scenario:
    """One registered scenario (see module docstring).

    Attributes:
      name: module name in torch_impl/ and jax_impl/.
      title: one line.
      family: "scenarios" or "pitfalls" (the CLI's --family).
      claims: ids of the tutorial claims it checks (e.g. ("C03",)), or () if none.
      source: article and section, e.g. "A3 §1.2", or the pitfall id "P07".
      lesson: what the scenario teaches, one or two sentences.
      variants: names; the first is the recommended one.
      cases: fixture cases; "random" is seeded, any other is a fixed hand-made input.
      schema: fixture field name -> Field.
      build: (rng, case) -> dict of float64 / int arrays (cast by fixtures.make).
      oracle: (fixture, variant) -> flat dict of float64 arrays, same keys as run().
      pattern: variant -> ((glob, "zero" | "nonzero"), ...).
      porting: Porting notes.
      tolerances: dtype -> {"parity" | "oracle": Tolerance}, overriding the defaults,
        with the reason in `tolerance_note`.
      diverges: variant -> globs of the output keys on which JAX is meant to differ
        from torch (a naive port): there JAX must differ from torch and the oracle,
        everywhere else it must agree; torch must match the oracle on every key.
      nonfinite_ok: globs of output keys allowed to be NaN / inf (equal on both sides).
      dtypes: dtypes the scenario runs in.
      checks: cross-field fixture constraints the schema cannot state (e.g. "window
        divides T"): (arrays, dims) -> an error message naming the fields, or None.
    """

    name: str
    title: str
    family: str
    claims: tuple[str, ...]
    source: str
    lesson: str
    variants: tuple[str, ...]
    schema: Mapping[str, Field]
    build: Callable[[np.random.Generator, str], dict[str, np.ndarray]]
    oracle: Callable[..., dict[str, np.ndarray]]
    pattern: Mapping[str, tuple[tuple[str, str], ...]]
    porting: Porting
    cases: tuple[str, ...] = ("random",)
    tolerances: Mapping[str, Mapping[str, Tolerance]] = field(default_factory=dict)
    tolerance_note: str = ""
    diverges: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    nonfinite_ok: tuple[str, ...] = ()
    dtypes: tuple[str, ...] = ("float32", "float64")
    checks: tuple[Callable[[Mapping[str, np.ndarray], Mapping[str, int]], str | None], ...] = ()

    def __post_init__(self) -> None:
        if self.family not in FAMILIES:
            raise ValueError(f"scenario {self.name!r}: family expected one of {FAMILIES}, got {self.family!r}")
        if not self.variants:
            raise ValueError(f"scenario {self.name!r}: variants expected at least one, got ()")
        if set(self.pattern) != set(self.variants):
            raise ValueError(
                f"scenario {self.name!r}: pattern expected an entry per variant {list(self.variants)}, "
                f"got {sorted(self.pattern)}"
            )
        if not isinstance(self.diverges, Mapping):
            raise ValueError(
                f"scenario {self.name!r}: diverges expected a mapping variant -> key globs, got {self.diverges!r}"
            )
        unknown = set(self.diverges) - set(self.variants)
        if unknown:
            raise ValueError(f"scenario {self.name!r}: diverges names unknown variants {sorted(unknown)}")
        for variant, globs in self.diverges.items():
            if isinstance(globs, str) or not globs:
                raise ValueError(
                    f"scenario {self.name!r}: diverges[{variant!r}] expected a non-empty tuple of key globs, got {globs!r}"
                )
        object.__setattr__(self, "schema", MappingProxyType(dict(self.schema)))

    def check_variant(self, variant: str) -> str:
        """Return `variant` if registered, else raise ValueError listing the valid names."""
        if variant not in self.variants:
            raise ValueError(f"{self.name}: variant expected one of {list(self.variants)}, got {variant!r}")
        return variant
