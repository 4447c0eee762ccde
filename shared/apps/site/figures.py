"""Gradient-flow figures of the static site (matplotlib, no pyplot, written as SVG).

Every figure is drawn from the output dicts of a fresh run (CaseResult.outputs:
{"torch": {...}, "jax": {...}, "oracle": {...}}) by output-key convention, so a
new scenario gets its figures without code here. A key's path may have a prefix
(`elman/grads/...`, `d_step/grads/...`); the label drops the `grads` segment.

  grad_norms    keys with a `grads` segment: per parameter group, the L2 norm of the
                gradient in each variant, torch and JAX side by side; an exactly zero
                norm (a stopped path) is drawn as a marked "0", never as an invisible
                bar; the same for a `moved` segment (how far each parameter moved),
                and, when neither exists, for every float output.
  time_heatmap  gradients over time (tbptt): a `grads*` segment followed by a field with
                a leading T axis (`grads/x` with x [T, ...], or `grads/inputs...`), or by
                per-step leaves `grads_last/x/t00`, `t01`, ...: |gradient| per input time
                step t (rows: variants, e.g. each truncation length k).
  meta_grads    keys `meta_grads/...` (maml): first- vs second-order meta-gradient,
                the norm of their difference per leaf, torch and JAX.

The bench page's figures are in bench_plots.py; what every figure shares (FigureFile, the
colours, the SVG writer) in draw.py.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Collection, Mapping
from pathlib import Path

import numpy as np

from .draw import JAX_COLOR, TORCH_COLOR, FigureFile, new_figure, save

__all__ = ["FigureFile", "grad_groups", "figures_for", "grad_norms", "time_heatmap", "meta_grads"]

MAX_GROUPS = 16  # more leaves than this are summed per parent path
Outputs = Mapping[str, Mapping[str, np.ndarray]]  # variant -> flat output dict of one framework


def _norm(a: np.ndarray) -> float:
    a = np.asarray(a, dtype=np.float64)
    return float(np.sqrt(np.sum(np.where(np.isfinite(a), a, 0.0) ** 2)))


def _is_float(a: np.ndarray) -> bool:
    return np.asarray(a).dtype.kind == "f"


STEP = re.compile(r"t\d+")  # a per-time-step leaf: .../t00


def _label(key: str, segment: str | None) -> str | None:
    """`key` without its `segment` path component (None if it has none); every key when segment is None."""
    parts = key.split("/")
    if segment is None:
        return key
    if segment not in parts[:-1] or STEP.fullmatch(parts[-1]):
        return None
    i = parts.index(segment)
    return "/".join(parts[:i] + parts[i + 1 :])


def grad_groups(keys: list[str], segment: str | None = "grads") -> dict[str, list[str]]:
    """Group keys with a `segment` path component for a bar chart (label: the key without it).

    One group per leaf, or per parent path when there are more than MAX_GROUPS leaves.
    segment=None takes every key. Per-time-step leaves (`.../t07`) are left to time_heatmap.
    """
    names = {k: n for k in keys if (n := _label(k, segment)) is not None}
    leaves = list(names)
    if len(leaves) > MAX_GROUPS:
        names = {k: n.rsplit("/", 1)[0] if "/" in n else n for k, n in names.items()}
    groups: dict[str, list[str]] = {}
    for k in leaves:
        groups.setdefault(names[k], []).append(k)
    return groups


def grad_norms(
    scenario: str,
    torch_out: Outputs,
    jax_out: Outputs,
    path: Path,
    segment: str | None = "grads",
    what: str = "gradient",
) -> bool:
    """Bar figure: per variant, the L2 norm per group of the outputs with a `segment` path component,
    torch and JAX side by side.

    Args:
      torch_out, jax_out: variant -> flat output dict (the same variants, in order).
      segment: "grads"; "moved" for parameter updates; None for every float output.
      what: the quantity's name on the axis.
    Returns:
      False (nothing written) when no variant has such float outputs.
    """
    variants = [v for v in torch_out if v in jax_out]
    keys = sorted({k for v in variants for k, a in torch_out[v].items() if _is_float(a)})
    groups = grad_groups(keys, segment)
    if not variants or not groups:
        return False
    labels = list(groups)
    ncol = min(len(variants), 4)
    nrow = -(-len(variants) // ncol)
    fig = new_figure(2.2 + 2.6 * ncol, nrow * (0.9 + 0.32 * len(labels)))
    axes = fig.subplots(nrow, ncol, sharey=True, squeeze=False)
    y = np.arange(len(labels))
    for i, ax in enumerate(axes.flat):
        if i >= len(variants):
            ax.set_axis_off()
            continue
        v = variants[i]
        top = 0.0
        for offset, (name, out, color) in enumerate(
            (("torch", torch_out[v], TORCH_COLOR), ("JAX", jax_out[v], JAX_COLOR))
        ):
            norms = np.array([np.sqrt(sum(_norm(out[k]) ** 2 for k in groups[g] if k in out)) for g in labels])
            pos = y + (offset - 0.5) * 0.38
            ax.barh(pos, norms, height=0.36, color=color, label=name)
            zero = norms == 0
            if zero.any():  # (an empty unclipped line would collapse the constrained layout)
                ax.plot(np.zeros(zero.sum()), pos[zero], "o", ms=5, mfc="white", mec=color, mew=1.5, clip_on=False)
            top = max(top, float(norms.max(initial=0.0)))
        for j, g in enumerate(labels):  # a stopped group: both sides exactly zero, said in words
            if all(_norm(torch_out[v][k]) == 0 and _norm(jax_out[v][k]) == 0 for k in groups[g] if k in jax_out[v]):
                label = ax.text(0.03, j, " 0 (exact)", transform=ax.get_yaxis_transform(), va="center", fontsize=8)
                label.set_in_layout(False)  # inside the axes: constrained layout must not make room for it
        ax.set_xlim(0, top * 1.1 if top > 0 else 1.0)
        ax.set_title(v, fontsize=10)
        ax.set_xlabel(f"‖{what}‖₂", fontsize=8)
        ax.tick_params(labelsize=8)
        ax.grid(axis="x", alpha=0.3)
    axes[0, 0].set_yticks(y, labels)
    axes[0, 0].invert_yaxis()
    fig.legend(*axes[0, 0].get_legend_handles_labels(), loc="outside upper right", fontsize=8, ncols=2)
    fig.suptitle(f"{scenario}: ‖{what}‖ per {'parameter group' if segment else 'output'}", fontsize=11)
    save(fig, path)
    return True


def _time_profiles(out: Mapping[str, np.ndarray], time_fields: Collection[str]) -> dict[str, np.ndarray]:
    """stem -> ‖gradient‖ per time step [T], from `grads*/<time field>` [T, ...] or `grads*/<field>/tNN` leaves."""
    whole: dict[str, np.ndarray] = {}
    steps: dict[str, dict[int, float]] = {}
    for key, a in out.items():
        parts = key.split("/")
        at = next((i for i, p in enumerate(parts[:-1]) if p.startswith("grads")), None)
        if at is None or not _is_float(a):
            continue
        rest = parts[at + 1 :]
        if len(rest) == 1 and (rest[0] in time_fields or rest[0].startswith("inputs")) and np.ndim(a) >= 1:
            flat = np.asarray(a, dtype=np.float64).reshape(np.shape(a)[0], -1)
            whole[key] = np.sqrt(np.sum(np.where(np.isfinite(flat), flat, 0.0) ** 2, axis=1))
        elif len(rest) >= 2 and STEP.fullmatch(rest[-1]):
            steps.setdefault("/".join(parts[:-1]), {})[int(rest[-1][1:])] = _norm(a)
    for stem, by_t in steps.items():
        whole[stem] = np.array([by_t[t] for t in sorted(by_t)])
    return whole


def time_heatmap(
    scenario: str, torch_out: Outputs, jax_out: Outputs, path: Path, time_fields: Collection[str] = ()
) -> bool:
    """Heatmap of ‖gradient‖ over input time steps t (columns) per variant (rows), torch | JAX,
    one row of panels per gradient stem (e.g. `elman/grads/x`, `elman/grads_last/x`).

    Args:
      time_fields: fixture fields whose leading axis is time (shape letter T).
    Returns:
      False (nothing written) unless every variant has the same stems, all of one length T.
    """
    variants = [v for v in torch_out if v in jax_out]
    profiles = {
        name: {v: _time_profiles(o[v], time_fields) for v in variants}
        for name, o in (("torch", torch_out), ("JAX", jax_out))
    }
    stems = sorted(profiles["torch"][variants[0]]) if variants else []
    flat = [p.get(s) for by_v in profiles.values() for p in by_v.values() for s in stems]
    if not stems or any(p is None for p in flat) or len({len(p) for p in flat}) != 1:
        return False
    import matplotlib
    from matplotlib.colors import LogNorm

    t_len = len(flat[0])
    positive = [p[p > 0] for p in flat if np.any(p > 0)]
    lo = min(float(p.min()) for p in positive) if positive else 1e-12
    hi = max(float(p.max()) for p in positive) if positive else 1.0
    norm = LogNorm(vmin=lo, vmax=max(hi, lo * 10))
    cmap = matplotlib.colormaps["viridis"].with_extremes(bad="#e8e8e8")
    fig = new_figure(2.6 + 2 * max(3.0, 0.22 * t_len), 0.9 + len(stems) * (0.7 + 0.3 * len(variants)))
    axes = fig.subplots(len(stems), 2, sharex=True, sharey=True, squeeze=False)
    for row, stem in enumerate(stems):
        for col, name in enumerate(profiles):
            ax = axes[row, col]
            grid = np.array([profiles[name][v][stem] for v in variants])
            image = ax.imshow(np.ma.masked_where(grid == 0, grid), aspect="auto", cmap=cmap, norm=norm)
            for (r, c), val in np.ndenumerate(grid):
                if val == 0 and t_len <= 40:
                    ax.text(c, r, "0", ha="center", va="center", fontsize=6, color="#777")
            ax.set_title(f"{name}: {stem}", fontsize=9)
            ax.set_yticks(range(len(variants)), variants)
            ax.tick_params(labelsize=7)
    for ax in axes[-1]:
        ax.set_xlabel("input time step t", fontsize=8)
    fig.colorbar(image, ax=axes, label="‖gradient at step t‖ (grey: exactly 0)", shrink=0.9)
    fig.suptitle(f"{scenario}: gradient magnitude over input time steps", fontsize=11)
    save(fig, path)
    return True


def _order_pair(variants: list[str]) -> tuple[str, str] | None:
    first = next((v for v in variants if fnmatch.fnmatch(v, "first*")), None)
    second = next((v for v in variants if fnmatch.fnmatch(v, "second*")), None)
    if first and second:
        return first, second
    return (variants[0], variants[1]) if len(variants) >= 2 else None


def meta_grads(scenario: str, torch_out: Outputs, jax_out: Outputs, path: Path) -> bool:
    """First- vs second-order meta-gradient (`meta_grads/...` keys): norms per leaf and ‖second − first‖.

    Returns False (nothing written) unless two variants have the same `meta_grads/...` keys.
    """
    variants = [v for v in torch_out if v in jax_out and any(k.startswith("meta_grads/") for k in torch_out[v])]
    pair = _order_pair(variants)
    if pair is None:
        return False
    first, second = pair
    leaves = sorted(k for k in torch_out[first] if k.startswith("meta_grads/") and k in torch_out[second])
    if not leaves:
        return False
    labels = [k.removeprefix("meta_grads/") for k in leaves]
    y = np.arange(len(labels))
    fig = new_figure(9.0, 1.2 + 0.4 * len(labels))
    left, right = fig.subplots(1, 2, sharey=True)
    for offset, (v, color) in enumerate(((first, "#999999"), (second, "#333333"))):
        left.barh(y + (offset - 0.5) * 0.38, [_norm(torch_out[v][k]) for k in leaves], 0.36, color=color, label=v)
    left.set_title("‖meta-gradient‖ (torch)", fontsize=10)
    left.legend(fontsize=8, loc="best")
    for offset, (name, out, color) in enumerate((("torch", torch_out, TORCH_COLOR), ("JAX", jax_out, JAX_COLOR))):
        diff = [_norm(np.asarray(out[second][k], np.float64) - np.asarray(out[first][k], np.float64)) for k in leaves]
        right.barh(y + (offset - 0.5) * 0.38, diff, 0.36, color=color, label=name)
    right.set_title(f"‖{second} − {first}‖", fontsize=10)
    right.legend(fontsize=8, loc="best")
    left.set_yticks(y, labels)
    left.invert_yaxis()
    for ax in (left, right):
        ax.tick_params(labelsize=8)
        ax.grid(axis="x", alpha=0.3)
    fig.suptitle(f"{scenario}: what the second-order term adds to the meta-gradient", fontsize=11)
    save(fig, path)
    return True


def figures_for(
    scenario: str, torch_out: Outputs, jax_out: Outputs, out_dir: Path, time_fields: Collection[str] = ()
) -> list[FigureFile]:
    """Draw every figure that applies to a scenario's outputs into out_dir/figures/; list them.

    Args:
      torch_out, jax_out: variant -> flat output dict (one case and dtype per variant).
      out_dir: the site root; files go to figures/<scenario>-<kind>.svg.
      time_fields: fixture fields with a leading time axis (for time_heatmap).
    """
    out: list[FigureFile] = []

    def draw(kind: str, ok: bool, caption: str) -> None:
        if ok:
            out.append(FigureFile(f"figures/{scenario}-{kind}.svg", caption, kind))

    def path(kind: str) -> Path:
        return out_dir / "figures" / f"{scenario}-{kind}.svg"

    draw(
        "time",
        time_heatmap(scenario, torch_out, jax_out, path("time"), time_fields),
        "Gradient magnitude per input time step, per variant: where truncation cuts the flow.",
    )
    draw(
        "meta",
        meta_grads(scenario, torch_out, jax_out, path("meta")),
        "First- vs second-order meta-gradient and their difference per parameter.",
    )
    zero = "torch and JAX side by side; ○ marks an exact zero."
    bars = (
        ("grads", "gradient", "grad-norms", f"Gradient norm per parameter group for each variant, {zero}"),
        ("moved", "update", "moved-norms", f"How far each parameter group moved (after − before), {zero}"),
    )
    for segment, what, kind, caption in bars:
        draw(kind, grad_norms(scenario, torch_out, jax_out, path(kind), segment, what), caption)
    if not any(f.kind in ("grad-norms", "moved-norms", "meta") for f in out):
        caption = f"Norm of every float output for each variant, {zero}"
        draw("output-norms", grad_norms(scenario, torch_out, jax_out, path("output-norms"), None, "output"), caption)
    return out
