"""check_port: weights across, both models run on one batch in float64 then float32, everything compared.

For each dtype the checker works on its own copies of both models (cast by the impls; the
user's models, optimizers and settings are left as they were): it pairs the modules
(match.py), copies the torch weights into the NNX copy by the rule tables (or, with
transfer=False, checks the user's own loaded weights against them), records every
submodule's output, the loss and every parameter's gradient, then runs K optimizer steps.
Everything is compared with shared/core/parity.py's comparator, keyed by the NNX leaf paths.
The float64 pass tells a bug from float32 noise; the diagnosis (diagnose.py) names the bug.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping

import numpy as np

from ..backends import backend
from . import budget, diagnose, flow
from .compare import Pass, rows_of
from .match import Plan, PortInputError, check_mapping, plan
from .report import PortReport

__all__ = ["MAX_STEPS", "check_port", "validate_batch"]

MAX_STEPS = 100  # optimizer steps compared: drift shows within a few; more only takes longer


def validate_batch(batch) -> dict[str, np.ndarray]:
    """The batch as a dict of numpy arrays (torch tensors and JAX arrays are read as their values; a tensor
    that requires grad too); PortInputError naming the key for anything else or NaN / inf."""
    if not isinstance(batch, Mapping) or not batch:
        raise PortInputError(f"batch: expected a non-empty dict of numpy arrays, got {type(batch).__name__}")
    out = {}
    for key, value in batch.items():
        if not isinstance(key, str):
            raise PortInputError(f"batch: keys expected str, got {key!r}")
        if callable(getattr(value, "detach", None)):  # a torch tensor, perhaps requiring grad: its values only
            value = value.detach().cpu().numpy()
        arr = np.asarray(value)
        if arr.size == 0:
            raise PortInputError(f"batch[{key!r}]: expected a non-empty array, got shape {arr.shape}")
        if arr.dtype.kind not in "biuf":
            raise PortInputError(f"batch[{key!r}]: expected a numeric numpy array, got dtype {arr.dtype}")
        if arr.dtype.kind == "f" and not np.all(np.isfinite(arr)):
            raise PortInputError(
                f"batch[{key!r}]: expected finite values, got {int((~np.isfinite(arr)).sum())} NaN / inf"
            )
        out[key] = arr
    return out


def _pair(optimizer) -> bool:
    """(transformation, filter), not an optax transformation (itself a NamedTuple with init / update)."""
    return isinstance(optimizer, tuple) and len(optimizer) == 2 and not hasattr(optimizer, "init")


def _cast(batch: Mapping[str, np.ndarray], dtype: str) -> dict[str, np.ndarray]:
    return {k: v.astype(dtype) if v.dtype.kind == "f" else v for k, v in batch.items()}


class _Checker:
    def __init__(self, torch_model, jax_model, batch, *, torch_loss, jax_loss, torch_optimizer, jax_optimizer,
                 torch_step, jax_step, mapping, transfer, steps, progress) -> None:  # fmt: skip
        for name, fn in (("torch_loss", torch_loss), ("jax_loss", jax_loss)):
            if not callable(fn):
                raise PortInputError(f"{name}: expected a callable (model, batch) -> scalar, got {type(fn).__name__}")
        if (torch_step is None) != (jax_step is None):
            raise PortInputError("torch_step / jax_step: expected both or neither, got one")
        if (torch_optimizer is None) != (jax_optimizer is None):
            raise PortInputError("torch_optimizer / jax_optimizer: expected both or neither, got one")
        if not isinstance(steps, int) or isinstance(steps, bool) or not 0 <= steps <= MAX_STEPS:
            raise PortInputError(f"steps: expected an integer in [0, {MAX_STEPS}], got {steps!r}")
        if not isinstance(transfer, bool):
            raise PortInputError(f"transfer: expected True or False, got {transfer!r}")
        check_mapping(mapping)  # before `dict(mapping)` below: 5, "ab" or [1] raised a TypeError (exit 1)
        for name, fn, what in (
            ("torch_optimizer", torch_optimizer, "a function params -> torch.optim.Optimizer"),
            ("torch_step", torch_step, "a function (model, batch) -> loss"),
            ("jax_step", jax_step, "a function (model, batch) -> loss"),
        ):
            if fn is not None and not callable(fn):  # an optimizer instance is the usual slip
                raise PortInputError(f"{name}: expected {what}, got {type(fn).__name__} {fn!r:.60}")
        self.T, self.J = backend("torch").port, backend("jax").port  # layouts: read, write, convert
        self.TR, self.JR = backend("torch").port_run, backend("jax").port_run  # runs: forward, gradients, steps
        for check, model in ((self.T.check_model, torch_model), (self.J.check_model, jax_model)):
            try:
                check(model)
            except ValueError as exc:
                raise PortInputError(str(exc)) from None
        self.models = (torch_model, jax_model)
        self.batch = validate_batch(batch)
        self.losses = (torch_loss, jax_loss)
        self.optimizers = (torch_optimizer, jax_optimizer)
        self.user_steps = (torch_step, jax_step)
        self.mapping, self.transfer = mapping, transfer
        self.k = steps if (torch_optimizer or torch_step) else 0
        self.progress = progress or (lambda msg: None)
        self.wrt = jax_optimizer[1] if _pair(jax_optimizer) else None
        self.dtypes: tuple[str, ...] = ("float64", "float32")  # check_port sets the passes it runs
        self.report = PortReport(settings={"steps": self.k, "transfer": self.transfer, "mapping": dict(mapping or {})})
        if steps and not self.k:
            self.report.notes.append("no optimizers or steps given: the K optimizer steps were skipped")

    def _impl(self, fn, *args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except ValueError as exc:
            raise PortInputError(str(exc)) from exc

    def _native(self, jm, pl: Plan, canonical: dict, grad: bool = False) -> tuple[dict, dict, dict]:
        return self._impl(self.J.to_native, jm, pl.to_jax(canonical), grad=grad)

    def _pass(self, dtype: str) -> Pass:
        T, J = self.T, self.J
        tm, jm = (self._impl(T.copy_model, self.models[0], dtype), self._impl(J.copy_model, self.models[1], dtype))
        p = Pass(dtype)
        tstruct, jstruct = self._impl(T.structure, tm), J.structure(jm)
        if dtype == "float64":  # before the big allocations: refused up front, never killed mid-check
            n = sum(math.prod(f["shape"]) for u in tstruct["units"] for f in u["leaves"].values() if "tied_to" not in f)
            budget.require(n, self.k, self.dtypes)
        pl = plan(tstruct, jstruct, self.mapping)
        self.plan, self.structures = pl, (tstruct, jstruct)
        weights = T.read(tm)
        if not any(weights.values()):
            raise PortInputError("torch_model: expected parameters or buffers to compare, got none")
        for unit, leaves in weights.items():  # the reference must be a number: NaN would equal NaN
            for leaf, value in leaves.items():
                if not np.all(np.isfinite(value)):
                    name = next(u["leaves"][leaf]["source"] for u in tstruct["units"] if u["path"] == unit)
                    raise PortInputError(f"torch_model: expected finite weights, got NaN / inf in {name}")
        p.expected, p.sources, p.dropped = self._native(jm, pl, weights)
        left = sorted(set(jstruct["variables"]) - set(p.expected))
        if left:
            shapes = ", ".join(f"{k} {jstruct['variables'][k]['shape']}" for k in left)
            raise PortInputError(f"the models' parameter sets differ: NNX leaves no torch parameter reaches: {shapes}")
        if self.transfer:
            self._impl(J.load, jm, pl.to_jax(T.read(tm)), strict=False)
        p.actual = J.native(jm)
        # the start: every run below works on a copy of it, so the pass's own models serve (two copies fewer)
        t0, j0 = tm, jm
        batch = _cast(self.batch, dtype)
        p.torch, p.torch_steps = self._torch_side(t0, j0, pl, batch, dtype)
        loss = np.asarray(p.torch["loss"])
        if not np.all(np.isfinite(loss)):
            raise PortInputError(f"torch_loss: expected a finite loss on the batch ({dtype}), got {loss}")
        p.jax, p.jax_steps = self._jax_side(j0, batch, dtype)
        self._torch_grads(p, jm, pl)

        def replay(knob: str, side: str = "torch") -> Pass:
            q = Pass(dtype, p.expected, p.actual, p.sources, dropped=p.dropped)
            if side == "torch":
                q.jax, q.jax_steps = p.jax, p.jax_steps
                q.torch, q.torch_steps = self._torch_side(t0, j0, pl, batch, dtype, knob)
                self._torch_grads(q, jm, pl)
            else:
                q.torch, q.torch_steps, q.torch_none = p.torch, p.torch_steps, p.torch_none
                q.jax, q.jax_steps = self._jax_side(j0, batch, dtype, knob)
            return q

        p.replay = replay
        return p

    def _torch_grads(self, p: Pass, jm, pl: Plan) -> None:
        grads = p.torch["grads"]
        none = {f"{u}/{leaf}" for u, g in grads.items() for leaf, v in g.items() if v is None}
        filled = {
            u: {leaf: (np.zeros(self._shape(u, leaf), p.dtype) if v is None else v) for leaf, v in g.items()}
            for u, g in grads.items()
        }
        native, sources, _ = self._native(jm, pl, filled, grad=True)
        inverse = {f"{ju}/{jl}".lstrip("/"): f"{tu}/{tl}".lstrip("/") for (tu, tl), (ju, jl) in pl.pairs.items()}
        p.torch["grads_native"] = native
        p.torch["grad_sources"] = {k: [inverse.get(s, s) for s in v] for k, v in sources.items()}
        p.torch_none = {k for k, v in p.torch["grad_sources"].items() if v and all(s in none for s in v)}

    def _shape(self, unit: str, leaf: str) -> tuple:
        return next(tuple(u["leaves"][leaf]["shape"]) for u in self.structures[0]["units"] if u["path"] == unit)

    def _torch_side(self, t0, j0, pl: Plan, batch, dtype, knob=None) -> tuple[dict, list[dict]]:
        """torch's forward, gradients and K steps from the start t0 (one run when an optimizer is given)."""
        T, runs = self.T, []
        if self.k:
            runs = self._impl(self.TR.train, T.copy_model(t0, dtype), batch, self.losses[0], dtype, self.optimizers[0],
                              self.user_steps[0], self.k, knob=knob)  # fmt: skip
        run = runs[0]["run"] if runs and "run" in runs[0] else None
        if run is None:
            run = self._impl(self.TR.run_loss, T.copy_model(t0, dtype), batch, self.losses[0], dtype, knob=knob)
        steps = []
        while runs:  # each step's torch layout freed as soon as it is mapped: one step's copy alive, not K
            s = runs.pop(0)
            values, _, dropped = self._native(j0, pl, s.pop("values"))
            steps.append({"loss": s["loss"], "values": values, "dropped": dropped})
        return run, steps

    def _jax_side(self, j0, batch, dtype, knob=None) -> tuple[dict, list[dict]]:
        """JAX's forward, gradients and K steps from the start j0 (one compile when an optimizer is given)."""
        J, steps = self.J, []
        if self.k:
            steps = self._impl(self.JR.train, J.copy_model(j0, dtype), batch, self.losses[1], dtype, self.optimizers[1],
                               self.user_steps[1], self.k, knob=knob)  # fmt: skip
        run = steps[0].pop("run") if steps and "run" in steps[0] else None
        if run is None:
            wrt = {"wrt": self.wrt} if self.wrt else {}
            run = self._impl(self.JR.run_loss, J.copy_model(j0, dtype), batch, self.losses[1], dtype, knob=knob, **wrt)
        return run, steps


def check_port(
    torch_model,
    jax_model,
    batch,
    *,
    torch_loss: Callable,
    jax_loss: Callable,
    torch_optimizer: Callable | None = None,
    jax_optimizer=None,
    torch_step: Callable | None = None,
    jax_step: Callable | None = None,
    mapping: Mapping[str, str] | None = None,
    transfer: bool = True,
    steps: int = 5,
    progress: Callable[[str], None] | None = None,
    dtypes: tuple[str, ...] = ("float64", "float32"),
) -> PortReport:
    """Check a JAX (Flax NNX) port of a torch model: weights, outputs, loss, gradients, K steps, in float64 then float32.

    Args:
      torch_model, jax_model: an nn.Module and an nnx.Module (never modified: the checker copies them).
      batch: dict of numpy arrays, handed to both losses as torch tensors / jax arrays (floats cast).
      torch_loss, jax_loss: (model, batch) -> scalar.
      torch_optimizer: params -> torch.optim.Optimizer; jax_optimizer: an optax transformation, or
        (transformation, NNX filter of the trainable leaves) for frozen parameters.
      torch_step, jax_step: instead of the optimizers, (model, batch) -> loss, one training step each.
      mapping: torch path prefix -> NNX path prefix, where the names differ; `*` matches one whole
        component, the target's `*`s take its values ({"h.*.attn": "blocks.*.attention"}).
      transfer: copy the torch weights into (a copy of) the NNX model; False checks the weights it has.
      steps: K optimizer steps compared (0: none).
      progress: called with a line per stage.
      dtypes: the passes, float64 first (the bug test); ("float64",) alone skips the float32 noise check.
    Returns:
      PortReport: .ok, .table(), .to_json(), .hints, .flow.
    Raises:
      PortInputError (a ValueError): bad input, named (unmatched parameters, a loss that is not a scalar,
        NaN in the batch, a batch a model rejects, live dropout, a check that would not fit in the memory
        available: refused before it starts, with its estimate, shared/apps/check/budget.py).
    """
    start = time.perf_counter()
    c = _Checker(torch_model, jax_model, batch, torch_loss=torch_loss, jax_loss=jax_loss, torch_optimizer=torch_optimizer,
                 jax_optimizer=jax_optimizer, torch_step=torch_step, jax_step=jax_step, mapping=mapping,
                 transfer=transfer, steps=steps, progress=progress)  # fmt: skip
    if (
        not dtypes
        or dtypes[0] != "float64"
        or not set(dtypes) <= {"float64", "float32"}
        or len(set(dtypes)) != len(dtypes)
    ):
        raise PortInputError(f"dtypes: expected ('float64',) or ('float64', 'float32'), got {dtypes!r}")
    report, passes = c.report, {}
    c.dtypes = tuple(dtypes)
    report.settings["dtypes"] = list(dtypes)
    for dtype in dtypes:
        c.progress(f"{dtype}: weights, outputs, loss, gradients{f', {c.k} steps' if c.k else ''} ...")
        t = time.perf_counter()
        p = c._pass(dtype)
        report.rows += rows_of(p, c.plan, c.transfer)
        report.seconds[dtype] = time.perf_counter() - t
        passes[dtype] = p
    report.notes += c.plan.notes
    p64 = passes["float64"]
    for key, (_, shape) in p64.orders.items():
        flat = ", ".join(f"{n}" for n in shape)
        report.notes.append(
            f"{key}: its rows are torch's in channels-last flatten order ([{flat}] flattened as "
            f"[{', '.join(str(n) for n in (*shape[1:], shape[0]))}], an NHWC port's loader): weights, gradients "
            "and steps compared in that order"
        )
    report.dropped = sorted({f"{c.plan.torch_name([k])}: {why}" for k, why in p64.dropped.items()})
    report.flow = flow.diff(p64, c.plan)
    c.progress("diagnosis ...")
    t = time.perf_counter()
    report.hints = diagnose.diagnose(report, passes, c.plan, c.structures, transfer=c.transfer, steps=c.k)
    report.seconds["diagnosis"] = time.perf_counter() - t
    report.seconds["total"] = time.perf_counter() - start
    return report
