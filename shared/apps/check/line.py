"""Name the line: inside the first parting module, the first operation of the port that torch never computed.

Both sides record what the module computes, value by value, with the line that computed each (the backends'
`inside`: torch's functions, JAX's equations). The two differ in number and order (a fused softmax against
exp / sum / div, a transposed matmul, a reshape), so values are paired by what they hold, not by name: a
value's fingerprint is its sorted entries, the same under any transpose, reshape or permutation of its
entries, and two values are twins when their fingerprints agree to the float64 bound. A port value is sound
when it has a torch twin, or when every value it was computed from is sound and something computed from it
has a twin (an intermediate of a fused operation: exp before the sum). The port parts at the first equation
whose inputs are all sound and whose value is not. torch's value at that place is the one torch computed
from the twins of those inputs, and how the two relate is said where it is simple (relation.py). Where the
forward matches, line_after.py finds where a gradient or the first step parts.
"""

from __future__ import annotations

import os

import numpy as np

from .line_frames import lifted, own_line
from .relation import aligned, relation

__all__ = ["RTOL", "twins", "parting", "locate", "where"]

RTOL = 1e-9  # two values are twins to this relative bound (float64 rounding of the longest chains, with room)


_MASK = 1e30  # an additive mask's entries (finfo.min) and beyond: compared among themselves, not as the scale


class _Print:
    """A value's fingerprint: its size, how many entries are -inf, +inf and NaN, and its finite entries sorted (the
    same under any transpose, reshape or permutation); `scale` the largest magnitude below a mask's, `mass` the sum
    of their magnitudes (a quick first test)."""

    def __init__(self, value) -> None:
        a = np.asarray(value)
        self.ok = a.size > 0 and a.dtype.kind in "biuf"
        flat = a.astype(np.float64).ravel() if self.ok else np.zeros(0)
        finite = np.isfinite(flat)
        self.size = a.size
        self.odd = (int(np.sum(flat == -np.inf)), int(np.sum(flat == np.inf)), int(np.sum(np.isnan(flat))))
        self.sorted = np.sort(flat[finite])
        usual = np.abs(self.sorted[np.abs(self.sorted) < _MASK])
        self.scale = float(np.max(usual)) if usual.size else 0.0
        self.mass = float(np.sum(np.abs(self.sorted)))

    def same(self, other: _Print) -> bool:
        """Whether `other` holds the same entries: each to RTOL of its own size, or of the largest (below a mask's)
        near zero (float64 rounding; a mask's huge entries hold no scale over the others)."""
        if not (self.ok and other.ok) or self.size != other.size or self.odd != other.odd:
            return False
        floor = RTOL * 1e-3 * max(self.scale, other.scale, 1e-300)
        if abs(self.mass - other.mass) > RTOL * max(self.mass, other.mass) + floor * self.size:
            return False
        a, b = self.sorted, other.sorted
        return bool(np.all(np.abs(a - b) <= RTOL * np.maximum(np.abs(a), np.abs(b)) + floor))


def _same(a, b) -> bool:
    """Whether two arrays hold the same entries to the float64 bound, in any arrangement."""
    return _Print(a).same(_Print(b))


def twins(port: list[dict], torch: list[dict]) -> list[int | None]:
    """For each port value, the index of a torch value holding the same entries (any arrangement), else None."""
    index: dict[int, list[tuple[int, _Print]]] = {}
    for i, t in enumerate(torch):
        fp = _Print(t["value"])
        if fp.ok:
            index.setdefault(fp.size, []).append((i, fp))
    out: list[int | None] = []
    for j in port:
        fp = _Print(j["value"])
        out.append(next((i for i, other in index.get(fp.size, ()) if fp.same(other)), None) if fp.ok else None)
    return out


_LAYOUT = ("broadcast_in_dim", "reshape", "squeeze", "expand_dims", "transpose", "convert_element_type", "copy")


def _masks(torch: list[dict]) -> dict[int, list[np.ndarray]]:
    """torch's masks by size, as what they let through: boolean values, and additive ones (0, or -inf / finfo.min)."""
    out: dict[int, list[np.ndarray]] = {}
    for t in torch:
        v = np.asarray(t["value"])
        if v.dtype.kind == "b":
            out.setdefault(v.size, []).append(v)
        elif v.dtype.kind == "f" and v.size and np.all((v == 0) | (v <= -_MASK)):
            out.setdefault(v.size, []).append(v == 0)
    return out


def _soundness(port: list[dict], paired: list, bookkeeping_sound: bool, masks=None) -> tuple[list[bool], int | None]:
    consumers: dict[int, list[int]] = {}
    for k, v in enumerate(port):
        for i in v["inputs"]:
            consumers.setdefault(i, []).append(k)
    reach = [False] * len(port)
    for k in reversed(range(len(port))):
        reach[k] = paired[k] is not None or any(reach[c] for c in consumers.get(k, ()))
    sound, constant, data = [False] * len(port), [False] * len(port), [False] * len(port)
    for k, v in enumerate(port):
        value = np.asarray(v["value"])
        if v["kind"] != "op":
            sound[k] = paired[k] is not None or v["kind"] in ("const", "batch")
            data[k] = value.dtype.kind == "f"
            continue
        # made from constants alone: a fill value broadcast (finfo.min for a mask) is no value of torch's to pair
        constant[k] = all(constant[i] for i in v["inputs"])
        filler = constant[k] and value.size > 0 and bool(np.all(value == value.flat[0]))
        # computed from floating data (an input, a parameter), not only from integers and masks: positions, labels,
        # one-hots are bookkeeping, which torch often keeps inside a fused kernel
        data[k] = any(data[i] for i in v["inputs"])
        inputs_sound = all(sound[i] for i in v["inputs"])
        moved = v["op"] in _LAYOUT and inputs_sound  # the same numbers, moved: nothing of its own to pair
        # a mask torch also holds (of its size) is compared, never assumed: a causal diagonal, a window, a polarity
        held = value.dtype.kind == "b" and value.size in (masks or {})
        kept = bookkeeping_sound and not data[k] and inputs_sound and not held
        sound[k] = paired[k] is not None or (inputs_sound and reach[k]) or filler or moved or kept
        if not sound[k] and inputs_sound and value.dtype.kind in "biuf":
            return sound, k
    return sound, None


def parting(port: list[dict], paired: list[int | None], torch: list[dict] | None = None) -> int | None:
    """The index of the first port operation whose inputs are all sound and whose value is not (see the module
    docstring), on the path of the floating data first (bookkeeping, positions, labels, one-hots, taken as sound,
    but for a mask of a size torch holds one of); else anywhere; None where every operation is sound or none has
    sound inputs."""
    masks = _masks(torch or [])
    _, k = _soundness(port, paired, bookkeeping_sound=True, masks=masks)
    return k if k is not None else _soundness(port, paired, bookkeeping_sound=False)[1]


def where(line) -> str:
    """file:line of a recorded [file, line, text], the file by its name only."""
    return f"{os.path.basename(line[0])}:{line[1]}" if line and line[1] else "?"


def _place(torch: list[dict], inputs: list[int], value: np.ndarray, near: bool = True) -> int | None:
    """torch's value at the place of a port `value` computed from the twins `inputs`: of the torch values of its size
    computed from them (directly or through others), the first that relates to it simply (relation.py), else the
    first; where torch computed none from them (a mask built from positions alone), the torch value of that shape
    and kind that differs from it in the fewest entries."""
    reach, found = set(inputs), []
    for i, t in enumerate(torch):
        if reach & set(t["inputs"]):
            reach.add(i)
            if t["kind"] == "op" and np.asarray(t["value"]).size == value.size:
                found.append(i)
    same = [i for i in inputs if np.asarray(torch[i]["value"]).size == value.size]  # where torch did nothing more
    prints = [_Print(torch[i]["value"]) for i in same]
    found = [i for i in found if not any(_Print(torch[i]["value"]).same(p) for p in prints)]  # not a view of them
    for i in found + same:
        if relation(value, np.asarray(torch[i]["value"])):
            return i
    if found or same:
        return (found or same)[0]
    if not near:
        return None
    kind = value.dtype.kind == "b"
    near = [(np.mean(np.asarray(t["value"]).ravel() != value.ravel()), i) for i, t in enumerate(torch)
            if t["kind"] == "op" and np.asarray(t["value"]).shape == value.shape
            and (np.asarray(t["value"]).dtype.kind == "b") == kind]  # fmt: skip
    return min(near)[1] if near else None


def _misarranged(port: list[dict], torch: list[dict], paired: list, k: int) -> int | None:
    """Where the port arranges a value otherwise than torch (the same entries, in no transpose or reshape of torch's
    arrangement: heads merged in another order), upstream of the parting operation k: the first operation whose
    value is so while its own inputs are not; None where k's inputs are arranged as torch's."""

    def wrong(i: int) -> bool:
        t = paired[i]
        return t is not None and port[i]["kind"] != "param" and not aligned(port[i]["value"], torch[t]["value"])

    todo, seen, found = [i for i in port[k]["inputs"] if wrong(i)], set(), []
    while todo:
        i = todo.pop()
        if i in seen:
            continue
        seen.add(i)
        before = [x for x in port[i]["inputs"] if wrong(x)]
        if before:
            todo += before
        else:
            found.append(i)
    return min(found) if found else None


def _out_of_fused(port: list[dict], torch: list[dict], paired: list, k: int) -> int:
    """Where torch fuses what the port computes step by step (a cross entropy's log-probabilities taken at the labels
    and averaged in one kernel), the parting operation k has no torch value of its size to be compared with: the
    first operation computed from k that has one (the loss's mean), else k."""
    anchor = [paired[i] for i in port[k]["inputs"] if paired[i] is not None]
    value = np.asarray(port[k]["value"])
    if value.dtype.kind != "f" or _place(torch, anchor, value, near=False) is not None:  # a mask is no fused value
        return k
    reached = {k}
    for i in range(k + 1, len(port)):
        if port[i]["kind"] == "op" and reached & set(port[i]["inputs"]):
            reached.add(i)
            if _place(torch, anchor, np.asarray(port[i]["value"]), near=False) is not None:
                return i
    return k


def _last_on_its_line(port: list[dict], k: int) -> int:
    """The last value computed on port[k]'s line from it: the value the line computes (a mask built in three
    equations, a loss's sum after its log-softmax), which torch's value at that place is compared with."""
    line, reached, last = port[k]["line"][:2], {k}, k
    for i in range(k + 1, len(port)):
        if port[i]["line"][:2] == line and reached & set(port[i]["inputs"]):
            reached.add(i)
            last = i
    return last


def _returned_early(port: list[dict], torch: list[dict], paired: list, outputs: list[int]) -> int | None:
    """A port value the module returns that is one of torch's values on the way, not torch's module output (a
    residual or a last scale left out): its index, where the module's own operations all pair."""
    if not outputs:
        return None
    for k, v in enumerate(port):
        if v.get("escapes") and v["kind"] == "op" and paired[k] is not None and paired[k] not in outputs:
            return k
    return None


def _settings(op: dict, paired: list, torch: list[dict], place: int | None) -> bool:
    """Whether a parting inside a library module the port built is its settings (groups, padding, epsilon): every
    input of the operation is torch's, and torch's value at that place is computed from them all directly (torch
    applied its module to the same values). Else the call is the bug: the module given other values, in another
    order (a norm before the residual instead of after), or integer positions torch never had."""
    ins = [paired[i] for i in op["inputs"]]
    return place is not None and all(i is not None for i in ins) and set(ins) <= set(torch[place]["inputs"])


def locate(port: list[dict], torch: list[dict], outputs: list[int] | None = None) -> dict | None:
    """Where the port parts inside one module (see the module docstring), from both sides' recorded values;
    `outputs`: the indices of torch's module outputs (a port that returns one of torch's intermediates instead
    is located at the line that computed it).

    Returns {"port": [file, line, text], "op": primitive, "inputs": [torch's [file, line, text] of each input's
    twin, or ["", 0, "<kind>"] for a module input or parameter], "torch": torch's value at that place
    [file, line, text] or None, "relation": a sentence or None}; None where no operation parts (the module's
    own inputs have no twin: the difference comes from outside it).
    """
    paired = twins(port, torch)
    k = parting(port, paired, torch)
    moved = None if k is None else _misarranged(port, torch, paired, k)
    # arranged otherwise before the module (an input, the batch): look around it
    if moved is not None and port[moved]["kind"] in ("input", "batch"):
        return None
    if moved is not None:  # the same entries as torch's, otherwise arranged: the permutation is the parting
        op, value = port[moved], np.asarray(port[moved]["value"])
        same = [i for i, t in enumerate(torch) if np.shape(t["value"]) == value.shape and _same(t["value"], value)]
        twin = same[0] if same else paired[moved]  # torch's twin in the port's own shape, where torch has one
        return {"port": op["line"], "op": op["op"], "inputs": [torch[twin]["line"]], "torch": torch[twin]["line"],
                "relation": relation(value, np.asarray(torch[twin]["value"])) or "the same entries, otherwise arranged",
                "early": False}  # fmt: skip
    early = _returned_early(port, torch, paired, outputs or []) if k is None else None
    if k is None and early is None:
        return None
    if k is None:  # the port returns what torch computes on the way: torch's output is the value at that place
        op, place = port[early], (outputs or [None])[0]
        value, twin_inputs = np.asarray(port[early]["value"]), [paired[early]]
    else:
        first, k = port[k], _out_of_fused(port, torch, paired, k)
        op = port[k]
        last = port[_last_on_its_line(port, k)]
        twin_inputs = [paired[i] for i in op["inputs"] if paired[i] is not None]
        value = np.asarray(last["value"])
        place = _place(torch, [paired[i] for i in last["inputs"] if paired[i] is not None] or twin_inputs, value)
    inputs = []
    for i in dict.fromkeys(twin_inputs):
        t = torch[i]
        inputs.append(t["line"] if t["kind"] == "op" else ["", 0, f"its {t['kind']} {t['op']}".strip()])
    said = None if place is None else relation(value, np.asarray(torch[place]["value"]))
    built = op.get("built") if k is not None and _settings(first, paired, torch, place) else None
    kinds = {port[i]["kind"] for i in op["inputs"]} if k is not None and op.get("built") and not built else set()
    if "input" in kinds or ("batch" in kinds and not op.get("top")):
        return None  # a library module's operation on the module's input as it came: handed in wrong, look around
    line = own_line(op) if k is None else lifted(port, k)
    return {
        "port": built or line,
        "called": op["line"] if built else None,
        "op": op["op"],
        "inputs": inputs,
        "torch": None if place is None else torch[place]["line"],
        "relation": said,
        "early": k is None,  # the port's module returns one of torch's values on the way
    }
