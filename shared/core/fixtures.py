"""Deterministic, validated numpy fixtures: the one input both frameworks see.

`make(spec, dtype, seed=0)` builds the fixture of a scenario record (or of a registered
name, looked up once) with a numpy `Generator(PCG64(seed))`, casts every float field to
`dtype`, validates it against the record's schema (shared/core/schema.py) and returns an
immutable `Fixture`. The same object is handed to `torch_impl.<scenario>.run`,
`jax_impl.<scenario>.run` and the oracle; it carries its record (`fx.spec`), so nothing
downstream looks the scenario up again.

A fixture owns private copies of its arrays over immutable bytes buffers and hands out
read-only views: neither a write through an array nor a flag flipped back to writeable
(on the view or on its base) can change a validated fixture, and its provenance
attributes cannot be reassigned. The structure (fields, shapes, dtypes) is validated
before anything is copied, so a huge array of the wrong shape is a shape error.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from types import MappingProxyType

import numpy as np

from . import registry
from .records import Scenario
from .schema import FLOAT_DTYPES, KIND_DTYPE, validate_structure, validate_values

__all__ = ["FLOAT_DTYPES", "Fixture", "make", "from_arrays", "require"]


class Fixture(Mapping[str, np.ndarray]):
    """Immutable mapping of named, read-only numpy arrays plus their provenance.

    Attributes (read-only):
      spec: the scenario record.  scenario: its name.  dtype: "float32" | "float64".
      seed: int or None.  case: fixture case ("random", or a named hand-made case).
      dims: bound shape letters, e.g. {"B": 8, "D": 3}.
    Raises:
      ValueError: an array fails the schema or a cross-field check (the message names
        the scenario, the field, the expected and the actual value).
    """

    __slots__ = ("_spec", "_dtype", "_seed", "_case", "_dims", "_arrays")

    def __init__(
        self, spec: Scenario, dtype: str, arrays: Mapping[str, np.ndarray], *, seed: int | None, case: str
    ) -> None:
        name = spec.name
        for key, arr in arrays.items():
            if not isinstance(arr, np.ndarray):
                raise ValueError(f"fixture {name!r} field {key!r}: expected a numpy array, got {type(arr).__name__}")
        validate_structure(name, dtype, arrays, spec.schema)  # before any copy: shapes and dtypes only
        frozen = {key: _read_only_copy(arr) for key, arr in arrays.items()}  # the caller cannot write through
        dims = validate_structure(name, dtype, frozen, spec.schema)
        validate_values(name, frozen, spec.schema, dims)  # on the private copy
        for check in spec.checks:  # cross-field constraints the schema cannot state
            problem = check(frozen, dims)
            if problem:
                raise ValueError(f"fixture {name!r}: {problem}")
        set_ = object.__setattr__
        set_(self, "_spec", spec)
        set_(self, "_dtype", dtype)
        set_(self, "_seed", seed)
        set_(self, "_case", case)
        set_(self, "_dims", MappingProxyType(dims))
        set_(self, "_arrays", MappingProxyType(frozen))

    def __setattr__(self, key: str, value: object) -> None:
        raise AttributeError(f"Fixture is immutable: cannot set {key!r}")

    def __delattr__(self, key: str) -> None:
        raise AttributeError(f"Fixture is immutable: cannot delete {key!r}")

    spec = property(lambda self: self._spec, doc="the scenario record")
    scenario = property(lambda self: self._spec.name, doc="the scenario name")
    dtype = property(lambda self: self._dtype, doc='"float32" or "float64"')
    seed = property(lambda self: self._seed, doc="the fixture seed, None for user arrays")
    case = property(lambda self: self._case, doc="the fixture case")
    dims = property(lambda self: self._dims, doc="bound shape letters")

    def __getitem__(self, key: str) -> np.ndarray:
        try:
            arr = self._arrays[key]
        except KeyError:
            raise KeyError(f"fixture {self.scenario!r} has no field {key!r}; fields: {sorted(self._arrays)}") from None
        view = arr.view()  # a view of a read-only base: its writeable flag cannot be turned on
        view.flags.writeable = False
        return view

    def __iter__(self) -> Iterator[str]:
        return iter(self._arrays)

    def __len__(self) -> int:
        return len(self._arrays)

    def __reduce__(self):
        # pickled by content (a process pool, say); rebuilt and revalidated on the other side
        return (_rebuild, (self.scenario, self.dtype, dict(self._arrays), self.seed, self.case))

    def scalar(self, key: str) -> float:
        """A 0-d float field as a Python float (hyper-parameters)."""
        return float(self[key])

    def under(self, prefix: str) -> dict[str, np.ndarray]:
        """The fields under `prefix/`, keyed by the rest of their path: `fx.under("params")` gives
        {"l1/kernel": ..., "l1/bias": ...} for the fields params/l1/kernel, params/l1/bias (read-only views).

        Raises KeyError naming the prefix and the fields when no field is under it.
        """
        head = f"{prefix.rstrip('/')}/"
        out = {k.removeprefix(head): self[k] for k in self._arrays if k.startswith(head)}
        if not out:
            raise KeyError(f"fixture {self.scenario!r} has no field under {head!r}; fields: {sorted(self._arrays)}")
        return out

    def float64(self) -> dict[str, np.ndarray]:
        """Writable float64 copies of every float field (ints and bools unchanged), for the oracle."""
        return {k: v.astype(np.float64) if v.dtype.kind == "f" else v.copy() for k, v in self._arrays.items()}

    def __repr__(self) -> str:
        fields = ", ".join(f"{k}{list(v.shape)}" for k, v in self._arrays.items())
        return f"Fixture({self.scenario!r}, {self.dtype}, seed={self.seed}, case={self.case!r}: {fields})"


def _read_only_copy(arr: np.ndarray) -> np.ndarray:
    """A copy of arr over an immutable bytes buffer: no view of it, nor its base, can be made writeable again.

    (An array that owns its memory can always be flipped back to writeable; one over bytes cannot.)
    """
    return np.frombuffer(arr.tobytes(order="C"), dtype=arr.dtype).reshape(arr.shape)


def _rebuild(scenario: str, dtype: str, arrays: dict, seed: int | None, case: str) -> Fixture:
    return Fixture(registry.get(scenario), dtype, arrays, seed=seed, case=case)


def _spec(scenario: Scenario | str) -> Scenario:
    return scenario if isinstance(scenario, Scenario) else registry.get(scenario)


def _cast(arrays: Mapping[str, np.ndarray], spec: Scenario, dtype: str) -> dict[str, np.ndarray]:
    out = {}
    for name, arr in arrays.items():
        field = spec.schema.get(name)
        kind = field.kind if field is not None else "float"
        target = np.dtype(dtype) if kind == "float" else KIND_DTYPE[kind]
        out[name] = np.asarray(arr).astype(target)
    return out


def make(scenario: Scenario | str, dtype: str, seed: int = 0, case: str | None = None) -> Fixture:
    """Build the validated fixture of a scenario.

    Args:
      scenario: a scenario record, or a registered name (see `detach-parity list`).
      dtype: "float32" or "float64"; every float field is cast to it.
      seed: seed of `numpy.random.Generator(PCG64(seed))`, an int in [0, 2**63); a named
        hand-made case ignores it.
      case: one of the scenario's `cases`; default its first.
    Raises:
      ValueError: unknown scenario, case or dtype, a bad seed, or a builder output that
        fails the schema.
    """
    spec = _spec(scenario)
    name = spec.name
    case = spec.cases[0] if case is None else case
    if case not in spec.cases:
        raise ValueError(f"fixture {name!r}: case expected one of {list(spec.cases)}, got {case!r}")
    if dtype not in FLOAT_DTYPES:
        raise ValueError(f"fixture {name!r}: dtype expected one of {FLOAT_DTYPES}, got {dtype!r}")
    if isinstance(seed, bool) or not isinstance(seed, int | np.integer) or not 0 <= seed < 2**63:
        raise ValueError(f"fixture {name!r}: seed expected a non-negative int below 2**63, got {seed!r}")
    rng = np.random.Generator(np.random.PCG64(int(seed)))
    raw = spec.build(rng, case)
    return Fixture(spec, dtype, _cast(raw, spec, dtype), seed=int(seed), case=case)


def from_arrays(scenario: Scenario | str, arrays: Mapping[str, np.ndarray], *, case: str = "user") -> Fixture:
    """Wrap user-supplied arrays as a fixture, validated exactly like `make`.

    The dtype is read from the float fields (all must agree); nothing is cast, so
    a float16 array or a list is refused rather than silently converted.
    Raises:
      ValueError: as `validate`, or float fields with different dtypes.
    """
    spec = _spec(scenario)
    name = spec.name
    if not isinstance(arrays, Mapping):
        raise ValueError(
            f"fixture {name!r}: arrays expected a mapping of field name to array, got {type(arrays).__name__}"
        )
    missing = sorted(set(spec.schema) - set(arrays))
    if missing:
        raise ValueError(f"fixture {name!r}: missing field(s) {missing}; expected fields {sorted(spec.schema)}")
    for key, arr in arrays.items():
        if not isinstance(arr, np.ndarray):
            raise ValueError(f"fixture {name!r} field {key!r}: expected a numpy array, got {type(arr).__name__}")
    by_field = {k: str(a.dtype) for k, a in arrays.items() if k in spec.schema and spec.schema[k].kind == "float"}
    if len(set(by_field.values())) != 1:
        raise ValueError(f"fixture {name!r}: float fields expected one dtype of {FLOAT_DTYPES}, got {by_field}")
    return Fixture(spec, next(iter(by_field.values())), dict(arrays), seed=None, case=case)


def require(fx: object, scenario: str, dtype: str, who: str) -> Fixture:
    """fx itself if it is a `dtype` Fixture of `scenario`.

    Raises ValueError naming `who`, the expected and the actual fixture.
    """
    if isinstance(fx, Fixture) and fx.scenario == scenario and fx.dtype == dtype:
        return fx
    got = f"a {fx.dtype} Fixture of {fx.scenario!r}" if isinstance(fx, Fixture) else type(fx).__name__
    raise ValueError(f"{who}: fx expected a {dtype} Fixture of {scenario!r}, got {got}")
