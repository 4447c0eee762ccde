"""Fixture schemas: the declared shape, kind and range of every array a scenario takes.

A schema maps field names to `Field(shape, kind)`. Shapes may use letters
(`("B", "D")`): a letter must take one value across all fields of a fixture, so a
batch of 4 observations next to 3 rewards is refused with a message naming both
fields. `kind` is "float" (the fixture dtype), "int" (int64) or "bool".
`validate` checks a dict of arrays against a schema and returns the bound letters.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

__all__ = ["FLOAT_DTYPES", "KIND_DTYPE", "Field", "validate", "validate_structure", "validate_values"]

FLOAT_DTYPES = ("float32", "float64")
KIND_DTYPE = {"int": np.dtype("int64"), "bool": np.dtype("bool")}


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

    `validate_structure` then `validate_values`: a fixture builder checks the structure
    of the caller's arrays before copying them (a huge array of the wrong shape is a
    shape error, not a MemoryError) and the values on its own private copy.
    Raises:
      ValueError: unknown dtype, missing or extra field, wrong rank, a shape letter
        bound to two values, wrong dtype, a non-finite value or a value out of range.
        The message names the scenario, the field, the expected and the actual value.
    """
    dims = validate_structure(scenario, dtype, arrays, schema)
    validate_values(scenario, arrays, schema, dims)
    return dims


def validate_structure(
    scenario: str,
    dtype: str,
    arrays: Mapping[str, object],
    schema: Mapping[str, Field],
) -> dict[str, int]:
    """Fields, ranks, shape letters and dtypes (no element is read); return the bound letters.

    Raises ValueError as `validate` does.
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
        want_dtype = np.dtype(dtype) if spec.kind == "float" else KIND_DTYPE[spec.kind]
        if arr.dtype != want_dtype:
            raise ValueError(f"{where}: expected dtype {want_dtype}, got {arr.dtype}")
    for letter, size in dims.items():
        if size == 0:
            raise ValueError(f"fixture {scenario!r}: dimension {letter} (field {bound_by[letter]!r}) is empty")
    return dims


def validate_values(
    scenario: str, arrays: Mapping[str, np.ndarray], schema: Mapping[str, Field], dims: Mapping[str, int]
) -> None:
    """Finite values and declared ranges, once every shape letter is bound. Raises ValueError as `validate`."""
    for name, spec in schema.items():
        arr = arrays[name]
        where = f"fixture {scenario!r} field {name!r}"
        if spec.kind == "float" and spec.finite and not np.all(np.isfinite(arr)):
            bad = np.argwhere(~np.isfinite(arr))[0]
            raise ValueError(
                f"{where}: expected finite values, got {arr[tuple(bad)]} at index {tuple(int(i) for i in bad)}"
            )
        if spec.low is None and spec.high is None and spec.choices is None:
            continue
        if isinstance(spec.high, str) and spec.high not in dims:
            raise ValueError(f"{where}: range bound {spec.high!r} is no shape letter")
        bad = spec.out_of_range(arr, dims)
        if bad.any():
            idx = tuple(int(i) for i in np.argwhere(bad)[0])
            value = arr[idx] if idx else arr[()]
            raise ValueError(f"{where}: expected values in {spec.range_text(dims)}, got {value} at index {idx}")
