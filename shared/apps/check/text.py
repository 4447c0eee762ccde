"""A PortReport as text: the summary table (rich) and the lines under it (report.py holds the data)."""

from __future__ import annotations

import io

import numpy as np

from .line import where

__all__ = ["rich_table", "lines", "table", "profile_table", "profile_lines", "line_sentence"]


def _num(x: float) -> float:
    return float(x) if np.isfinite(x) else float("inf")


def rich_table(report):
    """The summary as a rich Table (the CLI prints it)."""
    from rich.table import Table

    table = Table(title="detach-parity check: JAX port vs torch", header_style="bold")
    for col in (
        "dtype",
        "section",
        "compared",
        "failed",
        "max |jax-torch|",
        "of tolerance",
        "worst leaf",
        "verdict",
    ):
        table.add_column(col, justify="right" if col in ("compared", "failed") else "left")
    for s in report.summary():
        verdict = "[red]DIFFERS[/]" if not s["ok"] else "[yellow]no update[/]" if s["unchecked"] else "[green]match[/]"
        kinds = s["section"] == "precision"  # kinds of computation kept in float32 or not: no number to show
        table.add_row(
            s["dtype"], s["section"], str(s["compared"]), str(s["failed"]),
            "—" if kinds else f"{s['max_abs']:.2e}", "—" if kinds else f"{s['used']:.2g}", s["worst"], verdict,
        )  # fmt: skip
    return table


def _bfloat16(report) -> list[str]:
    """The bfloat16 pass in words: what its numbers are, and the largest error ratio."""
    rows = [r for r in report.rows if r.dtype == "bfloat16" and r.section != "precision" and np.isfinite(r.max_rel)]
    if not rows:
        return []
    worst = max(rows, key=lambda r: r.max_rel)
    kept = [r for r in report.rows if r.dtype == "bfloat16" and r.section == "precision"]
    policy = report.settings.get("precision", {})
    return [
        f"bfloat16: each side against the float64 truth (torch {policy.get('torch', 'bfloat16')}, the port "
        f"{policy.get('jax', 'bfloat16')}); the table's difference is the port's RMS error, its tolerance "
        f"{report.factor:g}x torch's own (the largest ratio {worst.max_rel:.2g}, at {worst.where}); "
        f"{sum(r.ok for r in kept)} of {len(kept)} kinds the reference keeps in float32 kept by the port"
    ]


def lines(report) -> list[str]:
    """What the table does not show: the first parting per dtype, dropped weights, flow mismatches, hints."""
    out = []
    for dtype in ("float64", "float32", "bfloat16"):
        row = report.first_parting(dtype)
        if row is not None:
            step = f" step {row.step}" if row.step else ""
            what = row.problem or f"max |jax-torch| {row.max_abs:.3g}"
            out.append(f"{dtype}: first parting at {row.section}{step} {row.key} (torch {row.torch}): {what}")
    out += _bfloat16(report)
    span = report.interval()
    if span is not None and (span[0] or span[1]):
        after = f"after {span[0]} (its output matches)" if span[0] else "from the start"
        between = f"; torch modules on the way or feeding it, with no NNX twin to compare: {', '.join(span[1])}"
        between = between if span[1] else ""
        out.append(f"float64: the forward parts {after}, at {span[2]}{between}")
    if report.line:
        out.append(line_sentence(report.line))
    back = report.backward_parting()
    if back is not None:
        out.append(
            f"float64: backward parting at {back.key} (torch {back.torch}): its output matches, the gradient "
            f"arriving at it differs ({back.problem or f'max |jax-torch| {back.max_abs:.3g}'}): a stop, detach or "
            "custom VJP between it and the modules downstream, whose gradients match"
        )
    out += [f"dropped: {line}" for line in report.dropped]
    out += [f"gradient flow: {f.text}" for f in report.mismatches]
    out += [f"hint: {h}" for h in report.hints]
    out += [f"note: {n}" for n in report.notes]
    for why in dict.fromkeys(r.explained for r in report.explained):
        rows = [r for r in report.explained if r.explained == why]
        worst = max(rows, key=lambda r: _num(r.max_rel))
        judged = "judged at float32 precision from there" if why.startswith("float64 pass") else "so judged"
        out.append(
            f"explained: {why}; {len(rows)} quantities {judged} "
            f"(the largest difference {worst.max_rel:.1e} relative, at {worst.where})"
        )
    verdict = {
        "match": "the port matches",
        "differs": "the port DIFFERS",
        "match, steps unchecked": f"the port matches up to the steps; its {report.unmoved} steps moved no "
        "trainable weight on either side, so the update is unchecked (more --steps, or a learning rate above 0)",
    }.get(report.verdict(), "the port matches, with the differences explained above")  # float32 islands, noise, ties
    out.append("verdict: " + verdict)
    return out


def table(report) -> str:
    """The whole report as plain text: the summary table, then `lines()`."""
    from rich.console import Console

    buf = io.StringIO()
    console = Console(file=buf, width=160, color_system=None, highlight=False)
    console.print(report.rich_table())
    for line in report.lines():
        console.print(line, markup=False)
    return buf.getvalue()


def profile_table(report):
    """Where the check's time went (report.profile) as a rich Table: seconds and share per stage, and where JAX's
    compile pipeline was counted (check_port's profile=True, --profile), its tracing, lowering and compiling."""
    from rich.table import Table

    from .stages import PIPELINE

    prof = report.profile
    total = prof["total_s"] or 1.0
    table = Table(title=f"where the check's time went: {prof['total_s']:.2f} s", header_style="bold")
    table.add_column("stage")
    for col in ("seconds", "share", *(what for *_, what in PIPELINE)):
        table.add_column(col, justify="right")
    for stage, row in prof["stages"].items():
        parts = [f"{row[s]:.2f} s ({row[n]})" if n in row else "" for s, n, _ in PIPELINE]
        table.add_row(stage, f"{row['s']:.2f}", f"{row['s'] / total:.0%}", *parts)
    return table


def profile_lines(report) -> list[str]:
    """The profile's totals in words: JAX's traces, lowerings, compiles and persistent-cache hits, and the checker's
    programs compiled and reused (a second check of the same model compiles nothing)."""
    prof = report.profile
    if not prof.get("counted"):
        return ["profile: seconds per stage only (JAX's compiles are counted with check_port(..., profile=True))"]
    c = prof["counts"]
    return [
        f"profile: JAX traced {c['jax_traces']}, lowered {c['jax_lowers']}, compiled {c['jax_compiles']} "
        f"({c['jax_cache_hits']} from the persistent cache); the checker's programs: {c['programs_compiled']} "
        f"compiled, {c['programs_reused']} reused from an earlier check in this process"
    ]


def line_sentence(found: dict) -> str:
    """The report's sentence for `name_line`'s finding."""
    port = found["port"]
    if found.get("optimizer"):
        at = f"{where(port)}, `{port[2]}`" if port[1] else "the port's optimizer"
        ahead = f"; torch's next is {found['torch_next']}" if found["torch_next"] else ""
        return (f"float64: the optimizer parts at {at}: its {found['optimizer']} (part {found['path']} of the "
                f"chain) takes the update torch has after {found['after']}, and gives one torch's optimizer never "
                f"computes{ahead}.")  # fmt: skip
    if found.get("backward"):
        came = where(found["inputs"][0]) if found["inputs"][0][1] else found["inputs"][0][2]
        return (f"float64: the gradient parts at {where(port)}, `{port[2]}` ({found['op']}, after "
                f"{found['module']}): the gradient arriving at its output is torch's, the one it passes back to its "
                f"input (torch's value from {came}) is not.")  # fmt: skip
    own = [where(line) for line in found["inputs"] if line[1]]
    kinds = [line[2] for line in found["inputs"] if not line[1]]
    came = ", ".join(own + kinds) or "none"
    called = found.get("called")
    how = f", in the module it builds, called at {where(called)}, `{called[2]}`" if called else ""
    text = (f"float64: the port parts at {where(port)}, `{port[2]}` ({found['op']}, in {found['module']}{how}). "
            f"Its inputs are torch's ({came}); its output is nothing torch computed.")  # fmt: skip
    if found["torch"]:
        text += f" torch's value at that place is {where(found['torch'])}, `{found['torch'][2]}`"
        text += f": {found['relation']}." if found["relation"] else "."
    return text
