"""bench: what one jitted training step costs in JAX: call overhead, freezing forms, the forward, BPTT memory.

What it teaches: what stop_gradient and its alternatives buy at run time. A frozen backbone
saves its backward, whichever way it is frozen; truncation saves memory only when each
window has its own gradient (C11, C16). For speed a JAX user cuts the Python overhead of
nnx.jit: `tuned_steps` gives a scenario's nnx.jit steps through nnx.cached_partial and as one
pure jax.jit over nnx.split state, set against torch.compile in the torch twin.
Gradient flow: frozen_backbone `full_finetune` all layers; `detach_features` (stop_gradient)
and `freeze_params` (nnx.DiffState over the head) the head only. tbptt `windows` takes a
value_and_grad per window inside a scan; `one_backward` stops the carry every k steps under
one jax.grad of the summed loss.
Port note: torch_impl/backend/bench.py has torch's grad modes (no_grad, inference_mode); a jitted JAX
forward records nothing to begin with, so `forward` is their one counterpart. Memory here
is the compiled function's memory analysis, not a measured allocator peak. nnx.jit walks
its modules' object graph in Python on every call (flax 0.12); jax.jit of the split state
does not.
Shapes: frozen_backbone B samples, D inputs, H features, C classes; tbptt T, B, I, H, O.
Reference: JAX docs, jax.stages.Compiled.memory_analysis and jax.lax.stop_gradient;
Flax NNX docs, nnx.jit, nnx.DiffState and "Performance considerations" (nnx.cached_partial); Yosinski et al. 2014, arXiv:1411.1792.
"""

from __future__ import annotations

import os
from collections.abc import Callable

import jax
import optax
from flax import nnx

from ...shared.core.checks import check_truncation
from ...shared.core.fixtures import require
from ...shared.core.runner import lesson
from .. import frozen_backbone, tbptt
from .._common import StepCall, field

__all__ = ["configure", "device", "dispatch_steps", "tuned_steps", "freezing_steps", "tbptt_step"]

FORMS = ("windows", "one_backward")


def configure(threads: int) -> dict[str, object]:
    """Set this process up for measuring (the bench's fresh worker only) and say where JAX runs.

    XLA sizes its CPU thread pool from the CPUs this process may use (the worker pins them
    before JAX starts), so `threads` changes nothing here. Returns device().
    """
    return device()


def device() -> dict[str, object]:
    """Where JAX runs: {"device": "<platform>:0 (<kind>)", "threads": CPUs XLA may use, "cuda": bool}."""
    d = jax.devices()[0]
    threads = len(os.sched_getaffinity(0))  # XLA's CPU thread pool is sized from the CPUs it may run on
    return {
        "device": f"{d.platform}:{d.id} ({d.device_kind})",
        "threads": threads,
        "cuda": d.platform == "gpu",
        "backend": jax.default_backend(),
    }


def dispatch_steps(fx) -> dict[str, Callable[[], jax.Array]]:
    """The fixed cost of one call, each doing one elementwise op on the fixture's x [B, D] (float32).

    `jit_call`: a jax.jit function of the array; `nnx_jit_call`: an nnx.jit function that also
    takes frozen_backbone's model and optimizer, as the scenarios' nnx.jit steps do (nnx.jit
    traverses their object graph in Python on every call); `nnx_cached_partial_call`: the same
    function through nnx.cached_partial, the mitigation of the Flax performance guide.
    """
    x = field(require(fx, "frozen_backbone", "float32", "dispatch_steps"), "x")
    model = frozen_backbone.build_model(fx)
    optimizer = frozen_backbone.make_optimizer(model, fx, "full_finetune")
    cached = nnx.cached_partial(_add_one_with_state, model, optimizer)
    return {
        "jit_call": _synced(lambda: _add_one(x)),
        "nnx_jit_call": _synced(lambda: _add_one_with_state(model, optimizer, x)),
        "nnx_cached_partial_call": _synced(lambda: cached(x)),
    }


@jax.jit
def _add_one(x: jax.Array) -> jax.Array:
    return x + 1.0


@nnx.jit
def _add_one_with_state(model: frozen_backbone.Classifier, optimizer: nnx.Optimizer, x: jax.Array) -> jax.Array:
    return x + 1.0


def tuned_steps(
    fx, variant: str, codegen: bool = True
) -> dict[str, tuple[Callable[[], jax.Array], Callable[[], dict]] | str]:
    """The scenario's step without nnx.jit's per-call overhead: {"jax_cached": ..., "jax_split": ...}.

    Built from the lesson's public `step_calls(fx, variant)`, the calls its make_step runs, each
    with the NNX modules and optimizers it updates (`StepCall.nodes`). `jax_cached`: every call
    through nnx.cached_partial over its nodes (the graph traversal is cached); `jax_split`: one
    jax.jit of a pure function of the nnx.split state of all the nodes that merges it, makes the
    same calls and returns the new state (the Flax performance guide's functional form). Both
    start from the scenario's fixture as its make_step does and return the same loss []; facts():
    {"state_leaves": arrays carried}. codegen: the torch twin's switch (False: `bench --quick` builds no
    torch.compile kernels); XLA compiles on the first call either way, so here it changes nothing.
    Each value is (step, facts), or the reason there is none:
    the lesson's own (`NO_STEP_CALLS`), or that no call takes an NNX module (a jax.jit of arrays
    has no graph to cache).
    Raises ValueError unless fx is a float32 fixture of a scenario with a step and variant is one of its.
    """
    name = fx.scenario
    require(fx, name, "float32", "tuned_steps")
    fx.spec.check_variant(variant)
    if not fx.spec.has_step:
        raise ValueError(f"tuned_steps: fx expected a fixture of a scenario with a step, got {name!r}")
    module = lesson("jax", name)
    if hasattr(module, "NO_STEP_CALLS"):
        why = f"{name} has no step_calls: {module.NO_STEP_CALLS}"
        return {"jax_cached": why, "jax_split": why}
    if not any(call.nodes for call in module.step_calls(fx, variant)):
        why = f"{name}'s step is already a jax.jit of arrays (no NNX module in its step_calls)"
        return {"jax_cached": f"{why}: nothing to cache", "jax_split": f"{why}: nothing to split"}
    tuned = {}
    for label, build in (("jax_cached", _cached), ("jax_split", _split)):
        step, leaves = build(module.step_calls(fx, variant))  # each form its own models, fresh from the fixture
        tuned[label] = (step, lambda n=leaves: {"state_leaves": n})
    return tuned


def _loss(out, path: tuple[int, ...]) -> jax.Array:
    for i in path:
        out = out[i]
    return out


def _cached(calls: list[StepCall]) -> tuple[Callable[[], jax.Array], int]:
    cached = [(nnx.cached_partial(call.fn, *call.nodes), call) for call in calls]
    leaves = len(jax.tree.leaves(nnx.state(tuple(n for call in calls for n in call.nodes))))

    def step() -> jax.Array:
        outs = jax.block_until_ready([fn(*call.args, **call.kwargs) for fn, call in cached])
        losses = [_loss(out, call.loss) for out, call in zip(outs, calls, strict=True)]
        return sum(losses[1:], losses[0])

    return step, leaves


def _split(calls: list[StepCall]) -> tuple[Callable[[], jax.Array], int]:
    nodes = list({id(n): n for call in calls for n in call.nodes}.values())  # each model or optimizer once
    where = [[next(i for i, n in enumerate(nodes) if n is m) for m in call.nodes] for call in calls]
    graphdef, state = nnx.split(tuple(nodes))

    @jax.jit
    def pure(state, args):
        objects = nnx.merge(graphdef, state)
        losses = [
            _loss(call.fn(*(objects[i] for i in idx), *a, **call.kwargs), call.loss)
            for call, idx, a in zip(calls, where, args, strict=True)
        ]
        return sum(losses[1:], losses[0]), nnx.state(objects)

    args = [call.args for call in calls]

    def step() -> jax.Array:
        nonlocal state
        loss, state = jax.block_until_ready(pure(state, args))
        return loss

    return step, len(jax.tree.leaves(state))


def freezing_steps(fx) -> dict[str, Callable[[], jax.Array]]:
    """One jitted step per way of training the head of frozen_backbone at bench size; each returns its loss [].

    Steps: the scenario's nnx.jit AdamW train_step for `full_finetune`, `detach_features`,
    `freeze_params`; the parts of the ideal frozen step, `backbone_forward` and `head_step`
    (head forward, gradient and AdamW on fixed features); and `forward` (the jitted loss).
    Every step blocks until its results are computed. fx: a float32 frozen_backbone fixture.
    Raises ValueError for any other fixture.
    """
    require(fx, "frozen_backbone", "float32", "freezing_steps")
    x, labels = field(fx, "x"), field(fx, "labels")
    steps: dict[str, Callable[[], jax.Array]] = {}
    for variant in ("full_finetune", "detach_features", "freeze_params"):
        model = frozen_backbone.build_model(fx)
        optimizer = frozen_backbone.make_optimizer(model, fx, variant)
        steps[variant] = _synced(
            lambda m=model, o=optimizer, v=variant: frozen_backbone.train_step(m, o, x, labels, v)[0]
        )

    model = frozen_backbone.build_model(fx)
    head_optimizer = nnx.Optimizer(model.head, optax.adamw(**_adamw_settings(fx)), wrt=nnx.Param)
    features = _backbone_forward(model.backbone, x)  # head_step's features: data, computed once

    steps["backbone_forward"] = _synced(lambda: _backbone_forward(model.backbone, x).sum())
    steps["head_step"] = _synced(lambda: _head_update(model.head, head_optimizer, features, labels))
    steps["forward"] = _synced(lambda: _forward(model, x, labels))
    return steps


def _adamw_settings(fx) -> dict[str, float]:
    """The scenario's AdamW hyper-parameters from the fixture, as optax.adamw keywords."""
    names = {"learning_rate": "lr", "b1": "b1", "b2": "b2", "eps": "eps", "weight_decay": "weight_decay"}
    return {key: fx.scalar(field) for key, field in names.items()}


@nnx.jit
def _backbone_forward(backbone: frozen_backbone.Backbone, x: jax.Array) -> jax.Array:
    return backbone(x)  # no gradient is taken: the backbone's part of a frozen step is a forward alone


@nnx.jit
def _head_update(head: nnx.Linear, optimizer: nnx.Optimizer, f: jax.Array, labels: jax.Array) -> jax.Array:
    def loss_fn(head):
        return frozen_backbone.cross_entropy(head(f), labels)

    loss, grads = nnx.value_and_grad(loss_fn)(head)  # the head alone, on features computed before
    optimizer.update(head, grads)
    return loss


@nnx.jit
def _forward(model: frozen_backbone.Classifier, x: jax.Array, labels: jax.Array) -> jax.Array:
    return frozen_backbone.cross_entropy(model(x, "full_finetune"), labels)


def _synced(step: Callable[[], jax.Array]) -> Callable[[], jax.Array]:
    def run() -> jax.Array:
        return jax.block_until_ready(step())  # dispatch is asynchronous: wait before the clock stops

    return run


def tbptt_step(fx, form: str, k: int) -> tuple[Callable[[], jax.Array], Callable[[], int]]:
    """(step, peak_bytes) of truncated BPTT on the GRU of a tbptt fixture, carry stopped every k steps.

    form "windows": tbptt.train_windows (value_and_grad per window in a scan); "one_backward":
    tbptt.unroll under one jax.value_and_grad of the summed loss. step() runs the jitted
    function (compiled once, on the first call of either) and returns the summed loss [].
    peak_bytes() is the compiled function's memory analysis, temp + output bytes (what it
    allocates beyond its arguments, as the torch twin counts), not a measured peak.
    Raises ValueError on an unknown form, a fixture that is not a float32 tbptt one, or a k that
    is not an int in [1, T] (dividing T for "windows").
    """
    if form not in FORMS:
        raise ValueError(f"tbptt_step: form expected one of {FORMS}, got {form!r}")
    t_steps = require(fx, "tbptt", "float32", "tbptt_step").dims["T"]
    k = check_truncation("tbptt_step", k, t_steps, divides=form == "windows")
    model, params = tbptt.build_model(fx, "gru")
    args = (params, field(fx, "x"), field(fx, "h0"), field(fx, "targets"))
    if form == "windows":
        fn = jax.jit(lambda p, x, h, y: tbptt.train_windows(model, p, x, h, y, k))
    else:  # the carry is stopped every k steps, but one gradient keeps every step's residuals

        def summed(p, x, h, y):
            return jax.vmap(tbptt.step_loss)(tbptt.unroll(model, p, x, h, k), y).sum()

        fn = jax.jit(jax.value_and_grad(summed))

    compiled = []  # one compile serves the step and its memory analysis

    def executable():
        if not compiled:
            compiled.append(fn.lower(*args).compile())
        return compiled[0]

    def peak_bytes() -> int:
        stats = executable().memory_analysis()
        return int(stats.temp_size_in_bytes + stats.output_size_in_bytes)

    return _synced(lambda: executable()(*args)[0]), peak_bytes
