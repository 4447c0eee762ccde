"""Deterministic, validated numpy fixtures: the one input both frameworks see.

`make(scenario, dtype, seed=0)` builds the fixture of a registered scenario with a
numpy `Generator(PCG64(seed))`, casts every float field to `dtype`, validates it
against the scenario's schema and returns an immutable `Fixture`. The same object
is handed to `torch_impl.<scenario>.run`, `jax_impl.<scenario>.run` and the oracle.

A schema maps field names to `Field(shape, kind)`. Shapes may use letters
(`("B", "D")`): a letter must take one value across all fields of a fixture, so a
batch of 4 observations next to 3 rewards is refused with a message naming both
fields. `kind` is "float" (the fixture dtype), "int" (int64) or "bool".
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from types import MappingProxyType

import numpy as np

__all__ = ["FLOAT_DTYPES", "Field", "Fixture", "validate", "make", "from_arrays", "require"]

FLOAT_DTYPES = ("float32", "float64")
_KIND_DTYPE = {"int": np.dtype("int64"), "bool": np.dtype("bool")}


@dataclass(frozen=True)
class Field:
    """Schema entry of one fixture array.

    Attributes:
      shape: tuple of ints and shape letters, e.g. ("B", "D") or () for a scalar.
      kind: "float" (fixture dtype), "int" (int64) or "bool".
      finite: reject NaN and inf (float fields).
      doc: what the field holds, with units.
    """

    shape: tuple[int | str, ...]
    kind: str = "float"
    finite: bool = True
    doc: str = ""
    low: float | None = None
    high: float | str | None = None
    low_open: bool = False
    high_open: bool = False
    choices: tuple[float, ...] | None = None

    def __post_init__(self) -> None:
        if self.kind not in ("float", "int", "bool"):
            raise ValueError(f"Field.kind: expected 'float', 'int' or 'bool', got {self.kind!r}")

    def range_text(self, dims: Mapping[str, int]) -> str:
        """The allowed values in interval notation, e.g. "[0, C=3)" or "(0, 1]"."""
        if self.choices is not None:
            return "{" + ", ".join(f"{c:g}" for c in self.choices) + "}"
        lo = "-inf" if self.low is None else f"{self.low:g}"
        if isinstance(self.high, str):
            hi, close = f"{self.high}={dims.get(self.high, '?')}", ")"
        else:
            hi, close = ("inf" if self.high is None else f"{self.high:g}"), (")" if self.high_open else "]")
        return f"{'(' if self.low_open else '['}{lo}, {hi}{close}"

    def out_of_range(self, arr: np.ndarray, dims: Mapping[str, int]) -> np.ndarray:
        """Boolean mask of the elements outside the allowed values (letters bound through `dims`)."""
        bad = np.zeros(arr.shape, dtype=bool)
        if self.choices is not None:
            return ~np.isin(arr, self.choices)
        if self.low is not None:
            bad |= (arr <= self.low) if self.low_open else (arr < self.low)
        if isinstance(self.high, str):  # an index into an axis of size dims[letter]: exclusive
            bad |= arr >= dims[self.high]
        elif self.high is not None:
            bad |= (arr >= self.high) if self.high_open else (arr > self.high)
        return bad


def _shape_str(shape: tuple[int | str, ...]) -> str:
    return "[" + ", ".join(str(d) for d in shape) + "]"


def validate(
    scenario: str,
    dtype: str,
    arrays: Mapping[str, np.ndarray],
    schema: Mapping[str, Field],
) -> dict[str, int]:
    """Check arrays against a schema; return the bound shape letters.

    Raises:
      ValueError: unknown dtype, missing or extra field, wrong rank, a shape letter
        bound to two values, wrong dtype, or a non-finite value. The message names
        the scenario, the field, the expected and the actual value.
    """
    if dtype not in FLOAT_DTYPES:
        raise ValueError(f"fixture {scenario!r}: dtype expected one of {FLOAT_DTYPES}, got {dtype!r}")
    missing = sorted(set(schema) - set(arrays))
    extra = sorted(set(arrays) - set(schema))
    if missing:
        raise ValueError(f"fixture {scenario!r}: missing field(s) {missing}; expected fields {sorted(schema)}")
    if extra:
        raise ValueError(f"fixture {scenario!r}: unexpected field(s) {extra}; expected fields {sorted(schema)}")
    dims: dict[str, int] = {}
    bound_by: dict[str, str] = {}
    for name, spec in schema.items():
        arr = arrays[name]
        if not isinstance(arr, np.ndarray):
            raise ValueError(f"fixture {scenario!r} field {name!r}: expected a numpy array, got {type(arr).__name__}")
        where = f"fixture {scenario!r} field {name!r}"
        if arr.ndim != len(spec.shape):
            raise ValueError(
                f"{where}: expected shape {_shape_str(spec.shape)} (rank {len(spec.shape)}), got {arr.shape}"
            )
        for axis, (want, got) in enumerate(zip(spec.shape, arr.shape, strict=False)):
            if isinstance(want, str):
                if want in dims and dims[want] != got:
                    raise ValueError(
                        f"{where}: expected shape {_shape_str(spec.shape)} with {want}={dims[want]} "
                        f"(set by field {bound_by[want]!r}), got {arr.shape}"
                    )
                dims.setdefault(want, got)
                bound_by.setdefault(want, name)
            elif want != got:
                raise ValueError(f"{where}: expected shape {_shape_str(spec.shape)}, got {arr.shape} (axis {axis})")
        want_dtype = np.dtype(dtype) if spec.kind == "float" else _KIND_DTYPE[spec.kind]
        if arr.dtype != want_dtype:
            raise ValueError(f"{where}: expected dtype {want_dtype}, got {arr.dtype}")
        if spec.kind == "float" and spec.finite and not np.all(np.isfinite(arr)):
            bad = np.argwhere(~np.isfinite(arr))[0]
            raise ValueError(
                f"{where}: expected finite values, got {arr[tuple(bad)]} at index {tuple(int(i) for i in bad)}"
            )
    for letter, size in dims.items():
        if size == 0:
            raise ValueError(f"fixture {scenario!r}: dimension {letter} (field {bound_by[letter]!r}) is empty")
    for name, spec in schema.items():  # value ranges, once every shape letter is bound
        if spec.low is None and spec.high is None and spec.choices is None:
            continue
        if isinstance(spec.high, str) and spec.high not in dims:
            raise ValueError(f"fixture {scenario!r} field {name!r}: range bound {spec.high!r} is no shape letter")
        bad = spec.out_of_range(arrays[name], dims)
        if bad.any():
            idx = tuple(int(i) for i in np.argwhere(bad)[0])
            value = arrays[name][idx] if idx else arrays[name][()]
            raise ValueError(
                f"fixture {scenario!r} field {name!r}: expected values in {spec.range_text(dims)}, "
                f"got {value} at index {idx}"
            )
    return dims


class Fixture(Mapping[str, np.ndarray]):
    """Immutable mapping of named, read-only numpy arrays plus their provenance.

    Attributes:
      scenario: registry name.  dtype: "float32" | "float64".  seed: int or None.
      case: fixture case ("random", or a named hand-made case such as "article").
      dims: bound shape letters, e.g. {"B": 8, "D": 3}.
    """

    def __init__(
        self,
        scenario: str,
        dtype: str,
        arrays: Mapping[str, np.ndarray],
        schema: Mapping[str, Field],
        *,
        seed: int | None,
        case: str,
        checks: tuple = (),
    ) -> None:
        frozen = {}
        for name, arr in arrays.items():
            if not isinstance(arr, np.ndarray):
                raise ValueError(
                    f"fixture {scenario!r} field {name!r}: expected a numpy array, got {type(arr).__name__}"
                )
            arr = np.array(arr, copy=True)  # own the memory: callers cannot write through
            arr.flags.writeable = False
            frozen[name] = arr
        self.dims = MappingProxyType(validate(scenario, dtype, frozen, schema))
        for check in checks:  # cross-field constraints the schema cannot state
            problem = check(frozen, self.dims)
            if problem:
                raise ValueError(f"fixture {scenario!r}: {problem}")
        self._arrays = MappingProxyType(frozen)
        self.scenario, self.dtype, self.seed, self.case = scenario, dtype, seed, case

    def __getitem__(self, key: str) -> np.ndarray:
        try:
            return self._arrays[key]
        except KeyError:
            raise KeyError(f"fixture {self.scenario!r} has no field {key!r}; fields: {sorted(self._arrays)}") from None

    def __iter__(self) -> Iterator[str]:
        return iter(self._arrays)

    def __len__(self) -> int:
        return len(self._arrays)

    def scalar(self, key: str) -> float:
        """A 0-d float field as a Python float (hyper-parameters)."""
        return float(self[key])

    def float64(self) -> dict[str, np.ndarray]:
        """Writable float64 copies of every float field (ints and bools unchanged), for the oracle."""
        return {k: v.astype(np.float64) if v.dtype.kind == "f" else v.copy() for k, v in self._arrays.items()}

    def __repr__(self) -> str:
        fields = ", ".join(f"{k}{list(v.shape)}" for k, v in self._arrays.items())
        return f"Fixture({self.scenario!r}, {self.dtype}, seed={self.seed}, case={self.case!r}: {fields})"


def _cast(arrays: Mapping[str, np.ndarray], schema: Mapping[str, Field], dtype: str) -> dict[str, np.ndarray]:
    out = {}
    for name, arr in arrays.items():
        spec = schema.get(name)
        kind = spec.kind if spec is not None else "float"
        target = np.dtype(dtype) if kind == "float" else _KIND_DTYPE[kind]
        out[name] = np.asarray(arr).astype(target)
    return out


def make(scenario: str, dtype: str, seed: int = 0, case: str | None = None) -> Fixture:
    """Build the validated fixture of a registered scenario.

    Args:
      scenario: registry name (see `detach-parity list`).
      dtype: "float32" or "float64"; every float field is cast to it.
      seed: seed of `numpy.random.Generator(PCG64(seed))`; a named hand-made case
        ignores it.
      case: one of the scenario's `cases`; default its first.
    Raises:
      ValueError: unknown scenario, case or dtype, or a builder output that fails
        the schema.
    """
    from shared.registry import get  # registry imports the scenario specs, which import this module

    spec = get(scenario)
    case = spec.cases[0] if case is None else case
    if case not in spec.cases:
        raise ValueError(f"fixture {scenario!r}: case expected one of {list(spec.cases)}, got {case!r}")
    if dtype not in FLOAT_DTYPES:
        raise ValueError(f"fixture {scenario!r}: dtype expected one of {FLOAT_DTYPES}, got {dtype!r}")
    if isinstance(seed, bool) or not isinstance(seed, int | np.integer) or seed < 0:
        raise ValueError(f"fixture {scenario!r}: seed expected a non-negative int, got {seed!r}")
    rng = np.random.Generator(np.random.PCG64(seed))
    raw = spec.build(rng, case)
    return Fixture(
        scenario, dtype, _cast(raw, spec.schema, dtype), spec.schema, seed=seed, case=case, checks=spec.checks
    )


def from_arrays(scenario: str, arrays: Mapping[str, np.ndarray], *, case: str = "user") -> Fixture:
    """Wrap user-supplied arrays as a fixture, validated exactly like `make`.

    The dtype is read from the float fields (all must agree); nothing is cast, so
    a float16 array or a list is refused rather than silently converted.
    Raises:
      ValueError: as `validate`, or float fields with different dtypes.
    """
    from shared.registry import get

    spec = get(scenario)
    if not isinstance(arrays, Mapping):
        raise ValueError(
            f"fixture {scenario!r}: arrays expected a mapping of field name to array, got {type(arrays).__name__}"
        )
    missing = sorted(set(spec.schema) - set(arrays))
    if missing:
        raise ValueError(f"fixture {scenario!r}: missing field(s) {missing}; expected fields {sorted(spec.schema)}")
    float_dtypes = {
        np.asarray(a).dtype.name for k, a in arrays.items() if k in spec.schema and spec.schema[k].kind == "float"
    }
    if len(float_dtypes) != 1:
        by_field = {
            k: np.asarray(a).dtype.name
            for k, a in arrays.items()
            if k in spec.schema and spec.schema[k].kind == "float"
        }
        raise ValueError(f"fixture {scenario!r}: float fields expected one dtype of {FLOAT_DTYPES}, got {by_field}")
    return Fixture(scenario, float_dtypes.pop(), dict(arrays), spec.schema, seed=None, case=case, checks=spec.checks)


def require(fx: object, scenario: str, dtype: str, who: str) -> Fixture:
    """fx itself if it is a `dtype` Fixture of `scenario`.

    Raises ValueError naming `who`, the expected and the actual fixture.
    """
    if isinstance(fx, Fixture) and fx.scenario == scenario and fx.dtype == dtype:
        return fx
    got = f"a {fx.dtype} Fixture of {fx.scenario!r}" if isinstance(fx, Fixture) else type(fx).__name__
    raise ValueError(f"{who}: fx expected a {dtype} Fixture of {scenario!r}, got {got}")
