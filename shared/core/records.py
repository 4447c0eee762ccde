"""The record types of the registry: `Scenario` and `Porting` (see shared/core/registry.py).

A scenario module (`shared/scenarios/<name>.py`) builds one `Scenario` as `SPEC`; the
registry finds it there. Kept apart from the registry so that a record imports only
the schema and the comparator's `Tolerance`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

import numpy as np

from .schema import Field
from .tolerance import Tolerance

__all__ = ["Porting", "Scenario", "FAMILIES"]

# scenarios: the seed tutorials; pitfalls: naive vs ported pairs (P01-...); advanced: the stops of
# modern training code; data_parallel: two processes per framework (torch.distributed, jax.distributed)
FAMILIES = ("scenarios", "pitfalls", "advanced", "data_parallel")


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
      family: one of FAMILIES (the CLI's --family).
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
        from torch (a naive port): there JAX must differ from torch and match
        `naive_oracle`, everywhere else it must agree; torch must match the oracle on
        every key.
      naive_oracle: (fixture, variant) -> float64 outputs of what the JAX side of a
        diverging variant computes on its declared keys: the right wrong answer (the
        tanh gelu, the biased std, the swapped soft update ...), so that a naive port
        that computes anything else fails. A diverging case without it fails (runner).
      nonfinite_ok: globs of output keys allowed to be NaN / inf (equal on both sides).
      dtypes: dtypes the scenario runs in.
      checks: cross-field fixture constraints the schema cannot state (e.g. "window
        divides T"): (arrays, dims) -> an error message naming the fields, or None.
      order: teaching position within the family (lower first; ties by name).
      step_loss: (oracle outputs, float64 fixture arrays) -> the loss of the first call of
        the pair's `make_step` (the training step the bench times), or None when the
        scenario has no step. A pair with a step exports `make_step` on both sides.
      step_updates: the step writes parameters or a carry, so its second loss differs.
      constants: framework-neutral constants both implementations read from the fixture's
        record (`fx.spec.constants`), e.g. the names of the cells or regimes they loop over,
        so that neither imports the record module.
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
    naive_oracle: Callable[..., dict[str, np.ndarray]] | None = None
    order: int = 0
    step_loss: Callable[[Mapping[str, np.ndarray], Mapping[str, np.ndarray]], object] | None = None
    step_updates: bool = False
    constants: Mapping[str, object] = field(default_factory=dict)

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
        # read-only mappings: a fixture carries its record (fx.spec), and no caller can rewrite the lesson
        freeze = lambda mapping: MappingProxyType(dict(mapping))  # noqa: E731
        object.__setattr__(self, "schema", freeze(self.schema))
        object.__setattr__(self, "constants", freeze(self.constants))
        object.__setattr__(self, "pattern", freeze({v: tuple(map(tuple, r)) for v, r in self.pattern.items()}))
        object.__setattr__(self, "diverges", freeze({v: tuple(g) for v, g in self.diverges.items()}))
        object.__setattr__(self, "tolerances", freeze({dt: freeze(t) for dt, t in self.tolerances.items()}))

    @property
    def has_step(self) -> bool:
        """Whether the pair exports `make_step` (the training step the bench times)."""
        return self.step_loss is not None

    def check_variant(self, variant: str) -> str:
        """Return `variant` if registered, else raise ValueError listing the valid names."""
        if variant not in self.variants:
            raise ValueError(f"{self.name}: variant expected one of {list(self.variants)}, got {variant!r}")
        return variant
