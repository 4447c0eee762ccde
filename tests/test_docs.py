"""The generated reference (docs/*.md, the README lists) is fresh, and the generator refuses what is not its own."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from detach_parity.shared.apps import docs
from detach_parity.shared.apps.common import UsageError
from detach_parity.shared.core.registry import names

ROOT = Path(__file__).resolve().parents[1]


def test_generated_reference_is_fresh() -> None:
    stale = docs.update(check=True)
    assert not stale, f"stale: {stale}: run `detach-parity docs` and commit"


def test_every_relative_link_of_the_readme_and_docs_names_a_file() -> None:
    """A stale map is a defect: README.md once linked docs/report.md, which was never committed (in a clean
    clone, as CI has it, a file exists only if it is committed)."""
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    links = 0
    for page in pages:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", page.read_text(encoding="utf-8")):
            if re.match(r"[a-z]+:", target):  # https:, mailto:
                continue
            links += 1
            assert (page.parent / target).exists(), f"{page.name} links {target}, which does not exist"
    assert links >= 3, f"found only {links} relative links: the pattern no longer reads the pages"


def test_readme_is_short_and_lists_every_scenario() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.encode()) <= 15 * 1024, f"README.md is {len(readme.encode())} bytes, above 15 KB"
    for name in names():
        assert f"`{name}`" in readme, f"{name} missing from the README's scenario list"


def test_every_scenario_in_the_cheatsheet_and_the_scenario_page() -> None:
    sheet, page = docs.cheatsheet_page(), docs.scenarios_page()
    for name in names():
        assert f"### `{name}`" in sheet and f"| `{name}` |" in page


def test_render_errors_and_escaping() -> None:
    with pytest.raises(ValueError, match="has no matching"):
        docs.render("<!-- BEGIN families -->\nno end")
    assert docs._cell("a | b\n c") == "a \\| b c"


def test_a_docs_file_not_written_by_docs_is_never_overwritten(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "README.md").write_text("# mine\n<!-- BEGIN families -->\n<!-- END families -->\n", encoding="utf-8")
    (tmp_path / "docs" / "claims.md").write_text("my own notes\n", encoding="utf-8")
    with pytest.raises(UsageError, match="docs/claims.md exists and was not written by `detach-parity docs`"):
        docs.update(root=tmp_path)
    assert (tmp_path / "docs" / "claims.md").read_text(encoding="utf-8") == "my own notes\n"
