"""Name the line where the forward matches: where a gradient parts (the backward), or the first step (the optimizer).

A backward parting is located by the gradient arriving at each value: the port's operation whose output's gradient
is torch's and whose input's is not (a stop_gradient where torch has no detach). A step that parts under matching
gradients is located in the port's optax chain: the same gradients fed through its parts one at a time, each
compared with torch's optimizer written in optax (the backends' `optimizer`), the first part torch never computes.
Values pair as line.py pairs them (their fingerprints).
"""

from __future__ import annotations

import numpy as np

from .line import RTOL, _same, twins

__all__ = ["locate_backward", "locate_optimizer"]


def locate_backward(port: list[dict], torch: list[dict]) -> dict | None:
    """Where the gradient parts under a forward that matches: the port operation nearest the loss whose output's
    incoming gradient is torch's (that of its value's twin) and whose input's is not; a stop_gradient there is
    preferred (an operation beside it on the same input sees the same wrong sum). None where none is found.
    Each value's "grad" is the gradient arriving at it (the backends' `inside` with backward=True)."""
    paired = twins(port, torch)
    grad_ok: list[bool | None] = []
    for k, v in enumerate(port):
        t = paired[k]
        theirs = None if t is None else torch[t]["grad"]
        grad_ok.append(None if v["grad"] is None or theirs is None else _same(v["grad"], theirs))
    found = []
    for k in reversed(range(len(port))):
        v = port[k]
        if v["kind"] != "op":
            continue
        cut = [i for i in v["inputs"] if grad_ok[i] is False]
        if cut and (grad_ok[k] is True or v["op"] == "stop_gradient"):
            found.append(k)
    if not found:
        return None
    k = next((k for k in found if port[k]["op"] == "stop_gradient"), found[0])
    op = port[k]
    cut = next(i for i in op["inputs"] if grad_ok[i] is False)
    twin = paired[cut]
    return {
        "port": op["line"],
        "op": op["op"],
        "inputs": [torch[twin]["line"] if twin is not None and torch[twin]["kind"] == "op" else ["", 0, "an input"]],
        "torch": None,
        "relation": None,
        "backward": True,
    }


def _all_close(a: dict, b: dict) -> bool:
    """Every leaf of `a` equal to `b`'s to the float64 bound (the same layout: both the port's)."""
    for key, x in a.items():
        y = np.asarray(b.get(key), dtype=np.float64) if key in b else None
        if y is None or y.shape != np.shape(x):
            return False
        scale = max(float(np.max(np.abs(y))) if y.size else 0.0, 1e-300)
        if np.any(np.abs(np.asarray(x, np.float64) - y) > RTOL * scale + RTOL * np.abs(y)):
            return False
    return True


def locate_optimizer(stages: dict, delta: dict) -> dict | None:
    """The part of the port's optax chain that first computes what torch's optimizer never does, from the backends'
    `optimizer_stages` (the same gradients through each part, and through torch's optimizer written in optax)
    and torch's own first update `delta` (which the written one must reproduce, or nothing is said). Returns
    {"optimizer": the part's optax function, "path": its indices in the chain, "after": torch's stage its input
    is, "torch_next": torch's next stage} or None."""
    port, ref = stages["port"], stages["reference"]
    if not ref or "updates" not in ref[-1] or not delta or not _all_close(delta, ref[-1]["updates"]):
        return None
    for step in ("updates", "updates2"):  # the first step, then the second (a part's state: Adam's b2)
        last = 0
        for stage in port[1:]:
            if step not in stage:
                return None
            twin = next((i for i, r in enumerate(ref) if step in r and _all_close(stage[step], r[step])), None)
            if twin is None:
                after = ref[last]["name"]
                ahead = ref[last + 1]["name"] if last + 1 < len(ref) else None
                return {"optimizer": stage["name"], "path": stage["path"], "after": after, "torch_next": ahead,
                        "step": 1 if step == "updates" else 2}  # fmt: skip
            last = twin
    return None
