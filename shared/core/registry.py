"""The scenario registry: every record found once, in teaching order.

A `Scenario` record (shared/core/records.py) holds what is framework-neutral about a
scenario: its title, the tutorial claims it comes from, its variants and fixture cases,
the fixture schema and builder, the float64 oracle, the tolerances per dtype, the
expected zero / non-zero pattern of its outputs per variant (the lesson, asserted on
both frameworks so that parity can never pass with both sides equally wrong), the
porting notes and the facts of its training step.

Each record is `SPEC` in `shared/scenarios/<name>.py`. The registry finds them there:
every module of the `shared.scenarios` package (its `__path__`, so a folder appended to
it is searched too) that does not start with "_". Adding a scenario touches no list.
Order: family (FAMILIES order), then the record's `order`, then the name. Like the
runner's loader of the implementations, this is the one place that imports scenario
modules by name; nothing here imports a framework.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Iterator, Mapping

from .records import FAMILIES, Porting, Scenario

__all__ = ["Porting", "Scenario", "SCENARIOS", "FAMILIES", "PACKAGE", "get", "names", "refresh"]

PACKAGE = f"{__package__.rsplit('.', 1)[0]}.scenarios"  # detach_parity.shared.scenarios


def _discover() -> dict[str, Scenario]:
    package = importlib.import_module(PACKAGE)
    found: dict[str, Scenario] = {}
    for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda m: m.name):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{PACKAGE}.{info.name}")
        spec = getattr(module, "SPEC", None)
        if not isinstance(spec, Scenario):
            raise ValueError(f"{PACKAGE}.{info.name}: SPEC expected a Scenario record, got {type(spec).__name__}")
        if spec.name != info.name:
            raise ValueError(f"{PACKAGE}.{info.name}: SPEC.name expected {info.name!r}, got {spec.name!r}")
        found[spec.name] = spec
    ordered = sorted(found.values(), key=lambda s: (FAMILIES.index(s.family), s.order, s.name))
    return {s.name: s for s in ordered}


class _Registry(Mapping[str, Scenario]):
    """Read-only name -> record mapping, discovered on first use (and again after refresh())."""

    def __init__(self) -> None:
        self._records: dict[str, Scenario] | None = None

    def _all(self) -> dict[str, Scenario]:
        if self._records is None:
            self._records = _discover()
        return self._records

    def __getitem__(self, name: str) -> Scenario:
        return self._all()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._all())

    def __len__(self) -> int:
        return len(self._all())

    def __repr__(self) -> str:
        return f"SCENARIOS({list(self)})"


SCENARIOS: Mapping[str, Scenario] = _Registry()


def refresh() -> None:
    """Forget the records found so far: the next lookup searches `shared.scenarios` again."""
    SCENARIOS._records = None  # type: ignore[attr-defined]


def names(family: str | None = None) -> list[str]:
    """Registered scenario names in teaching order, optionally of one family.

    Raises ValueError for an unknown family.
    """
    if family is not None and family not in FAMILIES:
        raise ValueError(f"family expected one of {list(FAMILIES)}, got {family!r}")
    return [n for n, s in SCENARIOS.items() if family is None or s.family == family]


def get(name: str) -> Scenario:
    """The record of a scenario; ValueError listing the valid names if unknown."""
    if isinstance(name, Scenario):
        return name
    try:
        return SCENARIOS[name]
    except (KeyError, TypeError):
        raise ValueError(f"scenario expected one of {names()}, got {name!r}") from None
