"""The declared surface (shared/core/backend.py): both backends implement it, mirrored, and keep to their side.

import-linter states who may import a backend (pyproject.toml); what it cannot see is checked here:
every function the surface names exists in both backends with the same parameters, each backend
satisfies the Protocols, and no backend module reaches a lesson's private name.
"""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest
from detach_parity.shared.apps.backends import backend
from detach_parity.shared.core import backend as surface
from detach_parity.shared.core.registry import SCENARIOS
from detach_parity.shared.core.runner import FRAMEWORKS, lesson

ROOT = Path(__file__).resolve().parents[1]
MEMBERS = {"port": surface.Port, "port_run": surface.PortRun, "bench": surface.Bench, "claims": surface.Claims}


def _methods(protocol: type) -> list[str]:
    return [n for n, v in vars(protocol).items() if callable(v) and not n.startswith("_")]


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_each_backend_satisfies_the_protocols(framework: str) -> None:
    side = backend(framework)
    assert isinstance(side, surface.Backend) and side.FRAMEWORK == framework
    for member, protocol in MEMBERS.items():
        assert isinstance(getattr(side, member), protocol), f"{framework}_impl/backend/{member}: not a {protocol}"


@pytest.mark.parametrize("member", MEMBERS)
def test_both_backends_have_every_declared_function_with_the_same_parameters(member: str) -> None:
    protocol = MEMBERS[member]
    for name in _methods(protocol):
        declared = [p for p in inspect.signature(getattr(protocol, name)).parameters if p != "self"]
        for framework in FRAMEWORKS:
            fn = getattr(getattr(backend(framework), member), name)
            assert list(inspect.signature(fn).parameters) == declared, f"{framework} {member}.{name}"
    if member == "claims":
        t, j = (backend(fw).claims for fw in FRAMEWORKS)
        assert list(t.THEMES) == list(j.THEMES) and list(t.CHECKS) == list(j.CHECKS) and t.CHECKS


def test_lessons_satisfy_the_lesson_protocol_and_the_loader_refuses_the_rest() -> None:
    for framework in FRAMEWORKS:
        for name in SCENARIOS:
            assert isinstance(lesson(framework, name), surface.Lesson), f"{framework} {name}"
    with pytest.raises(ValueError, match=r"scenario expected a registered scenario, got 'backend'"):
        lesson("torch", "backend")
    with pytest.raises(ValueError, match=r"framework expected one of \['torch', 'jax'\], got 'tf'"):
        backend("tf")


def test_no_backend_module_reaches_a_lessons_private_name() -> None:
    """`from ..dqn_target import _step` or `dqn_target._grads`: a lesson's private helper is not a surface."""
    lessons = set(SCENARIOS)
    found = []
    for path in sorted(ROOT.glob("*_impl/backend/**/*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        aliases = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level >= 2 and node.module in lessons:
                found += [f"{path.name}: {node.module}.{a.name}" for a in node.names if a.name.startswith("_")]
            if isinstance(node, ast.ImportFrom) and node.level >= 2 and node.module is None:
                aliases |= {a.asname or a.name for a in node.names if a.name in lessons}
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases:
                if node.attr.startswith("_"):
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {node.value.id}.{node.attr}")
    assert not found, found
