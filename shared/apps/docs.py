"""README sections generated from the registry, so that they can never drift from the code.

`detach-parity docs` rewrites the text between `<!-- BEGIN name -->` and
`<!-- END name -->` markers in README.md; `detach-parity docs --check` exits 1
if README.md is stale (the test suite runs the check). Sections:
  scenarios   the scenario list with the tutorial claim each comes from
  cheatsheet  the porting cheat sheet: torch idiom, JAX idiom, trap, proving test
  claims      the checked tutorial claims (when shared.claims exists)
  excerpt     a real excerpt of the report table (only with --excerpt: it runs cases,
              and its last digits depend on the machine, so --check leaves it alone)
"""

from __future__ import annotations

import argparse
import importlib.util
import re
from pathlib import Path

from shared.core import registry

__all__ = ["SECTIONS", "render", "update", "scenario_tests"]

ROOT = Path(__file__).resolve().parents[2]


def _cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


# test files about the whole package (harness, CLI, site, ...): they may name a scenario
# as an example, but they do not prove its lesson
GENERIC_TESTS = frozenset(
    {
        "test_parity.py",
        "test_mirror.py",
        "test_fixtures.py",
        "test_cli.py",
        "test_site.py",
        "test_site_browser.py",
        "test_selfcheck.py",
        "test_determinism.py",
        "test_docs.py",
        "test_properties.py",
        "test_lint.py",
        "test_harness.py",
        "test_layout.py",
        "test_steps.py",
        "test_bench.py",
    }
)


def scenario_tests(name: str, root: Path = ROOT) -> list[str]:
    """Test files that name a scenario, besides the registry-driven and package-wide suites."""
    out = []
    for path in sorted((root / "tests").glob("test_*.py")):
        if path.name in GENERIC_TESTS:
            continue
        if re.search(rf"[\"'/]{re.escape(name)}[\"'\]\[.]", path.read_text(encoding="utf-8")):
            out.append(f"tests/{path.name}")
    return out


def _proof(name: str) -> str:
    tests = [f"`{t}`" for t in scenario_tests(name)]
    return ", ".join([f"`tests/test_parity.py -k {name}`", *tests])


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


EXCERPT_CASES = (("frozen_backbone", None), ("feature_stats", "naive_ddof0"), ("p02_norm_at_zero", "naive"))


def excerpt_table() -> str:
    """A real excerpt of `detach-parity run` (runs a few cases: about 10 s; not part of --check)."""
    import io

    from rich.console import Console

    from shared.apps.run import results_table
    from shared.core.runner import iter_cases, run_case

    results = [
        run_case(spec, v, dt, case=case)
        for name, variant in EXCERPT_CASES
        for spec, v, case, dt in iter_cases([name], variant)
    ]
    console = Console(file=io.StringIO(), width=170, color_system=None)
    console.print(results_table(results))
    return "```text\n" + console.file.getvalue().rstrip() + "\n```"


SECTIONS = {"scenarios": scenarios_table, "cheatsheet": cheatsheet_table, "claims": claims_table}
RUN_SECTIONS = {"excerpt": excerpt_table}  # regenerated only on request: they run cases


def render(text: str, run: bool = False) -> str:
    """README text with every known marked section regenerated.

    Raises:
      ValueError: a section's BEGIN marker without its END marker.
    """
    for name, make in {**SECTIONS, **(RUN_SECTIONS if run else {})}.items():
        begin, end = f"<!-- BEGIN {name} -->", f"<!-- END {name} -->"
        if begin not in text:
            continue
        if end not in text:
            raise ValueError(f"README: marker {begin!r} has no matching {end!r}")
        head, _, rest = text.partition(begin)
        _, _, tail = rest.partition(end)
        text = f"{head}{begin}\n{make()}\n{end}{tail}"
    return text


def update(path: Path = ROOT / "README.md", check: bool = False, run: bool = False) -> bool:
    """Regenerate README sections in place; with check=True only report. Returns True if up to date.

    run=True also regenerates the sections that run cases (the report excerpt).
    """
    old = path.read_text(encoding="utf-8")
    new = render(old, run=run)
    if old == new:
        return True
    if not check:
        path.write_text(new, encoding="utf-8")
    return False


def cmd_docs(args: argparse.Namespace, console) -> int:
    fresh = update(check=args.check, run=args.excerpt)
    if args.check:
        console.print("README.md is up to date" if fresh else "README.md is stale: run `detach-parity docs`")
        return 0 if fresh else 1
    console.print("README.md was up to date" if fresh else "README.md regenerated")
    return 0


def add_parser(sub) -> None:
    p = sub.add_parser("docs", help="regenerate the README sections made from the registry")
    p.add_argument("--check", action="store_true", help="exit 1 if README.md is stale, change nothing")
    p.add_argument("--excerpt", action="store_true", help="also rerun the cases of the report excerpt (~10 s)")
    p.set_defaults(func=cmd_docs)
