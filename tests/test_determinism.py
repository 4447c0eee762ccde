"""Two runs of `detach-parity run --json` give identical files apart from timing fields, in one process or in two."""

from __future__ import annotations

import json

import pytest
from detach_parity.shared.apps import cli, run_profile, run_workers
from detach_parity.shared.core import runner

TIMING = {"seconds"}


def strip_timing(obj):
    if isinstance(obj, dict):
        return {k: strip_timing(v) for k, v in obj.items() if k not in TIMING}
    if isinstance(obj, list):
        return [strip_timing(v) for v in obj]
    return obj


def test_run_json_is_deterministic(tmp_path) -> None:
    paths = [tmp_path / "a.json", tmp_path / "b.json"]
    for path in paths:
        argv = ["run", "basics", "frozen_backbone", "--dtype", "float64", "--seed", "7", "--quiet", "--json", str(path)]
        assert cli.main(argv) == 0
    a, b = (json.loads(p.read_text()) for p in paths)
    assert a["results"] and len(a["results"]) == len(b["results"])
    assert "seconds" in a and "seconds" in a["results"][0]  # timing is there, and only there
    assert strip_timing(a) == strip_timing(b)


def test_two_processes_give_the_file_of_one(tmp_path) -> None:
    """`--jobs 2` (what `make report` runs): scenarios in spawned processes, results back in the order of one job."""
    paths = {jobs: tmp_path / f"jobs{jobs}.json" for jobs in (1, 2)}
    for jobs, path in paths.items():
        argv = [
            "run",
            "basics",
            "p01_std_convention",
            "--dtype",
            "float64",
            "--seed",
            "7",
            "--quiet",
            "--jobs",
            str(jobs),
        ]
        assert cli.main([*argv, "--json", str(path), *(["--profile"] if jobs == 2 else [])]) == 0
    one, two = (json.loads(p.read_text()) for p in paths.values())
    names = [r["scenario"] for r in two["results"]]
    assert set(names) == {"basics", "p01_std_convention"} and names == sorted(names)  # registry order, not finish order
    profile = two.pop("profile")  # --profile adds where the time went, and changes nothing else
    assert strip_timing(one) == strip_timing(two) and len(two["results"]) == len(one["results"]) > 1
    assert "profile" not in one
    # the workers counted their own: fresh processes import the lessons and trace every jitted function once
    assert profile["cases"] == len(two["results"]) and set(profile["stages_s"]) == set(run_profile.STAGES)
    assert all(profile["stages_s"][s] > 0 for s in ("imports", "fixtures", "torch", "jax", "oracle", "comparison"))
    counts, split = profile["jax_counts"], profile["jax_split_s"]
    assert counts["jax_traces"] >= len(profile["most_traced"]) > 0 and counts["jax_compiles"] > 0
    assert counts["jax_traces"] == sum(profile["most_traced"].values()) or len(profile["most_traced"]) == 10
    assert split["jax: tracing"] > 0 and split["jax: XLA compile"] > 0
    assert sum(split.values()) == pytest.approx(profile["stages_s"]["jax"], abs=0.01)  # the split adds up


def test_two_jobs_run_the_data_parallel_family_in_the_parent_after_the_workers(monkeypatch) -> None:
    """Its ranks are processes of their own: the workers are done before they start (the parent's run_case is
    replaced here, the workers' is not: the data_parallel results must come from the parent, in order)."""
    cases = list(runner.iter_cases(["dp_no_sync", "basics"], dtypes=("float64",)))
    parent = []

    def in_parent(name, variant, dtype, seed, case, counters=None):
        parent.append(name)
        return (name, variant, case, dtype)

    monkeypatch.setattr(run_workers, "run_case", in_parent)
    advanced = []
    results = run_workers.run_in_processes(cases, 0, 2, advanced.append)
    assert sum(advanced) == len(cases) and advanced[-1] == 1  # the family's cases last, one at a time
    assert set(parent) == {"dp_no_sync"} and len(parent) == sum(s.family == "data_parallel" for s, *_ in cases) > 0
    for (spec, variant, case, dtype), r in zip(cases, results, strict=True):
        if spec.family == "data_parallel":
            assert r == (spec.name, variant, case, dtype)
        else:  # a real CaseResult from a worker
            assert (r.scenario, r.variant, r.case, r.dtype, r.ok) == (spec.name, variant, case, dtype, True)
