"""Port checker, JAX half, compiled programs: one XLA compile per distinct program in a process.

What it does: a check traces a few functions (the recorded forward and gradient, the optimizer's update,
its init) and runs them on arrays of one shape: `jitted(fn)` traces and lowers `fn` once per signature
of its arguments (their tree and their shapes and dtypes), and compiles it only when this process has
not compiled the same program before. The same program is the same StableHLO text with the same trees of
arguments and results: a second check of the same model (a porter's next edit, the next test on the same
model, a replay that changes only the torch side) lowers again, a few milliseconds, and compiles nothing.
Where the user's code cannot be traced (it reads a traced value on the host), `fn` runs eagerly.
Gradient flow: none here.
Port note: jax.jit keys its compiled programs on the Python function, and each check makes its functions
anew (closures over the model's graph and the user's loss): the key here is what was lowered. JAX's
persistent compilation cache keys the same way across processes; it is a global setting, which a package
imported into someone else's process must leave alone, so the CLI turns it on for its own process only
(shared/apps/check/cache.py). At most `KEEP` programs are kept (the least recently used go first).
Shapes: as the arguments.
Reference: JAX docs, jax.stages (Lowered.as_text, Lowered.compile), "Ahead-of-time lowering and compilation".
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Callable

import jax

__all__ = ["KEEP", "UNTRACEABLE", "jitted", "eager_or_jitted", "counts", "clear", "persistent_cache"]

KEEP = 16  # programs kept per process: a check of one model makes 2 to 6 (a pass per dtype, the init, replays)
# XLA's cheapest level: the checker calls each program a few times, on small arrays, so compiling dominates
_FAST = {"xla_backend_optimization_level": 0, "xla_llvm_disable_expensive_passes": True}
UNTRACEABLE = (  # what a user's code raises under jit where it reads a traced value on the host: run eagerly
    jax.errors.ConcretizationTypeError,
    jax.errors.TracerBoolConversionError,
    jax.errors.TracerArrayConversionError,
)
_PROGRAMS: OrderedDict = OrderedDict()
_COUNTS = {"lowered": 0, "compiled": 0, "reused": 0}


def _signature(args) -> tuple:
    leaves, tree = jax.tree.flatten(args)
    return tree, tuple(
        (getattr(x, "shape", None), str(getattr(x, "dtype", type(x))), getattr(x, "weak_type", None)) for x in leaves
    )


def _program(lowered, sig: tuple) -> object:
    # the arguments' own signature too: jit leaves an unused argument out of the program's text, and the program
    # still checks what it was called with (optax.sgd's init reads no parameter, in float64 and float32 alike)
    key = (hashlib.sha256(lowered.as_text().encode()).hexdigest(), str(sig[0]), sig[1], str(lowered.out_tree))
    compiled = _PROGRAMS.pop(key, None)
    if compiled is None:
        compiled = lowered.compile()
        _COUNTS["compiled"] += 1
    else:
        _COUNTS["reused"] += 1
    _PROGRAMS[key] = compiled  # the most recently used last
    while len(_PROGRAMS) > KEEP:
        _PROGRAMS.popitem(last=False)
    return compiled


def jitted(fn: Callable, donate_argnums: tuple[int, ...] = ()) -> Callable:
    """`fn` jitted: traced and lowered once per signature of its arguments, compiled once per program per process.

    Args:
      fn: a function of arrays and pytrees of arrays (an nnx.State, a batch dict).
      donate_argnums: the arguments whose buffers the program may write its results over (jax.jit's).
    Returns:
      A function of the same arguments. Raises what tracing `fn` raises (UNTRACEABLE among them).
    """
    jf = jax.jit(fn, compiler_options=_FAST, donate_argnums=donate_argnums)
    known: dict = {}

    def call(*args):
        sig = _signature(args)
        compiled = known.get(sig)
        if compiled is None:
            lowered = jf.lower(*args)
            _COUNTS["lowered"] += 1
            compiled = known[sig] = _program(lowered, sig)
        return compiled(*args)

    return call


def eager_or_jitted(fn: Callable, *args):
    """fn(*args) jitted (one compile instead of one per operation); eagerly if the user's code cannot be traced."""
    try:
        return jitted(fn)(*args)
    except UNTRACEABLE:
        return fn(*args)


def counts() -> dict[str, int]:
    """Cumulative counts in this process: programs lowered, compiled, and reused from an earlier lowering."""
    return dict(_COUNTS)


def clear() -> None:
    """Forget every compiled program (the counts stay)."""
    _PROGRAMS.clear()


def persistent_cache(folder: str) -> dict:
    """Keep XLA's compiled programs in `folder` across processes (JAX's persistent compilation cache), unless this
    process already has one (JAX_COMPILATION_CACHE_DIR, or jax.config set by the caller: theirs is kept).

    A global setting of the process: only a command running in a process of its own calls this (the CLI's
    `check`), never check_port. Every program is kept, however quick its compile (JAX's default keeps only those
    over 1 s): a check's are 10 ms to 1 s each, and together they are most of a small check's time.
    Returns {"folder": the cache in use or None, "ours": whether this call set it}.
    """
    current = jax.config.jax_compilation_cache_dir
    if current:
        return {"folder": current, "ours": False}
    jax.config.update("jax_compilation_cache_dir", folder)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    return {"folder": folder, "ours": True}
