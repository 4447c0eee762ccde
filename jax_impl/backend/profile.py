"""What `detach-parity run --profile` counts in JAX: traces, lowerings to MLIR, XLA compiles.

JAX reports each step of its compile pipeline through `jax.monitoring` (a public listener API):
a jaxpr trace per jit cache miss (an eager primitive's first call at a shape is one too), its
lowering to an MLIR module, and the backend compile (served from the persistent compilation cache
where `JAX_COMPILATION_CACHE_DIR` holds it). `listen()` registers the listeners, once per process
and only when a profile is asked for (importing this module registers nothing); `counters()`
returns the totals since then. What is left of the jax stage's time is execution and Python.
Mirrored in torch_impl/backend/profile.py.
"""

from __future__ import annotations

import collections
import threading

import jax

from . import programs
from .programs import persistent_cache

__all__ = ["listen", "counters", "persistent_cache"]

# jax._src.dispatch's event names (JAXPR_TRACE_EVENT, JAXPR_TO_MLIR_MODULE_EVENT, BACKEND_COMPILE_EVENT)
_DURATIONS = {
    "/jax/core/compile/jaxpr_trace_duration": "trace",
    "/jax/core/compile/jaxpr_to_mlir_module_duration": "lower",
    "/jax/core/compile/backend_compile_duration": "compile",
}
_CACHE_HIT = "/jax/compilation_cache/cache_hits"
_totals: collections.Counter = collections.Counter()
_lock = threading.Lock()
_listening = False


def _on_duration(event: str, seconds: float, **kwargs) -> None:
    stage = _DURATIONS.get(event)
    if stage is None:
        return
    with _lock:
        _totals[f"jax_{stage}_s"] += seconds
        _totals[f"jax_{stage}s"] += 1
        if stage == "trace":  # which functions were traced, and how often: a retrace shows up here
            _totals[f"traced/{kwargs.get('fun_name', '?')}"] += 1


def _on_event(event: str, **kwargs) -> None:
    if event == _CACHE_HIT:
        with _lock:
            _totals["jax_cache_hits"] += 1


def listen() -> None:
    """Start counting (idempotent): register the jax.monitoring listeners of this module."""
    global _listening
    with _lock:
        if _listening:
            return
        _listening = True
    jax.monitoring.register_event_duration_secs_listener(_on_duration)
    jax.monitoring.register_event_listener(_on_event)


def counters() -> dict[str, float]:
    """Totals since listen(): jax_traces / jax_trace_s, jax_lowers / jax_lower_s, jax_compiles /
    jax_compile_s (persistent-cache hits included, jax_cache_hits of them), traced/<function name>; and the
    port checker's programs since the process started (programs.py): programs_lowered, _compiled, _reused.

    Raises RuntimeError before listen(): the totals would be zero and look like a measurement.
    """
    if not _listening:
        raise RuntimeError("profile.counters: expected listen() first, got no listener registered")
    with _lock:
        return {**_totals, **{f"programs_{k}": v for k, v in programs.counts().items()}}
