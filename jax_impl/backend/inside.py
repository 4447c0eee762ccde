"""Port checker, JAX half, inside a module: every value it computes, equation by equation, with the line of the
port's Python that computed it; the mirror of torch_impl/backend/inside.py.

What it does: where a check's float64 outputs part at a module, the checker asks what that module computed.
`inside` traces the loss once more in float64 (record.py's named scopes mark each module's equations;
"(loss)" is the loss's own code, outside the model's scope) and evaluates its jaxpr with the float64 pass's
widening (precision.py's interpreter: the port's float32 casts in float64), nested jits inlined so that a jnp
function's equations count one by one. Each equation inside the module is recorded: its primitive, the line
of the port that traced it (the innermost frame outside JAX, Flax, optax, numpy and the checker), the values
it read and its own. The evaluation is one jitted program whose outputs are the recorded values. With
`backward`, a zero probe is added to each recorded value and the loss differentiated w.r.t. the probes: the
gradient arriving at each value.
Gradient flow: a probe is a zero added on the graph; the values are unchanged.
Port note: equations come as JAX traced them, after jnp's own rewriting (`x / y` may be a `div` or a
`mul` by a reciprocal): the checker pairs them with torch's values by what they hold, never by name.
Shapes: as the module's arrays.
Reference: JAX docs, "Writing custom Jaxpr interpreters in JAX"; jax.extend.core (Jaxpr, source_info).
"""

from __future__ import annotations

import ast
import linecache
from collections.abc import Callable, Mapping
from pathlib import Path

import flax
import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from .._common import numpy as as_numpy
from .port import _key, _sequential_alias
from .precision import _INLINE, _Interpreter, settings
from .precision import batch as _batch
from .programs import jitted
from .record import recording, scope, scopes

__all__ = ["inside"]

_BACKEND = Path(__file__).parent
_LIBRARIES = tuple(str(Path(m.__file__).parent) for m in (jax, flax, optax, np))


def _ours(name: str) -> bool:
    return not (name.startswith(_LIBRARIES) or Path(name).parent == _BACKEND or "/shared/apps/" in name)


def _user_line(traceback) -> list:
    """The innermost frame of the port's own code: [file, line, text] (a library's call site where none is)."""
    frames = traceback.frames if traceback is not None else []
    for frame in frames:  # innermost first
        if _ours(frame.file_name):
            return [frame.file_name, frame.line_num, linecache.getline(frame.file_name, frame.line_num).strip()]
    return ["?", 0, ""]


def _user_stack(traceback) -> list:
    """The port's own frames, innermost first, as [file, line, its function's first line] (a frame's identity beside
    its line: line_frames.py picks the frame a parting is named in)."""
    frames = traceback.frames if traceback is not None else []
    return [[f.file_name, f.line_num, f.function_start_line] for f in frames if _ours(f.file_name)]


def _assignment(cls: type, attr: str) -> list | None:
    """[file, line, text] of `self.<attr> = ...` in the class `cls`'s own source (its file read as text: a class of
    a check file run as a script is no module inspect can find)."""
    fn = next((v for v in vars(cls).values() if hasattr(getattr(v, "__code__", None), "co_filename")), None)
    file = fn.__code__.co_filename if fn is not None else None
    try:
        tree = ast.parse(Path(file).read_text(encoding="utf-8")) if file else None
    except (OSError, SyntaxError, ValueError):
        return None
    classes = [n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == cls.__name__] if tree else []
    for node in (n for c in classes for n in ast.walk(c) if isinstance(n, ast.Assign)):
        targets = [t for target in node.targets for t in (target.elts if isinstance(target, ast.Tuple) else [target])]
        if any(isinstance(t, ast.Attribute) and t.attr == attr and getattr(t.value, "id", "") == "self"
               for t in targets):  # fmt: skip
            return [file, node.lineno, linecache.getline(file, node.lineno).strip()]
    return None


def _built(model) -> dict[str, list]:
    """{named scope: [file, line, text]}: the line of the port's own code that built each library module (an
    nnx.GroupNorm, an nnx.Conv): where its settings are, when what it computes parts while its inputs do not."""
    modules = dict(nnx.iter_modules(model))
    alias = _sequential_alias(modules)
    out = {}
    for path, module in modules.items():
        if not path or not type(module).__module__.startswith("flax."):
            continue
        owner, attr = path[:-1], path[-1]
        while owner in modules and isinstance(modules[owner], nnx.List | nnx.Sequential):  # layers[0]: `self.layers`
            owner, attr = owner[:-1], owner[-1]
        holder = modules.get(owner)
        if holder is None or type(holder).__module__.startswith("flax."):
            continue
        line = _assignment(type(holder), str(attr))
        if line is not None:
            out[scope("/".join(map(str, alias(path))))] = line
    return out


def _own_call(model, target: str) -> list | None:
    """[file, first line] of the __call__ of the module whose named scope is `target`; None for the loss or a
    module whose call has no Python code."""
    modules = dict(nnx.iter_modules(model))
    alias = _sequential_alias(modules)
    module = next((m for p, m in modules.items() if scope(_key(alias(p))) == target), None)
    mro = type(module).__mro__ if module is not None else ()
    call = next((vars(c)["__call__"] for c in mro if "__call__" in vars(c)), None)
    code = getattr(call, "__code__", None)
    return [code.co_filename, code.co_firstlineno] if code is not None else None


def _in(scope_path: str, target: str) -> bool:
    parts = scope_path.split("/")
    return "(model)" not in parts if target == "(loss)" else target in parts


class _Recording(_Interpreter):
    """precision.py's widening interpreter, recording the values of the equations in `target`'s scope; with
    `probes` ({slot: zero}, a slot being (the equation's number in the scope, its output's number)), adding each
    to its value instead, recording nothing (the gradient w.r.t. a probe is the gradient arriving there)."""

    def __init__(self, modules: dict, target: str, params: dict, probes: dict | None = None, built=None) -> None:
        super().__init__({}, modules)
        self.target, self.params, self.probes, self.built = target, params, probes, built or {}
        self.meta: list[dict] = []  # per recorded value: kind, op, line, inputs, slot (filled while tracing)
        self.values: list = []
        self.ids: dict[int, int] = {}  # id(value) -> index (the values are kept alive in self.values)
        self.sites: list = []  # the call site of each library function being inlined (its equations' line)
        self.count = 0  # the equations of the scope so far: a slot's first number, the same in every trace
        self.own = None  # [file, first line] of the module's own __call__ (its frame in each value's stack)

    def known(self, x) -> int:
        """The index of a value an equation reads: recorded as the module's input or parameter where new."""
        if id(x) not in self.ids:
            kind, name = self.params.get(id(x), ("input", ""))
            self.ids[id(x)] = len(self.values)
            self.values.append(x)
            self.meta.append({"kind": kind, "op": name, "line": ["", 0, ""], "inputs": []})
        return self.ids[id(x)]

    def _eqn(self, eqn, vals: list, stack: str) -> list:
        here = f"{stack}/{eqn.source_info.name_stack}".strip("/")
        if eqn.primitive.name in _INLINE:  # a jnp function's equations one by one, as torch's functions are
            jaxpr = eqn.params["jaxpr" if "jaxpr" in eqn.params else "call_jaxpr"]
            # a library's function keeps the equations of its first trace anywhere: their line is where the port
            # called it; a function of the port's own, jitted, keeps its own lines (None: no site over them)
            site = self.sites[-1] if self.sites and self.sites[-1] is not None else eqn.source_info.traceback
            self.sites.append(site if _library(jaxpr) else None)
            try:
                return self._closed(jaxpr, vals, here)
            finally:
                self.sites.pop()
        outs = super()._eqn(eqn, vals, stack)
        if not _in(here, self.target):
            for x in vals:  # a value of the module's read outside it: what the module returns
                if id(x) in self.ids:
                    self.meta[self.ids[id(x)]]["escapes"] = True
            return outs
        self.count += 1
        if self.probes is not None:
            return [x + self.probes[(self.count, o)] if (self.count, o) in self.probes else x
                    for o, x in enumerate(outs)]  # fmt: skip
        # a constant (a literal, an array built at trace time) is no value of the module's to pair
        inputs = [self.known(x) for x in vals if _numeric(x)]
        site = self.sites[-1] if self.sites and self.sites[-1] is not None else eqn.source_info.traceback
        line, stack = _user_line(site), _user_stack(site)
        # inside a library module the port built (an nnx.GroupNorm): the line that built it holds its settings
        built = next((self.built[p] for p in reversed(here.split("/")) if p in self.built), None)
        for o, x in enumerate(outs):
            if _numeric(x) and id(x) not in self.ids:
                self.ids[id(x)] = len(self.values)
                self.values.append(x)
                self.meta.append({"kind": "op", "op": eqn.primitive.name, "line": line, "inputs": inputs,
                                  "slot": (self.count, o), "built": built, "stack": stack,
                                  "own": self.own,
                                  "top": self.target == "(model)"})  # fmt: skip
        return outs


def _numeric(x) -> bool:
    """A traced array of numbers (a constant, or an nnx.Rngs' key, is nothing to pair)."""
    return isinstance(x, jax.core.Tracer) and (jnp.issubdtype(x.dtype, jnp.number) or x.dtype == jnp.bool_)


def _library(jaxpr) -> bool:
    """Whether a jitted function traced inside the port is a library's (its debug info: "fn at file:line")."""
    info = getattr(getattr(jaxpr, "jaxpr", jaxpr), "debug_info", None)
    file = (getattr(info, "func_src_info", "") or "").rpartition(" at ")[2].rpartition(":")[0]
    return not file or file.startswith(_LIBRARIES)


def inside(model, batch: Mapping[str, np.ndarray], loss_fn: Callable, path: str, dtype: str = "float64",
           backward: bool = False) -> dict:  # fmt: skip
    """What the module at `path` computes in one loss, value by value (see the module docstring).

    Args:
      model: the pass's NNX model (a float64 copy holding the compared weights); it is not changed.
      path: the module's path as the check names its outputs ('/'-joined alias, "" the model), or "(loss)".
      backward: also each value's incoming gradient.
    Returns:
      {"values": [{"kind": "input" | "param" | "op", "op": primitive, "line": [file, line, text], "inputs":
       [indices of earlier values], "value": array, "grad": array or None}] in the order computed}.
    Raises:
      ValueError: no module at `path`, or the loss raised.
    """
    names, built = scopes(model), _built(model)
    target = "(loss)" if path == "(loss)" else scope(path)
    if target != "(loss)" and target not in names:
        raise ValueError(f"inside: no NNX module at {path!r} (its modules: {sorted(names.values())[:8]} ...)")
    own = _own_call(model, target)
    with settings(dtype):
        b = _batch(batch, dtype)
        graphdef, state = nnx.split(model)
        leaves = [(jax.tree_util.keystr(k), v) for k, v in jax.tree_util.tree_flatten_with_path(state)[0]]

        def loss_of(flat, b):
            m = nnx.merge(graphdef, jax.tree.unflatten(jax.tree.structure(state), flat))
            with recording(m, {}):  # the named scopes only (nothing concrete to record under make_jaxpr)
                return loss_fn(m, b)

        try:
            closed = jax.make_jaxpr(loss_of)([v for _, v in leaves], b)
        except Exception as exc:
            raise ValueError(f"jax_loss(model, batch) raised {type(exc).__name__}: {exc}") from exc
        meta: list = []

        def evaluate(flat, b, probes=None):
            args = jax.tree.leaves((flat, b))
            params = {id(x): ("param", name) for (name, _), x in zip(leaves, flat, strict=True)}
            # the batch is the same on both sides by construction: a value to build on, not one to pair
            params |= {id(x): ("batch", jax.tree_util.keystr(k)) for k, x in jax.tree_util.tree_flatten_with_path(b)[0]}
            run = _Recording(names, target, params, probes, built)
            run.own = own
            out = run.run(closed.jaxpr, closed.consts, args)
            if probes is None:
                meta[:] = run.meta
            return out[0], list(run.values)

        flat = [v for _, v in leaves]
        loss, values = jitted(evaluate)(flat, b)
        grads = [None] * len(values)
        if backward:  # the probes' gradients, one program more
            probes = {m["slot"]: jnp.zeros_like(v) for m, v in zip(meta, values, strict=True)
                      if m["kind"] == "op" and jnp.issubdtype(v.dtype, jnp.inexact)}  # fmt: skip
            at = jitted(lambda flat, b, p: jax.grad(lambda p: evaluate(flat, b, p)[0])(p))(flat, b, probes)
            grads = [at.get(m.get("slot")) for m in meta]
    return {
        "values": [
            {**m, "value": as_numpy(v), "grad": None if g is None or m["kind"] != "op" else as_numpy(g)}
            for m, v, g in zip(meta, values, grads, strict=True)
        ],
        "loss": float(loss),
    }
