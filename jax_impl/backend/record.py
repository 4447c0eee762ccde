"""Port checker, JAX half, recording: every submodule's outputs per call and their named axes, or zero probes
added to them for the gradient arriving there; the mirror of torch_impl/backend/record.py.

What it does: NNX has no forward hooks, and nnx.capture cannot record inside nnx.RNN's scan: each module
class's __call__ is wrapped for one traced forward, recording the outputs of this model's instances
(values inside a scan are skipped: only the jitted function's own tracers are kept, and the gradient's
where the outputs are recorded inside it: recorded_value_and_grad). With `probes`, the wrapper adds them
to the same outputs instead: their gradient is each module's incoming gradient.
Gradient flow: a probe is a zero added on the graph: the values stay, the gradient w.r.t. it is the
cotangent of the output.
Port note: every __call__ is restored when the with ends.
Shapes: as the model's outputs.
Reference: Flax NNX docs (nnx.iter_modules); JAX docs, tracers and jax.grad.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

import jax
from flax import nnx

from .._common import numpy as as_numpy
from .outputs import output_axes
from .port import _key, _sequential_alias
from .precision import recording_precision, widening

__all__ = ["recording"]  # and, for port_run only (JAX has no hooks: torch records in its own run), the helpers below


def _kept(x, top) -> bool:
    # eager (top None): concrete arrays; under jit: tracers of the jitted function itself, not of a scan inside
    # it; `top` a tuple: any of those traces (a gradient's inside the jit, None for concrete arrays)
    if not isinstance(x, jax.Array):
        return False
    tops = top if isinstance(top, tuple) else (top,)
    if not isinstance(x, jax.core.Tracer):
        return None in tops
    return any(getattr(x, "_trace", None) is t for t in tops if t is not None)


def _leaves(tree, top) -> list[jax.Array]:
    return [x for x in jax.tree.leaves(tree) if _kept(x, top)]


def _probed(out, calls: list, n: int, top):
    """`out` with the n-th call's probes added to the arrays `_leaves` would record (zeros: the values
    are unchanged; the loss's gradient w.r.t. them is the gradient arriving at the module's output)."""
    probes = iter(calls[n] if n < len(calls) else ())

    def add(x):
        if not _kept(x, top):
            return x
        probe = next(probes, None)
        return x + probe if probe is not None and probe.shape == x.shape else x

    return jax.tree.map(add, out)


@contextlib.contextmanager
def recording(model, outputs: dict[str, list] | None, top=None, layouts=None, probes=None) -> Iterator[None]:
    """Every submodule's outputs per call into `outputs` {path: [[array] per call]} (and in `layouts` their
    named axes, outputs.py), the arrays `top`'s trace made (None: concrete ones; a tuple: any of those traces);
    with `probes` (same shape), the probes added to those outputs instead (`outputs` unused)."""
    # NNX has no forward hooks and nnx.capture cannot record inside nnx.RNN's scan: wrap each module
    # class's __call__ for the duration of one forward, recording the instances of this model only
    modules = dict(nnx.iter_modules(model))
    alias = _sequential_alias(modules)
    names = {id(m): _key(alias(p)) for p, m in modules.items()}
    classes = {type(m) for m in modules.values()}
    found = {
        cls: next((c.__dict__["__call__"] for c in cls.__mro__ if "__call__" in c.__dict__), None) for cls in classes
    }
    originals = {cls: call for cls, call in found.items() if call is not None}  # containers (nnx.List) are not called
    own = {cls: "__call__" in cls.__dict__ for cls in classes}
    known: dict = {}  # id(array) -> (array, its named axes): what a module without a rule passes on

    counts: dict[str, int] = {}

    def wrap(call):
        def recorded(self, *args, **kwargs):
            if id(self) not in names:
                return call(self, *args, **kwargs)
            with jax.named_scope(scope(names[id(self)])):  # each equation knows its module (precision.py reads it)
                out = call(self, *args, **kwargs)
            if probes is not None:
                n = counts[names[id(self)]] = counts.get(names[id(self)], -1) + 1
                return _probed(out, probes.get(names[id(self)], []), n, top)
            arrays = _leaves(out, top)
            if arrays:  # the steps of a scan inside are not recorded
                outputs.setdefault(names[id(self)], []).append(arrays)
                whole = len(arrays) == sum(isinstance(x, jax.Array) for x in jax.tree.leaves(out))
                specs = output_axes(self, args, kwargs, arrays, known) if whole else [None] * len(arrays)
                if layouts is not None:
                    layouts.setdefault(names[id(self)], []).append(specs)
            return out

        return recorded

    try:
        for cls, call in originals.items():
            cls.__call__ = wrap(call)
        yield
    finally:
        for cls, call in originals.items():
            if own[cls]:
                cls.__call__ = call
            else:
                del cls.__call__


def scope(path: str) -> str:
    """The named scope a module's call runs in while recorded: its path dotted, "(model)" for the root."""
    return path.replace("/", ".") or "(model)"


def scopes(model) -> dict[str, str]:
    """{named scope: module path} of every module `recording` scopes (precision.widening charges equations by it)."""
    modules = dict(nnx.iter_modules(model))
    alias = _sequential_alias(modules)
    return {scope(_key(alias(p))): _key(alias(p)) for p in modules}


def trace_of(b):
    """The trace of the jitted function `b` (a batch) is traced in; None for concrete arrays (an eager run)."""
    leaf = jax.tree.leaves(b)[0]
    return getattr(leaf, "_trace", None) if isinstance(leaf, jax.core.Tracer) else None


def recorded_loss(probe, loss: Callable, b, layouts: dict) -> tuple[jax.Array, dict]:
    """(loss(probe, b), every submodule's outputs {path: [[array] per call]}) of one forward of `probe` (in
    `layouts`, a Python dict filled while tracing, their named axes: outputs.py)."""
    outputs: dict = {}
    layouts.clear()  # a trace that fell back to an eager run records again
    with recording(probe, outputs, trace_of(b), layouts):
        return loss(probe, b), outputs


def widened(fn: Callable, islands: dict | None, modules: dict, precision: dict | None = None) -> Callable:
    """fn(m) of an NNX module with its float32 casts computed in float64 (precision.widening over m's state; the
    state it leaves, BatchStats included, written back to m), or with `precision` (a bfloat16 run) what each
    module computes in noted (precision.recording_precision); fn itself where both are None."""
    if islands is None and precision is None:
        return fn
    if islands is not None:
        transform = lambda f: widening(f, islands, modules)  # noqa: E731
    else:
        transform = lambda f: recording_precision(f, precision, modules)  # noqa: E731

    def wide(m):
        graphdef, state = nnx.split(m)

        def pure(state):
            copy = nnx.merge(graphdef, state)
            return fn(copy), nnx.state(copy)

        out, after = transform(pure)(state)
        nnx.update(m, after)
        return out

    return wide


def recorded_value_and_grad(
    m, loss: Callable, b, layouts: dict, islands: dict | None = None, precision: dict | None = None
) -> tuple[jax.Array, dict, nnx.State]:
    """(loss, outputs as recorded_loss's, the gradient w.r.t. every nnx.Param) of ONE forward of `m`: the
    outputs are recorded inside the gradient's own forward (its tracers and the jitted function's are kept,
    a scan's are not), so a check traces, compiles and runs the forward once. With `islands` (a float64
    run), the port's float32 casts run in float64 and are noted there; with `precision` (a bfloat16 run),
    what each module computes in (widened)."""
    top = trace_of(b)

    def loss_and_outputs(m):
        params = jax.tree.leaves(nnx.state(m, nnx.Param))
        inner = next((x._trace for x in params if isinstance(x, jax.core.Tracer) and x._trace is not top), None)
        outputs: dict = {}
        layouts.clear()
        with recording(m, outputs, top if inner is None else (top, inner), layouts):
            return loss(m, b), outputs

    forward = widened(loss_and_outputs, islands, scopes(m), precision)
    (value, outputs), grads = nnx.value_and_grad(forward, has_aux=True)(m)
    return value, outputs, grads


def run_of(outputs, loss, grads, trainable: set[str], layouts: dict, notes: tuple) -> dict:
    """A recorded run as port_run returns it: numpy arrays, the gradient by NNX path, the islands and precision
    notes (notes_for's dicts, filled while tracing)."""
    grads = {_key(p): as_numpy(v.get_value()) for p, v in nnx.to_flat_state(grads)}
    return {
        "loss": as_numpy(loss),
        "outputs": {k: [[as_numpy(a) for a in call] for call in v] for k, v in outputs.items()},
        "layouts": {k: [list(call) for call in v] for k, v in layouts.items()},
        "grads": grads,
        "trainable": {k: k in trainable for k in grads},
        "islands": dict(notes[0] or {}),
        "precision": dict(notes[1] or {}),
    }


def notes_for(dtype: str) -> tuple[dict | None, dict | None]:
    """The notes a run of `dtype` fills: (islands, precision), each a dict to fill or None."""
    # a float64 run widens the port's own float32 casts and notes them (islands); a bfloat16 run notes what each
    # module computes in (precision); the float32 run is as written
    return ({} if dtype == "float64" else None), ({} if dtype.endswith("bfloat16") else None)
