"""The suite's measured test durations, for the order in which pytest-xdist hands out work.

`make test` runs `--dist loadgroup --no-loadscope-reorder`: xdist gives each worker the next unit of
work (an xdist group, or one test) in collection order, and conftest sorts the units by their
measured cost, the longest first (longest-processing-time first: the last units handed out are
the short ones, so neither worker idles at the end). The costs live in DURATIONS_FILE; refresh
them after a change that moves the slow tests:

    .venv/bin/python -m pytest -n 2 --dist loadgroup --durations=0 > /tmp/log; .venv/bin/python tests/_durations.py /tmp/log

A test missing from the file costs DEFAULT_S: a stale file orders badly, never wrongly.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Mapping
from pathlib import Path

DURATIONS_FILE = Path(__file__).with_name("durations.json")
DEFAULT_S = 0.05  # most tests: a case result cached on the worker
KEEP_ABOVE_S = 0.25  # the file lists the tests slower than this (the rest cost DEFAULT_S)
_LINE = re.compile(r"^([\d.]+)s (?:setup|call|teardown)\s+(\S+)")


def load(path: Path = DURATIONS_FILE) -> dict[str, float]:
    """{node id (without xdist's @group): seconds}; empty when the file is missing."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}


def parse(log: str) -> dict[str, float]:
    """Seconds per test (setup + call + teardown) from pytest's `--durations=0` report.

    Raises ValueError when the log holds no duration line (a run without --durations=0).
    """
    total: dict[str, float] = {}
    for line in log.splitlines():
        m = _LINE.match(line)
        if m:
            node = m.group(2).split("@")[0]
            total[node] = total.get(node, 0.0) + float(m.group(1))
    if not total:
        raise ValueError("durations: expected pytest's --durations=0 lines ('0.12s call tests/...'), got none")
    return total


def order(units: Mapping[str, list[str]], costs: Mapping[str, float]) -> list[str]:
    """The unit names by total cost, the longest first (ties: their collection order)."""
    cost = {u: sum(costs.get(n, DEFAULT_S) for n in nodes) for u, nodes in units.items()}
    return sorted(units, key=lambda u: -cost[u])


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python tests/_durations.py PYTEST_DURATIONS_LOG", file=sys.stderr)
        return 2
    costs = parse(Path(argv[0]).read_text(encoding="utf-8"))
    kept = {k: round(v, 2) for k, v in sorted(costs.items()) if v > KEEP_ABOVE_S}
    DURATIONS_FILE.write_text(json.dumps(kept, indent=0) + "\n", encoding="utf-8")
    print(f"{DURATIONS_FILE}: {len(kept)} tests above {KEEP_ABOVE_S} s, {sum(costs.values()):.0f} s in all")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
