"""Fixtures: deterministic, immutable, validated with messages that name field, expected, actual."""

from __future__ import annotations

import numpy as np
import pytest
from detach_parity.shared.core import fixtures
from detach_parity.shared.core.registry import SCENARIOS
from detach_parity.shared.core.schema import Field, validate


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_make_is_deterministic_and_typed(name: str) -> None:
    spec = SCENARIOS[name]
    for case in spec.cases:
        a = fixtures.make(name, "float64", seed=3, case=case)
        b = fixtures.make(name, "float64", seed=3, case=case)
        assert list(a) == list(b)
        for key in a:
            np.testing.assert_array_equal(a[key], b[key])  # exact: one generator, one seed
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


RANGED = {
    "labels": Field(("B",), kind="int", low=0, high="C"),
    "logits": Field(("B", "C")),
    "gamma": Field((), low=0.0, high=1.0),
    "noise": Field(("B",), low=0.0, high=1.0, low_open=True, high_open=True),
    "done": Field(("B",), choices=(0.0, 1.0)),
}


def ranged() -> dict:
    return {
        "labels": np.array([0, 2]),
        "logits": np.zeros((2, 3)),
        "gamma": np.array(0.9),
        "noise": np.array([0.5, 0.25]),
        "done": np.array([0.0, 1.0]),
    }


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("labels", np.array([0, 3]), r"field 'labels': expected values in \[0, C=3\), got 3 at index \(1,\)"),
        ("labels", np.array([-1, 0]), r"field 'labels': expected values in \[0, C=3\), got -1 at index \(0,\)"),
        ("gamma", np.array(1.5), r"field 'gamma': expected values in \[0, 1\], got 1.5 at index \(\)"),
        ("noise", np.array([0.0, 0.5]), r"field 'noise': expected values in \(0, 1\), got 0.0 at index \(0,\)"),
        ("done", np.array([0.5, 1.0]), r"field 'done': expected values in \{0, 1\}, got 0.5 at index \(0,\)"),
    ],
)
def test_value_ranges(field: str, value, message: str) -> None:
    arrays = ranged()
    validate("demo", "float64", arrays, RANGED)
    arrays[field] = value
    with pytest.raises(ValueError, match=message):
        validate("demo", "float64", arrays, RANGED)


def test_lists_seed_and_non_mapping_refused() -> None:
    with pytest.raises(ValueError, match=r"field 'x': expected a numpy array, got list"):
        fixtures.from_arrays("basics", {"x": [1.0, 2.0], "c": np.ones(2), "d": np.ones(2)})
    with pytest.raises(ValueError, match=r"missing field\(s\) \['c', 'd', 'x'\]"):
        fixtures.from_arrays("basics", {})
    with pytest.raises(ValueError, match="arrays expected a mapping"):
        fixtures.from_arrays("basics", [1, 2])  # type: ignore[arg-type]
    for seed in (-1, None, 1.5, True):
        with pytest.raises(ValueError, match="seed expected a non-negative int"):
            fixtures.make("basics", "float64", seed=seed)  # type: ignore[arg-type]


def test_cross_field_checks_run_on_construction() -> None:
    from detach_parity.shared.core.fixtures import Fixture
    from detach_parity.shared.core.records import Porting, Scenario

    def window_divides(arrays, dims):
        return None if dims["B"] % 2 == 0 else f"field 'x': B={dims['B']} expected even"

    spec = Scenario(
        name="demo", title="demo", family="scenarios", claims=(), source="", lesson="", variants=("v",),
        schema=SCHEMA, build=lambda rng, case: {}, oracle=lambda fx, v: {}, pattern={"v": (("*", "nonzero"),)},
        porting=Porting("", "", ""), checks=(window_divides,),
    )  # fmt: skip
    arrays = {"x": np.zeros((3, 2)), "y": np.zeros(3), "k": np.array(1)}
    with pytest.raises(ValueError, match=r"fixture 'demo': field 'x': B=3 expected even"):
        Fixture(spec, "float64", arrays, seed=None, case="user")


# A validated fixture cannot be changed afterwards (issue 15 item 6) -------------------------------


def test_no_array_of_a_fixture_can_be_made_writeable_again() -> None:
    """`fx[k].flags.writeable = True` then a write once put NaN into a validated fixture; the base of the
    view (the fixture's own array) could be flipped the same way."""
    fx = fixtures.make("basics", "float64")
    before = fx["x"].copy()
    for arr in (fx["x"], fx["x"].base, fx._arrays["x"]):
        with pytest.raises(ValueError, match="cannot set WRITEABLE flag"):
            arr.flags.writeable = True
        with pytest.raises(ValueError, match="read-only"):
            arr[0] = np.nan
    np.testing.assert_array_equal(fx["x"], before)  # exact: the fixture is immutable
    copies = fx.float64()  # the oracle's copies are writable, and private
    copies["x"][0] = np.nan
    np.testing.assert_array_equal(fx["x"], before)  # exact: the fixture is immutable


def test_provenance_attributes_cannot_be_reassigned() -> None:
    fx = fixtures.make("basics", "float64")
    for attr, value in (("dtype", "float32"), ("seed", 1), ("case", "article"), ("spec", None), ("_arrays", {})):
        with pytest.raises(AttributeError, match="Fixture is immutable"):
            setattr(fx, attr, value)
    with pytest.raises(AttributeError, match="Fixture is immutable"):
        del fx.dtype
    with pytest.raises(TypeError):
        fx.dims["N"] = 1  # type: ignore[index]
    assert fx.dtype == "float64" and fx.seed == 0 and fx.case == "random"


def test_the_record_a_fixture_carries_cannot_be_rewritten() -> None:
    """fx.spec is the registry's record: rewriting its lesson, divergences or tolerances would change every run."""
    spec = fixtures.make("p04_gelu", "float64").spec
    with pytest.raises(TypeError):
        spec.pattern["ported"] = ()  # type: ignore[index]
    with pytest.raises(TypeError):
        spec.diverges["naive"] = ("nothing",)  # type: ignore[index]
    with pytest.raises(TypeError):
        spec.tolerances["float32"]["oracle"] = None  # type: ignore[index]
    with pytest.raises(TypeError):
        spec.schema["x"] = None  # type: ignore[index]


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (np.broadcast_to(0.0, (10**6, 10**6)), r"field 'x': expected shape \[N\] \(rank 1\), got \(1000000, 1000000\)"),
        (  # from_arrays reads the dtype from the float fields, Fixture checks it per field
            np.broadcast_to(np.float32(0.0), (10**12,)),
            r"field 'x': expected dtype float64, got float32|float fields expected one dtype .*'x': 'float32'",
        ),
    ],
)
def test_structure_is_checked_before_anything_is_copied(value: np.ndarray, message: str) -> None:
    """A huge broadcast view of the wrong shape (or dtype) is a shape error, not a MemoryError."""
    arrays = {k: np.array(v) for k, v in fixtures.make("basics", "float64").items()}
    with pytest.raises(ValueError, match=message):
        fixtures.from_arrays("basics", {**arrays, "x": value})
    with pytest.raises(ValueError, match=message):
        fixtures.Fixture(SCENARIOS["basics"], "float64", {**arrays, "x": value}, seed=None, case="user")
