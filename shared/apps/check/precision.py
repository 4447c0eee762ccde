"""The bfloat16 pass: each side's error against float64 truth, and the float32 the reference keeps.

Two correct bfloat16 runs differ by rounding everywhere, so the pass never compares the two: for every
quantity (each module's output, the loss, every gradient, every leaf after each step) it measures each side's
error against the float64 pass's torch value (the truth: float64 end to end, the two sides proven equal there),
err = RMS(x - truth), and the port matches while err_port <= FACTOR * max(err_ref, FLOOR * RMS(truth)): within a
stated factor of the reference's own error (FLOOR: half a bfloat16 ulp; no bfloat16 value is nearer). FACTOR
is measured on correct ports (docs/precision.md), never fitted to a buggy one.

The reference also states where it keeps float32 inside a bfloat16 model (HF's `.float()` in an RMSNorm and
the rotary table, the loss's upcast, a softmax or layer-norm kernel that keeps its normaliser in float32):
each backend notes per module which precision-critical kinds (exp, log, rsqrt, sin / cos) each side computes
in which dtype. Where the reference computes a kind in float32 and the port, in the twin module, only in
bfloat16, the port asks for less precision than the reference whatever this CPU's compiler keeps: a
`precision` row that differs, with both sides' ops named.
"""

from __future__ import annotations

import numpy as np

from .compare import Judge, Pass
from .guards import _cast
from .match import Plan, PortInputError, translate
from .report import Row

__all__ = ["FACTOR", "FLOOR", "PRECISIONS", "PrecisionJudge", "PrecisionPass", "policy_rows", "dtype_of"]

FACTOR = 4.0  # err_port / err_ref allowed: measured on correct ports (docs/precision.md), never fitted to a bug
FLOOR = 2.0**-9  # half a bfloat16 ulp, relative: no bfloat16 result is nearer the truth than that
NOISE_SIGMAS = 3  # a gradient entry below this many times the reference's own error: its Adam sign is a coin flip
# each side's bfloat16 policy: "bfloat16" (parameters and compute), "mixed" (float32 parameters, bfloat16 compute:
# torch.autocast on the reference; the port's own module dtypes)
PRECISIONS = ("bfloat16", "mixed")


def dtype_of(precision: str) -> str:
    """The backends' name for a side's bfloat16 policy."""
    return "mixed_bfloat16" if precision == "mixed" else "bfloat16"


def _rms(a) -> float:
    a = np.asarray(a, np.float64)
    return float(np.sqrt(np.mean(np.square(a)))) if a.size else 0.0


class PrecisionJudge(Judge):
    """The rows of the bfloat16 pass (module docstring), made as its quantities arrive, as Judge makes a pass's:
    the same pairing of outputs and leaves, each row judged against `truth` {(section, step, key): float64
    torch array, NNX layout} instead of against the other side."""

    def __init__(self, p: Pass, pl: Plan, transfer: bool, truth: dict, zeros: dict, own: dict) -> None:
        super().__init__(p, pl, transfer)
        self.truth = truth
        # the port's own float64 value where it parts from torch's in float64 (a module boundary drawn elsewhere:
        # the loss and gradients agree): its error is measured against it, torch's against torch's
        self.own = own
        self.zeros = zeros  # NNX key -> gradient entries zero in exact arithmetic (float64 rounding on both sides)
        self.noise: dict = {}  # NNX key -> the entries whose gradient the reference cannot resolve in bfloat16
        self.left_out: dict[str, int] = {}  # section -> entries not compared (zeros, noise), for the report's note
        grads = [v for (section, _, _), v in truth.items() if section == "grads"]
        self.grad_rms = _rms(np.concatenate([np.ravel(g) for g in grads])) if grads else 0.0
        # steps are held to the model's parameter scale, as the other passes hold them (compare.STEP_TOLERANCE): a
        # small leaf (a bias HF starts at zero, moved by a few Adam steps of lr) has no scale of its own to judge by
        values = [np.ravel(v) for v in p.expected.values() if np.asarray(v).dtype.kind == "f"]
        self.param_rms = _rms(np.concatenate(values)) if values else 0.0

    def _islands(self) -> None:  # the float64 pass's business
        self.first, self.finished, self.why = None, {}, ""

    def _add(self, section, key, torch_name, j, t, step=None, path=None) -> Row:
        truth = self.truth.get((section, step, key))
        if section == "weights" or np.asarray(t).dtype.kind in "biu":
            # both sides round the same weights; integers (a router's chosen experts) are no rounding error: the
            # float64 and float32 passes compare them, nothing to judge here
            return Row("bfloat16", section, key, torch_name, 0.0, 0.0, 0.0, True)
        j, t = np.asarray(j, np.float64), np.asarray(t, np.float64)
        if truth is None or np.shape(truth) != j.shape or j.shape != t.shape:
            shapes = f"jax {j.shape}, torch {t.shape}, float64 {np.shape(truth) if truth is not None else 'none'}"
            row = Row("bfloat16", section, key, torch_name, float("nan"), float("nan"), float("nan"), False, step,
                      f"no float64 truth of this shape to judge by ({shapes})")  # fmt: skip
            self.rows.append(row)
            return row
        truth = np.asarray(truth, np.float64)
        keep = np.ones(truth.shape, bool)
        for mask in (self.zeros.get(key), self.noise.get(key) if section == "steps" else None):
            if section in ("grads", "steps") and mask is not None and mask.shape == truth.shape:
                keep &= ~mask  # a gradient that is rounding, or Adam's sign of one the reference cannot resolve
        if not keep.all():
            self.left_out[section] = self.left_out.get(section, 0) + int((~keep).sum())
        scale = _rms(truth[keep])
        if section == "grads":  # a leaf whose gradient vanishes in exact arithmetic: judged at the model's scale
            scale = max(scale, self.grad_rms)
        elif section == "steps" and key != "loss":
            scale = max(scale, self.param_rms)
        mine = np.asarray(self.own.get((section, step, key), truth), np.float64)
        mine = mine if mine.shape == truth.shape else truth
        err_port, err_ref = _rms((j - mine)[keep]), _rms((t - truth)[keep])
        bound = FACTOR * max(err_ref, FLOOR * scale)
        ok = bool(np.isfinite(err_port) and err_port <= bound) or not keep.any()
        ratio = err_port / max(err_ref, FLOOR * scale) if scale else 0.0
        problem = (
            "" if ok else f"the port's error {err_port:.3g} is {ratio:.3g}x torch's {err_ref:.3g} (FACTOR {FACTOR:g})"
        )
        row = Row("bfloat16", section, key, torch_name, err_port, ratio, bound, ok, step, problem,
                  err_port / bound if bound else 0.0, reference=err_ref)  # fmt: skip
        self.rows.append(row)
        return row


def _twin(tpath: str, plan: Plan, aliases: set[str]) -> str:
    """The port's module that holds a torch module's computation: its twin, or the nearest ancestor's."""
    parts = tpath.split("/") if tpath else []
    for n in range(len(parts), -1, -1):
        alias = translate(".".join(parts[:n]), plan.mapping) if n else ""
        if alias in aliases:
            return alias
    return ""


def policy_rows(tprec: dict, jprec: dict, plan: Plan, aliases: set[str]) -> list[Row]:
    """A `precision` row per (torch module, kind) the reference computes in float32 in a bfloat16 run: it differs
    where the port's twin module (or the nearest one around it; the loss outside every module) computes that
    kind only in bfloat16 (tprec, jprec: each run's "precision" record; aliases: the port's module paths)."""
    rows = []
    for tpath, kinds in tprec.items():
        where = "(loss)" if tpath == "(loss)" else _twin(tpath, plan, aliases)
        # the port's computation under that module, at any depth (the root's: everything, the loss included)
        port = [k for p, k in jprec.items() if not where or p == where or p.startswith(where + "/")]
        for kind, dtypes in kinds.items():
            if "float32" not in dtypes:
                continue
            wide = [op for k in port for d, ops in k.get(kind, {}).items() if d in ("float32", "float64") for op in ops]
            narrow = [op for k in port for op in k.get(kind, {}).get("bfloat16", [])]
            ok = bool(wide) or not narrow
            name = tpath.replace("/", ".") or "(model)"
            problem = "" if ok else (
                f"torch computes {kind} in float32 here ({', '.join(dtypes['float32'])}); the port computes it in "
                f"bfloat16 ({', '.join(dict.fromkeys(narrow))}{f' in {where}' if where not in ('', '(loss)') else ''})"
            )  # fmt: skip
            rows.append(Row("bfloat16", "precision", f"{where or '(model)'}: {kind}", name, 0.0, 0.0, 0.0, ok,
                            problem=problem))  # fmt: skip
    return rows


class PrecisionPass:
    """The bfloat16 pass of checker._Checker (its models, losses, optimizers, plan and the float64 pass's truth)."""

    def _precision_pass(self, rows: list) -> Pass:
        """Both sides in their bfloat16 policy (self.precision), judged against the float64 truth (rows appended)."""
        try:
            return self._bfloat16(rows)
        except PortInputError as exc:  # an op without a bfloat16 kernel, a port that refuses bfloat16
            policy = ", ".join(f"{side}_precision={self.precision[side]!r}" for side in ("torch", "jax"))
            raise PortInputError(f"bfloat16 pass ({policy}): {exc}") from None

    def _bfloat16(self, rows: list) -> Pass:
        T, J, pl = self.T, self.J, self.plan
        tdt, jdt = dtype_of(self.precision["torch"]), dtype_of(self.precision["jax"])
        with self.stages("copies and weights"):
            tm, jm = self._impl(T.copy_model, self.models[0], tdt), self._impl(J.copy_model, self.models[1], jdt)
            if self.transfer:  # the user's weights, each side rounding them into its own parameters
                self._impl(J.load, jm, pl.to_jax(T.read(self.models[0])), strict=False)
            p = Pass("bfloat16")
            p.expected, p.sources, p.dropped = self._native(jm, pl, T.read(tm))
            p.actual = J.native(jm)
        batch = _cast(self.batch, "bfloat16")
        torch_steps, p.torch = self._torch_side(tm, jm, pl, batch, tdt)
        jax_steps, p.jax = self._jax_side(jm, batch, jdt)
        with self.stages("copies and weights"):
            self._torch_grads(p, jm, pl)
        own = {k: j for k, (j, _) in self.values64.items() if k[0] == "outputs"}
        judge = PrecisionJudge(p, pl, self.transfer, self.truth, self.zeros, own)
        with self.stages("comparison"):
            judge.run()
        for key, g in p.torch["grads_native"].items():
            true = self.truth.get(("grads", None, key))
            if true is not None and np.shape(true) == np.shape(g):
                # Adam's first steps are the gradient's sign: a coin flip, on any bfloat16 run, where the entry is
                # below three times the reference's own error on its leaf
                judge.noise[key] = np.abs(true) < NOISE_SIGMAS * _rms(np.asarray(g, np.float64) - true)
        for s, (ts, js) in enumerate(zip(torch_steps, jax_steps, strict=True), start=1):  # one of each alive
            with self.stages("comparison"):
                judge.step(s, ts, js)
            del ts, js
        aliases = {m["alias"] for m in self.structures[1]["modules"]}
        if judge.left_out:
            self.report.notes.append(
                "bfloat16 pass: not compared: "
                + "; ".join(f"{n} {section} entries" for section, n in judge.left_out.items())
                + " (gradients zero in exact arithmetic, rounding on both sides in float64; and in the steps, Adam's "
                f"signs of gradients below {NOISE_SIGMAS}x the reference's own bfloat16 error on their leaf)"
            )
        rows += judge.rows + policy_rows(p.torch.get("precision", {}), p.jax.get("precision", {}), pl, aliases)
        p.torch.update(outputs={}, grads_native={})
        p.jax.update(outputs={}, grads={})
        return p
