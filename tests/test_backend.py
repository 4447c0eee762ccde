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
MEMBERS = {
    "port": surface.Port,
    "port_run": surface.PortRun,
    "bench": surface.Bench,
    "claims": surface.Claims,
    "profile": surface.Profile,
    "inside": surface.Inside,
    "optimizer": surface.Optimizer,
}


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


def _private(attr: str) -> bool:
    return attr.startswith("_") and not (attr.startswith("__") and attr.endswith("__"))


def _reaches(source: str, lessons: set[str]) -> list[str]:
    """`lesson._name` accesses in a backend module's source: through an imported lesson (`from .. import
    dqn_target`, `from ..dqn_target import _step`), a lesson looked up (`lesson("jax", name)._grads`, or a
    name bound to one: `m = lesson(...)`; `m._step`), or a parameter of a lambda (`lambda m, fx: m._step`,
    the shape of a table of lessons' helpers). Dunders (`__name__`) are not private names."""

    def looked_up(node: ast.AST) -> bool:  # lesson(...) or runner.lesson(...)
        return isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", "")) == "lesson"

    tree = ast.parse(source)
    found, held = [], set()  # names that hold a lesson module
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level >= 2 and node.module in lessons:
            found += [f"{node.module}.{a.name}" for a in node.names if _private(a.name)]
        if isinstance(node, ast.ImportFrom) and node.level >= 2 and node.module is None:
            held |= {a.asname or a.name for a in node.names if a.name in lessons}
        if isinstance(node, ast.Assign | ast.NamedExpr | ast.AnnAssign) and looked_up(node.value):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            held |= {t.id for t in targets if isinstance(t, ast.Name)}
        if isinstance(node, ast.Lambda):
            params = {a.arg for a in (*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs)}
            for sub in ast.walk(node.body):
                if isinstance(sub, ast.Attribute) and isinstance(sub.value, ast.Name) and sub.value.id in params:
                    if _private(sub.attr):
                        found.append(f"line {sub.lineno}: (lambda {sub.value.id}).{sub.attr}")
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute) or not _private(node.attr):
            continue
        value = node.value
        if isinstance(value, ast.Name) and value.id in held:
            found.append(f"line {node.lineno}: {value.id}.{node.attr}")
        if looked_up(value):
            found.append(f"line {node.lineno}: lesson(...).{node.attr}")
    return found


def test_the_private_name_check_sees_every_way_to_reach_a_lesson() -> None:
    """The check itself, on the shapes a backend could use (the bench once had all of them)."""
    lessons = {"dqn_target", "frozen_backbone"}
    snippets = {
        "from ..dqn_target import _loss, train_step": ["dqn_target._loss"],
        "from .. import dqn_target as d\nd._grads(1)\nd.run": ["line 2: d._grads"],
        "m = lesson('jax', name)\nm._step\nm.make_step\nm.__name__": ["line 2: m._step"],
        "x = lesson('jax', 'dqn_target')._grads": ["line 1: lesson(...)._grads"],
        "T = {'a': lambda m, fx, v: [(m._step, m.build_model(fx))]}": ["line 1: (lambda m)._step"],
        "y = runner.lesson('torch', n)._pick": ["line 1: lesson(...)._pick"],
        "from ..shared.core.runner import lesson\nstep = lesson('jax', n).step_calls": [],
    }
    for source, expected in snippets.items():
        assert _reaches(source, lessons) == expected, source


def test_no_backend_module_reaches_a_lessons_private_name() -> None:
    """`from ..dqn_target import _step`, `dqn_target._grads`, `lesson(...)._grads` or a lambda over lessons:
    a lesson's private helper is not a surface."""
    found = []
    for path in sorted(ROOT.glob("*_impl/backend/**/*.py")):
        found += [f"{path.relative_to(ROOT)}: {r}" for r in _reaches(path.read_text(encoding="utf-8"), set(SCENARIOS))]
    assert not found, found
