"""check_port: weights across, both models run on one batch in float64 then float32, everything compared.

For each dtype the checker works on its own copies of both models (cast by the impls; the
user's models, optimizers and settings are left as they were): it pairs the modules
(match.py), copies the torch weights into the NNX copy by the rule tables (or, with
transfer=False, checks the user's own loaded weights against them), records every
submodule's output, the loss and every parameter's gradient, then runs K optimizer steps, each
compared as both sides yield it (passes.py: one step of each side alive, one dtype at a time).
Everything is compared with shared/core/parity.py's comparator, keyed by the NNX leaf paths.
The float64 pass tells a bug from float32 noise; the diagnosis (diagnose.py) names the bug.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping

import numpy as np

from ..backends import backend
from . import diagnose, flow
from .match import PortInputError, check_mapping
from .passes import Passes
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


def _fits_int32(a: np.ndarray) -> bool:
    """Whether JAX without x64 keeps the values: int32 for signed integers, uint32 for unsigned ones."""
    info = np.iinfo(np.uint32 if a.dtype.kind == "u" else np.int32)
    return bool(a.min() >= info.min and a.max() <= info.max)


def _pair(optimizer) -> bool:
    """(transformation, filter), not an optax transformation (itself a NamedTuple with init / update)."""
    return isinstance(optimizer, tuple) and len(optimizer) == 2 and not hasattr(optimizer, "init")


class _Checker(Passes):
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
        self.noise: dict = {}  # the float64 pass's gradient entries float32 cannot resolve (compare.noise_entries)
        self.report = PortReport(settings={"steps": self.k, "transfer": self.transfer, "mapping": dict(mapping or {})})
        if steps and not self.k:
            self.report.notes.append("no optimizers or steps given: the K optimizer steps were skipped")


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
    wide = [k for k, v in c.batch.items() if v.dtype.kind in "iu" and not _fits_int32(v)]
    if "float32" in dtypes and wide:  # they would wrap around, and the difference be blamed on float32
        v = c.batch[wide[0]]
        raise PortInputError(
            f"batch[{wide[0]!r}]: the float32 pass runs JAX without x64, where integers are 32-bit: expected values "
            f"in {'[0, 2**32 - 1]' if v.dtype.kind == 'u' else '[-2**31, 2**31 - 1]'}, got {v.min()} .. {v.max()} "
            "(check the float64 pass alone: dtypes=('float64',))"
        )
    c.progress("a forward twice: is it deterministic? ...")
    c._repeatable(dtypes[-1])  # the cheaper dtype: a random forward shows in either
    report, passes = c.report, {}
    c.dtypes = tuple(dtypes)
    report.settings["dtypes"] = list(dtypes)
    for dtype in dtypes:
        c.progress(f"{dtype}: weights, outputs, loss, gradients{f', {c.k} steps' if c.k else ''} ...")
        t = time.perf_counter()
        p = c._pass(dtype, report.rows)
        report.seconds[dtype] = time.perf_counter() - t
        passes[dtype] = p  # float32's arrays are all let go: its diagnosis reads rows only
    report.notes += c.plan.notes
    if passes["float64"].jax.get("exact_attention"):
        report.notes.append(
            "float64 pass: the port's jax.nn.dot_product_attention ran with its softmax in float64 (JAX takes it "
            "in float32 whatever the inputs: rounding, not the port's maths); the float32 pass runs it as it is"
        )
    p64 = passes["float64"]
    for key, (_, shape) in p64.orders.items():
        flat = ", ".join(f"{n}" for n in shape)
        report.notes.append(
            f"{key}: its rows are torch's in channels-last flatten order ([{flat}] flattened as "
            f"[{', '.join(str(n) for n in (*shape[1:], shape[0]))}], an NHWC port's loader): weights, gradients "
            "and steps compared in that order"
        )
    report.order = [name.replace("/", ".") or "(model)" for name in p64.torch.get("finished", [])]
    report.feeds = {
        n.replace("/", ".") or "(model)": [m.replace("/", ".") or "(model)" for m in ms]
        for n, ms in p64.torch.get("feeds", {}).items()
    }
    forward = report.failed("float64", "outputs") + report.failed("float64", "loss")
    if report.failed("float64", "grads") and not forward:  # the forward cannot say where: the backward can
        c.progress("float64: the gradient arriving at each module ...")
        report.rows += c._backward(p64)
    report.dropped = sorted({f"{c.plan.torch_name([k])}: {why}" for k, why in p64.dropped.items()})
    report.flow = flow.diff(p64, c.plan)
    c.progress("diagnosis ...")
    t = time.perf_counter()
    report.hints = diagnose.diagnose(report, passes, c.plan, c.structures, transfer=c.transfer, steps=c.k)
    report.seconds["diagnosis"] = time.perf_counter() - t
    report.seconds["total"] = time.perf_counter() - start
    return report
