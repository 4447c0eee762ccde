"""The comparisons of one pass (one dtype): JAX against torch, leaf by leaf, in the order of the check.

`Pass` holds what one dtype produced, already in the NNX layout (the port's canonical keys);
`rows_of` turns it into Rows with shared/core/parity.py's comparator: weights, the output of every
submodule in call order (each torch array paired with its NNX twin and permuted by the axes their
modules' rules name: pairing.py), the loss, every gradient, then each step's loss and leaves.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from ...core.parity import TOLERANCES, Tolerance, compare
from .match import Plan, translate
from .noise import DRIFT, NOISE, NOISE64, NOISE64_GAP, ROUNDING_BOUND, noise_entries
from .pairing import flatten_orders, pair
from .report import Row
from .routing import in_expert_order

__all__ = ["backward_rows", "TOLERANCE", "STEP_TOLERANCE", "Judge", "Pass", "floor", "island_facts", "rows_of"]

# float64: the package's parity bound (a bug, not rounding); float32: the noise of a deep float32 forward.
# Steps are held to the model's parameter scale, not each leaf's: a leaf whose gradient vanishes in exact
# arithmetic (an attention key bias, a bias before BatchNorm) gets rounding noise as its gradient, and Adam
# turns noise into updates of up to lr; in float64 that stays near 1e-12, in float32 near lr.
TOLERANCE = {"float64": TOLERANCES["float64"]["parity"], "float32": Tolerance(rtol=2e-4, atol=1e-6)}
STEP_TOLERANCE = {"float64": TOLERANCES["float64"]["parity"], "float32": Tolerance(rtol=5e-3, atol=1e-6)}


def floor(tol: Tolerance, scale: float) -> Tolerance:
    """The float64 bound with its absolute floor scaled to the quantity: atol, or rtol · scale where that is
    smaller. At a loss of 1e-13 the fixed floor (1e-12) would pass a port that is 6 times off; rounding of a
    quantity of that scale is rtol · scale and more below it. A quantity of scale ≥ atol / rtol keeps atol."""
    return Tolerance(rtol=tol.rtol, atol=min(tol.atol, tol.rtol * scale))


def _row(dtype, section, key, torch_name, jax_value, torch_value, tol, step=None, scale=None) -> Row:
    if scale is not None:  # a bound at the model's scale: atol + rtol * max(scale, max|torch|)
        tol = Tolerance(rtol=tol.rtol, atol=tol.atol + tol.rtol * scale)
    comp = compare(
        {key: jax_value}, {key: torch_value}, tol, label=section, names=("jax", "torch"), nonfinite_ok=("*",)
    )
    if comp.leaves:
        leaf = comp.leaves[0]
        return Row(dtype, section, key, torch_name, leaf.max_abs, leaf.max_rel, leaf.bound, comp.ok, step,
                   "; ".join(comp.problems), leaf.used)  # fmt: skip
    nan = float("nan")
    return Row(dtype, section, key, torch_name, nan, nan, nan, False, step, "; ".join(comp.problems))


@dataclass
class Pass:
    """Everything one dtype produced, for the rows and the diagnosis (arrays in NNX layout)."""

    dtype: str
    expected: dict = field(default_factory=dict)  # weights from torch, NNX layout
    actual: dict = field(default_factory=dict)  # weights in the NNX model
    sources: dict = field(default_factory=dict)  # NNX key -> canonical keys (nnx unit/leaf)
    torch: dict = field(default_factory=dict)  # run_loss of torch, grads in NNX layout
    jax: dict = field(default_factory=dict)
    torch_none: set = field(default_factory=set)  # NNX keys whose torch .grad were all None
    # [{"step": s, "loss", "values" NNX layout}]: in the float64 pass, the steps from its first difference on
    torch_steps: list = field(default_factory=list)
    jax_steps: list = field(default_factory=list)
    flow: dict = field(default_factory=dict)  # NNX key -> (torch's gradient state, JAX's): flow.state
    moved: dict = field(default_factory=dict)  # side -> NNX keys whose last step left the start
    no_grad: set = field(default_factory=set)  # NNX keys torch gives no or an all-zero gradient
    grad_norm: float = 0.0  # of torch's whole gradient
    step_dropped: set = field(default_factory=set)  # canonical keys a torch step's mapping dropped
    dropped: dict = field(default_factory=dict)
    replay: Callable | None = None
    values: dict = field(default_factory=dict)  # (section, step, key) -> (jax array, torch array)
    orders: dict = field(default_factory=dict)  # NNX kernel -> (row order, [C, *spatial]): pairing.flatten_orders


def _where(paths) -> str:
    """Module paths with their layer numbers as `*` (`model.layers.*.input_layernorm`), the loss by name."""
    where = dict.fromkeys(re.sub(r"(^|/)\d+(?=/|$)", r"\1*", p).replace("/", ".") or "(model)" for p in paths)
    return ", ".join(f"`{w}`" if w != "(loss)" else "the loss" for w in where)


def island(side: str, islands: dict) -> str:
    """The sentence of a report on where the float64 `side` ("reference" or "port") computes in a narrower
    dtype it could not widen (judged at float32's bound from there), with the reason."""
    dtypes = sorted({e["dtype"] for e in islands.values()})
    why = "; ".join(dict.fromkeys(e["why"] for e in islands.values() if e["why"]))
    return f"float64 pass: the {side} computes {_where(islands)} in {' / '.join(dtypes)}, not widened: {why}"


def island_facts(torch_islands: dict, jax_islands: dict) -> list[str]:
    """The report's facts on the float32 islands the float64 pass widened: where the reference (and the port)
    compute in float32, run in float64 on both sides, every row judged at the float64 bound."""
    out = []
    for side, islands in (("reference", torch_islands), ("port", jax_islands)):
        wide = {p: e for p, e in islands.items() if e["widened"]}
        if wide:
            dtypes = " / ".join(sorted({e["dtype"] for e in wide.values()}))
            out.append(
                f"float64 pass: the {side} computes {_where(wide)} in {dtypes}: widened to float64 on both sides "
                "(every row judged at the float64 bound; the float32 pass runs them as written)"
            )
    return out


def _int_width(j, t) -> np.ndarray:
    """JAX's integers are int32 unless x64 is on, torch's int64: equal values in another integer width are
    the same buffer (a step counter, token ids), not a difference; any other mismatch is left to compare."""
    j, t = np.asarray(j), np.asarray(t)
    ints = j.dtype.kind in "iu" and t.dtype.kind in "iu"
    if ints and j.dtype != t.dtype and j.shape == t.shape and np.array_equal(j, t):
        return j.astype(t.dtype)
    return j


class Judge:
    """The comparisons of one pass, made as its quantities arrive: the weights and the recorded run
    (outputs, loss, gradients), then each step as both sides yield it. Rows go to `rows`; an array
    pair goes to `p.values` only where `keep(row)` says (the diagnosis reads the differences), so a
    check that matches holds no compared arrays once they are judged (its memory at GPT-2 scale).

    The float64 pass runs the reference's float32 islands (HF's RMSNorm, rotary embedding, labels= loss) in
    float64 (precision.py of each backend): every row is judged at the float64 bound. Only where an island could
    not be widened (an op with no float64 kernel, a buffer built in float32 that cannot be rebuilt) is every
    quantity from it on (the outputs of the modules that finish after it, the loss, the gradients, the steps)
    that misses the float64 bound judged at float32's: within it, it matches with that reason; beyond it,
    it differs.
    """

    def __init__(
        self, p: Pass, pl: Plan, transfer: bool, keep: Callable[[Row], bool] = lambda row: True, noise=None
    ) -> None:
        self.p, self.pl, self.keep, self.rows = p, pl, keep, []
        # NNX key -> the entries whose float64 gradient a step cannot resolve (noise_entries), and why
        self.noise, self.noise_why = noise or {}, NOISE
        self.scale = max((float(np.max(np.abs(v))) for v in p.expected.values() if np.size(v)), default=0.0)
        self.first, self.finished, self.why = None, {}, ""
        self.grad_scale = float("inf")  # max |torch gradient| over every leaf, once the run is read
        self.grad_keys: set = set()  # the leaves with a gradient (the rest are buffers)
        self.drift, self.noised_at = 0.0, None  # the largest noise-driven step difference, and its first step
        self.truth: dict | None = None  # {(section, step, key): torch's array}: the bfloat16 pass's truth, if asked

    def _add(self, section, key, torch_name, j, t, step=None, path=None) -> Row:
        p, dt, first = self.p, self.p.dtype, self.first
        j, t = _int_width(j, t), np.asarray(t)
        if first is not None and t.dtype.kind == "f" and np.asarray(j).dtype.kind == "f":
            # an island's own result (HF's labels= loss in float32, a port's own step's loss): both in the wider dtype
            wider = max(t.dtype, np.asarray(j).dtype, key=lambda d: d.itemsize)
            j, t = np.asarray(j).astype(wider), t.astype(wider)
        steps = section == "steps" and key != "loss"
        tol, scale = (STEP_TOLERANCE if steps else TOLERANCE), (self.scale if steps else None)
        bound = tol[dt]
        if dt == "float64" and section in ("outputs", "loss", "grads", "backward") and t.dtype.kind == "f" and t.size:
            # the floor at the quantity's scale: a gradient's is the whole gradient's (a leaf that vanishes
            # in exact arithmetic is judged at the model's gradient scale), an output's and the loss's their own
            size = self.grad_scale if section == "grads" else float(np.max(np.abs(t)))
            bound = floor(bound, size) if 0 < size < np.inf else bound  # all zero: no scale to judge by
        row = _row(dt, section, key, torch_name, j, t, bound, step, scale)
        downstream = first is not None and (section != "outputs" or self.finished.get(path, -1) >= first)
        if not row.ok and downstream and section != "weights":
            # float32's absolute floor at the quantity's magnitude: 1e-6 is some ulps of a value of 1, not of 4
            wide32 = tol["float32"]
            if not steps and t.dtype.kind == "f" and t.size:
                wide32 = Tolerance(rtol=wide32.rtol, atol=wide32.atol * max(1.0, float(np.max(np.abs(t)))))
            wide = _row("float32", section, key, torch_name, j, t, wide32, step, scale)
            if wide.ok:
                row.ok, row.explained, row.problem = True, self.why, ""
        if not row.ok and steps and key in self.noise and self.noise[key].shape == np.shape(j):
            # Adam scales a gradient to ~lr whatever its size: on entries whose true gradient is below
            # float32's resolution (attention's key bias: softmax ignores it) a float32 step is rounding noise
            m = self._ordered(key, self.noise[key])
            rest = _row(dt, section, key, torch_name, np.where(m, t, j), t, tol[dt], step, scale)
            gap = float(np.max(np.where(m, np.abs(np.asarray(j, np.float64) - np.asarray(t, np.float64)), 0.0)))
            if rest.ok and gap <= self._noise_limit():
                row.ok, row.problem = True, ""
                row.explained = self.noise_why + f" ({int(np.sum(m))} entries of {np.size(m)})"
                self.drift = max(self.drift, gap)
                self.noised_at = step if self.noised_at is None else min(self.noised_at, step)
        buffer = key not in self.grad_keys
        if not row.ok and steps and buffer and self.noised_at is not None and step > self.noised_at:
            # BatchNorm's running mean after a noise-driven bias step: the forward saw the two sides' biases
            if row.max_abs <= self.drift:
                row.ok, row.problem, row.explained = True, "", DRIFT
        if self.keep(row):
            p.values[(section, step, key)] = (np.asarray(j), np.asarray(t))
        if self.truth is not None and section != "weights" and t.dtype.kind == "f":
            self.truth[(section, step, key)] = np.array(t, np.float64)
        self.rows.append(row)
        return row

    def _islands(self) -> None:
        """The islands no side could widen: the first of them (in torch's finished order) and why."""
        self.finished = {path: i for i, path in enumerate(self.p.torch.get("finished", []))}
        ref = {p: e for p, e in (self.p.torch.get("islands") or {}).items() if not e["widened"]}
        port = {p: e for p, e in (self.p.jax.get("islands") or {}).items() if not e["widened"]}
        # a port's island from the first torch module inside its twin on (the loss: after every module)
        alias = [(translate(t.replace("/", "."), self.pl.mapping), i) for t, i in self.finished.items()]
        inside = lambda p: [i for a, i in alias if a == p or a.startswith(p + "/") or not p]  # noqa: E731
        at = [e["at"] for e in ref.values()] + [min(inside(p), default=len(self.finished)) for p in port]
        self.first = min(at, default=None)
        self.why = "; ".join(island(side, i) for side, i in (("reference", ref), ("port", port)) if i)

    def narrow_steps(self, why: str) -> None:
        """From here on (the steps), a quantity that misses the float64 bound is judged at float32's: the port's own
        training step ran its float32 casts as written (the checker widens its own steps only)."""
        self.first = len(self.finished) if self.first is None else self.first
        self.why = "; ".join(w for w in (self.why, why) if w)

    def _noise_limit(self) -> float:
        """How far apart noise-driven steps may be: in float64 the two sides' roundings nearly agree, so 1e-6 of
        the model's scale, and a bug that moves those entries further (decay, a shift, another lr) differs there;
        in float32 each side's rounding is its own, Adam scales either to lr, and the float64 pass is the judge."""
        return NOISE64_GAP * self.scale if self.p.dtype == "float64" else float("inf")

    def _name(self, key: str) -> str:
        return self.pl.torch_name(self.p.sources.get(key, [key]))

    def _ordered(self, key, t):
        return np.asarray(t)[self.p.orders[key][0]] if key in self.p.orders else t

    def run(self) -> list[Row]:
        """The weights, every submodule's output in call order, the loss and every gradient; the rows added."""
        p, before = self.p, len(self.rows)
        self._islands()
        # a dense kernel loaded in channels-last flatten order (an NHWC port's head): compared in that order
        p.orders = flatten_orders(p.expected, p.actual, p.torch)
        for key in p.expected:
            if key in p.actual:
                self._add("weights", key, self._name(key), p.actual[key], self._ordered(key, p.expected[key]))
        self.outputs("outputs", p.torch["outputs"], p.jax["outputs"])
        self._add("loss", "loss", "torch_loss", p.jax["loss"], p.torch["loss"])
        tg = p.torch["grads_native"]
        self.grad_scale = max((float(np.max(np.abs(g))) for g in tg.values() if np.size(g)), default=float("inf"))
        self.grad_keys = set(p.jax["grads"])
        for key, g in p.jax["grads"].items():
            if key in p.torch_none and not p.jax["trainable"].get(key, True):
                continue  # frozen on both sides (torch None, outside JAX's wrt): the flow diff's business, no gradient to compare
            if key in tg:
                self._add("grads", key, self._name(key), g, self._ordered(key, tg[key]))
        return self.rows[before:]

    def outputs(self, section: str, tout: dict, jout: dict) -> list[Row]:
        """Each module's arrays per call, paired by the mapping and compared in torch's layout (named axes of
        the recorded run; a router's chosen experts as index sets, routing.py): its outputs, or the gradients
        arriving at them ("backward"); the rows added."""
        p, pl, before = self.p, self.pl, len(self.rows)
        tlay, jlay = p.torch.get("layouts", {}), p.jax.get("layouts", {})
        for tpath, calls in tout.items():
            alias = translate(tpath.replace("/", "."), pl.mapping)
            if alias not in jout:
                continue
            tspecs, jspecs = tlay.get(tpath, []), jlay.get(alias, [])
            for i, (ta, ja) in enumerate(zip(calls, jout[alias], strict=False)):
                ts, js = (tspecs[i] if i < len(tspecs) else None), (jspecs[i] if i < len(jspecs) else None)
                found, ties = in_expert_order(pair(ta, ts, ja, js), ta, ja, p.dtype)  # a router's choice: routing.py
                for n, _, moved, jv in found:
                    suffix = (f"#{i}" if len(calls) > 1 else "") + (f"[{n}]" if len(ta) > 1 else "")
                    name, torch_name = f"{alias or '(model)'}{suffix}", tpath.replace("/", ".") or "(model)"
                    row = self._add(section, name, torch_name, jv, moved, path=tpath)
                    row.explained = ties.get(n, "") if row.ok and not row.explained else row.explained
        return self.rows[before:]

    def step(self, s: int, ts: dict, js: dict) -> list[Row]:
        """Step s's loss and every leaf after it ({"loss", "values"} per side, NNX layout); the rows added."""
        before = len(self.rows)
        self._add("steps", "loss", "torch_loss", js["loss"], ts["loss"], s)
        for key, v in js["values"].items():
            if key in ts["values"]:
                self._add("steps", key, self._name(key), v, self._ordered(key, ts["values"][key]), s)
        return self.rows[before:]


def backward_rows(p: Pass, pl: Plan, transfer: bool, tcot: dict, jcot: dict) -> list[Row]:
    """The gradient arriving at each module's output ("backward" rows), torch's `tcot` against JAX's `jcot`
    ({module path: [[array] per call]}, port_run.cotangents), paired and laid out as the pass's outputs."""
    judge = Judge(p, pl, transfer)
    judge._islands()  # the gradient comes back through the reference's float32 islands: judged as downstream of them
    return judge.outputs("backward", tcot, jcot)


def rows_of(p: Pass, pl: Plan, transfer: bool) -> list[Row]:
    """Every comparison of one pass, in the order of the check (weights, outputs, loss, grads, steps):
    the steps both sides hold (a replay compares the steps its original kept: Pass.torch_steps)."""
    judge = Judge(p, pl, transfer)
    tg, jg = p.torch.get("grads_native") or {}, p.jax.get("grads") or {}
    if p.dtype == "float64" and tg and jg:  # as the pass judged its steps: a zero's rounding is not a difference
        judge.noise, judge.noise_why = noise_entries(tg, jg, ROUNDING_BOUND), NOISE64
    judge.run()
    jax_steps = {st["step"]: st for st in p.jax_steps}
    for ts in p.torch_steps:
        if ts["step"] in jax_steps:
            judge.step(ts["step"], ts, jax_steps[ts["step"]])
    return judge.rows
