"""The package's own code runs clean with warnings as errors (issue 28, item 5).

`PYTHONWARNINGS=error` failed every data_parallel JAX case: the ranks (and `_common`) called flax's
deprecated `State.flat_state()` / `State.filter()`, and torch's warning about the in-place all-reduce of
dp_stop_global_stat, the lesson itself, became an error in its rank. Here `detach-parity run` runs the
whole family on its real processes (two torch ranks, two JAX processes: the environment reaches them),
and a few ordinary scenarios in two worker processes, all with `PYTHONWARNINGS=error`: every case
must pass, and nothing may be reported as an ignored exception (an unclosed file, say).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from detach_parity.shared.core import registry

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.xdist_group("data_parallel")  # their ranks need the CPUs the family's tests use
# a few ordinary scenarios, by position (this file is no proof of them): they share `_common` with the family
ORDINARY = registry.names("scenarios")[:2] + registry.names("advanced")[-3:-2] + registry.names("pitfalls")[5:6]


def _run(argv: list[str], tmp_path: Path) -> tuple[dict, str]:
    out = tmp_path / "out.json"
    env = {**os.environ, "PYTHONWARNINGS": "error", "DETACH_PARITY_JAX_RANKS": "processes", "JAX_PLATFORMS": "cpu"}
    done = subprocess.run(
        [sys.executable, "-m", "detach_parity.shared.apps.cli", *argv, "--quiet", "--json", str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert out.exists(), done.stderr[-3000:]
    payload = json.loads(out.read_text())
    problems = [p for r in payload["results"] for p in r["problems"]]
    assert done.returncode == 0 and payload["ok"], "\n".join(problems)[-4000:] or done.stderr[-3000:]
    return payload, done.stderr


def test_the_data_parallel_family_and_ordinary_cases_run_with_warnings_as_errors(tmp_path) -> None:
    family = registry.names("data_parallel")
    payload, err = _run(["run", *family, *ORDINARY, "--dtype", "float64", "--jobs", "2"], tmp_path)
    ran = {r["scenario"] for r in payload["results"]}
    assert ran == set(family) | set(ORDINARY) and all(r["verdict"] != "ERROR" for r in payload["results"])
    assert "Warning" not in err and "Exception ignored" not in err, err[-3000:]
