"""Each scenario is a mirrored pair: same public names in the same order, same GRAD-FLOW tags, docstrings."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from shared.core.registry import SCENARIOS

ROOT = Path(__file__).resolve().parents[1]
TAG = re.compile(r"#\s*GRAD-FLOW:\s*(.+)$")


def module_facts(path: Path) -> tuple[list[str], list[str], list[str], str | None, dict[str, str | None]]:
    src = path.read_text(encoding="utf-8")
    tree = ast.parse(src)
    all_names: list[str] = []
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "__all__" for t in node.targets):
            all_names = [e.value for e in node.value.elts]  # type: ignore[attr-defined]
    defined = [n.name for n in tree.body if isinstance(n, ast.FunctionDef | ast.ClassDef)]
    docs = {n.name: ast.get_docstring(n) for n in tree.body if isinstance(n, ast.FunctionDef | ast.ClassDef)}
    tags = [m.group(1).strip() for line in src.splitlines() if (m := TAG.search(line))]
    return all_names, [d for d in defined if d in all_names], tags, ast.get_docstring(tree), docs


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_pair_mirrors(name: str) -> None:
    t_path, j_path = ROOT / "torch_impl" / f"{name}.py", ROOT / "jax_impl" / f"{name}.py"
    assert t_path.exists() and j_path.exists(), f"{name}: both torch_impl/{name}.py and jax_impl/{name}.py must exist"
    t_all, t_order, t_tags, t_doc, t_docs = module_facts(t_path)
    j_all, j_order, j_tags, j_doc, j_docs = module_facts(j_path)
    assert t_all and t_all == j_all, f"{name}: __all__ differs: torch {t_all} vs jax {j_all}"
    assert "run" in t_all
    assert t_order == t_all and j_order == j_all, f"{name}: public names must be defined in __all__ order"
    # same tags with the same reasons on both sides (order may differ where an idiom moves a line)
    assert t_tags and sorted(t_tags) == sorted(j_tags), (
        f"{name}: GRAD-FLOW tags differ:\ntorch {t_tags}\njax   {j_tags}"
    )
    assert t_doc and j_doc and "Port note" in t_doc and "Port note" in j_doc, (
        f"{name}: module docstrings need a Port note"
    )
    for public in t_all:
        assert t_docs[public] and j_docs[public], f"{name}.{public}: docstring missing"
