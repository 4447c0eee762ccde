"""What `detach-parity run --profile` counts in torch: nothing is compiled, so nothing is counted.

The lessons run torch eagerly: the torch stage of a case is all execution and Python, with no
trace or compile to split out (torch.compile appears in `detach-parity bench` only). `listen()` and
`counters()` keep the shape of jax_impl/backend/profile.py, whose counters split the jax stage.
"""

from __future__ import annotations

__all__ = ["listen", "counters", "persistent_cache"]


def listen() -> None:
    """Start counting: eager torch has no compile pipeline to listen to, so nothing is registered."""


def counters() -> dict[str, float]:
    """No counters: an eager torch run traces and compiles nothing (the stage's seconds are its execution)."""
    return {}


def persistent_cache(folder: str) -> dict:
    """The twin of JAX's persistent compilation cache: a check runs torch eagerly, so there is nothing to keep
    (torch.compile'd models are read through `_orig_mod`). Returns {"folder": None, "ours": False}."""
    return {"folder": None, "ours": False}
