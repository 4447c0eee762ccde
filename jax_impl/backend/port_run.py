"""Port checker, JAX half, running: the user's NNX model on a batch (every submodule's output recorded,
the loss, every gradient) and K optimizer steps; the mirror of torch_impl/backend/port_run.py.

What it does: the runs `detach-parity check` compares (shared/apps/check). One jitted function per
dtype does the recorded forward, the gradient w.r.t. every nnx.Param and the optimizer update, so a
check compiles once for the forward, the gradients and the K steps. `knobs` are counterfactuals on
this side (the default matmul precision off a CPU); a float64 run computes the port's own float32 casts
in float64 (precision.py: jax.nn.dot_product_attention's float32 softmax too). `cotangents` gives the gradient
arriving at each module.
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

from collections.abc import Callable, Iterator, Mapping

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from .._common import numpy as as_numpy
from .knobs import knob as apply_knob
from .knobs import knobs
from .port import _STATE, _key, native
from .precision import batch as _batch
from .precision import settings, widening
from .programs import UNTRACEABLE, eager_or_jitted, jitted
from .record import notes_for as _notes
from .record import recorded_loss, recorded_value_and_grad, recording, run_of, scopes, trace_of

__all__ = ["knobs", "repeat_loss", "run_loss", "cotangents", "steps", "train"]


def _scalar(loss, name: str) -> jax.Array:
    if not isinstance(loss, jax.Array) or loss.size != 1:
        kind = "a jax.Array" if isinstance(loss, jax.Array) else type(loss).__name__  # a tracer inside jit too
        raise ValueError(f"{name}: expected a scalar jax.Array, got {kind} of shape {np.shape(loss)}")
    if not jnp.issubdtype(loss.dtype, jnp.floating):
        raise ValueError(f"{name}: expected a floating scalar, got dtype {loss.dtype}")
    return loss.reshape(())


def _loss(loss_fn: Callable) -> Callable:
    return lambda m, b: _scalar(loss_fn(m, b), "jax_loss")


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


def _copy(state):
    # new Variable objects over the same values: two nnx.merge of one state share its Variables, so a
    # recorded forward on the copy would update the BatchStats of the model too
    return jax.tree.map(lambda x: x, state)


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
    with settings(dtype):
        b = _batch(batch, dtype)
        pair = _call(lambda m, bb: _twice(loss_fn, m, bb), model, b, "jax_loss")
        first, second = (float(_scalar(loss, "jax_loss")) for loss in pair)
    return first, second


def _twice(loss_fn: Callable, model, b) -> tuple:
    # one program for both calls (eagerly, each operation is a program of its own), reused by the next check;
    # the state it returns carries an nnx.Rngs' advanced counter into the second call, so a module drawing
    # random numbers still differs
    graphdef, state = nnx.split(model)

    def once(state, b):
        m = nnx.merge(graphdef, state)
        return loss_fn(m, b), nnx.state(m)

    program = jitted(once)
    try:
        first, state = program(state, b)
    except UNTRACEABLE:
        return loss_fn(model, b), loss_fn(model, b)
    second, state = program(state, b)
    nnx.update(model, state)
    return first, second


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
    with settings(dtype), apply_knob(knob):
        b = _batch(batch, dtype)
        graphdef, state = nnx.split(model)
        layouts: dict = {}
        notes = _notes(dtype)

        def forward_and_gradient(state, b):
            # one compile, one forward: recorded inside the gradient's, which updates the BatchStats once
            m = nnx.merge(graphdef, state)
            loss, outputs, grads = recorded_value_and_grad(m, _loss(loss_fn), b, layouts, *notes)
            return outputs, loss, grads, nnx.state(m)

        outputs, loss, grads, after = _call(
            lambda m, b: eager_or_jitted(forward_and_gradient, state, b), model, b, "jax_loss"
        )
        nnx.update(model, after)  # the BatchStats the forward updated, as torch's buffers
        trainable = {_key(p) for p, _ in nnx.to_flat_state(nnx.state(model, wrt))}
        return run_of(outputs, loss, grads, trainable, layouts, notes)


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
    with settings(dtype):
        b = _batch(batch, dtype)
        graphdef, state = nnx.split(model)

        def gradients(state, b):
            _, outputs = recorded_loss(nnx.merge(graphdef, _copy(state)), _loss(loss_fn), b, {})
            floating = lambda a: jnp.issubdtype(a.dtype, jnp.inexact)  # noqa: E731
            # float64: a float64 probe also on an output the port computes in float32 (widened, as its forward)
            wide = {"dtype": jnp.float64} if dtype == "float64" else {}
            probes = {k: [[jnp.zeros_like(a, **wide) if floating(a) else None for a in call] for call in calls]
                      for k, calls in outputs.items()}  # fmt: skip
            top = trace_of(b)

            def loss_of(probes):
                inner = next((x._trace for x in jax.tree.leaves(probes) if isinstance(x, jax.core.Tracer)), None)
                m = nnx.merge(graphdef, _copy(state))
                with recording(m, None, (top, inner), probes=probes):
                    return _scalar(loss_fn(m, b), "jax_loss")

            if dtype == "float64":  # the forward the pass compared: the port's float32 casts in float64
                loss_of = widening(loss_of, {}, scopes(model))
            return outputs, jax.grad(loss_of)(probes)

        outputs, grads = _call(lambda m, b: eager_or_jitted(gradients, state, b), model, b, "jax_loss")
        return {
            k: [[np.zeros(np.shape(a)) if g is None else as_numpy(g) for a, g in zip(oc, gc, strict=True)]
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
    with settings(dtype), apply_knob(knob):
        b = _batch(batch, dtype)  # in x64 for float64: outside it jnp.asarray would round the batch to float32
        if step is None:
            step = _optimizer_step(model, loss_fn, optimizer, runs, _notes(dtype))
    values = getattr(step, "values", lambda: native(model))  # the checker's step holds its state between steps
    for s in range(k):
        # the settings and the knob hold for the step only: between steps the caller runs torch
        with settings(dtype), apply_knob(knob):
            loss = _scalar(_call(step, model, b, name), name)
            out = {"loss": as_numpy(loss), "values": values()}
            if s == k - 1 and hasattr(step, "close"):
                step.close(model)  # trained in place, as a user's own step trains it
        if runs:
            out["run"] = runs.pop()
        yield out
        del out  # not held while the next step runs: the caller's copy is all there is


def _optimizer_step(model, loss_fn: Callable, optimizer, runs: list, notes: tuple) -> Callable:
    pair = isinstance(optimizer, tuple) and not isinstance(optimizer, optax.GradientTransformation)
    tx, wrt = optimizer if pair else (optimizer, nnx.Param)
    if not isinstance(tx, optax.GradientTransformation):
        raise ValueError(f"jax_optimizer: expected an optax.GradientTransformation, got {type(tx).__name__}")
    model_def, model_state = nnx.split(model)
    found = []  # the optimizer's structure (its GraphDef: static, no arrays), known once `init` is traced

    def init(model_state):
        # GRAD-FLOW: frozen leaves stay out of the optimizer: no moment, no weight decay
        opt_def, opt_state = nnx.split(nnx.Optimizer(nnx.merge(model_def, model_state), tx, wrt=wrt))
        found.append(opt_def)
        return opt_state

    try:  # one program for every moment's init
        opt_state = jitted(init)(model_state)
        opt = nnx.merge(found[-1], opt_state)
    except Exception as exc:
        raise ValueError(f"jax_optimizer: its init raised {type(exc).__name__}: {exc}") from exc
    graphdef, state = nnx.split((model, opt))
    trainable = {_key(p) for p, _ in nnx.to_flat_state(nnx.state(model, wrt))}
    layouts: dict = {}

    def update(state, batch):
        m, o = nnx.merge(graphdef, state)
        loss, outputs, grads = recorded_value_and_grad(m, _loss(loss_fn), batch, layouts, *notes)  # a stop: 0s
        # GRAD-FLOW: only the trainable leaves are differentiated: a frozen one gets no gradient
        o.update(m, nnx.filter_state(grads, wrt))
        return loss, (outputs, loss, grads), nnx.state((m, o))

    # the state is donated: XLA writes the new leaves and moments over the old ones (copy_model made them
    # the checker's own; one a caller still views as numpy is copied instead, its values untouched)
    program = jitted(update, donate_argnums=(0,))
    held = [state]  # the state between steps: the model is written once, after the last (nnx.update walks it all)
    first = [True]

    def step(m, batch):
        try:
            loss, run, held[0] = program(held[0], batch)
        except Exception as exc:  # the loss and its gradient alone, jitted as the step is: where they work,
            nnx.jit(nnx.value_and_grad(loss_fn))(m, batch)  # the update raised; else the loss's own error
            raise _UpdateError from exc
        if first[0]:
            first[0] = False
            runs.append(run_of(*run, trainable, layouts, notes))
        del run  # the gradients and outputs of a later step: not compared, freed now
        return loss

    step.values = lambda: {  # what native(model) would read after the step: its Params and BatchStats
        _key(p): as_numpy(v.get_value()) for p, v in nnx.to_flat_state(nnx.filter_state(held[0][0], _STATE))
    }
    step.close = lambda m: nnx.update((m, opt), held[0])
    return step


def train(
    model, batch: Mapping[str, np.ndarray], loss_fn: Callable, dtype: str, optimizer=None, step=None, k=5, knob=None
) -> list[dict]:
    """`steps` gathered in a list: [{"loss", "values"}] * k, the first with "run" (an optimizer given)."""
    return list(steps(model, batch, loss_fn, dtype, optimizer, step, k, knob))
