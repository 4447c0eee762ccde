"""The cells of a checked bench payload that every reader shares: headers, row order, ratio cells, notes.

The terminal tables (tables.py) and the Markdown report (report.py) are built from these, so both
follow one rule: a payload measured on the CPU of a shared machine quotes step times only as
ratios measured in that one run (against torch eager in the same run); absolute times are quoted
only for a GPU run (`on_gpu`).
"""

from __future__ import annotations

from collections.abc import Mapping

from ...core import registry

__all__ = [
    "HEADERS",
    "ordered",
    "on_gpu",
    "device_heading",
    "ms",
    "ratio_cell",
    "first_call_cell",
    "reasons",
    "closing_note",
    "port_check_line",
]

HEADERS = {
    "torch": "torch eager",
    "torch_compile": "torch.compile",
    "jax": "JAX as written",
    "jax_cached": "JAX cached_partial",
    "jax_split": "JAX jit(split)",
}


def ordered(rows: Mapping[str, Mapping]) -> dict[str, Mapping]:
    """Rows in teaching order (the registry's), then any the registry does not know (a stored JSON's keys are sorted)."""
    known = [n for n in registry.names() if n in rows]
    return {n: rows[n] for n in [*known, *(n for n in rows if n not in known)]}


def on_gpu(payload: Mapping) -> bool:
    """Whether both frameworks ran on a CUDA GPU (absolute times may be quoted)."""
    return payload["machine"]["accelerator"] == "cuda"


def device_heading(payload: Mapping) -> str:
    m = payload["machine"]
    if on_gpu(payload):
        return f"GPU: {m['devices']['torch']['device']} (absolute times)"
    return f"CPU: {m['cpu']}, {m['threads']} thread(s) (ratios measured in one run)"


def ms(seconds: float) -> str:
    return f"{seconds * 1e3:.3f} ms" if seconds < 1 else f"{seconds:.2f} s"


def ratio_cell(row: Mapping, col: str, gpu: bool = False) -> str:
    """A step-time cell: its ratio to torch eager (with the GPU: the median too), ⚠ if noisy, — if none."""
    if col not in row:
        return "—"
    flag = " ⚠" if row[col]["noisy"] else ""
    if col == "torch":
        return (ms(row[col]["median_s"]) if gpu else "1×") + flag
    text = f"{row['ratios'][col]:.2f}×"
    return (f"{ms(row[col]['median_s'])} ({text})" if gpu else text) + flag


def first_call_cell(row: Mapping, col: str, gpu: bool = False) -> str:
    """The first call (a compile) of a column: in seconds on a GPU, else in torch eager steps of this run."""
    if col not in row:
        return "—"
    first = row[col]["first_call_s"]
    return ms(first) if gpu else f"{first / row['torch']['median_s']:,.0f} steps"


def reasons(payload: Mapping) -> list[str]:
    """One line per tuned column and reason it has no timing, naming the steps it holds for."""
    groups: dict[tuple[str, str], list[str]] = {}
    for section in ("scenarios", "large"):
        for name, row in ordered(payload.get(section, {})).items():
            for col, why in row["unavailable"].items():
                why = "the step already is a jax.jit, nothing to tune" if "already a jax.jit" in why else why
                groups.setdefault((col, why), []).append(f"{name} (large)" if section == "large" else name)
    return [f"{HEADERS[col]} — {', '.join(names)}: {why}" for (col, why), names in groups.items()]


def closing_note(payload: Mapping) -> str:
    m = payload["machine"]
    load = m["load_average_before"][0]
    if on_gpu(payload):
        where = f"Measured on {m['devices']['torch']['device']}."
    else:
        where = (
            f"No CUDA GPU was available: every number here was measured on the CPU ({m['cpu']}, "
            f"{m['threads']} thread(s), {m.get('threads_chosen', '')}), so step times are ratios measured in this one run."
        )
    return f"{where} Load average before the run {load:.2f}; measured {payload['measured_at']}."


def port_check_line(payload: Mapping) -> str:
    """One sentence on the port check of the 1 M-parameter model (absolute seconds: the target is a time)."""
    pc = payload["port_check"]
    sec = pc["seconds"]
    verdict = "the port matches" if pc["ok"] else "the port DIFFERS (a bug in the worked port or the checker)"
    return (
        f"Port check of the {pc['parameters']:,}-parameter worked {pc['model']} (float64 + float32 + {pc['steps']} "
        f"optimizer steps): {sec['total']:.1f} s wall ({sec['float64']:.1f} s float64, {sec['float32']:.1f} s float32), "
        f"{pc['cpu_seconds']:.1f} s CPU; {verdict} (issue target: under 30 s on 2 cores)."
    )
