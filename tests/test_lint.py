"""One formatter and linter for both trees (ruff), and the layers of the package (import-linter), as pyproject.toml states them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_ruff_check_and_format() -> None:
    for args in (["check", "."], ["format", "--check", "."]):
        proc = subprocess.run([sys.executable, "-m", "ruff", *args], cwd=ROOT, capture_output=True, text=True)
        assert proc.returncode == 0, proc.stdout + proc.stderr


def test_import_linter_contracts_are_kept() -> None:
    """The contracts of [tool.importlinter] in pyproject.toml: every one kept, none skipped."""
    script = "import sys\nfrom importlinter.cli import lint_imports_command\nsys.exit(lint_imports_command())"
    proc = subprocess.run([sys.executable, "-c", script, "--no-cache"], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert " 0 broken" in proc.stdout and " kept" in proc.stdout, proc.stdout


MAX_LINES = 300  # issue 24: a module a reader takes in whole; past it, split by concern


def test_no_module_over_300_lines_outside_tests() -> None:
    tracked = subprocess.run(["git", "ls-files", "*.py"], cwd=ROOT, capture_output=True, text=True, check=True)
    modules = [p for p in tracked.stdout.split() if not p.startswith("tests/")]
    assert len(modules) > 100, modules  # the package's own modules were found
    long = {p: n for p in modules if (n := len((ROOT / p).read_text(encoding="utf-8").splitlines())) > MAX_LINES}
    assert not long, f"modules over {MAX_LINES} lines (split them by concern): {long}"
