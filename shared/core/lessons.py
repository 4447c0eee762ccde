"""Where the lessons are: the two frameworks, the loader of a registered scenario's lesson, its file.

    FRAMEWORKS   ("torch", "jax"): the implementation packages torch_impl / jax_impl
    lesson       imports `<framework>_impl/<scenario>.py` of a registered scenario
    source_path  the file of `<framework>_impl/<module>.py`, found without importing it

The one place that turns a framework and a module name into an import; shared.core.runner
runs the lessons it loads (and exports these names too).
"""

from __future__ import annotations

import importlib
import importlib.util
from pathlib import Path

from . import registry
from .backend import Lesson

__all__ = ["FRAMEWORKS", "lesson", "source_path"]

FRAMEWORKS = ("torch", "jax")
_PACKAGE = __package__.rsplit(".", 2)[0]  # detach_parity: the grandparent of shared.core


def _module_name(framework: str, module: str) -> str:
    if framework not in FRAMEWORKS:
        raise ValueError(f"framework expected one of {list(FRAMEWORKS)}, got {framework!r}")
    if not isinstance(module, str) or not all(part.isidentifier() for part in module.split(".")):
        raise ValueError(f"module expected a Python module name, got {module!r}")
    return f"{_PACKAGE}.{framework}_impl.{module}"


def lesson(framework: str, scenario: str) -> Lesson:
    """The lesson of a registered scenario: `torch_impl/<scenario>.py` or `jax_impl/<scenario>.py`.

    The one loader of the lessons (the registry names them; `Lesson` in shared/core/backend.py
    says what they provide). The tools of a framework are not lessons: the applications reach
    them through shared.apps.backends. Raises ValueError for an unknown framework or scenario.
    """
    if scenario not in registry.SCENARIOS:
        raise ValueError(f"scenario expected a registered scenario, got {scenario!r}")
    return importlib.import_module(_module_name(framework, scenario))


def source_path(framework: str, module: str) -> Path:
    """The file of `torch_impl/<module>.py` or `jax_impl/<module>.py` (dotted: `backend.port`), not imported.

    For the tools that read the sources (show, site, selfcheck, the claims' integrity check).
    Raises ValueError for an unknown framework or module.
    """
    package = importlib.util.find_spec(_module_name(framework, module).rsplit(".", module.count(".") + 1)[0])
    folders = [Path(p) for p in (package.submodule_search_locations or [])] if package else []
    # the file itself, found from the framework package's folder: importing a backend's subpackage
    # to locate one of its files would import the framework
    found = [f for d in folders for f in (d.joinpath(*module.split(".")).with_suffix(".py"),) if f.is_file()]
    if not found:
        raise ValueError(f"{framework}_impl.{module}: module not found")
    return found[0]
