"""README sections generated from the registry are up to date, and the generator escapes."""

from __future__ import annotations

import pytest

from shared.apps import docs


def test_readme_is_fresh() -> None:
    assert docs.update(check=True), "README.md is stale: run `detach-parity docs` and commit"


def test_every_scenario_in_cheatsheet() -> None:
    from shared.core.registry import names

    table = docs.cheatsheet_table()
    for name in names():
        assert f"| `{name}` |" in table


def test_render_errors_and_escaping() -> None:
    with pytest.raises(ValueError, match="has no matching"):
        docs.render("<!-- BEGIN scenarios -->\nno end")
    assert docs._cell("a | b\n c") == "a \\| b c"
