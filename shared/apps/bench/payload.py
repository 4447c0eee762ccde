"""The bench's JSON payload: what it must hold (PAYLOAD), its glossary, the check, and its timings.

The tables, the Markdown report and the site read only what `check_payload` has checked, so a
stale or hand-edited file is refused with the dotted path of its first bad field.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping

__all__ = [
    "COLUMNS",
    "TUNED",
    "FREEZING_VARIANTS",
    "CLAIM_C16",
    "GLOSSARY",
    "PAYLOAD",
    "OPTIONAL",
    "check_payload",
    "timings",
    "noisy_timings",
    "capped_timings",
]

# the step-time columns, in table order: what a user of each framework would run
COLUMNS = ("torch", "torch_compile", "jax", "jax_cached", "jax_split")
TUNED = ("torch_compile", "jax_cached", "jax_split")  # a row may lack these; `unavailable` says why
FREEZING_VARIANTS = ("full_finetune", "detach_features", "freeze_params")
CLAIM_C16 = {"id": "C16", "claim": "detach speeds training up by 15–20 %", "saving": (0.15, 0.20)}
GLOSSARY = {  # written into every payload, so that the JSON explains itself
    "median_s, p25_s, p75_s, min_s": "seconds per step over the timed rounds (median, quartiles, fastest)",
    "n": "timed rounds; each round times `inner` consecutive steps and divides by inner",
    "capped": "fewer rounds than settings.repeats: its share of the time budget (settings.budget_s) ran out",
    "spread, noisy": "(p75_s - p25_s) / median_s, and whether it exceeds settings.noisy_above",
    "first_call_s": "the first call, timed apart: JAX traces and compiles there, torch.compile compiles, eager warms up",
    "torch, torch_compile": "torch eager; torch.compile(mode='default', dynamic=False) of the same step (inductor; "
    "quick mode: backend='aot_eager', no kernels built: settings.torch_compile)",
    "jax, jax_cached, jax_split": "the scenario's JAX step as written (jit or nnx.jit); its nnx.jit calls "
    "through nnx.cached_partial; one jax.jit over the nnx.split state",
    "unavailable": "column -> why it has no timing (a compile error, no nnx.jit call to tune, the budget spent)",
    "skipped": "what was not measured because the time budget was spent (large rows, the longest tbptt T)",
    "errors": "rows whose plain step failed, and the error",
    "ratios": "column median / torch eager median, measured in the same run: < 1 means faster than torch eager",
    "best": "the fastest torch and JAX columns, and best JAX / best torch",
    "jax_over_torch": "JAX median / torch median (both as the scenario writes them): < 1 means JAX is faster",
    "large": "the same steps at a size where arithmetic dominates (dims: the shape letters changed)",
    "graphs, graph_breaks, backend": "torch.compile: graphs Dynamo compiled, graph breaks it met (backward() splits "
    "a step), the backend that compiled them (inductor; aot_eager in quick mode)",
    "state_leaves": "jax_cached / jax_split: arrays in the models' and optimizers' state",
    "saving": "1 - step time / full_finetune step time",
    "ideal_s": "backbone_forward + head_step medians: the frozen step with nothing wasted",
    "peak_bytes": "torch: most bytes allocated at once during one step; JAX: compiled temp + output bytes",
    "bytes_per_step, seconds_per_step": "least-squares slope over T: per time step of the sequence",
    "peak_ratio": "peak_bytes at the largest T / at the smallest T",
    "fields": "the shapes of the scenario fixture's arrays",
    "accelerator": "cuda when both frameworks ran on a CUDA GPU, else cpu (absolute times are quoted for a GPU only)",
    "seconds": "wall time of the whole bench command",
}

# What a payload must hold for the tables and the site: a dict is required keys ("+": a non-empty
# mapping of any keys), a one-item list a non-empty list, NUMBER a finite number.
NUMBER = "a finite number"
_STATS = {"median_s": NUMBER, "p25_s": NUMBER, "p75_s": NUMBER, "noisy": bool, "first_call_s": NUMBER}
_STEP_TIMES = {v: {"median_s": NUMBER, "p25_s": NUMBER, "p75_s": NUMBER, "noisy": bool} for v in FREEZING_VARIANTS}
_ROW = {
    "variant": str,
    "torch": _STATS,
    "jax": _STATS,
    "jax_over_torch": NUMBER,
    "ratios": {"+": NUMBER},
    "unavailable": {},
    "best": {"torch": str, "jax": str, "jax_over_torch": NUMBER},
}
PAYLOAD = {
    "versions": {"+": str},
    "measured_at": str,
    "machine": {
        "cpu": str,
        "threads": int,
        "note": str,
        "accelerator": str,
        "load_average_before": [NUMBER],
        "devices": {fw: {"device": str} for fw in ("torch", "jax")},
    },
    "settings": {"repeats": int, "mode": str, "budget_s": NUMBER, "capped": int},
    "scenarios": {"+": _ROW},
    "overhead": {k: {"median_s": NUMBER} for k in ("eager_op", "jit_call", "nnx_jit_call", "nnx_cached_partial_call")},
}
OPTIONAL = {
    "large": {"+": {**_ROW, "dims": {"+": int}}},
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
    "port_check": {
        "model": str,
        "parameters": int,
        "steps": int,
        "seconds": {k: NUMBER for k in ("float64", "float32", "diagnosis", "total")},
        "cpu_seconds": NUMBER,
        "ok": bool,
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

    Besides the fields of PAYLOAD (and of OPTIONAL's sections, when present), every row of
    `scenarios` and `large` has each tuned column either timed or explained in `unavailable`.
    Raises ValueError naming the first bad field (dotted path), what it expected and what it got.
    """
    spec = {**PAYLOAD, **{k: v for k, v in OPTIONAL.items() if isinstance(payload, dict) and k in payload}}
    _check(payload, spec, "payload")
    for section in ("scenarios", "large"):
        for name, row in payload.get(section, {}).items():
            for col in TUNED:
                path = f"payload.{section}.{name}.{col}"
                if col in row:
                    _check(row[col], _STATS, path)
                elif not isinstance(row["unavailable"].get(col), str):
                    raise ValueError(f"field {path} expected timings, or a reason in unavailable.{col}, got neither")


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


def timings(payload: Mapping) -> Iterator[tuple[str, Mapping]]:
    """(label, statistics) of every step timing of the payload (the per-call overheads aside)."""
    for section, suffix in (("scenarios", ""), ("large", " (large)")):
        for name, row in payload.get(section, {}).items():
            yield from ((f"{name} {col}{suffix}", row[col]) for col in COLUMNS if col in row)
    for fw in ("torch", "jax"):
        yield from ((f"freezing {fw} {k}", r) for k, r in payload.get("freezing", {}).get(fw, {}).items())
    for r in payload.get("tbptt_memory", {}).get("rows", []):
        yield f"tbptt {r['framework']} {r['form']} {r['k']} T={r['T']}", r


def noisy_timings(payload: Mapping) -> list[str]:
    """Labels of the timings whose interquartile range exceeds settings.noisy_above of their median."""
    return [label for label, r in timings(payload) if r["noisy"]]


def capped_timings(payload: Mapping) -> list[str]:
    """Labels of the timings that got fewer rounds than settings.repeats: its share of the time budget ran out."""
    return [label for label, r in timings(payload) if r.get("capped")]
