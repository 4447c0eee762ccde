"""Shared pytest fixtures: every parity case is computed once per session and reused."""

from __future__ import annotations

import functools
import os
import zlib

import pytest

# The suite compiles a few hundred tiny XLA programs; at these sizes LLVM's optimisation
# passes cost more than they save. Set before JAX starts its backend; values may change
# by rounding only, and every tolerance stays as it is. An explicit XLA_FLAGS wins.
os.environ.setdefault("XLA_FLAGS", "--xla_backend_optimization_level=0 --xla_llvm_disable_expensive_passes=true")
# data_parallel cases run JAX on one process with two forced host devices (jax_impl/_distributed.py);
# tests/test_dp_*.py start the real two-process runs themselves. An explicit setting wins.
os.environ.setdefault("DETACH_PARITY_JAX_RANKS", "devices")

from shared.core.runner import CaseResult, iter_cases, run_case


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


@functools.cache
def case_result(scenario: str, variant: str, dtype: str, case: str, seed: int = 0) -> CaseResult:
    """The CaseResult of one case, computed once per worker (JAX compiles are the cost)."""
    return run_case(scenario, variant, dtype, seed=seed, case=case)


def _group(name: str) -> str:
    """The xdist group of a scenario: its name; the data_parallel family shares one (its ranks start once per worker)."""
    from shared.core.registry import get

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
    from shared.core.registry import names

    known = sorted(names(), key=len, reverse=True)
    for item in items:
        if any(m.name == "xdist_group" for m in item.iter_markers()):
            continue
        stem = item.path.stem.removeprefix("test_")
        group = stem if stem in known else next((n for n in known if n in item.nodeid), None)
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(_group(group)))
