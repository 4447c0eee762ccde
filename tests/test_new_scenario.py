"""A new scenario costs four files: a throwaway one, written into a copy of the tree, is picked up by the
parity, mirror, property and step tests, the bench, the site and the selfcheck, with no other file edited.

The four files live in THROWAWAY below (the one place). The copy is checked in a fresh interpreter, so
that it imports the copy's packages, not this tree's.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from detach_parity.shared.apps import selfcheck

ROOT = Path(__file__).resolve().parents[1]
NAME = "zz_throwaway"

RECORD = '''
"""zz_throwaway: y = w·x, z = stop(y); a throwaway scenario that proves four files are enough."""

import numpy as np

from ..core.records import Porting, Scenario
from ..core.schema import Field

SCHEMA = {"x": Field(("N",)), "w": Field(()), "c": Field(("N",)), "d": Field(("N",))}


def build(rng, case):
    n = int(rng.integers(2, 5))
    return {"x": rng.normal(size=n), "w": np.array(1.5), "c": rng.normal(size=n), "d": rng.normal(size=n)}


def oracle(fx, variant):
    a = fx.float64()
    y = a["w"] * a["x"]
    dw = np.sum(a["d"] * a["x"]) + (0.0 if variant == "stopped" else np.sum(a["c"] * a["x"]))
    return {"loss": np.array(np.sum((a["c"] + a["d"]) * y)), "grads/w": np.array(dw)}


SPEC = Scenario(
    name="zz_throwaway", title="throwaway", family="scenarios", order=99, claims=(), source="tests",
    lesson="z = stop(y) carries no gradient.", variants=("stopped", "none"), schema=SCHEMA, build=build,
    oracle=oracle, pattern={v: (("grads/w", "nonzero"),) for v in ("stopped", "none")},
    porting=Porting(torch="y.detach()", jax="jax.lax.stop_gradient(y)", trap="none"),
    step_loss=lambda o, a: o["loss"],
)
'''

TORCH = '''
"""zz_throwaway: a throwaway scenario. Port note: detach is stop_gradient.

Shapes: N elements. Reference: tests/test_new_scenario.py.
"""

from collections.abc import Callable

import numpy as np
import torch

from ._common import StepCall, field, scenario_run, scenario_step, step_of

__all__ = ["loss_fn", "loss_and_grad", "step_calls", "make_step", "run"]


def loss_fn(w: torch.Tensor, x: torch.Tensor, c: torch.Tensor, d: torch.Tensor, variant: str) -> torch.Tensor:
    """sum(c·z + d·y) with y = w·x [N], z = y stopped in variant "stopped"."""
    y = w * x
    z = y.detach() if variant == "stopped" else y  # GRAD-FLOW: z is a constant copy of y
    return torch.sum(c * z + d * y)


def loss_and_grad(w: torch.Tensor, x: torch.Tensor, c: torch.Tensor, d: torch.Tensor, variant: str):
    """(the loss, its gradient in w); w requires grad."""
    loss = loss_fn(w, x, c, d, variant)
    (g,) = torch.autograd.grad(loss, w)
    return loss, g


def step_calls(fx, variant: str) -> list[StepCall]:
    """make_step's calls: loss_and_grad on the fixture."""
    w, x, c, d = field(fx, "w", requires_grad=True), field(fx, "x"), field(fx, "c"), field(fx, "d")
    return [StepCall(loss_and_grad, (), (w, x, c, d), {"variant": variant})]


@scenario_step("zz_throwaway")
def make_step(fx, variant: str) -> Callable[[], torch.Tensor]:
    """The loss and its gradient in w; returns the loss."""
    return step_of(step_calls(fx, variant))


@scenario_run("zz_throwaway")
def run(fx, variant: str) -> dict[str, np.ndarray]:
    """Outputs: loss [], grads/w []."""
    w, x, c, d = field(fx, "w", requires_grad=True), field(fx, "x"), field(fx, "c"), field(fx, "d")
    loss, g = loss_and_grad(w, x, c, d, variant)
    return {"loss": loss, "grads/w": g}
'''

JAX = '''
"""zz_throwaway: a throwaway scenario. Port note: detach is stop_gradient.

Shapes: N elements. Reference: tests/test_new_scenario.py.
"""

import functools
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

from ._common import StepCall, field, scenario_run, scenario_step, step_of

__all__ = ["loss_fn", "loss_and_grad", "step_calls", "make_step", "run"]


def loss_fn(w: jax.Array, x: jax.Array, c: jax.Array, d: jax.Array, variant: str) -> jax.Array:
    """sum(c·z + d·y) with y = w·x [N], z = y stopped in variant "stopped"."""
    y = w * x
    z = jax.lax.stop_gradient(y) if variant == "stopped" else y  # GRAD-FLOW: z is a constant copy of y
    return jnp.sum(c * z + d * y)


@functools.partial(jax.jit, static_argnames="variant")
def loss_and_grad(w: jax.Array, x: jax.Array, c: jax.Array, d: jax.Array, variant: str):
    """(the loss, its gradient in w), jitted."""
    return jax.value_and_grad(loss_fn)(w, x, c, d, variant)


def step_calls(fx, variant: str) -> list[StepCall]:
    """make_step's calls: loss_and_grad on the fixture."""
    w, x, c, d = field(fx, "w"), field(fx, "x"), field(fx, "c"), field(fx, "d")
    return [StepCall(loss_and_grad, (), (w, x, c, d), {"variant": variant})]


@scenario_step("zz_throwaway")
def make_step(fx, variant: str) -> Callable[[], jax.Array]:
    """The loss and its gradient in w; returns the loss."""
    return step_of(step_calls(fx, variant))


@scenario_run("zz_throwaway")
def run(fx, variant: str) -> dict[str, np.ndarray]:
    """Outputs: loss [], grads/w []."""
    w, x, c, d = field(fx, "w"), field(fx, "x"), field(fx, "c"), field(fx, "d")
    loss, g = loss_and_grad(w, x, c, d, variant)
    return {"loss": loss, "grads/w": g}
'''

TEST = '''
"""zz_throwaway: the stop removes c·x from dL/dw."""

from conftest import case_result


def test_stop_removes_the_z_path() -> None:
    stopped = case_result("zz_throwaway", "stopped", "float64", "random").outputs
    none = case_result("zz_throwaway", "none", "float64", "random").outputs
    assert stopped["torch"]["grads/w"] != none["torch"]["grads/w"]
'''

# the four files of the throwaway scenario: the one place it is defined
THROWAWAY = {
    f"shared/scenarios/{NAME}.py": RECORD,
    f"torch_impl/{NAME}.py": TORCH,
    f"jax_impl/{NAME}.py": JAX,
    f"tests/test_{NAME}.py": TEST,
}

# run in the copy, in a fresh interpreter: every machinery, each reporting what it found
CHECK = f"""
import json, tempfile
from pathlib import Path
import pytest

report = {{}}
# selfcheck first: it forks, which must happen before JAX starts its threads
from detach_parity.shared.apps import selfcheck
sites = [s for s in selfcheck.find_sites() if s.module == "{NAME}"]
report["selfcheck_sites"] = [s.path for s in sites]
report["covering"] = selfcheck.covering_tests("{NAME}")
# plus an identity "mutant" (the site left as it is): the children test the copy, and an unchanged copy passes
import dataclasses
same = dataclasses.replace(sites[0], replacement=sites[0].original)
report["selfcheck"] = [f"{{o.status}} {{o.exit_code}}" for o in selfcheck.selfcheck([*sites, same], jobs=1)]

rc = pytest.main(["-q", "-p", "no:cacheprovider", "tests/test_parity.py", "tests/test_mirror.py",
                  "tests/test_steps.py", "tests/test_properties.py", "tests/test_{NAME}.py", "-k", "{NAME}"])
report["pytest_exit"] = int(rc)

from detach_parity.shared.core import registry
report["registered"] = "{NAME}" in registry.names("scenarios")

from detach_parity.shared.apps import bench, site
from detach_parity.shared.core.fixtures import make
from detach_parity.shared.core.runner import lesson

fx = make("{NAME}", "float32")
steps = [lesson(fw, "{NAME}").make_step(fx, "stopped") for fw in ("torch", "jax")]
report["bench_steps"] = "{NAME}" in bench.scenario_names() and all(float(s()) == float(s()) for s in steps)

with tempfile.TemporaryDirectory() as out:
    pages = site.build(Path(out) / "site", ["{NAME}"])
    report["site_pages"] = sorted(p.name for p in (Path(out) / "site").glob("*.html"))
    report["site_ok"] = all(r.ok for p in pages for r in p.results)
print("REPORT " + json.dumps(report))
"""


@pytest.fixture(scope="module")
def copy_with_throwaway(tmp_path_factory) -> Path:
    """A copy of the tree plus the four files (nothing else edited)."""
    dest = tmp_path_factory.mktemp("tree") / "detach_parity"  # the copy's root is the package: its folder's name
    selfcheck._copy_tree(ROOT, dest)  # the tree as the selfcheck copies it (no venv, no generated folders)
    for rel, text in THROWAWAY.items():
        (dest / rel).write_text(textwrap.dedent(text).lstrip(), encoding="utf-8")
    return dest


def test_four_files_are_picked_up_by_every_machinery(copy_with_throwaway: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-c", CHECK],
        cwd=copy_with_throwaway,
        env={**os.environ, "PYTHONPATH": str(copy_with_throwaway.parent)},  # the copy, before the installed tree
        capture_output=True,
        text=True,
        timeout=600,
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith("REPORT ")]
    assert proc.returncode == 0 and lines, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = json.loads(lines[-1].removeprefix("REPORT "))
    assert report["registered"]
    assert report["pytest_exit"] == 0, proc.stdout[-3000:]  # parity, mirror, steps, properties, its own test
    assert report["bench_steps"]
    assert report["site_pages"] == ["index.html", f"{NAME}.html"] and report["site_ok"]
    # y.detach() in torch, stop_gradient in JAX (the step's returned loss is detached by _common.step_of)
    assert sorted(report["selfcheck_sites"]) == [f"jax_impl/{NAME}.py", f"torch_impl/{NAME}.py"]
    assert f"tests/test_{NAME}.py" in report["covering"] and "tests/test_parity.py" in report["covering"]
    assert report["selfcheck"] == ["killed 1"] * 2 + ["survived 0"]  # each stop removed makes a test fail
