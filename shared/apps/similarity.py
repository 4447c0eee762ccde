"""`detach-parity similarity [SCENARIO ...] [--family F] [--worst N] [--min-median R] [--json PATH]`.

How closely each scenario pair reads side by side: a dev tool for the mirror (STYLE.md, "A
scenario is a mirrored pair"). Every word and punctuation token of `torch_impl/<name>.py` and
`jax_impl/<name>.py` (`\\w+|[^\\w\\s]`, comments and docstrings included), the framework names
masked to one token (so `torch.tanh` and `jnp.tanh` agree), then difflib's
`SequenceMatcher(autojunk=False).ratio()` of the two sequences: 1.0 for token-identical files.
CleanRL's `dqn.py` / `dqn_jax.py`, the style's example, score 0.81 on this metric.

The sources are read, never imported (no framework is loaded). Per family: the pairs, their
median and lowest ratio; then the overall median and the lowest pairs. `--min-median R` exits
1 when the median of the pairs measured is below R (a gate for CI or a review).
"""

from __future__ import annotations

import argparse
import difflib
import re
import statistics
from collections.abc import Iterable, Mapping

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from ..core import registry
from ..core.runner import source_path
from .common import UsageError, bounded_int, json_path, versions, write_json

__all__ = ["FRAMEWORK_NAMES", "tokens", "ratio", "pair_ratio", "measure", "summary", "add_parser"]

# names that only say which framework a line uses: masked to one token before comparing
FRAMEWORK_NAMES = frozenset({"torch", "jax", "jnp", "nnx", "optax", "nn", "F", "flax", "lax", "rlax", "distrax"})
_TOKEN = re.compile(r"\w+|[^\w\s]")
_MASK = "<framework>"


def tokens(source: str) -> list[str]:
    """Every word and punctuation token of a source text, framework names masked to one token."""
    return [_MASK if t in FRAMEWORK_NAMES else t for t in _TOKEN.findall(source)]


def ratio(torch_source: str, jax_source: str) -> float:
    """difflib.SequenceMatcher(autojunk=False).ratio() of the two token sequences, in [0, 1]."""
    return difflib.SequenceMatcher(None, tokens(torch_source), tokens(jax_source), autojunk=False).ratio()


def pair_ratio(name: str) -> float:
    """The ratio of one module pair, torch_impl/<name>.py against jax_impl/<name>.py.

    Raises ValueError if either file is missing.
    """
    t, j = (source_path(fw, name).read_text(encoding="utf-8") for fw in ("torch", "jax"))
    return ratio(t, j)


def measure(names: Iterable[str]) -> dict[str, float]:
    """{scenario: pair ratio} for the given registered scenarios, in the order given."""
    return {name: pair_ratio(name) for name in names}


def summary(ratios: Mapping[str, float]) -> dict[str, object]:
    """Per family (registry order): {"pairs", "median", "min"}; then the overall median.

    Raises ValueError for an empty mapping (a median of nothing).
    """
    if not ratios:
        raise ValueError("summary: ratios expected at least one pair, got none")
    families = {}
    for family in registry.FAMILIES:
        values = [r for n, r in ratios.items() if registry.get(n).family == family]
        if values:
            families[family] = {"pairs": len(values), "median": statistics.median(values), "min": min(values)}
    return {"families": families, "median": statistics.median(ratios.values()), "pairs": len(ratios)}


def cmd_similarity(args: argparse.Namespace, console: Console) -> int:
    known = registry.names()
    unknown = [n for n in args.scenarios if n not in known]
    if unknown:
        raise UsageError(f"scenario expected one of {known}, got {unknown[0]!r}")
    names = list(dict.fromkeys(args.scenarios)) or registry.names(args.family)
    if args.family:
        names = [n for n in names if registry.get(n).family == args.family]
    if not names:
        raise UsageError(f"scenarios expected at least one of family {args.family!r}, got none")
    ratios = measure(names)
    result = summary(ratios)

    table = Table(title="pair similarity (token ratio, framework names masked)", header_style="bold")
    for col in ("family", "pairs", "median", "lowest"):
        table.add_column(col, justify="left" if col == "family" else "right")
    for family, row in result["families"].items():
        table.add_row(family, str(row["pairs"]), f"{row['median']:.3f}", f"{row['min']:.3f}")
    table.add_row("all", str(result["pairs"]), f"{result['median']:.3f}", f"{min(ratios.values()):.3f}")
    console.print(table)
    worst = sorted(ratios.items(), key=lambda item: item[1])[: args.worst]
    if worst:
        console.print("lowest: " + ", ".join(f"{escape(n)} {r:.3f}" for n, r in worst))
    if args.json:
        write_json(args.json, {"versions": versions(), "ratios": ratios, **result})
    if args.min_median is not None and result["median"] < args.min_median:
        console.print(f"median {result['median']:.3f} is below --min-median {args.min_median}")
        return 1
    return 0


def _ratio_arg(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number in [0, 1], got {text!r}") from None
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"expected a number in [0, 1], got {text}")
    return value


def add_parser(sub) -> None:
    """Register the `similarity` subcommand on an argparse subparsers object."""
    p = sub.add_parser("similarity", help="how closely each torch / JAX lesson pair reads side by side")
    p.add_argument("scenarios", nargs="*", metavar="SCENARIO", help="default all")
    p.add_argument("--family", choices=registry.FAMILIES, help="only this family")
    p.add_argument("--worst", type=bounded_int(0, 1000), default=5, help="list the N lowest pairs (default 5)")
    p.add_argument("--min-median", type=_ratio_arg, metavar="R", help="exit 1 if the median is below R")
    p.add_argument("--json", type=json_path, metavar="PATH", help="also write every pair's ratio as JSON")
    p.set_defaults(func=cmd_similarity)
