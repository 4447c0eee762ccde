"""`detach-parity bench [SCENARIO ...] [--json PATH] [--repeats N] [--budget S] [--threads N] [--quick]`.

Measures, side by side in one run (measurements, never test assertions):
1. every scenario's training step (each pair's `make_step`) on its own float32 fixture, in
   the five columns a user could pick: torch eager, torch.compile, JAX as written (jit or
   nnx.jit), JAX through nnx.cached_partial, one jax.jit over nnx.split state; medians over
   interleaved rounds, first calls (compiles) apart, ratios to torch eager;
2. the same steps at a size where arithmetic dominates (sizes.SIZES[mode]["large"]), and the
   JAX/torch ratios at both sizes;
3. frozen_backbone at bench size: the cost of the stop (C16) and torch's grad modes;
4. truncated BPTT peak memory and step time as T grows (C11).
The whole command is capped by time (--budget): rounds stop at each phase's share of it.

The package:
  cli.py        arguments, run() starting the worker, cmd_bench, add_parser
  worker.py     the fresh measuring interpreter: pinning, device set-up, the phases under a Budget
  timing.py     interleaved timing, statistics, the noisy flag, slope, Budget
  sizes.py      SIZES, and fixtures at bench size built from a scenario's schema
  steps.py, freezing.py, truncation.py   the sections
  payload.py    PAYLOAD schema, check_payload, GLOSSARY, noisy / capped timings
  progress.py   the progress bar with the time left
  cells.py      the cells both readers share (headers, row order, ratio cells, notes)
  tables.py     rich tables;  report.py  Markdown (`markdown`, `summary`: docs/bench.md, README)
The framework code is the pair torch_impl/backend/bench.py / jax_impl/backend/bench.py, reached through
shared.apps.backends.
"""

from .cli import MAX_BUDGET_S, MAX_REPEATS, add_parser, choose_threads, cmd_bench, run, scenario_names
from .payload import (
    CLAIM_C16,
    COLUMNS,
    FREEZING_VARIANTS,
    GLOSSARY,
    OPTIONAL,
    PAYLOAD,
    TUNED,
    capped_timings,
    check_payload,
    noisy_timings,
)
from .report import markdown, summary
from .sizes import SIZES, fixture
from .tables import print_tables
from .timing import MIN_ROUNDS, NOISY, Budget, interleaved, slope
from .worker import available_cpus

__all__ = [
    "SIZES",
    "CLAIM_C16",
    "COLUMNS",
    "TUNED",
    "GLOSSARY",
    "FREEZING_VARIANTS",
    "PAYLOAD",
    "OPTIONAL",
    "NOISY",
    "MIN_ROUNDS",
    "MAX_REPEATS",
    "MAX_BUDGET_S",
    "Budget",
    "check_payload",
    "available_cpus",
    "choose_threads",
    "scenario_names",
    "fixture",
    "interleaved",
    "slope",
    "run",
    "noisy_timings",
    "capped_timings",
    "print_tables",
    "markdown",
    "summary",
    "cmd_bench",
    "add_parser",
]
