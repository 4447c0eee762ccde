"""Fixtures: deterministic, immutable, validated with messages that name field, expected, actual."""

from __future__ import annotations

import numpy as np
import pytest

from shared import fixtures
from shared.fixtures import Field, validate
from shared.registry import SCENARIOS


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_make_is_deterministic_and_typed(name: str) -> None:
    spec = SCENARIOS[name]
    for case in spec.cases:
        a = fixtures.make(name, "float64", seed=3, case=case)
        b = fixtures.make(name, "float64", seed=3, case=case)
        assert list(a) == list(b)
        for key in a:
            np.testing.assert_array_equal(a[key], b[key])
        f32 = fixtures.make(name, "float32", seed=3, case=case)
        for key, field in spec.schema.items():
            want = {"float": np.float32, "int": np.int64, "bool": np.bool_}[field.kind]
            assert f32[key].dtype == want, key


def test_random_case_depends_on_seed() -> None:
    a = fixtures.make("linear_regression", "float64", seed=0, case="random")
    b = fixtures.make("linear_regression", "float64", seed=1, case="random")
    assert not np.array_equal(a["x"], b["x"])


def test_fixture_is_immutable() -> None:
    fx = fixtures.make("basics", "float64")
    with pytest.raises(ValueError, match="read-only"):
        fx["x"][0] = 1.0
    with pytest.raises(TypeError):
        fx["x"] = np.zeros(3)  # type: ignore[index]
    with pytest.raises(KeyError, match="has no field 'nope'"):
        fx["nope"]


def test_from_arrays_does_not_alias_caller_memory() -> None:
    x = np.array([1.0, 2.0, 3.0])
    fx = fixtures.from_arrays("basics", {"x": x, "c": np.ones(3), "d": np.ones(3)})
    x[0] = 100.0
    assert fx["x"][0] == 1.0


SCHEMA = {"x": Field(("B", "D")), "y": Field(("B",)), "k": Field((), kind="int")}


def good() -> dict:
    return {"x": np.zeros((4, 3)), "y": np.zeros(4), "k": np.array(2)}


@pytest.mark.parametrize(
    "mutate, message",
    [
        (
            lambda a: a.update(y=np.zeros(5)),
            r"field 'y': expected shape \[B\] with B=4 \(set by field 'x'\), got \(5,\)",
        ),
        (lambda a: a.update(x=np.zeros(4)), r"field 'x': expected shape \[B, D\] \(rank 2\), got \(4,\)"),
        (lambda a: a.update(x=np.zeros((4, 3), np.float32)), r"field 'x': expected dtype float64, got float32"),
        (lambda a: a.update(k=np.array(2.0)), r"field 'k': expected dtype int64, got float64"),
        (lambda a: a["x"].__setitem__((1, 2), np.nan), r"field 'x': expected finite values, got nan at index \(1, 2\)"),
        (lambda a: a["y"].__setitem__(0, np.inf), r"field 'y': expected finite values, got inf at index \(0,\)"),
        (lambda a: a.pop("y"), r"missing field\(s\) \['y'\]"),
        (lambda a: a.update(z=np.zeros(1)), r"unexpected field\(s\) \['z'\]"),
        (lambda a: a.update(x=[[0.0] * 3] * 4), r"field 'x': expected a numpy array, got list"),
        (lambda a: a.update(x=np.zeros((0, 3)), y=np.zeros(0)), r"dimension B \(field 'x'\) is empty"),
    ],
)
def test_validate_names_field_expected_actual(mutate, message: str) -> None:
    arrays = good()
    mutate(arrays)
    with pytest.raises(ValueError, match=message):
        validate("demo", "float64", arrays, SCHEMA)


def test_validate_binds_letters() -> None:
    assert validate("demo", "float64", good(), SCHEMA) == {"B": 4, "D": 3}


def test_make_rejects_unknown_names() -> None:
    with pytest.raises(ValueError, match=r"scenario expected one of \[.*'basics'.*\], got 'nope'"):
        fixtures.make("nope", "float64")
    with pytest.raises(ValueError, match=r"dtype expected one of \('float32', 'float64'\), got 'float16'"):
        fixtures.make("basics", "float16")
    with pytest.raises(ValueError, match=r"case expected one of \['random', 'article'\], got 'x'"):
        fixtures.make("basics", "float64", case="x")


def test_from_arrays_validates_user_input() -> None:
    with pytest.raises(ValueError, match=r"fixture 'linear_regression' field 'y': expected shape \[B\] with B=2"):
        fixtures.from_arrays(
            "linear_regression", {"x": np.zeros((2, 3)), "y": np.zeros(3), "w": np.zeros(3), "b": np.array(0.0)}
        )
    with pytest.raises(ValueError, match=r"float fields expected one dtype"):
        fixtures.from_arrays(
            "linear_regression",
            {"x": np.zeros((2, 3), np.float32), "y": np.zeros(2), "w": np.zeros(3), "b": np.array(0.0)},
        )
