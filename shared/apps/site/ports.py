"""ports.html: the port checker's reports on the worked ports (torch_impl/backend/ports/, jax_impl/backend/ports/).

For each worked model: the correct NNX port's report (float64 then float32, weights, outputs,
loss, gradients, 5 steps) and one line per buggy port: the pitfall it has, the pitfall the
checker named, where the two models first part and the evidence. Every number comes from a
fresh run (`write_ports` runs the checks); `render_ports` only formats what it is given.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..check.ports import WORKED, check_worked, steps_for, variants
from ..check.report import PortReport

__all__ = ["PortPage", "run_ports", "render_ports", "write_ports"]


@dataclass
class PortPage:
    """One worked model: the correct port's report and (variant, expected pitfall, report) per buggy port."""

    name: str
    correct: PortReport
    buggy: list[tuple[str, str, PortReport]]


def run_ports(names=WORKED, echo: Callable[[str], None] | None = None) -> list[PortPage]:
    """Check every worked port: the correct one in full, each buggy one in float64 (the bug test)."""
    pages = []
    for name in names:
        if echo:
            echo(f"checking the worked port {name} ...")
        correct = check_worked(name, "correct")
        buggy = [
            (v, pid, check_worked(name, v, steps=steps_for(name, v), dtypes=("float64",)))
            for v, pid in variants(name).items()
            if pid
        ]
        pages.append(PortPage(name, correct, buggy))
    return pages


def render_ports(env, pages: list[PortPage]) -> str:
    """The HTML of ports.html (templates/ports.html, autoescaped)."""
    return env.get_template("ports.html").render(ports=pages)


def write_ports(root: Path, env, echo: Callable[[str], None] | None = None) -> list[PortPage]:
    """Run the worked ports and write root/ports.html; returns the pages."""
    pages = run_ports(echo=echo)
    (Path(root) / "ports.html").write_text(render_ports(env, pages), encoding="utf-8")
    return pages
