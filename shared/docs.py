"""README sections generated from the registry, so that they can never drift from the code.

`detach-parity docs` rewrites the text between `<!-- BEGIN name -->` and
`<!-- END name -->` markers in README.md; `detach-parity docs --check` exits 1
if README.md is stale (the test suite runs the check). Sections:
  scenarios   the scenario list with the tutorial claim each comes from
  cheatsheet  the porting cheat sheet: torch idiom, JAX idiom, trap, proving test
  claims      the checked tutorial claims (when shared.claims exists)
"""

from __future__ import annotations

import argparse
import importlib.util
import re
from pathlib import Path

from shared import registry

__all__ = ["SECTIONS", "render", "update", "scenario_tests"]

ROOT = Path(__file__).resolve().parents[1]


def _cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def scenario_tests(name: str, root: Path = ROOT) -> list[str]:
    """Test files that name a scenario, besides the registry-driven parity / mirror suites."""
    out = []
    for path in sorted((root / "tests").glob("test_*.py")):
        if path.name in ("test_parity.py", "test_mirror.py", "test_fixtures.py"):
            continue
        if re.search(rf"[\"'/]{re.escape(name)}[\"'\]\[.]", path.read_text(encoding="utf-8")):
            out.append(f"tests/{path.name}")
    return out


def _proof(name: str) -> str:
    tests = [f"`{t}`" for t in scenario_tests(name)]
    return ", ".join([f"`test_parity.py -k {name}`", *tests])


def scenarios_table() -> str:
    rows = ["| scenario | what it teaches | variants | tutorial source (claims) |", "|---|---|---|---|"]
    for name in registry.names("scenarios"):
        s = registry.get(name)
        claims = f" ({', '.join(s.claims)})" if s.claims else ""
        variants = ", ".join(f"`{v}`" for v in s.variants)
        rows.append(f"| `{name}` | {_cell(s.lesson)} | {variants} | {_cell(s.source)}{claims} |")
    return "\n".join(rows)


def cheatsheet_table() -> str:
    rows = ["| scenario / pitfall | torch idiom | JAX idiom | the trap | proved by |", "|---|---|---|---|---|"]
    for family in registry.FAMILIES:
        for name in registry.names(family):
            p = registry.get(name).porting
            rows.append(f"| `{name}` | {_cell(p.torch)} | {_cell(p.jax)} | {_cell(p.trap)} | {_proof(name)} |")
    return "\n".join(rows)


def claims_table() -> str:
    if importlib.util.find_spec("shared.claims") is None:
        return "_No claims module yet._"
    from shared import claims

    return claims.markdown_table()


SECTIONS = {"scenarios": scenarios_table, "cheatsheet": cheatsheet_table, "claims": claims_table}


def render(text: str) -> str:
    """README text with every known marked section regenerated.

    Raises:
      ValueError: a section's BEGIN marker without its END marker.
    """
    for name, make in SECTIONS.items():
        begin, end = f"<!-- BEGIN {name} -->", f"<!-- END {name} -->"
        if begin not in text:
            continue
        if end not in text:
            raise ValueError(f"README: marker {begin!r} has no matching {end!r}")
        head, _, rest = text.partition(begin)
        _, _, tail = rest.partition(end)
        text = f"{head}{begin}\n{make()}\n{end}{tail}"
    return text


def update(path: Path = ROOT / "README.md", check: bool = False) -> bool:
    """Regenerate README sections in place; with check=True only report. Returns True if up to date."""
    old = path.read_text(encoding="utf-8")
    new = render(old)
    if old == new:
        return True
    if not check:
        path.write_text(new, encoding="utf-8")
    return False


def cmd_docs(args: argparse.Namespace, console) -> int:
    fresh = update(check=args.check)
    if args.check:
        console.print("README.md is up to date" if fresh else "README.md is stale: run `detach-parity docs`")
        return 0 if fresh else 1
    console.print("README.md was up to date" if fresh else "README.md regenerated")
    return 0


def add_docs(sub) -> None:
    p = sub.add_parser("docs", help="regenerate the README sections made from the registry")
    p.add_argument("--check", action="store_true", help="exit 1 if README.md is stale, change nothing")
    p.set_defaults(func=cmd_docs)
