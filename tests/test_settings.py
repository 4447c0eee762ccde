"""Importing or calling the package leaves the user's JAX and torch settings as they were.

`numerics(dtype)` (torch_impl/_common.py, jax_impl/_common.py) is the one scope of the package's
numeric settings: x64 and "highest" matmul precision in JAX, full float32 (no TF32, no bfloat16
passes) in torch. scenario_run enters it for each call, scenario_step for the build and each step.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import jax
import numpy as np
import pytest
import torch
from detach_parity.jax_impl import _common as jax_common
from detach_parity.torch_impl import _common as torch_common

ROOT = Path(__file__).resolve().parents[1]
B = torch.backends

# The user's own settings, none of them a default, set before the package is imported; then a
# scenario run in both dtypes and two calls of a step on each side, through the package's loader.
USER = """
import json, sys
import jax, torch

def settings():
    b = torch.backends
    out = {
        "jax_default_matmul_precision": jax.config.jax_default_matmul_precision,
        "jax_enable_x64": jax.config.jax_enable_x64,
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
        "cudnn.allow_tf32": b.cudnn.allow_tf32,
    }
    for name, s in [("generic", b), ("cudnn", b.cudnn), ("cuda.matmul", b.cuda.matmul), ("cudnn.conv", b.cudnn.conv),
                    ("cudnn.rnn", b.cudnn.rnn), ("mkldnn", b.mkldnn), ("mkldnn.matmul", b.mkldnn.matmul),
                    ("mkldnn.conv", b.mkldnn.conv), ("mkldnn.rnn", b.mkldnn.rnn)]:
        out[name + ".fp32_precision"] = s.fp32_precision
    return out

jax.config.update("jax_default_matmul_precision", "bfloat16")
jax.config.update("jax_enable_x64", True)
torch.set_float32_matmul_precision("medium")  # TF32 on cuBLAS, bfloat16 passes on oneDNN
torch.backends.cudnn.allow_tf32 = False
before = settings()
import detach_parity.jax_impl, detach_parity.torch_impl  # noqa: E401,F401
after_import = settings()

from detach_parity.shared.core import fixtures
from detach_parity.shared.core.runner import lesson, run_case
results = [run_case("basics", "z_stopped", dtype) for dtype in ("float32", "float64")]
fx = fixtures.make("basics", "float32")
losses = {}
for fw in ("torch", "jax"):
    step = lesson(fw, "basics").make_step(fx, "z_stopped")
    losses[fw] = [float(step()), float(step())]
print(json.dumps({"before": before, "after_import": after_import, "after": settings(),
                  "ok": [r.ok for r in results], "losses": losses}))
"""


def test_importing_and_running_keeps_the_users_settings() -> None:
    # a fresh interpreter: the settings must be the user's before anything of the package is imported
    proc = subprocess.run([sys.executable, "-c", USER], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["before"]["jax_default_matmul_precision"] == "bfloat16"
    assert out["before"]["float32_matmul_precision"] == "medium"
    assert out["before"]["mkldnn.matmul.fp32_precision"] == "bf16" and out["before"]["cudnn.allow_tf32"] is False
    assert out["after_import"] == out["before"]
    assert out["after"] == out["before"]
    assert out["ok"] == [True, True]  # the user's x64 and bfloat16 precision did not leak into the cases
    for fw in ("torch", "jax"):
        assert all(np.isfinite(out["losses"][fw])), out["losses"]
    np.testing.assert_allclose(out["losses"]["torch"], out["losses"]["jax"], rtol=1e-5)


ALL_FP32 = (
    B,
    B.cudnn,
    B.cuda.matmul,
    B.cudnn.conv,
    B.cudnn.rnn,
    B.mkldnn,
    B.mkldnn.matmul,
    B.mkldnn.conv,
    B.mkldnn.rnn,
)


@pytest.fixture
def torch_flags():
    """This process's torch precision flags put back exactly after the test (legacy view first)."""
    legacy = torch.get_float32_matmul_precision(), B.cudnn.allow_tf32
    fp32 = [s.fp32_precision for s in ALL_FP32]
    yield
    torch.set_float32_matmul_precision(legacy[0])
    B.cudnn.allow_tf32 = legacy[1]
    for s, v in zip(ALL_FP32, fp32, strict=True):
        s.fp32_precision = v


def _jax_settings() -> tuple:
    return jax.config.jax_default_matmul_precision, jax.config.jax_enable_x64


def _torch_settings() -> dict:
    return {
        "legacy": (torch.get_float32_matmul_precision(), B.cuda.matmul.allow_tf32, B.cudnn.allow_tf32),
        "fp32": [s.fp32_precision for s in (B.cuda.matmul, B.cudnn.conv, B.cudnn.rnn, B.mkldnn.matmul)],
    }


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_jax_numerics_pins_inside_and_restores_after(dtype: str) -> None:
    outside = _jax_settings()
    with jax_common.numerics(dtype):
        assert _jax_settings() == ("highest", dtype == "float64")
        assert jax.numpy.ones(2).dtype == np.dtype(dtype)
    assert _jax_settings() == outside
    with pytest.raises(RuntimeError, match="boom"), jax_common.numerics(dtype):
        raise RuntimeError("boom")
    assert _jax_settings() == outside


def test_torch_numerics_pins_inside_and_restores_after(torch_flags) -> None:
    torch.set_float32_matmul_precision("high")  # the user's TF32
    B.cudnn.allow_tf32 = True
    outside = _torch_settings()
    with torch_common.numerics("float32"):
        inside = _torch_settings()
    assert inside == {"legacy": ("highest", False, False), "fp32": ["ieee"] * 4}
    assert _torch_settings() == outside
    with pytest.raises(RuntimeError, match="boom"), torch_common.numerics("float64"):
        raise RuntimeError("boom")
    assert _torch_settings() == outside


def test_torch_numerics_with_the_new_api_only(torch_flags) -> None:
    """A user of torch's per-operation API (legacy flags then unreadable) keeps exactly those settings."""
    B.cuda.matmul.fp32_precision = "tf32"
    B.cudnn.conv.fp32_precision = "ieee"
    outside = [s.fp32_precision for s in ALL_FP32]
    with torch_common.numerics("float32"):
        assert B.cuda.matmul.fp32_precision == B.cudnn.conv.fp32_precision == B.mkldnn.matmul.fp32_precision == "ieee"
    assert [s.fp32_precision for s in ALL_FP32] == outside


@pytest.mark.parametrize("common", [torch_common, jax_common], ids=["torch", "jax"])
def test_numerics_refuses_an_unknown_dtype(common) -> None:
    with pytest.raises(ValueError, match=r"numerics: dtype expected one of \['float32', 'float64'\], got 'bfloat16'"):
        with common.numerics("bfloat16"):
            pass


@pytest.mark.parametrize("common", [torch_common, jax_common], ids=["torch", "jax"])
def test_scenario_run_and_step_compute_inside_numerics(common, torch_flags) -> None:
    """The decorators enter numerics: for run, for building a step and for every call of it."""
    from detach_parity.shared.core.fixtures import make

    def observed() -> tuple:
        return _jax_settings() if common is jax_common else _torch_settings()["legacy"]

    pinned = {"float32": ("highest", False), "float64": ("highest", True)}
    if common is torch_common:
        pinned = dict.fromkeys(pinned, ("highest", False, False))
    seen: list[tuple] = []

    @common.scenario_run("basics")
    def run(fx, variant):
        seen.append(observed())
        return {"z": np.zeros(1, fx.dtype)}

    @common.scenario_step("basics")
    def make_step(fx, variant):
        seen.append(observed())
        return lambda: seen.append(observed())

    torch.set_float32_matmul_precision("high")  # the user's TF32 (the JAX side: x64 off, default precision)
    outside = observed()
    for dtype in ("float32", "float64"):
        run(make("basics", dtype), "z_stopped")
    step = make_step(make("basics", "float32"), "z_stopped")
    assert observed() == outside
    step()
    step()
    assert observed() == outside
    assert seen == [pinned["float32"], pinned["float64"], pinned["float32"], pinned["float32"], pinned["float32"]]
