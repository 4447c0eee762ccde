"""The bench's measuring process: a fresh interpreter (`python -m shared.apps.bench --worker`).

Its CPU affinity and torch's thread count are set to the chosen threads before torch or JAX
start, so both frameworks get the same cores; device set-up goes through each pair's
`configure` (a CUDA device visible to both: the GPU, float32 matmuls without TF32). The work
is shared out by a `Budget` ending at the time the command was given: phases and their items
stop adding rounds at their share, so the whole command ends near its --budget.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import time
from collections.abc import Mapping

from ...core import children, registry
from ...core.fixtures import make
from ..backends import backend
from ..check import bench_one_million
from .freezing import freezing_section
from .payload import GLOSSARY, capped_timings
from .progress import BenchProgress
from .sizes import SIZES, fixture
from .steps import compile_allowed, overhead, step_row
from .timing import MIN_ROUNDS, NOISY, Budget
from .truncation import tbptt_points, tbptt_repeats, tbptt_section

__all__ = ["WEIGHTS", "SPENT", "TORCH_COMPILE", "available_cpus", "pin", "main"]

# each phase's share of the budget left when it starts (phases absent from a run drop out)
WEIGHTS = {"overhead": 0.02, "scenarios": 0.3, "freezing": 0.1, "tbptt": 0.15, "port_check": 0.13, "large": 0.3}
SPENT = "skipped: the time budget (--budget) was spent before it started"
OVER = "skipped: the time budget (--budget) and its grace were overrun before it started"
# the port check of the 1 M-parameter model is one run, not rounds: it starts only with this much budget left
PORT_CHECK_MIN_S = 30.0
PORT_CHECK_SHORT = f"skipped: less than {PORT_CHECK_MIN_S:.0f} s of the time budget (--budget) was left for it"
# how torch.compile ran, by SIZES[mode]["codegen"]
TORCH_COMPILE = {
    True: "torch.compile(step, mode='default', dynamic=False): inductor",
    False: "torch.compile(step, backend='aot_eager', dynamic=False): quick mode captures the step (the same graphs "
    "and breaks) but builds no kernels: not inductor's speed",
}
# at a large size the per-call overhead that cached_partial removes is dwarfed by arithmetic; its compile is not
LARGE_LEAVE_OUT = {"jax_cached": "not measured at the large size: it removes per-call overhead (see the fixture size)"}


def available_cpus() -> list[int]:
    """The CPU ids this process may run on (os.sched_getaffinity), sorted."""
    return sorted(os.sched_getaffinity(0))


def pin(threads: int) -> list[int]:
    """Restrict this process to `threads` CPUs before torch and JAX start; returns their ids."""
    cpus = available_cpus()[:threads]
    os.sched_setaffinity(0, cpus)  # JAX sizes its CPU thread pool from this; torch is set by configure too
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ[var] = str(threads)
    return cpus


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _machine(config: Mapping, cpus: list[int], cpus_available: int, devices: dict) -> dict:
    cuda = devices["torch"]["cuda"] and devices["jax"]["cuda"]
    if devices["torch"]["cuda"] != devices["jax"]["cuda"]:
        note = "torch and JAX run on different devices here: the JAX/torch ratios compare devices, not frameworks"
    elif cuda:
        note = "CUDA device present: both frameworks ran on the GPU, float32 matmuls without TF32"
    else:
        note = "no CUDA device (torch.cuda.is_available() is False, jax.devices() is CPU): ran on the CPU"
    return {
        "cpu": _cpu_model(),
        "load_average_before": list(os.getloadavg()),  # 1, 5, 15 min: > 0 means others were running
        "cpus_available": cpus_available,
        "cpus_used": cpus,
        "threads": config["threads"],
        "threads_chosen": config["threads_chosen"],
        "devices": devices,
        "accelerator": "cuda" if cuda else "cpu",
        "note": note,
        "jax_backend": devices["jax"]["backend"],
        "xla_flags": os.environ.get("XLA_FLAGS", ""),
    }


def _rows(names, section, sizes, repeats, budget, progress, errors, skipped) -> dict:
    """The step rows of one section ("scenarios": fixture size, "large": sizes["large"]).

    Each row gets an equal share of the phase; a large row that starts once the whole budget
    is spent is skipped, a fixture-size row once it is overrun (budget.over()), the first row
    never (it makes the payload); a row whose plain step fails is recorded in errors, and the
    others go on.
    """
    rows = {}
    for i, name in enumerate(names):
        spec = registry.get(name)
        progress.step(f"{name} ({'fixture size' if section == 'scenarios' else 'large'})")
        deadline = budget.item(len(names) - i)
        if budget.left() == 0 if section == "large" else budget.over() and rows:
            skipped[f"{section}/{name}"] = SPENT if section == "large" else OVER
            continue
        if section == "scenarios":
            fx = make(name, "float32", seed=0, case=spec.cases[0])
        else:
            fx = fixture(name, sizes["large"][name])
        try:
            leave_out = LARGE_LEAVE_OUT if section == "large" else None
            tune = compile_allowed(deadline)
            rows[name] = step_row(
                fx, spec.variants[0], repeats, sizes["target_s"], deadline, tune, leave_out, sizes["codegen"]
            )
        except Exception as exc:  # noqa: BLE001 - one broken step must not lose the whole run
            errors[f"{section}/{name}"] = f"{type(exc).__name__}: {exc}"
            continue
        if section == "large":
            rows[name]["dims"] = dict(sizes["large"][name])
    return rows


def main(config: Mapping, out_path: str) -> None:
    """Measure in this fresh interpreter and write the payload as JSON to out_path."""
    children.follow_parent(config["parent"])  # the pid the parent sent: it may be gone before this line runs
    cpus_available = len(available_cpus())
    cpus = pin(config["threads"])
    budget_s = config["budget_end"] - time.time()  # the budget counts from the command's start
    names, sizes = config["scenarios"], SIZES[config["mode"]]
    large = [n for n in names if n in sizes["large"]]
    phases = {"overhead": 1, "scenarios": len(names), "large": len(large)}
    phases |= {"freezing": 1} if config["freezing"] else {}
    phases |= {"tbptt": len(tbptt_points(sizes["tbptt"]))} if config["tbptt"] else {}
    phases |= {"port_check": 1} if config.get("port_check") else {}
    budget = Budget(max(budget_s, 1e-3), {k: w for k, w in WEIGHTS.items() if phases.get(k)})
    repeats, target_s = config["repeats"], sizes["target_s"]
    devices = {fw: backend(fw).bench.configure(config["threads"]) for fw in ("torch", "jax")}
    payload = {
        "machine": _machine(config, cpus, cpus_available, devices),
        "settings": {
            "repeats": repeats,
            "tbptt_repeats": tbptt_repeats(repeats),
            "mode": config["mode"],
            "dtype": "float32",
            "target_block_s": target_s,
            "noisy_above": NOISY,
            "budget_s": config["budget_s"],
            "min_rounds": MIN_ROUNDS,
            "torch_compile": TORCH_COMPILE[sizes["codegen"]],
        },
        "measured_at": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "glossary": GLOSSARY,
    }
    errors: dict[str, str] = {}
    skipped: dict[str, str] = {}
    with BenchProgress(sum(phases.values()), budget, config["quiet"]) as progress:
        budget.phase("overhead")
        progress.step("per-call overhead")
        payload["overhead"] = overhead(make("frozen_backbone", "float32", seed=0), repeats, target_s, budget.item(1))
        budget.phase("scenarios")
        payload["scenarios"] = _rows(names, "scenarios", sizes, repeats, budget, progress, errors, skipped)
        if config["freezing"]:  # the lessons (C16, C11) before the large sizes: those go first when time runs out
            budget.phase("freezing")
            progress.step("frozen_backbone at bench size (C16)")
            if budget.over():
                skipped["freezing"] = OVER
            else:
                payload["freezing"] = freezing_section(sizes["freezing"], repeats, target_s, budget.item(1))
        if config["tbptt"] and budget.over():
            skipped["tbptt_memory"] = OVER
        elif config["tbptt"]:
            budget.phase("tbptt")

            def keep(t_steps: int, done: int) -> bool:  # two lengths at least: a growth needs two points
                if done < 2 or budget.left() > 0:
                    return True
                skipped[f"tbptt_memory/T={t_steps}"] = SPENT
                return False

            payload["tbptt_memory"] = tbptt_section(
                sizes["tbptt"], tbptt_repeats(repeats), target_s, budget.item, progress.step, keep
            )
        if config.get("port_check"):  # issue 16's target: a 1 M-parameter port checked in under 30 s
            budget.phase("port_check")
            progress.step("port check, 1 M-parameter transformer (float64 + float32 + 5 steps)")
            if budget.left() < PORT_CHECK_MIN_S:
                skipped["port_check"] = PORT_CHECK_SHORT
            else:
                payload["port_check"] = bench_one_million()
        if large:
            budget.phase("large")
            payload["large"] = _rows(large, "large", sizes, repeats, budget, progress, errors, skipped)
    for section in ("scenarios", "large"):
        if not payload.get(section, True):
            del payload[section]  # every row failed: errors says why
    if errors:
        payload["errors"] = errors
    if skipped:
        payload["skipped"] = skipped
    payload["settings"]["capped"] = len(capped_timings(payload))
    payload["settings"]["skipped"] = len(skipped)
    payload["machine"]["load_average_after"] = list(os.getloadavg())
    payload["settings"]["measuring_s"] = round(budget.elapsed(), 3)
    with open(out_path, "w", encoding="utf-8") as fh:
        json.dump(payload, fh)
