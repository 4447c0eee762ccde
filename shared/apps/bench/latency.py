"""`detach-parity bench --port-check`: how long a porter waits for a check, against the import floor.

What it measures, in one run (this machine's speed moves 2x within a session: the ratios are the result):
- F, the import floor: a new process importing torch, jax, flax.nnx and optax (median of `runs`);
- the CLI in a new process with warm caches: `detach-parity check NAME --profile` (a first run fills the
  persistent compilation cache; the median of `runs` after it), and once with the cache off
  (DETACH_PARITY_NO_CACHE=1: every program compiled again, what each run cost before the cache);
- the warm process: `check_port` in one process, the first check (nothing compiled yet) and then the median of
  `runs` more (what a notebook or a test session waits).
Each with its stage profile (shared/apps/check/stages.py). The worked ports: the cnn, gru and transformer, and
transformers' GPT-2 and Llama at their tiny configs, correct variant, float64 + float32, 5 optimizer steps.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path

from ...core import children

__all__ = ["PORTS", "TARGETS", "floor", "cli", "in_process", "measure", "markdown"]

PORTS = ("cnn", "gru", "transformer", "gpt2", "llama")
REAL = {"gpt2": "GPT2LMHeadModel", "llama": "LlamaForCausalLM"}  # transformers' classes the real ports build
TARGETS = {"warm": 0.5, "cli": 2.0}  # issue 44: at most these multiples of F
_FLOOR = "import torch, jax, flax.nnx, optax"


def _timed(argv: list[str], env: dict | None = None) -> tuple[float, subprocess.CompletedProcess]:
    start = time.perf_counter()
    done = subprocess.run(argv, env=children.child_env(env), capture_output=True, text=True, check=False)
    return time.perf_counter() - start, done


def floor(runs: int = 3, also: str = "") -> dict:
    """F: the median wall time of `runs` new processes importing torch, jax, flax.nnx and optax (and `also`, a
    statement run after those imports: transformers' model classes, the floor of any process building them)."""
    times = []
    for _ in range(runs):
        seconds, done = _timed(children.python("-c", f"{_FLOOR}; {also}" if also else _FLOOR))
        if done.returncode:
            raise RuntimeError(f"the import floor's process failed: {done.stderr.strip()[-300:]}")
        times.append(seconds)
    return {"s": round(statistics.median(times), 3), "runs": [round(t, 3) for t in times]}


def cli(name: str, runs: int = 3, env: dict | None = None) -> dict:
    """`detach-parity check NAME --profile` in new processes: one to fill the caches, then the median of `runs`;
    the last run's verdict and profile. `env` on top of this process's (DETACH_PARITY_NO_CACHE, XDG_CACHE_HOME)."""
    times, report = [], {}
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "report.json"
        argv = children.python("-m", "detach_parity.shared.apps.cli", "check", name, "--profile", "--json", str(out))
        for i in range(runs + 1):
            seconds, done = _timed(argv, env)
            if done.returncode not in (0, 1):
                raise RuntimeError(f"detach-parity check {name} exited {done.returncode}: {done.stderr.strip()[-300:]}")
            if i:  # the first run fills the persistent compilation cache
                times.append(seconds)
        report = json.loads(out.read_text(encoding="utf-8"))
    return {"s": round(statistics.median(times), 3), "runs": [round(t, 3) for t in times],
            "verdict": report["verdict"], "profile": report["profile"]}  # fmt: skip


def in_process(name: str, runs: int = 3) -> dict:
    """`check_port` of the worked port `name` in a new process: the first check, then `runs` more (the median);
    each one's profile (the first's and the last's)."""
    argv = children.python("-m", "detach_parity.shared.apps.bench.latency", name, str(runs))
    _, done = _timed(argv)
    if done.returncode:
        raise RuntimeError(f"the warm process of {name} failed: {done.stderr.strip()[-300:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _checks(name: str, runs: int) -> dict:
    """The warm process's own work (the `python -m` entry below): checks of one worked port, one after another."""
    from ..check import check_port, ports

    def one() -> tuple[float, dict, str]:
        args = ports.case(name, "correct")
        model_t, model_j, batch = args.pop("torch_model"), args.pop("jax_model"), args.pop("batch")
        start = time.perf_counter()
        report = check_port(model_t, model_j, batch, profile=True, **args)
        return time.perf_counter() - start, report.profile, report.verdict()

    first_s, first, verdict = one()
    times, last = [], first
    for _ in range(runs):
        seconds, last, verdict = one()
        times.append(seconds)
    return {"first_s": round(first_s, 3), "first": first, "s": round(statistics.median(times), 3),
            "runs": [round(t, 3) for t in times], "verdict": verdict, "profile": last}  # fmt: skip


def measure(names: Sequence[str] = PORTS, runs: int = 3, progress: Callable[[str], None] | None = None) -> dict:
    """The latencies of `names` against F, measured in this one run (see the module docstring).

    Returns {"measured_at", "cpus", "load_before", "runs", "floor": {"s", "runs"}, "floor_transformers" (F with
    transformers' model classes imported too, where a real model is measured), "ports": {name: {"cli",
    "cli_no_cache", "warm", "cli_f", "warm_f", "first_f"}}, "targets", "floor_after"}: seconds, multiples of F.
    Raises RuntimeError when a process fails (the message ends with its standard error).
    """
    say = progress or (lambda msg: None)
    load = round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else None
    say("the import floor F ...")
    out = {"measured_at": datetime.now(UTC).isoformat(timespec="seconds"), "cpus": len(os.sched_getaffinity(0)),
           "load_before": load, "runs": runs, "floor": floor(runs), "ports": {}, "targets": TARGETS}  # fmt: skip
    real = [REAL[n] for n in names if n in REAL]
    if real:
        out["floor_transformers"] = floor(runs, f"from transformers import {', '.join(real)}")
    for name in names:
        say(f"{name}: the CLI in new processes, then in one process ...")
        row = {"cli": cli(name, runs), "cli_no_cache": cli(name, 1, {"DETACH_PARITY_NO_CACHE": "1"}),
               "warm": in_process(name, runs)}  # fmt: skip
        f = out["floor"]["s"]
        row.update(cli_f=round(row["cli"]["s"] / f, 2), warm_f=round(row["warm"]["s"] / f, 2),
                   first_f=round(row["warm"]["first_s"] / f, 2))  # fmt: skip
        if name in REAL:  # the part of the CLI's wait no port of that library can avoid: importing it
            row["cli_ft"] = round(row["cli"]["s"] / out["floor_transformers"]["s"], 2)
        out["ports"][name] = row
    out["floor_after"] = floor(runs)  # the machine's speed moves: F again, at the end
    return out


def _stages(profile: dict, top: int = 4) -> str:
    rows = sorted(profile["stages"].items(), key=lambda kv: -kv[1]["s"])[:top]
    return ", ".join(f"{name} {row['s']:.2f}" for name, row in rows)


def markdown(payload: dict) -> str:
    """The latencies as a markdown table and the lines under it (docs/bench.md, the bench's own output)."""
    f = payload["floor"]["s"]
    ft = payload.get("floor_transformers", {}).get("s")
    lines = [
        f"F = {f:.2f} s (a new process importing torch, jax, flax.nnx and optax; {payload['floor_after']['s']:.2f} s "
        f"again at the end{f'; with transformers model classes too: {ft:.2f} s' if ft else ''}). "
        f"Measured {payload['measured_at'][:10]} on {payload['cpus']} CPU(s), load average {payload['load_before']} "
        f"before; the median of {payload['runs']} runs. Targets (issue 44): the warm check ≤ "
        f"{TARGETS['warm']} × F, the CLI ≤ {TARGETS['cli']} × F.",
        "",
        "| port | verdict | CLI, warm caches | CLI, no compile cache | first check in a process | warm check |",
        "|---|---|---|---|---|---|",
    ]
    for name, r in payload["ports"].items():
        hf = f" ({r['cli_ft']:.2f} × F with transformers)" if "cli_ft" in r else ""
        lines.append(
            f"| `{name}` | {r['cli']['verdict']} | {r['cli']['s']:.2f} s = {r['cli_f']:.2f} × F{hf} | "
            f"{r['cli_no_cache']['s']:.2f} s = {r['cli_no_cache']['s'] / f:.2f} × F | "
            f"{r['warm']['first_s']:.2f} s = {r['first_f']:.2f} × F | {r['warm']['s']:.2f} s = {r['warm_f']:.2f} × F |"
        )
    lines += [
        "",
        "Where the time goes (seconds, the largest stages; `detach-parity check --profile` shows them all):",
        "",
    ]
    for name, r in payload["ports"].items():
        lines += [f"- `{name}`: CLI: {_stages(r['cli']['profile'])}; without the compile cache: "
                  f"{_stages(r['cli_no_cache']['profile'])}; first check in a process: "
                  f"{_stages(r['warm']['first'])}; warm: {_stages(r['warm']['profile'])}"]  # fmt: skip
    return "\n".join(lines)


if __name__ == "__main__":  # the warm process: python -m detach_parity.shared.apps.bench.latency NAME RUNS
    print(json.dumps(_checks(sys.argv[1], int(sys.argv[2]))))
