"""Port checker, JAX half, precision: what each dtype of a check computes in; the mirror of
torch_impl/backend/precision.py.

What it does: `settings(dtype)` holds a run's numerics (x64 for float64 only, "highest" matmul precision) and
`batch` casts its inputs (bfloat16 floats for a pure bfloat16 run; a "mixed_bfloat16" port computes in the dtype
its modules were built with). `recording_precision` notes, per module, which precision-critical kinds (exp,
log, rsqrt, sin / cos) a bfloat16 run's jaxpr computes in float32 and which in bfloat16. A port that mirrors Hugging Face's precision casts to float32 where HF does (`x.astype(
jnp.float32)` in an RMSNorm, a softmax, the rotary table, the loss's log-softmax). In the checker's float64
pass that cast would put float32's rounding into the port while the reference, widened, has none.
`widening(fn, islands)` traces fn to a jaxpr, and where any equation computes in a narrower float, evaluates
the jaxpr with those equations in float64 instead: a cast to float32 becomes one to float64, a float32
literal or iota a float64 one; nested jits are inlined, scans, loops, conds and remat regions rebuilt with
widened bodies. A region it cannot rebuild (a custom_jvp / custom_vjp rule, defined for its dtypes) runs as
written on inputs cast back, and is recorded as not widened, with the reason. Each narrow equation is
charged to the module whose named scope it sits in (record.py scopes every module call).
Gradient flow: unchanged; jax.grad differentiates the widened evaluation (an unchanged region is bound as
it was traced, its custom derivative rule included).
Port note: nothing of the user's code is edited; a port with no narrower float anywhere is evaluated as
traced. Float64 only (the float32 and bfloat16 passes run the port as written).
Shapes: as fn's outputs.
Reference: JAX docs, "Writing custom Jaxpr interpreters in JAX" (jax.make_jaxpr, eval_jaxpr).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax._src import source_info_util
from jax.extend import core as jcore

from .._common import numerics

__all__ = ["NARROW", "STORAGE", "settings", "batch", "widening", "recording_precision"]

NARROW = (np.dtype(jnp.float32), np.dtype(jnp.float16), np.dtype(jnp.bfloat16))  # below float64's precision
# where each dtype of a check keeps the parameters: "mixed_bfloat16" trains float32 ones, computing in the dtype
# each module was built to compute in (its `dtype`: the port's own policy)
STORAGE = {"float64": np.dtype(np.float64), "float32": np.dtype(np.float32), "bfloat16": np.dtype(jnp.bfloat16),
           "mixed_bfloat16": np.dtype(np.float32)}  # fmt: skip
_WIDE = np.dtype(np.float64)
_INLINE = ("jit", "pjit", "closed_call", "core_call")
_SKIP = ("reduce_precision",)  # rounds to fewer bits on purpose: on a widened value it is the identity


@contextlib.contextmanager
def settings(dtype: str) -> Iterator[None]:
    """A run of the check in `dtype`: x64 on for float64 only, "highest" matmul precision (numerics); the bfloat16
    forms compute in what their arrays and modules hold (copy_model set them)."""
    with numerics("float64" if dtype == "float64" else "float32"):
        yield


def batch(arrays: Mapping[str, np.ndarray], dtype: str) -> dict[str, jax.Array]:
    """The batch as JAX arrays (inside `settings`: x64 for float64, else a float64 batch would round): floating
    ones in bfloat16 for a pure bfloat16 run (handed in float32, as to torch), everything else as given."""
    wide = {"dtype": jnp.bfloat16} if dtype == "bfloat16" else {}
    return {k: jnp.asarray(v, **(wide if np.asarray(v).dtype.kind == "f" else {})) for k, v in arrays.items()}


def _narrow(aval) -> bool:
    return getattr(aval, "dtype", None) in NARROW


def _jaxprs(eqn) -> list:
    return [j.jaxpr if isinstance(j, jcore.ClosedJaxpr) else j for j in jcore.jaxprs_in_params(eqn.params)]


def _has_narrow(jaxpr) -> bool:
    vars_ = [*jaxpr.invars, *jaxpr.constvars, *(v for e in jaxpr.eqns for v in (*e.invars, *e.outvars))]
    return any(_narrow(v.aval) for v in vars_) or any(_has_narrow(j) for e in jaxpr.eqns for j in _jaxprs(e))


def _module(name_stack: str, modules: dict) -> str:
    """The innermost module (record.py scopes each module call by its dotted path) of an equation: its path."""
    parts = [modules[p] for p in name_stack.split("/") if p in modules]
    return parts[-1] if parts else "(loss)"


class _Interpreter:
    """Evaluates a jaxpr with its narrower floats in float64 (the module docstring); `islands` as torch's."""

    def __init__(self, islands: dict, modules: dict) -> None:
        self.islands, self.modules = islands, modules

    def _note(self, eqn, stack: str, widened: bool, why: str = "") -> None:
        dtype = next((str(v.aval.dtype) for v in eqn.outvars if _narrow(v.aval)), "float32")
        where = _module(f"{stack}/{eqn.source_info.name_stack}", self.modules)
        entry = self.islands.setdefault(where, {"dtype": dtype, "at": 0, "ops": [], "widened": True, "why": ""})
        if eqn.primitive.name not in entry["ops"]:
            entry["ops"].append(eqn.primitive.name)
        if not widened:
            entry["widened"], entry["why"] = False, entry["why"] or why

    def run(self, jaxpr, consts, args, stack: str = "") -> list:
        env: dict = {}

        def read(v):
            if isinstance(v, jcore.Literal):
                return _decimal(v.val) if _narrow(v.aval) else v.val
            return env[v]

        for v, x in zip(jaxpr.constvars, consts, strict=True):
            env[v] = _up(x)
        for v, x in zip(jaxpr.invars, args, strict=True):
            env[v] = _up(x)
        for eqn in jaxpr.eqns:
            # as jax.core.eval_jaxpr: each equation keeps its source line and named scope (its module)
            names = source_info_util.current_name_stack() + eqn.source_info.name_stack
            with source_info_util.user_context(eqn.source_info.traceback, name_stack=names):
                outs = self._eqn(eqn, [read(v) for v in eqn.invars], stack)
            for v, x in zip(eqn.outvars, outs, strict=True):
                if not isinstance(v, jcore.DropVar):
                    env[v] = x
        return [read(v) for v in jaxpr.outvars]

    def _closed(self, closed, args, stack: str) -> list:
        return self.run(closed.jaxpr, closed.consts, args, stack)

    def _eqn(self, eqn, vals: list, stack: str) -> list:
        prim, params = eqn.primitive, dict(eqn.params)
        changed = any(_dtype(x) != v.aval.dtype for x, v in zip(vals, eqn.invars, strict=True)
                      if hasattr(v.aval, "dtype"))  # fmt: skip
        narrow = any(_narrow(v.aval) for v in eqn.outvars) or any(_has_narrow(j) for j in _jaxprs(eqn))
        scope = f"{stack}/{eqn.source_info.name_stack}".strip("/")
        if not (changed or narrow):  # as traced: its own derivative rules and all
            return _bind(prim, vals, params)
        name = prim.name
        if any(_narrow(v.aval) for v in eqn.outvars) and name not in _INLINE:
            self._note(eqn, stack, name not in ("custom_jvp_call", "custom_vjp_call"), _REASON.format(name))
        if name in _INLINE:
            return self._closed(params["jaxpr" if "jaxpr" in params else "call_jaxpr"], vals, scope)
        if name in _SKIP:
            return [vals[0]]
        if name == "remat2":
            body = lambda *a: self.run(params["jaxpr"], [], a, scope)  # noqa: E731
            return list(jax.checkpoint(body, prevent_cse=params["prevent_cse"], policy=params["policy"])(*vals))
        if name == "scan":
            return self._scan(params, vals, scope)
        if name == "while":
            return self._while(params, vals, scope)
        if name == "cond":
            branches = [lambda *ops, b=b: self._closed(b, ops, scope) for b in params["branches"]]
            return list(lax.switch(vals[0], branches, *vals[1:]))
        if _jaxprs(eqn):  # a region with rules of its own for its dtypes: as written, on inputs cast back
            self._note(eqn, stack, False, _REASON.format(name))
            down = [lax.convert_element_type(x, v.aval.dtype) if hasattr(v.aval, "dtype") else x
                    for x, v in zip(vals, eqn.invars, strict=True)]  # fmt: skip
            return [_up(x) for x in _bind(prim, down, params)]
        params = {k: (_WIDE if isinstance(p, np.dtype) and p in NARROW else p) for k, p in params.items()}
        return _bind(prim, vals, params)

    def _scan(self, params, vals, scope) -> list:
        nc, nk = params["num_consts"], params["num_carry"]
        consts, init, xs = vals[:nc], vals[nc : nc + nk], vals[nc + nk :]

        def body(carry, x):
            out = self._closed(params["jaxpr"], [*consts, *carry, *x], scope)
            return out[:nk], out[nk:]

        carry, ys = lax.scan(
            body, init, xs, length=params["length"], reverse=params["reverse"], unroll=params["unroll"]
        )
        return [*carry, *ys]

    def _while(self, params, vals, scope) -> list:
        cn, bn = params["cond_nconsts"], params["body_nconsts"]
        cc, bc, init = vals[:cn], vals[cn : cn + bn], vals[cn + bn :]
        cond = lambda c: self._closed(params["cond_jaxpr"], [*cc, *c], scope)[0]  # noqa: E731
        body = lambda c: self._closed(params["body_jaxpr"], [*bc, *c], scope)  # noqa: E731
        return list(lax.while_loop(cond, body, list(init)))


_REASON = "{} is a region with derivative rules of its own for its dtypes: run in them as written"


def _decimal(value) -> np.ndarray:
    """A narrower float literal in float64, as the decimal it was written as: a scalar is traced already rounded
    (`x + 1e-6` on a float32 x holds float32(1e-6), 3e-9 off), and the shortest decimal that rounds to it is the
    number the port's code wrote (torch keeps such a Python number exact); an array literal as it is."""
    a = np.asarray(value)
    if a.ndim:
        return a.astype(_WIDE)
    exact = float(a.astype(_WIDE))
    shortest = (float(f"{exact:.{n}g}") for n in range(1, 18))  # the first decimal that rounds back to it
    return np.float64(next(x for x in shortest if np.asarray(x).astype(a.dtype) == a))


def _bind(prim, vals: list, params: dict) -> list:
    """An equation evaluated as jax.core.eval_jaxpr does (a region's params become what its bind takes)."""
    outs = prim.bind(*vals, **prim.get_bind_params(params))
    return list(outs) if prim.multiple_results else [outs]


def _dtype(x):
    return x.dtype if hasattr(x, "dtype") else np.result_type(x)


def _up(x):
    """A narrower float array (or tracer) as float64; anything else as it is."""
    return lax.convert_element_type(x, _WIDE) if _dtype(x) in NARROW else x


def widening(fn: Callable, islands: dict, modules: dict | None = None) -> Callable:
    """fn (a function of arrays / pytrees, traceable) with its narrower float computations in float64.

    Args:
      fn: the computation (a float64 run of the port: its loss, its recorded outputs).
      islands: filled with {module path or "(loss)": {"dtype", "at": 0, "ops": [primitive names], "widened":
        bool, "why": the reason it was not}}, torch's shape (the module: the innermost named scope that is a
        key of `modules`, {scope name: module path}, the scopes record.py gives module calls).
    Returns:
      A function with fn's signature and outputs: as traced where nothing is narrower, widened where it is.
    """
    modules = dict(modules or {})

    def wide(*args):
        closed, shape = jax.make_jaxpr(fn, return_shape=True)(*args)
        flat = jax.tree.leaves(args)
        if _has_narrow(closed.jaxpr):
            out = _Interpreter(islands, modules).run(closed.jaxpr, closed.consts, flat)
        else:
            out = jcore.jaxpr_as_fun(closed)(*flat)
        return jax.tree.unflatten(jax.tree.structure(shape), out)

    return wide


# the precision-critical kinds of computation a bfloat16 check compares, by the primitives that do them
_KINDS = {"exp": "exp", "exp2": "exp", "log": "log", "log1p": "log", "rsqrt": "rsqrt", "sqrt": "rsqrt",
          "sin": "sin / cos", "cos": "sin / cos"}  # fmt: skip


def _walk(jaxpr, stack: str, modules: dict, record: dict) -> None:
    for eqn in jaxpr.eqns:
        scope = f"{stack}/{eqn.source_info.name_stack}".strip("/")
        for sub in _jaxprs(eqn):
            _walk(sub, scope, modules, record)
        kind = _KINDS.get(eqn.primitive.name)
        dtype = next((str(v.aval.dtype) for v in eqn.outvars if hasattr(v.aval, "dtype")), None)
        if kind and dtype in ("float32", "bfloat16", "float16", "float64"):
            ops = record.setdefault(_module(scope, modules), {}).setdefault(kind, {}).setdefault(dtype, [])
            if eqn.primitive.name not in ops:
                ops.append(eqn.primitive.name)


def recording_precision(fn: Callable, record: dict, modules: dict | None = None) -> Callable:
    """fn, evaluated as traced, noting in `record` {module path or "(loss)": {kind: {dtype: [primitives]}}} what
    its jaxpr computes each precision-critical kind in (exp, log, rsqrt, sin / cos), charged to the innermost
    module scope (`modules`: {named scope: module path}, as for widening)."""
    modules = dict(modules or {})

    def traced(*args):
        closed, shape = jax.make_jaxpr(fn, return_shape=True)(*args)
        _walk(closed.jaxpr, "", modules, record)
        out = jcore.jaxpr_as_fun(closed)(*jax.tree.leaves(args))
        return jax.tree.unflatten(jax.tree.structure(shape), out)

    return traced
