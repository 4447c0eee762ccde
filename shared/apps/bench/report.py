"""A checked bench payload as Markdown: the tables of docs/bench.md (`markdown`) and the README lines (`summary`).

One rule for every reader (terminal tables, docs/bench.md, the README, the site): a payload
measured on the CPU of a shared machine quotes step times only as ratios measured in that one
run (against torch eager in the same run); absolute times are quoted only for a GPU run, in
its own section. Memory is bytes either way. The cells the terminal tables share are in cells.py.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping

from .cells import (
    HEADERS,
    closing_note,
    device_heading,
    first_call_cell,
    ms,
    on_gpu,
    ordered,
    port_check_line,
    ratio_cell,
    reasons,
)
from .payload import COLUMNS, capped_timings, noisy_timings

__all__ = ["markdown", "summary"]


def _steps_table(payload: Mapping, section: str) -> list[str]:
    gpu = on_gpu(payload)
    large = section == "large"
    head = ["scenario", *(["dims"] if large else ["variant"]), *(HEADERS[c] for c in COLUMNS if gpu or c != "torch")]
    head += ["best JAX / best torch", "torch.compile 1st call", "JAX 1st call"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, row in ordered(payload[section]).items():
        what = ", ".join(f"{k}={v}" for k, v in row["dims"].items()) if large else f"`{row['variant']}`"
        cells = [f"`{name}`", what, *(ratio_cell(row, c, gpu) for c in COLUMNS if gpu or c != "torch")]
        best = row["best"]
        cells += [
            f"{best['jax_over_torch']:.2f}× ({HEADERS[best['jax']]} / {HEADERS[best['torch']]})",
            first_call_cell(row, "torch_compile", gpu),
            first_call_cell(row, "jax", gpu),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def _both_sizes(payload: Mapping) -> list[str]:
    lines = [
        "| scenario | JAX / torch, fixture | JAX / torch, large | best / best, fixture | best / best, large |",
        "|---|---|---|---|---|",
    ]
    for name, big in ordered(payload.get("large", {})).items():
        small = payload["scenarios"].get(name)
        cells = [f"{r['jax_over_torch']:.2f}×" if r else "—" for r in (small, big)]
        cells += [f"{r['best']['jax_over_torch']:.2f}×" if r else "—" for r in (small, big)]
        lines.append(f"| `{name}` | " + " | ".join(cells) + " |")
    return lines


def _freezing(payload: Mapping) -> list[str]:
    f, gpu = payload["freezing"], on_gpu(payload)
    cfg = f["config"]
    lines = [
        f"`frozen_backbone` at B={cfg['B']}, D={cfg['D']}, H={cfg['H']}, C={cfg['C']}: a backbone of "
        f"{cfg['backbone_params']:,} parameters under a head of {cfg['head_params']:,}. "
        f"C16 claims “{f['claim']['claim']}”.",
        "",
        "| step | torch | JAX | torch saving | JAX saving |",
        "|---|---|---|---|---|",
    ]
    for v in ("full_finetune", "detach_features", "freeze_params"):
        cells = []
        for fw in ("torch", "jax"):
            r, full = f[fw][v], f[fw]["full_finetune"]["median_s"]
            cells.append(ms(r["median_s"]) if gpu else f"{r['median_s'] / full:.2f}× full_finetune")
        saving = [
            f"{100 * f['summary'][fw]['saving'][v]:.1f} %" if v != "full_finetune" else "" for fw in ("torch", "jax")
        ]
        lines.append(f"| `{v}` | " + " | ".join(cells + saving) + " |")
    ideal = [
        ms(f["summary"][fw]["ideal_s"]) if gpu else f"{1 - f['summary'][fw]['ideal_saving']:.2f}× full_finetune"
        for fw in ("torch", "jax")
    ]
    ideal_saving = [f"{100 * f['summary'][fw]['ideal_saving']:.1f} %" for fw in ("torch", "jax")]
    lines.append("| ideal = backbone forward + head step | " + " | ".join(ideal + ideal_saving) + " |")
    ratios = ", ".join(f"`{k}` {v:.2f}×" for k, v in f["torch_ratios"].items())
    lines += ["", f"torch grad modes, one forward (> 1: the second is faster): {ratios}."]
    return lines


def _tbptt(payload: Mapping) -> list[str]:
    tb, gpu = payload["tbptt_memory"], on_gpu(payload)
    cfg = tb["config"]
    lines = [
        f"GRU, B={cfg['B']}, H={cfg['H']}, k={cfg['k']}, T = {', '.join(map(str, cfg['T']))}: `windows` runs a "
        "backward per window, `one_backward` stops the carry every k steps and runs one backward of the summed loss.",
        "",
        f"| framework, form, k | peak at T={cfg['T'][0]} | peak at T={cfg['T'][-1]} | peak × | bytes per time step | "
        + ("time per time step |" if gpu else "step time × |"),
        "|---|---|---|---|---|---|",
    ]
    for key, g in tb["growth"].items():
        fw, form, k = key.split(" ")
        sel = [r for r in tb["rows"] if (r["framework"], r["form"], r["k"]) == (fw, form, k)]
        time_cell = f"{g['seconds_per_step'] * 1e6:.1f} µs" if gpu else f"{g.get('time_ratio', 0):.2f}×"
        lines.append(
            f"| {key} | {_mib(sel[0]['peak_bytes'])} | {_mib(sel[-1]['peak_bytes'])} | {g['peak_ratio']:.2f}× | "
            f"{g['bytes_per_step']:,.0f} | {time_cell} |"
        )
    return lines


def _mib(n: float) -> str:
    return f"{n / 2**20:.2f} MiB" if n >= 2**20 else f"{n / 2**10:.1f} KiB"


def _overhead(payload: Mapping) -> str:
    o = payload["overhead"]
    if on_gpu(payload):
        return ", ".join(f"`{k}` {v['median_s'] * 1e6:.1f} µs" for k, v in o.items())
    base = o["eager_op"]["median_s"]
    return "in torch eager ops: " + ", ".join(f"`{k}` {v['median_s'] / base:.1f}×" for k, v in o.items())


def markdown(payload: Mapping) -> str:
    """The payload as Markdown: a section per device kind, tables of ratios (CPU) or times (GPU)."""
    s = payload["settings"]
    out = [
        f"## {device_heading(payload)}",
        "",
        f"{s['repeats']} interleaved rounds per step (median), float32, a time budget of {s['budget_s']:.0f} s; "
        "each ratio is a median over torch eager's median in the same run: < 1× is faster than torch eager. "
        + (
            "Quick mode: tiny sizes, a smoke test, not numbers to quote (torch.compile builds no kernels there). "
            if s["mode"] == "quick"
            else ""
        )
        + f"Versions: {', '.join(f'{k} {v}' for k, v in payload['versions'].items())}.",
        "",
        "### Training step per scenario, at its fixture size",
        "",
        *_steps_table(payload, "scenarios"),
        "",
        f"Per-call overhead, one elementwise op: {_overhead(payload)}.",
    ]
    if "large" in payload:
        out += ["", "### The same steps where arithmetic dominates", "", *_steps_table(payload, "large")]
        out += ["", "### JAX / torch at both sizes", "", *_both_sizes(payload)]
    lines = reasons(payload)
    if lines:
        out += ["", "Columns without a timing:", "", *(f"- {line}" for line in lines)]
    if "freezing" in payload:
        out += ["", "### The cost of the stop (C16)", "", *_freezing(payload)]
    if "tbptt_memory" in payload:
        out += ["", "### Memory of truncation (C11)", "", *_tbptt(payload)]
    if "port_check" in payload:
        out += ["", "### Checking a port of one's own", "", port_check_line(payload)]
    out += ["", *_warnings(payload), closing_note(payload)]
    return "\n".join(out) + "\n"


def _warnings(payload: Mapping) -> list[str]:
    out = []
    noisy, capped = noisy_timings(payload), capped_timings(payload)
    if noisy:
        out += [f"⚠ {len(noisy)} timing(s) spread by more than {payload['settings']['noisy_above']:.0%} of their median "
                f"(something else was using the CPUs): {', '.join(noisy[:8])}{' …' if len(noisy) > 8 else ''}.", ""]  # fmt: skip
    if capped:
        out += [f"{len(capped)} timing(s) got fewer rounds than {payload['settings']['repeats']}: their share of the time budget ran out.", ""]  # fmt: skip
    for key, why in {**payload.get("skipped", {}), **payload.get("errors", {})}.items():
        out += [f"- `{key}`: {why}"]
    return out + ([""] if payload.get("skipped") or payload.get("errors") else [])


def summary(payload: Mapping) -> str:
    """A few lines for the README: where it ran, the ratio ranges at both sizes, freezing and memory."""
    m = payload["machine"]
    where = "a CUDA GPU" if on_gpu(payload) else f"the CPU only ({m['cpu']}, {m['threads']} thread(s); no CUDA GPU)"
    load = m["load_average_before"][0]
    lines = [
        f"Stored run `docs/bench-cpu.json`, {payload['measured_at'][:10]}, on {where}, load average {load:.1f} "
        "before the run; ratios from that one run.",
        "",
    ]
    for section, what in (("scenarios", "at fixture sizes"), ("large", "at sizes where arithmetic dominates")):
        rows = payload.get(section, {})
        if rows:
            plain = [r["jax_over_torch"] for r in rows.values()]
            best = [r["best"]["jax_over_torch"] for r in rows.values()]
            lines.append(
                f"- JAX / torch {what} ({len(rows)} steps): {_range(plain)} as written, "
                f"{_range(best)} with the fastest form of each (torch.compile; cached_partial, jit over nnx.split)."
            )
    failed = sorted({n for sec in ("scenarios", "large") for n, r in payload.get(sec, {}).items()
                     if r["unavailable"].get("torch_compile", "").split(" ")[0].endswith("Error")})  # fmt: skip
    if failed:
        lines.append(
            f"- torch.compile fails on the steps of {', '.join(f'`{n}`' for n in failed)} (reasons in docs/bench.md)."
        )
    if "freezing" in payload:
        sv = payload["freezing"]["summary"]
        lines.append(
            f"- Freezing (C16 claims 15–20 %): `detach_features` saves {100 * sv['torch']['saving']['detach_features']:.0f} % "
            f"(torch) / {100 * sv['jax']['saving']['detach_features']:.0f} % (JAX) of a full fine-tuning step."
        )
    if "tbptt_memory" in payload:
        g = payload["tbptt_memory"]["growth"]
        k = payload["tbptt_memory"]["config"]["k"]
        lines.append(
            f"- Truncation memory (C11): a backward per window keeps peak memory flat in T "
            f"(×{g[f'torch windows k={k}']['peak_ratio']:.2f} torch); one backward grows it "
            f"×{g[f'torch one_backward k={k}']['peak_ratio']:.1f} although the carry is detached every {k} steps."
        )
    if "port_check" in payload:
        lines.append(f"- {port_check_line(payload)}")
    return "\n".join(lines)


def _range(values: list[float]) -> str:
    return f"{min(values):.2f}–{max(values):.2f}× (median {statistics.median(values):.2f}×)"
