"""Port checker, name the line: which frame of the port's code a parting value is reported at.

A value the port computes is recorded with its stack (the port's own frames, innermost first: inside.py). Its
innermost line is where it was computed; two cases want an outer frame: a library computed it (an nnx.Linear's
dot) from a value the port's code handed down, so the port's fault is where it was handed in; or the module
returns a value computed in a submodule it calls (a residual left out), so the fault is the module's own line.
Reference: issue 41 ("the Python source line that produced it").
"""

from __future__ import annotations

import linecache

__all__ = ["lifted", "own_line"]


def _frame_line(frame: list) -> list:
    return [frame[0], frame[1], linecache.getline(frame[0], frame[1]).strip()]


def lifted(port: list[dict], k: int) -> list:
    """port[k]'s line, or, where a library module computed it (an nnx.Linear's dot) from a value the port's code made in
    an outer frame and passed down, the line of the deepest frame both share: where that value was handed in (a
    block feeding its MLP the stream instead of the normed stream; the batch itself: the model's own line)."""
    op = port[k]
    consumer = list(reversed(op.get("stack") or []))
    if not op.get("built") or not consumer:  # computed by the port's own code, or a library's function it called
        return op["line"]
    if any(port[i]["kind"] == "batch" for i in op["inputs"]):  # the model's own input: handed in by the model
        return own_line(op)
    depths = []
    for i in op["inputs"]:
        producer = list(reversed(port[i].get("stack") or [])) if port[i]["kind"] == "op" else []
        if not producer:
            continue
        d = 0
        while d < min(len(consumer), len(producer)) and consumer[d] == producer[d]:
            d += 1
        same_function = d < min(len(consumer), len(producer)) and consumer[d][0::2] == producer[d][0::2]
        depths.append(d if same_function else d - 1)
    depth = max(depths, default=len(consumer) - 1)
    return op["line"] if depth < 0 or depth >= len(consumer) - 1 else _frame_line(consumer[depth])


def own_line(op: dict) -> list:
    """op's line in the frame of the module's own __call__ (a value it returns, computed in a submodule it calls:
    the line of that call), else op's line."""
    own = op.get("own")
    frame = next((f for f in op.get("stack") or [] if own and [f[0], f[2]] == own), None)
    return _frame_line(frame) if frame is not None else op["line"]
