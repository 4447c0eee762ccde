"""What every figure of the site shares: the written-figure record, the two colours, a figure, its SVG file.

matplotlib without pyplot (no global state, no display): `new_figure` makes a constrained-layout
Figure, `save` writes it as reproducible SVG (text kept as text, a fixed hash salt, no date).
Used by the scenario figures (figures.py) and the bench figures (bench_plots.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

__all__ = ["TORCH_COLOR", "JAX_COLOR", "FigureFile", "new_figure", "save"]

TORCH_COLOR, JAX_COLOR = "#ee4c2c", "#5e97f6"


@dataclass(frozen=True)
class FigureFile:
    """A written figure: file name (relative to the site root), caption, kind."""

    path: str
    caption: str
    kind: str


def save(fig, path: Path) -> None:
    """Write `fig` to `path` as SVG, making its folder; text stays text, no date, a fixed hash salt."""
    import matplotlib

    path.parent.mkdir(parents=True, exist_ok=True)
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": "detach-parity"}):
        fig.savefig(path, format="svg", bbox_inches="tight", metadata={"Date": None})


def new_figure(width: float, height: float):
    """A constrained-layout matplotlib Figure of width × height inches (no pyplot)."""
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), layout="constrained")
