"""`detach-parity bench [SCENARIO ...] [--json PATH] [--repeats N] [--threads N] [--quick]`.

Measures, side by side in one run (measurements, never test assertions):
1. every scenario's training step (torch_impl/steps.py eager vs jax_impl/steps.py jit) on the
   same float32 fixture: median and spread over interleaved repeats (torch, JAX, torch, JAX,
   ...), the JAX/torch ratio, JAX compile time (first call) apart;
2. frozen_backbone at a size where the backbone dwarfs the head: `full_finetune`,
   `detach_features`, `freeze_params` against the ideal frozen step computed from measured
   parts (backbone forward + head step), next to the tutorial claim of a 15–20 % saving (C16);
   torch's grad modes for one forward (C09, C17);
3. truncated BPTT peak memory and step time as T grows, for a fixed k and for k = T, with a
   backward per window (`windows`) and with one backward of the summed loss (`one_backward`).
The measuring runs in a fresh interpreter (`python -m shared.apps.bench --worker`): its CPU affinity
and torch's thread count are set to --threads before torch or JAX start, so both frameworks get
the same cores. With a CUDA device visible to both, the worker runs there (float32 matmuls
without TF32); otherwise it says so and runs on the CPU.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from rich.console import Console
from rich.table import Table

from shared.apps.common import UsageError, json_path, positive_int, versions, write_json
from shared.core import registry
from shared.core.runner import impl

__all__ = [
    "SIZES",
    "CLAIM_C16",
    "GLOSSARY",
    "FREEZING_VARIANTS",
    "PAYLOAD",
    "check_payload",
    "available_cpus",
    "scenario_names",
    "interleaved",
    "slope",
    "run",
    "noisy_timings",
    "print_tables",
    "cmd_bench",
    "add_parser",
]

# Sizes per mode. freezing: frozen_backbone dims (backbone D*H + H*H weights, head H*C);
# tbptt: GRU dims, the sequence lengths T swept, the fixed truncation k; target_s: the least
# time one timed block of steps takes (steps are repeated inside a block to reach it).
SIZES = {
    "full": {
        "freezing": {"B": 256, "D": 1024, "H": 1024, "C": 10},
        "tbptt": {"B": 16, "I": 32, "H": 128, "O": 8, "T": (64, 128, 256, 512, 1024), "k": 32},
        "target_s": 0.02,
    },
    "quick": {
        "freezing": {"B": 4, "D": 8, "H": 8, "C": 3},
        "tbptt": {"B": 2, "I": 2, "H": 3, "O": 1, "T": (8, 32), "k": 4},
        "target_s": 0.0,
    },
}
GLOSSARY = {  # written into every payload, so that the JSON explains itself
    "median_s, p25_s, p75_s, min_s": "seconds per step over the timed rounds (median, quartiles, fastest)",
    "n": "timed rounds; each round times `inner` consecutive steps and divides by inner",
    "spread, noisy": "(p75_s - p25_s) / median_s, and whether it exceeds settings.noisy_above",
    "first_call_s": "the first call, timed apart: JAX traces and compiles there, torch warms up",
    "jax_over_torch": "JAX median / torch median: < 1 means JAX is faster",
    "saving": "1 - step time / full_finetune step time",
    "ideal_s": "backbone_forward + head_step medians: the frozen step with nothing wasted",
    "peak_bytes": "torch: most bytes allocated at once during one step; JAX: compiled temp + output bytes",
    "bytes_per_step, seconds_per_step": "least-squares slope over T: per time step of the sequence",
    "peak_ratio": "peak_bytes at the largest T / at the smallest T",
    "fields": "the shapes of the scenario fixture's arrays",
    "seconds": "wall time of the whole bench command",
}
CLAIM_C16 = {"id": "C16", "claim": "detach speeds training up by 15–20 %", "saving": (0.15, 0.20)}
FREEZING_VARIANTS = ("full_finetune", "detach_features", "freeze_params")


def available_cpus() -> list[int]:
    """The CPU ids this process may run on (os.sched_getaffinity), sorted."""
    return sorted(os.sched_getaffinity(0))


def scenario_names() -> tuple[str, ...]:
    """The scenarios whose pair has a training step (`make_step`), in teaching order."""
    return tuple(n for n, spec in registry.SCENARIOS.items() if spec.has_step)


NOISY = 0.25  # a step whose interquartile range exceeds this fraction of its median is flagged noisy


def _stats(times: Sequence[float]) -> dict[str, float]:
    q = statistics.quantiles(times, n=4, method="inclusive") if len(times) > 1 else [times[0]] * 3
    median = statistics.median(times)
    spread = (q[2] - q[0]) / median
    return {
        "median_s": median,
        "p25_s": q[0],
        "p75_s": q[2],
        "min_s": min(times),
        "n": len(times),
        "spread": spread,
        "noisy": spread > NOISY,
    }


def interleaved(
    steps: Mapping[str, Callable[[], object]], repeats: int, target_s: float
) -> dict[str, dict[str, float]]:
    """Time every step, interleaved: one block of each per round (A B A B ...), `repeats` rounds.

    The first call of each step is timed apart (`first_call_s`: JAX traces and compiles there,
    torch warms its caches); the second call sets how many steps a block repeats to last at
    least target_s. Returns {label: {median_s, p25_s, p75_s, min_s, n, first_call_s, inner}},
    seconds per step. Raises ValueError unless repeats is an int >= 1, target_s a finite number
    >= 0 and steps a non-empty mapping of label to callable.
    """
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
        raise ValueError(f"repeats expected an integer >= 1, got {repeats!r}")
    if isinstance(target_s, bool) or not isinstance(target_s, int | float) or not 0 <= target_s < math.inf:
        raise ValueError(f"target_s expected a finite number of seconds >= 0, got {target_s!r}")
    if not isinstance(steps, Mapping) or not all(callable(step) for step in steps.values()):
        raise ValueError(f"steps expected a mapping of label to callable, got {type(steps).__name__}")
    if not steps:
        raise ValueError("steps expected at least one step to time, got none")
    first, inner = {}, {}
    for label, step in steps.items():
        start = time.perf_counter()
        step()
        first[label] = time.perf_counter() - start
        start = time.perf_counter()
        step()
        inner[label] = max(1, min(1000, math.ceil(target_s / max(time.perf_counter() - start, 1e-7))))
    times: dict[str, list[float]] = {label: [] for label in steps}
    for _ in range(repeats):
        for label, step in steps.items():
            start = time.perf_counter()
            for _ in range(inner[label]):
                step()
            times[label].append((time.perf_counter() - start) / inner[label])
    return {label: {**_stats(times[label]), "first_call_s": first[label], "inner": inner[label]} for label in steps}


def slope(xs: Sequence[float], ys: Sequence[float]) -> float:
    """Least-squares slope of ys against xs.

    Raises ValueError with fewer than two distinct xs, unequal lengths or a non-finite value.
    """
    if len(xs) != len(ys) or len(set(xs)) < 2:
        raise ValueError(f"slope: expected >= 2 distinct x values and as many ys, got xs={xs}, ys={ys}")
    if not all(math.isfinite(v) for v in (*xs, *ys)):
        raise ValueError(f"slope: expected finite values, got xs={xs}, ys={ys}")
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum((x - mx) ** 2 for x in xs)


# What a payload must hold for the tables and the site: a dict is required keys ("+": a non-empty
# mapping of any keys), a one-item list a non-empty list, NUMBER a finite number.
NUMBER = "a finite number"
_STATS = {"median_s": NUMBER, "p25_s": NUMBER, "p75_s": NUMBER, "noisy": bool, "first_call_s": NUMBER}
_STEP_TIMES = {v: {"median_s": NUMBER, "p25_s": NUMBER, "p75_s": NUMBER, "noisy": bool} for v in FREEZING_VARIANTS}
PAYLOAD = {
    "versions": {"+": str},
    "measured_at": str,
    "machine": {
        "cpu": str,
        "threads": int,
        "note": str,
        "load_average_before": [NUMBER],
        "devices": {fw: {"device": str} for fw in ("torch", "jax")},
    },
    "settings": {"repeats": int, "mode": str},
    "scenarios": {"+": {"variant": str, "torch": _STATS, "jax": _STATS, "jax_over_torch": NUMBER}},
    "overhead": {k: {"median_s": NUMBER} for k in ("eager_op", "jit_call", "nnx_jit_call", "nnx_cached_partial_call")},
}
OPTIONAL = {
    "freezing": {
        "config": {k: int for k in ("B", "D", "H", "C", "backbone_params", "head_params")},
        "torch": _STEP_TIMES,
        "jax": _STEP_TIMES,
        "summary": {
            fw: {"ideal_s": NUMBER, "ideal_saving": NUMBER, "saving": {v: NUMBER for v in FREEZING_VARIANTS[1:]}}
            for fw in ("torch", "jax")
        },
        "claim": {"claim": str},
    },
    "tbptt_memory": {
        "config": {"B": int, "H": int, "T": [int]},
        "rows": [
            {"framework": str, "form": str, "k": str, "T": int, "peak_bytes": int, "median_s": NUMBER, "noisy": bool}
        ],
        "growth": {"+": {"peak_ratio": NUMBER, "bytes_per_step": NUMBER, "seconds_per_step": NUMBER}},
    },
}


def check_payload(payload: object) -> None:
    """Check a bench payload (as read from --json) has every field the tables and the site read.

    Raises ValueError naming the first bad field (dotted path), what it expected and what it got.
    """
    spec = {**PAYLOAD, **{k: v for k, v in OPTIONAL.items() if isinstance(payload, dict) and k in payload}}
    _check(payload, spec, "payload")


def _check(value: object, spec: object, path: str) -> None:
    if spec is NUMBER:
        ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    elif spec is bool:
        ok = isinstance(value, bool)
    elif spec in (str, int):
        ok = isinstance(value, spec) and not isinstance(value, bool)
    elif isinstance(spec, list):
        ok = isinstance(value, list) and len(value) > 0
    else:
        ok = isinstance(value, dict) and ("+" not in spec or len(value) > 0)
    if not ok:
        shown = repr(value) if not isinstance(value, dict | list) or len(repr(value)) < 60 else type(value).__name__
        raise ValueError(f"field {path} expected {_describe(spec)}, got {shown}")
    if isinstance(spec, list):
        for i, item in enumerate(value):
            _check(item, spec[0], f"{path}[{i}]")
    elif isinstance(spec, dict):
        for key, sub in spec.items() if "+" not in spec else ((k, spec["+"]) for k in value):
            if key not in value:
                raise ValueError(f"field {path}.{key} expected {_describe(sub)}, got nothing (missing)")
            _check(value[key], sub, f"{path}.{key}")


def _describe(spec: object) -> str:
    if spec is NUMBER:
        return NUMBER
    if spec in (str, int, bool):
        return {str: "a string", int: "an integer", bool: "true or false"}[spec]
    if isinstance(spec, list):
        return "a non-empty list"
    return "a non-empty object" if "+" in spec else "an object"


# ---------------------------------------------------------------- worker (fresh interpreter)


def _fixture(name: str, dims: Mapping[str, int], seed: int = 0):
    """A float32 fixture of frozen_backbone or tbptt at bench size, validated like any other."""
    import numpy as np

    from shared.core.fixtures import from_arrays

    rng = np.random.Generator(np.random.PCG64(seed))
    f32 = np.float32
    if name == "frozen_backbone":
        b, d, h, c = (dims[k] for k in "BDHC")
        arrays = {
            "x": rng.normal(size=(b, d)).astype(f32),
            "labels": rng.integers(0, c, size=b).astype(np.int64),
            "params/backbone/l1/kernel": (rng.normal(size=(d, h)) / np.sqrt(d)).astype(f32),
            "params/backbone/l1/bias": np.zeros(h, f32),
            "params/backbone/l2/kernel": (rng.normal(size=(h, h)) / np.sqrt(h)).astype(f32),
            "params/backbone/l2/bias": np.zeros(h, f32),
            "params/head/kernel": (rng.normal(size=(h, c)) / np.sqrt(h)).astype(f32),
            "params/head/bias": np.zeros(c, f32),
            **{k: np.array(v, f32) for k, v in dict(lr=1e-3, weight_decay=1e-2, b1=0.9, b2=0.999, eps=1e-8).items()},
            "steps": np.array(1, np.int64),
        }
    else:
        from shared.scenarios.tbptt import PARAMS

        sizes = {**dims, "G": 3 * dims["H"]}
        arrays = {
            "x": rng.normal(size=(sizes["T"], sizes["B"], sizes["I"])).astype(f32),
            "targets": rng.normal(size=(sizes["T"], sizes["B"], sizes["O"])).astype(f32),
            "h0": np.zeros((sizes["B"], sizes["H"]), f32),
        }
        for key, shape in PARAMS.items():
            fan_in = sizes[shape[0]] if len(shape) == 2 else sizes["H"]
            arrays[f"params/{key}"] = (rng.normal(size=tuple(sizes[s] for s in shape)) / np.sqrt(fan_in)).astype(f32)
    return from_arrays(name, arrays, case="bench")


def _pin(threads: int) -> list[int]:
    """Restrict this process to `threads` CPUs before torch and JAX start; returns their ids."""
    cpus = available_cpus()[:threads]
    os.sched_setaffinity(0, cpus)  # JAX sizes its CPU thread pool from this; torch is set below too
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


def _scenarios_section(names, repeats, target_s, progress) -> tuple[dict, dict]:
    jax_bench = impl("jax", "bench")
    from shared.core import registry
    from shared.core.fixtures import make

    torch_bench = impl("torch", "bench")

    progress("per-call overhead")
    fx = make("frozen_backbone", "float32", seed=0)
    overhead = interleaved(
        {**torch_bench.dispatch_steps(fx), **jax_bench.dispatch_steps(fx)}, repeats, max(target_s, 1e-3)
    )
    out = {}
    for name in names:
        spec = registry.get(name)
        progress(f"scenario {name}")
        fx = make(name, "float32", seed=0, case=spec.cases[0])
        timed = interleaved(
            {fw: impl(fw, name).make_step(fx, spec.variants[0]) for fw in ("torch", "jax")}, repeats, target_s
        )
        out[name] = {
            "variant": spec.variants[0],
            "case": spec.cases[0],
            "fields": {k: list(v.shape) for k, v in fx.items()},
            "torch": timed["torch"],
            "jax": timed["jax"],
            "jax_over_torch": timed["jax"]["median_s"] / timed["torch"]["median_s"],
        }
    return out, overhead


def _freezing_section(dims, repeats, target_s, progress) -> dict:
    jax_bench = impl("jax", "bench")
    torch_bench = impl("torch", "bench")

    progress("frozen_backbone at bench size")
    fx = _fixture("frozen_backbone", dims)
    t_steps, j_steps = torch_bench.freezing_steps(fx), jax_bench.freezing_steps(fx)
    both = {}
    for label in dict.fromkeys([*t_steps, *j_steps]):  # torch then JAX per label: interleaved
        if label in t_steps:
            both[f"torch/{label}"] = t_steps[label]
        if label in j_steps:
            both[f"jax/{label}"] = j_steps[label]
    timed = interleaved(both, repeats, target_s)
    per_fw = {
        fw: {k.split("/", 1)[1]: v for k, v in timed.items() if k.startswith(fw + "/")} for fw in ("torch", "jax")
    }
    summary = {}
    for fw, steps in per_fw.items():
        full = steps["full_finetune"]["median_s"]
        ideal = steps["backbone_forward"]["median_s"] + steps["head_step"]["median_s"]
        summary[fw] = {
            "full_finetune_s": full,
            "ideal_s": ideal,
            "ideal_saving": 1 - ideal / full,
            "saving": {v: 1 - steps[v]["median_s"] / full for v in FREEZING_VARIANTS[1:]},
            "over_ideal": {v: steps[v]["median_s"] / ideal for v in FREEZING_VARIANTS[1:]},
        }
    t = per_fw["torch"]
    grad_modes = {
        "forward_grad/forward_no_grad": t["forward_grad"]["median_s"] / t["forward_no_grad"]["median_s"],
        "forward_grad/forward_inference_mode": t["forward_grad"]["median_s"] / t["forward_inference_mode"]["median_s"],
        "forward_no_grad/forward_inference_mode": t["forward_no_grad"]["median_s"]
        / t["forward_inference_mode"]["median_s"],
        "detach_features/no_grad_backbone": t["detach_features"]["median_s"] / t["no_grad_backbone"]["median_s"],
    }
    d, h, c = dims["D"], dims["H"], dims["C"]
    return {
        "config": {**dims, "backbone_params": d * h + h + h * h + h, "head_params": h * c + c},
        "torch": per_fw["torch"],
        "jax": per_fw["jax"],
        "summary": summary,
        "jax_over_torch": {v: per_fw["jax"][v]["median_s"] / t[v]["median_s"] for v in FREEZING_VARIANTS},
        "torch_ratios": grad_modes,
        "claim": dict(CLAIM_C16),
    }


def _tbptt_section(cfg, repeats, target_s, progress) -> dict:
    jax_bench = impl("jax", "bench")
    torch_bench = impl("torch", "bench")

    k_fixed, rows = cfg["k"], []
    dims = {key: cfg[key] for key in ("B", "I", "H", "O")}
    for t_steps in cfg["T"]:
        fx = _fixture("tbptt", {**dims, "T": t_steps})
        for form, k in (("windows", k_fixed), ("one_backward", k_fixed), ("windows", t_steps)):
            progress(f"tbptt T={t_steps} {form} k={k}")
            t_step, t_peak = torch_bench.tbptt_step(fx, form, k)
            j_step, j_peak = jax_bench.tbptt_step(fx, form, k)
            timed = interleaved({"torch": t_step, "jax": j_step}, repeats, target_s)
            peaks = {"torch": t_peak(), "jax": j_peak()}
            for fw in ("torch", "jax"):
                label = "k=T" if k == t_steps else f"k={k}"
                rows.append(
                    {"framework": fw, "form": form, "k": label, "T": t_steps, "peak_bytes": peaks[fw]} | timed[fw]
                )
    growth = {}
    for fw in ("torch", "jax"):
        for form, label in (("windows", f"k={k_fixed}"), ("one_backward", f"k={k_fixed}"), ("windows", "k=T")):
            sel = [r for r in rows if (r["framework"], r["form"], r["k"]) == (fw, form, label)]
            ts = [r["T"] for r in sel]
            peak = [r["peak_bytes"] for r in sel]
            growth[f"{fw} {form} {label}"] = {
                "bytes_per_step": slope(ts, peak),
                "seconds_per_step": slope(ts, [r["min_s"] for r in sel]),  # the fastest round: least disturbed
                "peak_ratio": peak[-1] / peak[0],
                "T_ratio": ts[-1] / ts[0],
            }
    return {"config": {**dims, "k": k_fixed, "T": list(cfg["T"]), "cell": "gru"}, "rows": rows, "growth": growth}


def _tbptt_repeats(repeats: int) -> int:
    """Rounds for the tbptt sweep: at most 5, its longest steps take a third of a second."""
    return max(1, min(repeats, 5))


def _exit_with_parent(parent: int) -> None:
    """End this worker when the process that started it is gone (killed, say): never orphaned."""

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(0.5)
        os._exit(1)

    threading.Thread(target=watch, daemon=True).start()


def _worker(config: dict, out_path: str) -> None:
    """Measure in this fresh interpreter and write the payload as JSON to out_path."""
    _exit_with_parent(config["parent"])  # the pid the parent sent: it may be gone before this line runs
    cpus_available = len(available_cpus())
    cpus = _pin(config["threads"])
    err = Console(stderr=True)
    progress = (lambda text: None) if config["quiet"] else (lambda text: err.print(f"[dim]bench: {text}[/dim]"))
    jax_bench = impl("jax", "bench")
    torch_bench = impl("torch", "bench")
    devices = {"torch": torch_bench.configure(config["threads"]), "jax": jax_bench.configure(config["threads"])}
    if devices["torch"]["cuda"] != devices["jax"]["cuda"]:
        note = "torch and JAX run on different devices here: the JAX/torch ratios compare devices, not frameworks"
    elif devices["torch"]["cuda"]:
        note = "CUDA device present: both frameworks ran on the GPU, float32 matmuls without TF32"
    else:
        note = "no CUDA device (torch.cuda.is_available() is False, jax.devices() is CPU): ran on the CPU"
    sizes = SIZES[config["mode"]]
    repeats, target_s = config["repeats"], sizes["target_s"]
    payload = {
        "machine": {
            "cpu": _cpu_model(),
            "load_average_before": list(os.getloadavg()),  # 1, 5, 15 min: > 0 means others were running
            "cpus_available": cpus_available,
            "cpus_used": cpus,
            "threads": config["threads"],
            "devices": devices,
            "note": note,
            "jax_backend": devices["jax"]["backend"],
            "xla_flags": os.environ.get("XLA_FLAGS", ""),
        },
        "settings": {
            "repeats": repeats,
            "tbptt_repeats": _tbptt_repeats(repeats),
            "mode": config["mode"],
            "dtype": "float32",
            "target_block_s": target_s,
            "noisy_above": NOISY,
        },
        "measured_at": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "glossary": GLOSSARY,
    }
    payload["scenarios"], payload["overhead"] = _scenarios_section(config["scenarios"], repeats, target_s, progress)
    if config["freezing"]:
        payload["freezing"] = _freezing_section(sizes["freezing"], repeats, target_s, progress)
    if config["tbptt"]:
        payload["tbptt_memory"] = _tbptt_section(sizes["tbptt"], _tbptt_repeats(repeats), target_s, progress)
    payload["machine"]["load_average_after"] = list(os.getloadavg())
    with open(out_path, "w", encoding="utf-8") as fh:
        json.dump(payload, fh)


# ---------------------------------------------------------------- command line


def run(
    scenarios: Sequence[str] | None = None,
    repeats: int = 15,
    threads: int | None = None,
    quick: bool = False,
    quiet: bool = True,
) -> dict:
    """Run the bench in a fresh interpreter and return its payload (see the module docstring).

    scenarios: names of family "scenarios" (default all); frozen_backbone adds section 2 and
    tbptt section 3, and both run when no name is given. threads: CPUs for both frameworks
    (default all this process may use).
    Raises ValueError on an unknown scenario, repeats < 1 or threads outside [1, available];
    RuntimeError if the worker fails (its stderr was shown).
    """
    known = scenario_names()
    if isinstance(scenarios, str):
        raise ValueError(f"bench: scenarios expected a list of names, got the string {scenarios!r}")
    names = list(known) if not scenarios else list(dict.fromkeys(scenarios))
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ValueError(f"bench: scenario expected one of {list(known)}, got {unknown}")
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
        raise ValueError(f"bench: repeats expected an integer >= 1, got {repeats!r}")
    cpus = len(available_cpus())
    threads = cpus if threads is None else threads
    if isinstance(threads, bool) or not isinstance(threads, int) or not 1 <= threads <= cpus:
        raise ValueError(f"bench: threads expected 1..{cpus} (the CPUs this process may use), got {threads}")
    config = {
        "scenarios": names,
        "freezing": "frozen_backbone" in names,
        "tbptt": "tbptt" in names,
        "repeats": repeats,
        "threads": threads,
        "mode": "quick" if quick else "full",
        "quiet": quiet,
        "parent": os.getpid(),
    }
    previous = signal.signal(signal.SIGTERM, _terminated)  # so that `finally` stops the worker
    try:
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "bench.json"
            cmd = [sys.executable, "-m", "shared.apps.bench", "--worker", json.dumps(config), str(out)]
            proc = subprocess.Popen(cmd, cwd=Path(__file__).resolve().parents[3])
            try:
                code = proc.wait()
            finally:
                if proc.poll() is None:
                    proc.terminate()
                    proc.wait()
            if code != 0 or not out.exists():
                how = f"was killed by signal {-code}" if code < 0 else f"failed with exit code {code}"
                raise RuntimeError(f"bench: the measuring process {how} (its messages, if any, are above)")
            return json.loads(out.read_text(encoding="utf-8"))
    finally:
        signal.signal(signal.SIGTERM, previous)


def _terminated(signum, frame) -> None:
    raise SystemExit(128 + signum)


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.3f} ms" if seconds < 1 else f"{seconds:.2f} s"


def _spread(r: Mapping[str, float]) -> str:
    flag = " ⚠" if r["noisy"] else ""
    return f"{_ms(r['median_s'])} ±{100 * (r['p75_s'] - r['p25_s']) / 2 / r['median_s']:.0f}%{flag}"


def noisy_timings(payload: Mapping) -> list[str]:
    """Labels of the timings whose interquartile range exceeds NOISY of their median."""
    out = [f"{name} {fw}" for name, r in payload["scenarios"].items() for fw in ("torch", "jax") if r[fw]["noisy"]]
    for fw in ("torch", "jax"):
        out += [f"freezing {fw} {k}" for k, r in payload.get("freezing", {}).get(fw, {}).items() if r["noisy"]]
    rows = payload.get("tbptt_memory", {}).get("rows", [])
    out += [f"tbptt {r['framework']} {r['form']} {r['k']} T={r['T']}" for r in rows if r["noisy"]]
    return out


def _mb(n: float) -> str:
    return f"{n / 2**20:.2f} MiB" if n >= 2**20 else f"{n / 2**10:.1f} KiB"


def print_tables(payload: Mapping, console: Console) -> None:
    """The payload as rich tables: per-scenario steps, freezing (C16), grad modes, tbptt memory."""
    m = payload["machine"]
    where = f"{m['devices']['torch']['device']} / {m['devices']['jax']['device']}, {m['threads']} thread(s)"
    console.print(f"[bold]bench[/bold] on {m['cpu']} — {where}. {m['note']}.")
    table = Table(title="Training step per scenario: torch eager vs JAX jit (float32, the scenario's fixture)")
    for col in (
        "scenario",
        "variant",
        "torch median ±IQR/2",
        "JAX median ±IQR/2",
        "JAX/torch",
        "JAX compile",
        "torch 1st call",
    ):
        table.add_column(col, justify="left" if col in ("scenario", "variant") else "right")
    for name, r in payload["scenarios"].items():
        table.add_row(
            name,
            r["variant"],
            _spread(r["torch"]),
            _spread(r["jax"]),
            f"{r['jax_over_torch']:.2f}×",
            _ms(r["jax"]["first_call_s"]),
            _ms(r["torch"]["first_call_s"]),
        )
    console.print(table)
    o = payload["overhead"]
    console.print(
        f"Per-call overhead (one elementwise op): torch eager {o['eager_op']['median_s'] * 1e6:.1f} µs, "
        f"jax.jit {o['jit_call']['median_s'] * 1e6:.1f} µs, nnx.jit with a model and optimizer "
        f"{o['nnx_jit_call']['median_s'] * 1e6:.1f} µs ({o['nnx_cached_partial_call']['median_s'] * 1e6:.1f} µs "
        "through nnx.cached_partial): at fixture sizes a step's time is mostly this."
    )
    if "freezing" in payload:
        f = payload["freezing"]
        cfg = f["config"]
        title = (
            f"frozen_backbone B={cfg['B']} D={cfg['D']} H={cfg['H']} C={cfg['C']}: "
            f"backbone {cfg['backbone_params']:,} params, head {cfg['head_params']:,}"
        )
        table = Table(title=title)
        for col in ("step", "torch", "JAX", "torch saving", "JAX saving"):
            table.add_column(col, justify="left" if col == "step" else "right")
        for label in dict.fromkeys([*f["torch"], *f["jax"]]):
            cells = [_spread(f[fw][label]) if label in f[fw] else "—" for fw in ("torch", "jax")]
            saving = [
                f"{100 * f['summary'][fw]['saving'][label]:.1f} %" if label in f["summary"][fw]["saving"] else ""
                for fw in ("torch", "jax")
            ]
            table.add_row(label, *cells, *saving)
        ideal = [_ms(f["summary"][fw]["ideal_s"]) for fw in ("torch", "jax")]
        ideal_saving = [f"{100 * f['summary'][fw]['ideal_saving']:.1f} %" for fw in ("torch", "jax")]
        table.add_row("ideal = backbone_forward + head_step", *ideal, *ideal_saving, style="bold")
        console.print(table)
        s = f["summary"]
        console.print(
            f"C16 claims detach saves 15–20 %. Measured against full_finetune: detach_features saves "
            f"{100 * s['torch']['saving']['detach_features']:.1f} % (torch) / {100 * s['jax']['saving']['detach_features']:.1f} % (JAX), "
            f"the ideal {100 * s['torch']['ideal_saving']:.1f} % / {100 * s['jax']['ideal_saving']:.1f} %; "
            f"detach / freeze_params = {f['torch']['detach_features']['median_s'] / f['torch']['freeze_params']['median_s']:.2f}× (torch), "
            f"{f['jax']['detach_features']['median_s'] / f['jax']['freeze_params']['median_s']:.2f}× (JAX)."
        )
        ratios = Table(title="torch ratios (> 1: the second is faster)")
        ratios.add_column("ratio")
        ratios.add_column("value", justify="right")
        for key, value in f["torch_ratios"].items():
            ratios.add_row(key, f"{value:.2f}×")
        console.print(ratios)
    if "tbptt_memory" in payload:
        tb = payload["tbptt_memory"]
        cfg = tb["config"]
        table = Table(title=f"tbptt GRU B={cfg['B']} I={cfg['I']} H={cfg['H']}: peak memory and step time as T grows")
        for col in ("T", "form", "k", "torch peak", "JAX peak", "torch step", "JAX step"):
            table.add_column(col, justify="right")
        pairs: dict[tuple, dict] = {}
        for r in tb["rows"]:
            pairs.setdefault((r["T"], r["form"], r["k"]), {})[r["framework"]] = r
        for (t_steps, form, k), p in pairs.items():
            table.add_row(
                str(t_steps),
                form,
                k,
                _mb(p["torch"]["peak_bytes"]),
                _mb(p["jax"]["peak_bytes"]),
                _ms(p["torch"]["median_s"]),
                _ms(p["jax"]["median_s"]),
            )
        console.print(table)
        growth = Table(title=f"growth from T={cfg['T'][0]} to T={cfg['T'][-1]} (×{cfg['T'][-1] // cfg['T'][0]})")
        for col in ("framework, form, k", "peak ×", "bytes per time step", "time per time step (fastest round)"):
            growth.add_column(col, justify="left" if col.startswith("framework") else "right")
        for key, g in tb["growth"].items():
            growth.add_row(
                key, f"{g['peak_ratio']:.2f}×", f"{g['bytes_per_step']:,.0f}", f"{g['seconds_per_step'] * 1e6:.1f} µs"
            )
        console.print(growth)
    noisy = noisy_timings(payload)
    load = payload["machine"]["load_average_before"][0]
    if noisy:
        shown = ", ".join(noisy[:6]) + (" …" if len(noisy) > 6 else "")
        console.print(
            f"[yellow]⚠ {len(noisy)} timing(s) spread by more than {NOISY:.0%} of their median: {shown}. Usually "
            "something else was using the CPUs: rerun on an idle machine, or with --threads below the number of "
            "cores, before quoting these times.[/yellow]",
            highlight=False,
        )
    elif load > 1.0:
        console.print(
            f"[yellow]⚠ load average {load:.2f} before the run: other processes may have used the CPUs "
            f"(every spread stayed under {NOISY:.0%}).[/yellow]",
            highlight=False,
        )


def cmd_bench(args: argparse.Namespace, console: Console) -> int:
    """Run the bench, write JSON on request, print the tables.

    Returns 0; 1 if the measuring process failed or the JSON could not be written (a previous
    file there is left as it was); bad arguments raise UsageError (exit 2).
    """
    err = Console(stderr=True)
    start = time.perf_counter()
    try:
        payload = run(args.scenarios, args.repeats, args.threads, args.quick, args.quiet)
    except ValueError as exc:
        raise UsageError(str(exc).removeprefix("bench: ")) from None  # the CLI names the command already
    except RuntimeError as exc:
        kept = f"; {args.json} was left as it was" if args.json and Path(args.json).exists() else ""
        err.print(f"detach-parity bench: error: {exc}{kept}", markup=False, highlight=False)
        return 1
    payload = {"versions": versions(), **payload, "seconds": round(time.perf_counter() - start, 3)}
    if args.json:  # before the tables: a closed stdout must not lose the measurements
        try:
            write_json(Path(args.json), payload)
        except OSError as exc:
            err.print(f"detach-parity bench: error: could not write {args.json}: {exc}", markup=False, highlight=False)
            return 1
    print_tables(payload, console)
    console.print(f"bench done in {payload['seconds']:.1f} s (measurements, not assertions)")
    if args.json:
        console.print(f"wrote {args.json}", markup=False, highlight=False)
    return 0


def add_parser(sub) -> None:
    """Register the `bench` subcommand on an argparse subparsers object."""
    p = sub.add_parser("bench", help="step time and memory, torch eager vs JAX jit; what stopping gradients saves")
    p.add_argument("scenarios", nargs="*", metavar="SCENARIO", help="scenarios to measure (default: all 15)")
    p.add_argument(
        "--repeats", type=positive_int, default=15, help="timed rounds per step, median reported (default 15)"
    )
    p.add_argument("--threads", type=positive_int, help="CPUs for both frameworks (default: all available)")
    p.add_argument("--quick", action="store_true", help="tiny sizes (the smoke test of the bench itself)")
    p.add_argument("--json", type=json_path, metavar="PATH", help="also write the measurements as JSON")
    p.add_argument("--quiet", action="store_true", help="no progress lines")
    p.set_defaults(func=cmd_bench)
