"""Shared pytest fixtures: every parity case is computed once per session and reused."""

from __future__ import annotations

import functools
import os
import zlib

import _durations as durations  # tests/ is on sys.path (the rootdir's conftest)
import numpy as np
import pytest

# The suite compiles a few hundred tiny XLA programs; at these sizes LLVM's optimisation
# passes cost more than they save. Set before JAX starts its backend; values may change
# by rounding only, and every tolerance stays as it is. Added to an explicit XLA_FLAGS (the
# second instruction-set pass sets --xla_cpu_max_isa there); a flag it sets itself wins.
_FAST = {"--xla_backend_optimization_level": "0", "--xla_llvm_disable_expensive_passes": "true"}
_flags = os.environ.get("XLA_FLAGS", "").split()
_flags += [f"{k}={v}" for k, v in _FAST.items() if not any(f.startswith(k) for f in _flags)]
os.environ["XLA_FLAGS"] = " ".join(_flags)
# data_parallel cases run JAX on one process with two forced host devices (jax_impl/_distributed.py);
# tests/test_dp_*.py start the real two-process runs themselves. An explicit setting wins.
os.environ.setdefault("DETACH_PARITY_JAX_RANKS", "devices")
# Under xdist, each worker's torch gets its share of the cores (set before torch starts OpenMP). With a
# thread per core in every worker, OpenMP's waiting threads spin on the cores the other worker computes on:
# the port tests took 4.6x the CPU time of one worker alone (206 against 45 CPU-seconds, measured
# 2026-12-07 on 2 cores). Values change by a sum's order at most, within every tolerance. An explicit
# OMP_NUM_THREADS wins.
if os.environ.get("PYTEST_XDIST_WORKER_COUNT", "").isdigit():
    _share = len(os.sched_getaffinity(0)) // int(os.environ["PYTEST_XDIST_WORKER_COUNT"])
    os.environ.setdefault("OMP_NUM_THREADS", str(max(1, _share)))

from detach_parity.shared.core.runner import CaseResult, iter_cases, run_case  # noqa: E402 (after the environment above)


@pytest.fixture(autouse=True)
def _torch_seed_per_test(request):
    """Seed torch's global generator from the test's id, and restore it after.

    Tests that build `nn.Module`s with their default init then get the same weights whatever ran
    before them on their xdist worker (an order-dependent init made a port-checker test flaky).
    """
    import torch

    state = torch.random.get_rng_state()
    torch.manual_seed(zlib.crc32(request.node.nodeid.encode()))
    yield
    torch.random.set_rng_state(state)


def assert_same_to_rounding(actual, desired, why: str, ulps: int = 8) -> None:
    """Assert two arrays computed by different programs agree to rounding: |a − b| ≤ ulps · eps · max|b|.

    Two variants, jit and eager, torch and JAX, one process and two ranks are different programs; how
    each rounds depends on the compiler and the CPU (XLA vectorises by instruction set, torch's kernels
    dispatch by it), so bit-equality between them proves nothing about the port. The bound is `ulps`
    units in the last place at the array's own scale (its largest magnitude), so that entries which
    cancel to near zero are judged at the scale of the values they came from. Shapes and dtypes must
    match exactly and every value be finite; integer and boolean arrays are compared exactly; `why` (the reason the two should agree) heads the message.
    """
    a, b = np.asarray(actual), np.asarray(desired)
    assert a.shape == b.shape and a.dtype == b.dtype, f"{why}: {a.shape} {a.dtype} vs {b.shape} {b.dtype}"
    if a.size == 0:
        raise AssertionError(f"{why}: nothing to compare (empty arrays)")
    if not np.issubdtype(b.dtype, np.inexact):  # integers and booleans (counts, indices, masks) are exact
        np.testing.assert_array_equal(a, b, err_msg=why)
        return
    scale = float(np.max(np.abs(b.astype(np.float64))))
    bound = ulps * float(np.finfo(b.dtype).eps) * scale
    gap = float(np.max(np.abs(a.astype(np.float64) - b.astype(np.float64))))
    assert np.isfinite(a).all() and np.isfinite(b).all(), f"{why}: a non-finite value"
    assert gap <= bound, f"{why}: max|a − b| = {gap:.3g} > {ulps} ulps at scale {scale:.3g} ({bound:.3g})"


@functools.cache
def case_result(scenario: str, variant: str, dtype: str, case: str, seed: int = 0) -> CaseResult:
    """The CaseResult of one case, computed once per worker (JAX compiles are the cost)."""
    return run_case(scenario, variant, dtype, seed=seed, case=case)


@functools.cache
def worked_report(name: str, variant: str, steps: int, dtypes: tuple[str, ...]):
    """One check of a worked port per worker, read by every test that asks for the same one (test_port_hf.py and
    test_port_precision.py share an xdist group for it). The report is shared: tests read it, never change it."""
    from detach_parity.shared.apps.check.ports import check_worked

    return check_worked(name, variant, steps=steps, dtypes=dtypes)


def _group(name: str) -> str:
    """The xdist group of a scenario: its name; the data_parallel family shares one (its ranks start once per worker)."""
    from detach_parity.shared.core.registry import get

    return "data_parallel" if get(name).family == "data_parallel" else name


def all_cases(family: str | None = None) -> list:
    """pytest params for every registered case, grouped per scenario for pytest-xdist."""
    return [
        pytest.param(
            spec.name, v, case, dt, id=f"{spec.name}[{v}]-{case}-{dt}", marks=pytest.mark.xdist_group(_group(spec.name))
        )
        for spec, v, case, dt in iter_cases(family=family)
    ]


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups into the node ids
def pytest_collection_modifyitems(config, items) -> None:
    """Send every test about one scenario to the same xdist worker, so `case_result` is computed once.

    A test belongs to scenario X when it lives in tests/test_X.py or its id names X
    (longest registered name wins, so `p01_std_convention` beats `basics`).
    """
    from detach_parity.shared.core.registry import names

    known = sorted(names(), key=len, reverse=True)
    for item in items:
        if any(m.name == "xdist_group" for m in item.iter_markers()):
            continue
        stem = item.path.stem.removeprefix("test_")
        if stem.startswith("port_"):  # a port checker's file on one worker: its models are traced there once
            item.add_marker(pytest.mark.xdist_group(stem))
            continue
        group = stem if stem in known else next((n for n in known if n in item.nodeid), None)
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(_group(group)))
    _longest_first(items)


def _longest_first(items: list) -> None:
    """Order the units of work (an xdist group, or a test alone) by their measured cost, the longest first
    (tests/_durations.py): with `--no-loadscope-reorder` xdist hands them out in this order."""
    units: dict[str, list] = {}
    for item in items:
        mark = item.get_closest_marker("xdist_group")
        units.setdefault(f"@{mark.args[0]}" if mark else item.nodeid, []).append(item)
    costs = durations.load()
    ranked = durations.order({u: [i.nodeid for i in group] for u, group in units.items()}, costs)
    items[:] = [item for unit in ranked for item in units[unit]]
