"""The gradient-flow diff: for every parameter, on each side, does its gradient flow, stop or not exist?

torch: "flows" (a non-zero .grad), "zero" (a .grad of zeros, or of subnormals only: a stop), "None (requires_grad
False)" (frozen) or "None (no path)" (the loss never reaches it, or only through detached values).
JAX: "flows", "zero" (stop_gradient gives exact zeros), "absent (outside wrt)" (the optimizer's
filter leaves it out: frozen), "NaN". The update is looked at too: a leaf JAX moves while its
gradient is zero is weight decay on a frozen leaf. Every mismatch is said in words, grouped by
the module prefix they share (`encoder/*`).
"""

from __future__ import annotations

import numpy as np

from .report import FlowLine

__all__ = ["state", "states", "diff"]


def state(g: np.ndarray | None, trainable: bool, side: str) -> str:
    """The flow state of one gradient (None: torch's .grad was None)."""
    if g is None:
        return "None (no path)" if trainable else "None (requires_grad False)"
    if side == "jax" and not trainable:
        return "absent (outside wrt)"
    g = np.asarray(g)
    if not np.all(np.isfinite(g)):
        return "NaN"
    # below the smallest normal number a gradient is no evidence of flow: XLA flushes subnormals to
    # zero where torch keeps them (a vanishing gradient through a deep stack is not a stop)
    tiny = np.finfo(g.dtype).tiny if g.dtype.kind == "f" else 0
    return "zero" if np.all(np.abs(g) < tiny) else "flows"


def _sentence(t: str, j: str, moved_j: bool, moved_t: bool) -> tuple[str, bool]:
    if t.startswith("None (requires_grad") and j == "flows":
        return "torch None (requires_grad False), JAX non-zero: the JAX port neither stops nor freezes it", True
    if t.startswith("None (no path") and j == "flows":
        return "torch None (no path from the loss), JAX non-zero: the JAX port is missing a stop_gradient", True
    if t == "zero" and j == "flows":
        return "torch exact zeros, JAX non-zero: the JAX port is missing a stop_gradient", True
    if t == "flows" and j == "zero":
        return "torch non-zero, JAX exact zeros: the JAX port stops a gradient torch lets through", True
    if t == "flows" and j.startswith("absent"):
        return "torch trains it, JAX leaves it out of the optimizer (wrt): frozen in JAX only", True
    if "NaN" in (t, j) and t != j:
        return f"torch {t}, JAX {j}: a NaN gradient on one side only", True
    if t != "flows" and j != "flows" and moved_j and not moved_t:
        return f"torch {t}, JAX {j} but moved by the update: weight decay on a frozen leaf", True
    if t.startswith("None") and j == "zero":
        return "torch None, JAX exact zeros: the same gradient, spelled differently (P11)", False
    return "", False


def _group(keys: list[str], everything: list[str]) -> list[str]:
    """Keys compressed to `prefix/*` where every parameter under the prefix is in `keys`."""
    members = set(keys)
    # parameters under each prefix, all of them and those in `keys`: one pass each (a deep model stays linear)
    total: dict[str, int] = {}
    inside: dict[str, int] = {}
    for counts, names in ((total, everything), (inside, members)):
        for k in names:
            parts = k.split("/")
            for n in range(1, len(parts)):
                prefix = "/".join(parts[:n])
                counts[prefix] = counts.get(prefix, 0) + 1
    chosen = []
    for key in keys:
        parts = key.split("/")
        for n in range(1, len(parts)):
            prefix = "/".join(parts[:n])
            if total.get(prefix) and inside.get(prefix) == total[prefix]:
                chosen.append(f"{prefix}/*")
                break
        else:
            chosen.append(key)
    return list(dict.fromkeys(chosen))


def states(p) -> dict[str, tuple[str, str]]:
    """{NNX key: (torch's gradient state, JAX's)} of a float64 Pass's recorded run (compare.Pass),
    taken as soon as both gradients exist: the arrays can go, the flow diff keeps these."""
    tg, sources = p.torch["grads_native"], p.torch["grad_sources"]
    trainable_t = {f"{u}/{leaf}".lstrip("/"): v for u, g in p.torch["trainable"].items() for leaf, v in g.items()}
    out = {}
    for key, g in p.jax["grads"].items():
        if key in tg:
            trainable = any(trainable_t.get(s, True) for s in sources.get(key, []))
            t = state(None if key in p.torch_none else tg[key], trainable, "torch")
            out[key] = (t, state(g, p.jax["trainable"].get(key, True), "jax"))
    return out


def diff(p, plan) -> list[FlowLine]:
    """FlowLines of a float64 Pass (compare.Pass: its `flow` states and `moved` keys): the mismatches,
    then the agreements worth a word."""
    facts: dict[tuple[str, str, str, bool], list[str]] = {}
    params = list(p.flow)
    for key, (t, j) in p.flow.items():
        moved_j, moved_t = key in p.moved.get("jax", ()), key in p.moved.get("torch", ())
        text, mismatch = _sentence(t, j, moved_j, moved_t)
        if text:
            facts.setdefault((t, j, text, mismatch), []).append(key)
    lines = []
    for (t, j, text, mismatch), keys in sorted(facts.items(), key=lambda kv: not kv[0][3]):
        for group in _group(keys, params):
            lines.append(FlowLine(group, t, j, f"`{group}`: {text}", mismatch))
    return lines
