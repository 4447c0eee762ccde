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
from .compare import island_facts
from .mapping import translate
from .match import PortInputError, check_mapping
from .named_line import name_line
from .passes import Passes
from .precision import FACTOR, PRECISIONS, PrecisionPass
from .report import PortReport
from .stages import Stages
from .unread import boundaries, unread

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


class _Checker(Passes, PrecisionPass):
    def __init__(self, torch_model, jax_model, batch, *, torch_loss, jax_loss, torch_optimizer, jax_optimizer,
                 torch_step, jax_step, mapping, transfer, steps, progress, precision) -> None:  # fmt: skip
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
        for side, policy in precision.items():
            if policy not in PRECISIONS:
                raise PortInputError(f"{side}_precision: expected one of {list(PRECISIONS)}, got {policy!r}")
        self.precision = dict(precision)  # each side's bfloat16 policy (the bfloat16 pass)
        self.truth: dict = {}  # the float64 pass's torch values, which the bfloat16 pass judges both sides by
        self.values64: dict = {}  # the float64 pass's differences kept (passes.py)
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
        viewed = []  # each side's model as the checker reads and runs it (torch: through torch.compile)
        for side, model in ((self.T, torch_model), (self.J, jax_model)):
            try:
                viewed.append(side.view(model))
                side.check_model(viewed[-1][0])
            except ValueError as exc:
                raise PortInputError(str(exc)) from None
        (torch_model, torch_notes), (jax_model, jax_notes) = viewed
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
        self.zeros: dict = {}  # its gradient entries zero in exact arithmetic (rounding on both sides)
        self.stages = Stages()  # where the time goes (check_port's profile=True counts JAX's compiles in it too)
        self.report = PortReport(settings={"steps": self.k, "transfer": self.transfer, "mapping": dict(mapping or {})})
        self.report.notes += torch_notes + jax_notes
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
    torch_precision: str = "bfloat16",
    jax_precision: str = "bfloat16",
    profile: bool = False,
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
      dtypes: the passes, float64 first (the bug test); ("float64",) alone skips the float32 noise check;
        "bfloat16" adds the bfloat16 pass (each side's error against the float64 truth, precision.py).
      torch_precision, jax_precision: each side's policy in the bfloat16 pass: "bfloat16" (parameters and
        compute) or "mixed" (float32 parameters, bfloat16 compute: torch.autocast on the reference; on the
        port, the dtype each module was built to compute in, NNX's `dtype` with `param_dtype` float32).
      profile: also count JAX's traces, lowerings and compiles per stage (report.profile, report.profile_lines();
        the stages' seconds are there either way).
    Returns:
      PortReport: .ok, .table(), .to_json(), .hints, .flow, .profile.
    Raises:
      PortInputError (a ValueError): bad input, named (unmatched parameters, a loss that is not a scalar,
        NaN in the batch, a batch a model rejects, live dropout, a check that would not fit in the memory
        available: refused before it starts, with its estimate, shared/apps/check/budget.py).
    """
    start = time.perf_counter()
    c = _Checker(torch_model, jax_model, batch, torch_loss=torch_loss, jax_loss=jax_loss, torch_optimizer=torch_optimizer,
                 jax_optimizer=jax_optimizer, torch_step=torch_step, jax_step=jax_step, mapping=mapping,
                 transfer=transfer, steps=steps, progress=progress,
                 precision={"torch": torch_precision, "jax": jax_precision})  # fmt: skip
    if (
        not isinstance(dtypes, tuple | list)
        or not dtypes
        or dtypes[0] != "float64"
        or not set(dtypes) <= {"float64", "float32", "bfloat16"}
        or len(set(dtypes)) != len(dtypes)
    ):
        raise PortInputError(
            "dtypes: expected 'float64' first, then any of 'float32', 'bfloat16' (the bfloat16 pass is judged "
            f"against the float64 pass's truth), got {dtypes!r}"
        )
    wide = [k for k, v in c.batch.items() if v.dtype.kind in "iu" and not _fits_int32(v)]
    narrow = next((d for d in dtypes if d != "float64"), None)
    if narrow and wide:  # they would wrap around, and the difference be blamed on float32
        v = c.batch[wide[0]]
        raise PortInputError(
            f"batch[{wide[0]!r}]: the {narrow} pass runs JAX without x64, where integers are 32-bit: expected values "
            f"in {'[0, 2**32 - 1]' if v.dtype.kind == 'u' else '[-2**31, 2**31 - 1]'}, got {v.min()} .. {v.max()} "
            "(check the float64 pass alone: dtypes=('float64',))"
        )
    c.dtypes = tuple(dtypes)
    if profile:
        jax_profile = backend("jax").profile
        jax_profile.listen()  # jax.monitoring's listeners, registered once per process
        c.stages = Stages(jax_profile.counters)
    with c.stages("memory estimate"):
        c.report.notes += c._budget()  # before anything big runs: refused up front, never killed mid-check
    c.progress("a forward twice: is it deterministic? ...")
    with c.stages("determinism"):
        c._repeatable("float32" if "float32" in dtypes else "float64")  # the cheaper: a random forward shows in any
    report, passes = c.report, {}
    report.settings["dtypes"] = list(dtypes)
    if "bfloat16" in dtypes:
        report.settings["precision"], report.factor = dict(c.precision), FACTOR
    for dtype in dtypes:
        c.progress(f"{dtype}: weights, outputs, loss, gradients{f', {c.k} steps' if c.k else ''} ...")
        t = time.perf_counter()
        p = c._precision_pass(report.rows) if dtype == "bfloat16" else c._pass(dtype, report.rows)
        report.seconds[dtype] = time.perf_counter() - t
        passes[dtype] = p  # float32's and bfloat16's arrays are all let go: their diagnosis reads rows only
    c.truth.clear()
    report.notes += c.plan.notes
    report.notes += island_facts(
        passes["float64"].torch.get("islands") or {}, passes["float64"].jax.get("islands") or {}
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
    # outputs differing only where the loss never reads (a fully masked attention row): facts, with their reason
    with c.stages("diagnosis"):
        notes, read_nowhere, back = unread(report, p64, lambda: c._backward(p64), c.plan, c.transfer)
        report.notes += notes + boundaries(report, p64)
    forward = report.failed("float64", "outputs") + report.failed("float64", "loss")
    if report.failed("float64", "grads") and not forward:  # the forward cannot say where: the backward can
        c.progress("float64: the gradient arriving at each module ...")
        report.rows += back if back is not None else c._backward(p64)
    report.dropped = sorted({f"{c.plan.torch_name([k])}: {why}" for k, why in p64.dropped.items()})
    report.flow = flow.diff(p64, c.plan)
    c.progress("diagnosis ...")
    t = time.perf_counter()
    with c.stages("diagnosis"):
        hints = diagnose.diagnose(report, passes, c.plan, c.structures, transfer=c.transfer, steps=c.k)
    report.hints = read_nowhere + hints
    report.seconds["diagnosis"] = time.perf_counter() - t
    c.progress("the line where the port parts ...")
    t = time.perf_counter()
    with c.stages("line"):
        try:
            report.line = name_line(c, report, p64, lambda path: translate(path, c.plan.mapping))
        except Exception as exc:  # the verdict and the hints stand; only the line is not named, and the report says why
            report.notes.append(f"the line where the port parts could not be named: {type(exc).__name__}: {exc}")
    report.seconds["line"] = time.perf_counter() - t
    report.seconds["total"] = time.perf_counter() - start
    report.profile = c.stages.profile(report.seconds["total"])
    report.profile["counted"] = profile  # JAX's pipeline counted per stage (else seconds only)
    return report
