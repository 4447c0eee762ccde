"""Port checker, torch half, running: the user's nn.Module on a batch (every submodule's output recorded,
the loss, every gradient) and K optimizer steps; the mirror of jax_impl/backend/port_run.py.

What it does: the runs `detach-parity check` compares (shared/apps/check). Outputs come from forward
hooks, gradients are `.grad` after one backward (in canonical layout, None kept), K steps use the
user's optimizer factory or training step; the first step records the forward, so one run gives
both. `knobs` are counterfactuals (the GELU approximation, norm epsilons, BatchNorm conventions,
mask polarity, the LSTM carry order, Adam's decay, first order): if torch with a knob matches JAX,
the knob names the bug.
Gradient flow: a parameter with requires_grad False keeps .grad None (absent, frozen: no optimizer
moment, no weight decay); one the loss does not reach keeps None too (P11).
Port note: a knob changes the checker's own copy of the model for one run and restores every
attribute and function it patched (F.gelu, nn.MultiheadAttention.forward, torch.autograd.grad).
Shapes: as the user's model; B batch rows.
Reference: PyTorch docs, nn.Module.register_forward_hook, torch.optim.Adam(decoupled_weight_decay).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping

import numpy as np
import torch
from torch import nn

from .._common import numpy
from .knobs import knob as apply_knob
from .knobs import knobs
from .layout import named_leaves
from .port import _bare, _key, _units, read
from .precision import batch as _batch
from .precision import narrow_buffers, settings, widening
from .record import _tensors, recording

__all__ = ["knobs", "repeat_loss", "run_loss", "cotangents", "steps", "train"]


def _scalar(loss, name: str) -> torch.Tensor:
    if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
        shape = tuple(loss.shape) if isinstance(loss, torch.Tensor) else np.shape(loss)
        raise ValueError(f"{name}: expected a scalar torch.Tensor, got {type(loss).__name__} of shape {shape}")
    if not loss.is_floating_point():
        raise ValueError(f"{name}: expected a floating scalar, got dtype {loss.dtype}")
    return loss.reshape(())


class _UpdateError(Exception):
    """The checker's own optimizer step raised in the update, not in the user's loss: reported as the optimizer's."""


def _call(fn: Callable, model, batch, name: str):
    try:
        return fn(model, batch)
    except _UpdateError as exc:
        cause = exc.__cause__
        raise ValueError(f"torch_optimizer: the update raised {type(cause).__name__}: {cause}") from cause
    except Exception as exc:
        shapes = {k: (tuple(v.shape), str(v.dtype).removeprefix("torch.")) for k, v in batch.items()}
        raise ValueError(f"{name}(model, batch) raised {type(exc).__name__}: {exc} (batch: {shapes})") from exc


def _grads(model: nn.Module) -> tuple[dict, dict]:
    grads, trainable = {}, {}
    for path, unit in _units(model, buffers=False).items():
        for leaf, facts in unit["leaves"].items():
            trainable.setdefault(path, {})[leaf] = facts["trainable"]
    for _, path, sub, leaf in named_leaves(model):
        g = sub.get_parameter(leaf.attr).grad
        piece = None if g is None else (g[leaf.rows[0] : leaf.rows[1]] if leaf.rows else g)
        grads.setdefault(_key(path), {})[leaf.name] = None if piece is None else leaf.to_canon(numpy(piece)).copy()
    for path, unit in _units(model, buffers=False).items():
        if unit["bare"]:
            for leaf in unit["leaves"]:
                g = _bare(model, unit, leaf).grad
                grads.setdefault(path, {})[leaf] = None if g is None else numpy(g).copy()
    return grads, trainable


def repeat_loss(model, batch: Mapping[str, np.ndarray], loss_fn: Callable, dtype: str) -> tuple[float, float] | None:
    """The loss twice on the same weights and batch, as two floats: equal unless the forward draws random
    numbers (dropout left on: F.dropout(x, p) trains by default; nnx.Dropout with its rngs). Call it on a copy:
    a train-mode BatchNorm moves its running statistics. The global random state is left as it was (torch
    has one: never None, which the JAX side returns for a model with no random state of its own).

    Raises:
      ValueError: the loss raised or is not a scalar.
    """
    with settings(dtype), torch.random.fork_rng():  # with autograd: a loss may differentiate inside (MAML)
        b = _batch(batch, dtype)
        first, second = (
            float(_scalar(_call(loss_fn, model, b, "torch_loss"), "torch_loss").detach()) for _ in range(2)
        )
    return first, second


def run_loss(model, batch: Mapping[str, np.ndarray], loss_fn: Callable, dtype: str, wrt=None, knob=None) -> dict:
    """One forward with every submodule's output recorded (forward hooks), then loss.backward().

    Args:
      batch: numpy arrays, already in `dtype`; loss_fn(model, batch) -> scalar tensor.
      wrt: unused (requires_grad says what trains); the JAX twin takes the optimizer's filter.
    Returns:
      {"loss": 0-d array, "outputs": {module path: [[arrays] per call]}, "layouts": {module path:
       [[(name, axes) or None per array] per call]} (outputs.py), "grads": {unit: {leaf:
       canonical array, or None where .grad is None}}, "trainable": {unit: {leaf: requires_grad}},
       "islands": {module path or "(loss)": (dtype, modules finished before it)} where a float64
       forward computed in float32 or narrower, "finished": module paths in the order their first
       call finished, "feeds": {module path: [modules whose outputs it took as inputs]}}.
    Raises:
      ValueError: the loss raised or is not a scalar.
    """
    # the caller's random stream is left as it was (the memory estimate's run on 2 rows comes before the
    # check's refusal of a random forward)
    with settings(dtype), apply_knob(model, knob), torch.random.fork_rng(devices=[]):
        return _run(model, _batch(batch, dtype), loss_fn, dtype)


def cotangents(model, batch: Mapping[str, np.ndarray], loss_fn: Callable, dtype: str) -> dict:
    """The gradient of the loss w.r.t. every submodule's output, per call: the gradient arriving at it in the
    backward (its cotangent), for localising a backward that parts where the forward matches.

    A hook on each output tensor keeps its .grad in the backward (the total over every use of it). Call it on
    a copy: a train-mode BatchNorm moves its statistics.
    Returns:
      {module path: [[array per output tensor] per call]}, as run_loss's "outputs"; zeros where an output
      is outside the graph (computed under no_grad, or from frozen leaves only).
    Raises:
      ValueError: the loss raised or is not a scalar.
    """
    grads: dict[str, list] = {}

    def post(name: str):
        def hook(module, args, out) -> None:
            tensors = _tensors(out)
            slot = [np.zeros(tuple(t.shape)) for t in tensors]
            grads.setdefault(name, []).append(slot)
            for i, t in enumerate(tensors):
                if t.requires_grad:
                    t.register_hook(lambda g, slot=slot, i=i: slot.__setitem__(i, numpy(g).copy()))

        return hook

    with settings(dtype):
        handles = [sub.register_forward_hook(post(_key(p))) for p, sub in model.named_modules()]
        try:
            with _widened(model):  # the forward the pass compared: its float32 islands in float64
                loss = _scalar(_call(loss_fn, model, _batch(batch, dtype), "torch_loss"), "torch_loss")
        finally:
            for h in handles:
                h.remove()
        if loss.requires_grad:
            loss.backward()
    return grads


def _wide(model: nn.Module) -> bool:
    return any(p.dtype == torch.float64 for p in model.parameters())


def _widened(model: nn.Module):
    """A float64 model's forward and backward with the float32 islands widened (precision.widening), unrecorded."""
    return widening([], [], {}) if _wide(model) else contextlib.nullcontext()


def _run(model: nn.Module, b: dict, loss_fn: Callable, dtype: str, after_backward: Callable | None = None) -> dict:
    outputs: dict[str, list] = {}
    layouts: dict[str, list] = {}
    islands: dict | None = {} if _wide(model) else None  # only a float64 forward can hide a narrower island
    precision: dict | None = {} if dtype.endswith("bfloat16") else None  # where a bfloat16 run computes float32
    feeds: dict[str, list] = {}
    with recording(model, outputs, islands, layouts, feeds, precision) as finished:
        loss = _scalar(_call(loss_fn, model, b, "torch_loss"), "torch_loss")
    for name, (path, why) in narrow_buffers(model).items():  # values built in float32 before the pass
        entry = {"dtype": "float32", "at": 0, "ops": [name], "widened": False, "why": why}
        key = path.replace(".", "/")
        islands[key] = {**islands[key], **entry, "ops": islands[key]["ops"] + [name]} if key in islands else entry
    if loss.requires_grad:  # a loss computed from stopped values only has no graph: every .grad stays None
        loss.backward()
    grads, trainable = _grads(model)
    if after_backward:
        after_backward()
    return {
        "loss": numpy(loss).copy(),
        "outputs": outputs,
        "layouts": layouts,
        "grads": grads,
        "trainable": trainable,
        "islands": dict(islands or {}),
        "finished": list(dict.fromkeys(finished)),
        "feeds": feeds,
        "precision": dict(precision or {}),
    }


def steps(
    model, batch: Mapping[str, np.ndarray], loss_fn: Callable, dtype: str, optimizer=None, step=None, k=5, knob=None
) -> Iterator[dict]:
    """K training steps on one batch, yielded one at a time: the caller compares each step and lets it go,
    so one step's snapshot is alive, not K (the checker's memory at GPT-2 scale).

    Args:
      optimizer: a factory params -> torch.optim.Optimizer, called once with model.parameters().
      step: instead, the user's step(model, batch) -> loss (several optimizers, a target update).
    Yields:
      {"loss": 0-d array, "values": {unit: {leaf: canonical array}}} per step, the loss before the
      update and every unit after it; with an optimizer, the first step also holds "run": what
      run_loss returns for the starting model (the same forward and backward the first update uses).
    Raises:
      ValueError: the factory's result is not a new torch.optim.Optimizer over the parameters it is
        given, or the loss / step raised or is not a scalar (at the first step).
    """
    name = "torch_step" if step is not None else "torch_loss"
    runs: list[dict] = []
    with settings(dtype), apply_knob(model, knob):
        b = _batch(batch, dtype)
        if step is None:
            step = _optimizer_step(model, loss_fn, optimizer, knob, runs, dtype)
    for _ in range(k):
        # the settings and the knob hold for the step only: between steps the caller runs JAX
        # the user's own step, widened whole; the checker's optimizer step widens its forwards itself
        user = _widened(model) if name == "torch_step" else contextlib.nullcontext()
        with settings(dtype), apply_knob(model, knob), user:
            loss = _scalar(_call(step, model, b, name), name)
            out = {"loss": numpy(loss).copy(), "values": read(model)}
        if runs:
            out["run"] = runs.pop()
        yield out
        del out  # not held while the next step runs: the caller's copy is all there is


def _update(opt: torch.optim.Optimizer) -> None:
    """opt.step(), its error marked as the update's. torch only: torch's update is a call of its own, while
    JAX's runs inside the jitted step (jax_impl's step tells the two apart by rerunning the loss alone)."""
    try:
        opt.step()
    except Exception as exc:
        raise _UpdateError from exc


def _optimizer_step(model: nn.Module, loss_fn: Callable, optimizer: Callable, knob, runs: list, dtype: str) -> Callable:
    # GRAD-FLOW: frozen leaves stay out of the optimizer: no moment, no weight decay
    try:
        opt = optimizer(model.parameters())  # torch.optim skips a parameter whose .grad is None
    except Exception as exc:
        raise ValueError(f"torch_optimizer(params) raised {type(exc).__name__}: {exc}") from exc
    if not isinstance(opt, torch.optim.Optimizer):
        raise ValueError(f"torch_optimizer: expected a factory of torch.optim.Optimizer, got {type(opt).__name__}")
    given = {id(q) for q in model.parameters()}
    if foreign := sum(id(q) not in given for g in opt.param_groups for q in g["params"]):
        # the user's own optimizer: stepping (or zeroing) it would change their model, not this copy
        raise ValueError(
            f"torch_optimizer: expected a new optimizer over the parameters it is given, got a "
            f"{type(opt).__name__} holding {foreign} other tensor(s) (your own optimizer?): build it from "
            "them, e.g. lambda params: torch.optim.Adam(params, lr=1e-3)"
        )
    if knob and "adam_swapped" in knob.split("+"):
        if any("decoupled_weight_decay" not in g for g in opt.param_groups):  # the knob swaps it in Adam.step
            raise ValueError(f"knob adam_swapped: expected torch.optim.Adam / AdamW, got {type(opt).__name__}")
    calls = []

    def step(m, batch):
        opt.zero_grad(set_to_none=True)
        calls.append(1)
        if len(calls) == 1:  # the first step, recorded: outputs and .grad before the update
            runs.append(_run(m, batch, loss_fn, dtype, after_backward=lambda: _update(opt)))
            return torch.from_numpy(runs[-1]["loss"])
        with _widened(m):  # as the recorded first step: the float32 islands computed in float64
            loss = _scalar(loss_fn(m, batch), "torch_loss")
        # GRAD-FLOW: only the trainable leaves are differentiated: a frozen one gets no gradient
        if loss.requires_grad:  # every parameter frozen: no graph, nothing to differentiate (as in _run)
            loss.backward()
        _update(opt)
        return loss

    return step


def train(
    model, batch: Mapping[str, np.ndarray], loss_fn: Callable, dtype: str, optimizer=None, step=None, k=5, knob=None
) -> list[dict]:
    """`steps` gathered in a list: [{"loss", "values"}] * k, the first with "run" (an optimizer given)."""
    return list(steps(model, batch, loss_fn, dtype, optimizer, step, k, knob))
