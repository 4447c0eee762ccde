"""The bench page's figures, drawn from a `detach-parity bench` JSON payload (matplotlib, SVG).

  bench-ratio     the JAX/torch step-time ratio per scenario, as written and with the fastest
                  form of each framework, at the fixture size and the large size;
  bench-freezing  frozen_backbone step times of each way to freeze against the ideal;
  bench-memory    tbptt peak memory against T.
Step times are ratios measured in the run, absolute (ms) only for a GPU run; memory in MiB.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np

from .draw import JAX_COLOR, TORCH_COLOR, FigureFile, new_figure, save

__all__ = ["bench_figures"]


def bench_figures(payload: Mapping, out_dir: Path) -> list[FigureFile]:
    """Draw the bench figures that the payload has data for into out_dir/figures/bench-*.svg; list them.

    payload: the JSON of `detach-parity bench` (sections `scenarios`, optional `large`, `freezing`
    and `tbptt_memory`). Step times are drawn as ratios measured in the run, absolute (ms) only
    for a GPU run; memory in MiB.
    """
    from matplotlib.ticker import FuncFormatter, NullFormatter

    out: list[FigureFile] = []
    where = out_dir / "figures"
    scenarios = payload.get("scenarios", {})
    gpu = payload["machine"].get("accelerator") == "cuda"
    if scenarios:
        names = list(scenarios)
        series = [("fixture size, JAX as written / torch eager", "jax_over_torch", "scenarios", JAX_COLOR)]
        series.append(("fixture size, best JAX / best torch", "best", "scenarios", "#8fb8de"))
        if payload.get("large"):
            series.append(("large size, best JAX / best torch", "best", "large", "#555555"))
        fig = new_figure(9.0, 0.42 * len(names) * len(series) / 2 + 1.5)
        ax = fig.add_subplot()
        height = 0.8 / len(series)
        y = np.arange(len(names))
        for i, (label, key, section, color) in enumerate(series):
            rows = payload.get(section, {})
            values = [
                (rows[n]["best"]["jax_over_torch"] if key == "best" else rows[n][key]) if n in rows else np.nan
                for n in names
            ]
            ratios = np.array(values, dtype=float)
            ax.barh(y + (i - (len(series) - 1) / 2) * height, ratios - 1, height, left=1, color=color, label=label)
        ax.axvline(1.0, color="#333", lw=0.8)
        ax.set_xscale("log")
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}×"))
        ax.set_yticks(y, names)
        ax.invert_yaxis()
        ax.set_xlabel("JAX / torch, median step time (log scale): < 1× JAX faster, > 1× torch faster")
        ax.legend(frameon=False, loc="lower right", fontsize=8)
        save(fig, where / "bench-ratio.svg")
        caption = (
            "Training step per scenario: JAX / torch ratio of median step times in one run, as the scenarios are "
            "written and with the fastest form of each framework (torch.compile; nnx.cached_partial, jit over "
            "nnx.split), at the fixture size and where measured at a large size; log scale."
        )
        out.append(FigureFile("figures/bench-ratio.svg", caption, "bench-ratio"))
    if "freezing" in payload:
        f = payload["freezing"]
        labels = ["full_finetune", "detach_features", "freeze_params", "ideal"]
        fig = new_figure(9.0, 3.0)
        ax = fig.add_subplot()
        x = np.arange(len(labels))
        for i, (fw, color) in enumerate((("torch", TORCH_COLOR), ("jax", JAX_COLOR))):
            times = [f[fw][v]["median_s"] for v in labels[:-1]] + [f["summary"][fw]["ideal_s"]]
            scale = 1e3 if gpu else 1 / f[fw]["full_finetune"]["median_s"]
            ax.bar(x + (i - 0.5) * 0.38, [t * scale for t in times], 0.38, color=color, label=fw)
        ax.set_xticks(x, labels)
        ax.set_ylabel("median step time (ms)" if gpu else "step time / full_finetune's")
        ax.legend(frameon=False)
        save(fig, where / "bench-freezing.svg")
        caption = (
            "frozen_backbone at bench size: step time of each way to freeze, and the ideal (backbone forward + head "
            "step)" + (", ms." if gpu else ", relative to each framework's full_finetune in the same run.")
        )
        out.append(FigureFile("figures/bench-freezing.svg", caption, "bench-freezing"))
    if "tbptt_memory" in payload:
        rows = payload["tbptt_memory"]["rows"]
        fig = new_figure(9.0, 3.6)
        ax = fig.add_subplot()
        styles = {"windows": ("-", "o"), "one_backward": ("--", "s")}
        for fw, color in (("torch", TORCH_COLOR), ("jax", JAX_COLOR)):
            for form, k in sorted({(r["form"], r["k"]) for r in rows}):
                sel = [r for r in rows if (r["framework"], r["form"], r["k"]) == (fw, form, k)]
                line, marker = (":", "^") if k == "k=T" else styles.get(form, ("-", "o"))
                ax.plot(
                    [r["T"] for r in sel],
                    [r["peak_bytes"] / 2**20 for r in sel],
                    line,
                    color=color,
                    marker=marker,
                    ms=5,
                    mfc="none" if k == "k=T" else color,
                    label=f"{fw} {form} {k}",
                )
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        for axis in (ax.xaxis, ax.yaxis):
            axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
            axis.set_minor_formatter(NullFormatter())
        mib = [r["peak_bytes"] / 2**20 for r in rows]
        ax.set_yticks(
            [
                v
                for v in (0.01, 0.1, 0.5, 1, 2, 5, 10, 20, 50, 100, 200, 500)
                if min(mib) <= v * 1.5 and v <= max(mib) * 1.5
            ]
        )
        ax.set_xticks(sorted({r["T"] for r in rows}))
        ax.set_xlabel("sequence length T")
        ax.set_ylabel("peak memory of one step (MiB)")
        ax.legend(frameon=False, fontsize=9, ncols=2)
        save(fig, where / "bench-memory.svg")
        caption = (
            "tbptt: peak memory of one training step against T. Flat with a backward per window (windows, fixed k); "
            "linear with one backward of the summed loss, which lies on the k=T line (open markers): "
            "stopping the carry every k steps saves nothing there."
        )
        out.append(FigureFile("figures/bench-memory.svg", caption, "bench-memory"))
    return out
