"""A checked bench payload as rich tables on the terminal (the same cells as the Markdown report)."""

from __future__ import annotations

from collections.abc import Mapping

from rich.console import Console
from rich.table import Table

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

__all__ = ["print_tables"]


def _steps(payload: Mapping, section: str, title: str) -> Table:
    gpu = on_gpu(payload)
    cols = [c for c in COLUMNS if gpu or c != "torch"]
    table = Table(title=title)
    table.add_column("scenario")
    table.add_column("dims" if section == "large" else "variant")
    for col in cols:
        table.add_column(HEADERS[col] + ("" if gpu else " ×"), justify="right")
    for col in ("best JAX / best torch", "torch.compile 1st call", "JAX 1st call"):
        table.add_column(col, justify="right")
    for name, row in ordered(payload[section]).items():
        what = ", ".join(f"{k}={v}" for k, v in row["dims"].items()) if section == "large" else row["variant"]
        table.add_row(
            name,
            what,
            *(ratio_cell(row, c, gpu) for c in cols),
            f"{row['best']['jax_over_torch']:.2f}×",
            first_call_cell(row, "torch_compile", gpu),
            first_call_cell(row, "jax", gpu),
        )
    return table


def print_tables(payload: Mapping, console: Console) -> None:
    """The payload as rich tables: steps at both sizes, freezing (C16), grad modes, tbptt memory, notes."""
    gpu = on_gpu(payload)
    m = payload["machine"]
    console.print(f"[bold]bench[/bold] — {device_heading(payload)}. {m['note']}.", highlight=False)
    unit = "" if gpu else " (× torch eager's median in this run: < 1 is faster)"
    console.print(_steps(payload, "scenarios", f"Training step per scenario at its fixture size{unit}"))
    o = payload["overhead"]
    if gpu:
        parts = [f"{k} {v['median_s'] * 1e6:.1f} µs" for k, v in o.items()]
    else:
        parts = [f"{k} {v['median_s'] / o['eager_op']['median_s']:.1f}× a torch eager op" for k, v in o.items()]
    console.print("Per-call overhead, one elementwise op: " + ", ".join(parts) + ".", highlight=False)
    if "large" in payload:
        console.print(_steps(payload, "large", f"The same steps where arithmetic dominates{unit}"))
        both = Table(title="JAX / torch at both sizes")
        for col in (
            "scenario",
            "as written, fixture",
            "as written, large",
            "best / best, fixture",
            "best / best, large",
        ):
            both.add_column(col, justify="left" if col == "scenario" else "right")
        for name, big in ordered(payload["large"]).items():
            small = payload["scenarios"].get(name)
            cells = [f"{r['jax_over_torch']:.2f}×" if r else "—" for r in (small, big)]
            cells += [f"{r['best']['jax_over_torch']:.2f}×" if r else "—" for r in (small, big)]
            both.add_row(name, *cells)
        console.print(both)
    for line in reasons(payload):
        console.print(line, style="dim", markup=False, highlight=False)
    if "freezing" in payload:
        _freezing(payload, console, gpu)
    if "tbptt_memory" in payload:
        _tbptt(payload, console, gpu)
    if "port_check" in payload:
        console.print(port_check_line(payload), markup=False, highlight=False)
    noisy, capped = noisy_timings(payload), capped_timings(payload)
    s = payload["settings"]
    if noisy:
        shown = ", ".join(noisy[:6]) + (" …" if len(noisy) > 6 else "")
        console.print(
            f"[yellow]⚠ {len(noisy)} timing(s) spread by more than {s['noisy_above']:.0%} of their median: {shown}. "
            "Usually something else was using the CPUs: rerun on an idle machine, or with --threads below the number "
            "of cores, before quoting these times.[/yellow]",
            highlight=False,
        )
    elif m["load_average_before"][0] > 1.0:
        console.print(
            f"[yellow]⚠ load average {m['load_average_before'][0]:.2f} before the run: other processes may have used "
            f"the CPUs (every spread stayed under {s['noisy_above']:.0%}).[/yellow]",
            highlight=False,
        )
    if capped:
        console.print(
            f"[yellow]time cap: {len(capped)} timing(s) got fewer than {s['repeats']} rounds (at least "
            f"{s.get('min_rounds', 1)}): their share of the {s['budget_s']:.0f} s budget ran out (--budget).[/yellow]",
            highlight=False,
        )
    for key, why in payload.get("skipped", {}).items():
        console.print(f"[yellow]{key}: {why}[/yellow]", highlight=False)
    for key, why in payload.get("errors", {}).items():
        console.print(f"error in {key}: {why}", markup=False, highlight=False)
    console.print(closing_note(payload), highlight=False, markup=False)


def _freezing(payload: Mapping, console: Console, gpu: bool) -> None:
    f = payload["freezing"]
    cfg = f["config"]
    title = (
        f"frozen_backbone B={cfg['B']} D={cfg['D']} H={cfg['H']} C={cfg['C']}: "
        f"backbone {cfg['backbone_params']:,} params, head {cfg['head_params']:,}"
        + ("" if gpu else " (× full_finetune's median)")
    )
    table = Table(title=title)
    for col in ("step", "torch", "JAX", "torch saving", "JAX saving"):
        table.add_column(col, justify="left" if col == "step" else "right")

    def cell(fw: str, label: str) -> str:
        if label not in f[fw]:
            return "—"
        r, flag = f[fw][label], " ⚠" if f[fw][label]["noisy"] else ""
        return (ms(r["median_s"]) if gpu else f"{r['median_s'] / f[fw]['full_finetune']['median_s']:.2f}×") + flag

    for label in dict.fromkeys([*f["torch"], *f["jax"]]):
        saving = [
            f"{100 * f['summary'][fw]['saving'][label]:.1f} %" if label in f["summary"][fw]["saving"] else ""
            for fw in ("torch", "jax")
        ]
        table.add_row(label, cell("torch", label), cell("jax", label), *saving)
    sv = f["summary"]
    ideal = [ms(sv[fw]["ideal_s"]) if gpu else f"{1 - sv[fw]['ideal_saving']:.2f}×" for fw in ("torch", "jax")]
    ideal_saving = [f"{100 * sv[fw]['ideal_saving']:.1f} %" for fw in ("torch", "jax")]
    table.add_row("ideal = backbone_forward + head_step", *ideal, *ideal_saving, style="bold")
    console.print(table)
    console.print(
        f"C16 claims detach saves 15–20 %. Measured against full_finetune: detach_features saves "
        f"{100 * sv['torch']['saving']['detach_features']:.1f} % (torch) / "
        f"{100 * sv['jax']['saving']['detach_features']:.1f} % (JAX), the ideal {100 * sv['torch']['ideal_saving']:.1f} % / "
        f"{100 * sv['jax']['ideal_saving']:.1f} %; detach / freeze_params = "
        f"{f['torch']['detach_features']['median_s'] / f['torch']['freeze_params']['median_s']:.2f}× (torch), "
        f"{f['jax']['detach_features']['median_s'] / f['jax']['freeze_params']['median_s']:.2f}× (JAX).",
        highlight=False,
    )
    ratios = Table(title="torch grad modes, one forward (> 1: the second is faster)")
    ratios.add_column("ratio")
    ratios.add_column("value", justify="right")
    for key, value in f["torch_ratios"].items():
        ratios.add_row(key, f"{value:.2f}×")
    console.print(ratios)


def _tbptt(payload: Mapping, console: Console, gpu: bool) -> None:
    tb = payload["tbptt_memory"]
    cfg = tb["config"]
    table = Table(title=f"tbptt GRU B={cfg['B']} I={cfg['I']} H={cfg['H']}: peak memory and step time as T grows")
    step_cols = ("torch step", "JAX step") if gpu else ("JAX / torch step",)
    for col in ("T", "form", "k", "torch peak", "JAX peak", *step_cols):
        table.add_column(col, justify="right")
    pairs: dict[tuple, dict] = {}
    for r in tb["rows"]:
        pairs.setdefault((r["T"], r["form"], r["k"]), {})[r["framework"]] = r
    for (t_steps, form, k), p in pairs.items():
        if gpu:
            steps = [ms(p["torch"]["median_s"]), ms(p["jax"]["median_s"])]
        else:
            steps = [f"{p['jax']['median_s'] / p['torch']['median_s']:.2f}×"]
        table.add_row(str(t_steps), form, k, _mib(p["torch"]["peak_bytes"]), _mib(p["jax"]["peak_bytes"]), *steps)
    console.print(table)
    growth = Table(title=f"growth from T={cfg['T'][0]} to T={cfg['T'][-1]} (×{cfg['T'][-1] // cfg['T'][0]})")
    time_col = "time per time step (fastest round)" if gpu else "step time ×"
    for col in ("framework, form, k", "peak ×", "bytes per time step", time_col):
        growth.add_column(col, justify="left" if col.startswith("framework") else "right")
    for key, g in tb["growth"].items():
        t = f"{g['seconds_per_step'] * 1e6:.1f} µs" if gpu else f"{g.get('time_ratio', 0):.2f}×"
        growth.add_row(key, f"{g['peak_ratio']:.2f}×", f"{g['bytes_per_step']:,.0f}", t)
    console.print(growth)


def _mib(n: float) -> str:
    return f"{n / 2**20:.2f} MiB" if n >= 2**20 else f"{n / 2**10:.1f} KiB"
