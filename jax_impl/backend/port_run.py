"""Port checker, JAX half, running: the user's NNX model on a batch (every submodule's output recorded,
the loss, every gradient) and K optimizer steps; the mirror of torch_impl/backend/port_run.py.

What it does: the runs `detach-parity check` compares (shared/apps/check). One jitted function per
dtype does the recorded forward, the gradient w.r.t. every nnx.Param and the optimizer update, so a
check compiles once for the forward, the gradients and the K steps. `knobs` are counterfactuals on
this side (the default matmul precision off a CPU); a float64 run takes jax.nn.dot_product_attention's
softmax in float64 (knobs._exact_attention). `cotangents` gives the gradient arriving at each module.
Gradient flow: gradients w.r.t. every nnx.Param (a stop_gradient gives exact zeros); only the leaves
in the optimizer's `wrt` filter are updated: the mirror of torch's requires_grad_(False).
Port note: NNX has no forward hooks, and nnx.capture cannot record inside nnx.RNN's scan: the outputs
are recorded by wrapping each module class's __call__ for one traced forward, the gradient's own (only
this model's instances; values inside a scan are skipped). Two nnx.merge of one state share its
Variables, so the forward of `cotangents`' outputs runs on a copy, or the BatchStats would move twice.
Shapes: as the user's model; B batch rows.
Reference: Flax NNX docs (nnx.split / nnx.merge, nnx.Optimizer(wrt), nnx.value_and_grad); JAX docs, jax.jit.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Mapping

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from .._common import numerics
from .knobs import _exact_attention, knobs
from .knobs import knob as apply_knob
from .port import _key, native
from .record import recorded_loss, recorded_value_and_grad, recording, trace_of

__all__ = ["knobs", "repeat_loss", "run_loss", "cotangents", "steps", "train"]

# the checker calls each compiled function a few times: compile time dominates, so XLA's cheapest level
_FAST = {"xla_backend_optimization_level": 0, "xla_llvm_disable_expensive_passes": True}


def _scalar(loss, name: str) -> jax.Array:
    if not isinstance(loss, jax.Array) or loss.size != 1:
        kind = "a jax.Array" if isinstance(loss, jax.Array) else type(loss).__name__  # a tracer inside jit too
        raise ValueError(f"{name}: expected a scalar jax.Array, got {kind} of shape {np.shape(loss)}")
    if not jnp.issubdtype(loss.dtype, jnp.floating):
        raise ValueError(f"{name}: expected a floating scalar, got dtype {loss.dtype}")
    return loss.reshape(())


def _loss(loss_fn: Callable) -> Callable:
    return lambda m, b: _scalar(loss_fn(m, b), "jax_loss")


def _batch(batch: Mapping[str, np.ndarray]) -> dict[str, jax.Array]:
    return {k: jnp.asarray(v) for k, v in batch.items()}


class _UpdateError(Exception):
    """The checker's own optimizer step raised in the update, not in the user's loss: reported as the optimizer's."""


def _call(fn: Callable, model, batch, name: str):
    try:
        return fn(model, batch)
    except _UpdateError as exc:
        cause = exc.__cause__
        raise ValueError(f"jax_optimizer: the update raised {type(cause).__name__}: {cause}") from cause
    except Exception as exc:
        shapes = {k: (tuple(v.shape), str(v.dtype)) for k, v in batch.items()}
        raise ValueError(f"{name}(model, batch) raised {type(exc).__name__}: {exc} (batch: {shapes})") from exc


_UNTRACEABLE = (  # what a user's code raises under jit where it reads a traced value on the host: run eagerly
    jax.errors.ConcretizationTypeError,
    jax.errors.TracerBoolConversionError,
    jax.errors.TracerArrayConversionError,
)


def _jit_or_eager(fn: Callable, *args):
    """fn jitted (one compile instead of one per operation); eagerly if the user's code cannot be traced."""
    try:
        return jax.jit(fn, compiler_options=_FAST)(*args)
    except _UNTRACEABLE:
        return fn(*args)


def _copy(state):
    # new Variable objects over the same values: two nnx.merge of one state share its Variables, so a
    # recorded forward on the copy would update the BatchStats of the model too
    return jax.tree.map(lambda x: x, state)


def _run(outputs, loss, grads, trainable: set[str], layouts: dict) -> dict:
    grads = {_key(p): np.asarray(v.get_value()) for p, v in nnx.to_flat_state(grads)}
    return {
        "loss": np.asarray(loss),
        "outputs": {k: [[np.asarray(a) for a in call] for call in v] for k, v in outputs.items()},
        "layouts": {k: [list(call) for call in v] for k, v in layouts.items()},
        "grads": grads,
        "trainable": {k: k in trainable for k in grads},
    }


def repeat_loss(model, batch: Mapping[str, np.ndarray], loss_fn: Callable, dtype: str) -> tuple[float, float] | None:
    """The loss twice on the same weights and batch, as two floats: equal unless the forward draws random
    numbers (dropout left on: F.dropout(x, p) trains by default; nnx.Dropout with its rngs). Call it on a copy:
    a train-mode BatchNorm moves its running statistics. JAX has no global random state: a model that holds
    no nnx.Rngs (no nnx.RngState) has none to draw from, and None is returned without running anything.

    Raises:
      ValueError: the loss raised or is not a scalar.
    """
    if not nnx.to_flat_state(nnx.state(model, nnx.RngState)):
        return None  # the check's passes run the loss anyway: one compile fewer per check
    with numerics(dtype):
        b = _batch(batch)
        pair = _call(lambda m, bb: _twice(loss_fn, m, bb), model, b, "jax_loss")
        first, second = (float(_scalar(loss, "jax_loss")) for loss in pair)
    return first, second


def _twice(loss_fn: Callable, model, b) -> tuple:
    # one compile for both calls (eagerly, each operation is a program of its own); nnx.jit carries an
    # nnx.Rngs' advanced counter out of the first call, so a module drawing random numbers still differs
    jitted = nnx.jit(loss_fn)
    try:
        first = jitted(model, b)
    except _UNTRACEABLE:
        return loss_fn(model, b), loss_fn(model, b)
    return first, jitted(model, b)


def run_loss(model, batch: Mapping[str, np.ndarray], loss_fn: Callable, dtype: str, wrt=nnx.Param, knob=None) -> dict:
    """One forward with every submodule's output recorded, then the loss and its gradient (each jitted).

    Args:
      batch: numpy arrays, already in `dtype`; loss_fn(model, batch) -> scalar.
      wrt: the NNX filter of the trainable leaves (the optimizer's); the gradient is taken w.r.t.
        every nnx.Param anyway, so that a stopped leaf shows exact zeros.
    Returns:
      {"loss": 0-d array, "outputs": {alias path: [[arrays] per call]}, "layouts": {alias path:
       [[(name, axes) or None per array] per call]} (outputs.py), "grads": {NNX path: array},
       "trainable": {NNX path: bool}}. The model's BatchStats are updated once, as torch's buffers.
    Raises:
      ValueError: the loss raised or is not a scalar (a forward drawing random numbers is refused before,
        by the checker's repeat_loss).
    """
    used: list = []
    with numerics(dtype), apply_knob(knob), _exact_attention(dtype, used):
        b = _batch(batch)
        graphdef, state = nnx.split(model)
        layouts: dict = {}

        def forward_and_gradient(state, b):
            # one compile, one forward: recorded inside the gradient's, which updates the BatchStats once
            m = nnx.merge(graphdef, state)
            loss, outputs, grads = recorded_value_and_grad(m, _loss(loss_fn), b, layouts)
            return outputs, loss, grads, nnx.state(m)

        outputs, loss, grads, after = _call(
            lambda m, b: _jit_or_eager(forward_and_gradient, state, b), model, b, "jax_loss"
        )
        nnx.update(model, after)  # the BatchStats the forward updated, as torch's buffers
        trainable = {_key(p) for p, _ in nnx.to_flat_state(nnx.state(model, wrt))}
        return dict(_run(outputs, loss, grads, trainable, layouts), exact_attention=bool(used))


def cotangents(model, batch: Mapping[str, np.ndarray], loss_fn: Callable, dtype: str) -> dict:
    """The gradient of the loss w.r.t. every submodule's output, per call: the gradient arriving at it in the
    backward (its cotangent), for localising a backward that parts where the forward matches.

    A zero probe is added to each recorded output and the loss differentiated w.r.t. the probes (NNX has no
    backward hooks); one jitted function. Call it on a copy: a train-mode BatchNorm moves its statistics.
    Returns:
      {alias path: [[array per recorded output] per call]}, as run_loss's "outputs" (zeros for an integer one).
    Raises:
      ValueError: the loss raised or is not a scalar.
    """
    with numerics(dtype), _exact_attention(dtype, []):
        b = _batch(batch)
        graphdef, state = nnx.split(model)

        def gradients(state, b):
            _, outputs = recorded_loss(nnx.merge(graphdef, _copy(state)), _loss(loss_fn), b, {})
            floating = lambda a: jnp.issubdtype(a.dtype, jnp.inexact)  # noqa: E731
            probes = {k: [[jnp.zeros_like(a) if floating(a) else None for a in call] for call in calls]
                      for k, calls in outputs.items()}  # fmt: skip
            top = trace_of(b)

            def loss_of(probes):
                inner = next((x._trace for x in jax.tree.leaves(probes) if isinstance(x, jax.core.Tracer)), None)
                m = nnx.merge(graphdef, _copy(state))
                with recording(m, None, (top, inner), probes=probes):
                    return _scalar(loss_fn(m, b), "jax_loss")

            return outputs, jax.grad(loss_of)(probes)

        outputs, grads = _call(lambda m, b: _jit_or_eager(gradients, state, b), model, b, "jax_loss")
        return {
            k: [[np.zeros(np.shape(a)) if g is None else np.asarray(g) for a, g in zip(oc, gc, strict=True)]
                for oc, gc in zip(outputs[k], calls, strict=True)]
            for k, calls in grads.items()
        }  # fmt: skip


def steps(
    model, batch: Mapping[str, np.ndarray], loss_fn: Callable, dtype: str, optimizer=None, step=None, k=5, knob=None
) -> Iterator[dict]:
    """K training steps on one batch, yielded one at a time: the caller compares each step and lets it go,
    so one step's snapshot is alive, not K (the checker's memory at GPT-2 scale).

    Args:
      optimizer: an optax.GradientTransformation, or (transformation, NNX filter of the trainable
        leaves): nnx.Optimizer(model, tx, wrt=filter); frozen leaves get no gradient and no update.
      step: instead, the user's step(model, batch) -> loss (several optimizers, a target update).
    Yields:
      {"loss": 0-d array, "values": {NNX path: array}} per step, the loss before the update and every
      leaf after it; with an optimizer, the first step also holds "run": what run_loss returns for the
      starting model (the same compiled function: one compile for the gradients, the outputs and the update).
    Raises:
      ValueError: the optimizer is not an optax transformation, or the loss / step raised or is not a
        scalar (at the first step).
    """
    name = "jax_step" if step is not None else "jax_loss"
    runs: list[dict] = []
    used: list = []
    with numerics(dtype), apply_knob(knob):
        b = _batch(batch)  # in x64 for float64: outside it jnp.asarray would round the batch to float32
        if step is None:
            step = _optimizer_step(model, loss_fn, optimizer, runs)
    for _ in range(k):
        # the settings and the knob hold for the step only: between steps the caller runs torch
        with numerics(dtype), apply_knob(knob), _exact_attention(dtype, used):
            loss = _scalar(_call(step, model, b, name), name)
            out = {"loss": np.asarray(loss), "values": native(model)}
        if runs:
            out["run"] = dict(runs.pop(), exact_attention=bool(used))
        yield out
        del out  # not held while the next step runs: the caller's copy is all there is


def _optimizer_step(model, loss_fn: Callable, optimizer, runs: list) -> Callable:
    pair = isinstance(optimizer, tuple) and not isinstance(optimizer, optax.GradientTransformation)
    tx, wrt = optimizer if pair else (optimizer, nnx.Param)
    if not isinstance(tx, optax.GradientTransformation):
        raise ValueError(f"jax_optimizer: expected an optax.GradientTransformation, got {type(tx).__name__}")
    # GRAD-FLOW: frozen leaves stay out of the optimizer: no moment, no weight decay
    try:
        opt = nnx.jit(lambda m: nnx.Optimizer(m, tx, wrt=wrt))(model)  # one compile for every moment's init
    except Exception as exc:
        raise ValueError(f"jax_optimizer: its init raised {type(exc).__name__}: {exc}") from exc
    graphdef, _ = nnx.split((model, opt))
    trainable = {_key(p) for p, _ in nnx.to_flat_state(nnx.state(model, wrt))}
    layouts: dict = {}
    calls = []

    # the state is donated: XLA writes the new leaves and moments over the old ones (copy_model made them
    # the checker's own; one a caller still views as numpy is copied instead, its values untouched)
    @functools.partial(jax.jit, compiler_options=_FAST, donate_argnums=0)
    def update(state, batch):
        m, o = nnx.merge(graphdef, state)
        loss, outputs, grads = recorded_value_and_grad(m, _loss(loss_fn), batch, layouts)  # a stop: exact 0s
        # GRAD-FLOW: only the trainable leaves are differentiated: a frozen one gets no gradient
        o.update(m, nnx.filter_state(grads, wrt))
        return loss, (outputs, loss, grads), nnx.state((m, o))

    def step(m, batch):
        try:
            loss, run, after = update(nnx.state((m, opt)), batch)
        except Exception as exc:  # the loss and its gradient alone, jitted as the step is: where they work,
            nnx.jit(nnx.value_and_grad(loss_fn))(m, batch)  # the update raised; else the loss's own error
            raise _UpdateError from exc
        calls.append(1)
        if len(calls) == 1:
            runs.append(_run(*run, trainable, layouts))
        del run  # the gradients and outputs of a later step: not compared, freed now
        nnx.update((m, opt), after)
        return loss

    return step


def train(
    model, batch: Mapping[str, np.ndarray], loss_fn: Callable, dtype: str, optimizer=None, step=None, k=5, knob=None
) -> list[dict]:
    """`steps` gathered in a list: [{"loss", "values"}] * k, the first with "run" (an optimizer given)."""
    return list(steps(model, batch, loss_fn, dtype, optimizer, step, k, knob))
