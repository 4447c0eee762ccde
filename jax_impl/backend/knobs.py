"""Port checker, JAX half, counterfactuals: the knobs a run of the port can apply; the mirror of
torch_impl/backend/knobs.py.

What it does: each knob changes how the NNX port computes for one run (the matmul precision), so that
if the port with the knob matches torch, the knob names the bug.
Gradient flow: unchanged; a knob changes precision only.
Port note: a float64 run computes jax.nn.dot_product_attention's softmax in float64 (`_exact_attention`:
JAX takes it in float32 whatever the inputs, a rounding the float32 pass sees as it is); restored after.
Shapes: as the user's model.
Reference: the checker's catalogue (shared/apps/check/catalogue/), one record per knob.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["knobs", "knob"]

# the counterfactuals of the port (precision), each named by one record of the checker's catalogue
# (shared/apps/check/catalogue/), which says what it changes and which pitfall it confirms
_KNOBS = ("matmul_default",)


def knobs() -> frozenset[str]:
    """The counterfactuals `run_loss` / `train` can apply on this side, by name (no matmul_default on a
    CPU, where JAX computes float32 matmuls in full float32 whatever the precision setting)."""
    on_cpu = jax.default_backend() == "cpu"
    return frozenset(k for k in _KNOBS if not (on_cpu and k == "matmul_default"))


@contextlib.contextmanager
def knob(name: str | None) -> Iterator[None]:
    """Applies the knob `name` to JAX for the body of the with; restores what it patched.

    Raises ValueError naming the knob when it is not one of `knobs()`.
    """
    if name is None:
        yield
    elif name == "matmul_default":
        with jax.default_matmul_precision("default"):
            yield
    else:
        raise ValueError(f"knob expected one of {sorted(_KNOBS)} or None, got {name!r}")


@contextlib.contextmanager
def _exact_attention(dtype: str, used: list) -> Iterator[None]:
    """In a float64 run, jax.nn.dot_product_attention with its softmax in float64 (it takes float32 whatever
    the inputs: a port's rounding, not its maths; the float32 pass runs it as it is). `used` gets an entry
    per call traced."""
    if dtype != "float64":
        yield
        return
    original = jax.nn.dot_product_attention

    def exact(*args, **kwargs):
        names = ("query", "key", "value", "bias", "mask")
        given = {**dict(zip(names, args, strict=False)), **{k: v for k, v in kwargs.items() if k in names}}
        other = {k for k, v in kwargs.items() if v is not None and k not in (*names, "is_causal", "scale",
                                                                              "implementation")}  # fmt: skip
        q = given.get("query")
        if len(args) > 5 or other or getattr(q, "ndim", 0) not in (3, 4):  # lengths, a window: JAX's own
            return original(*args, **kwargs)
        used.append(True)
        flags = {k: kwargs[k] for k in ("is_causal", "scale") if k in kwargs}
        if q.ndim == 4:
            return _attention(*(given.get(n) for n in names), **flags)
        # unbatched [T, N, H] (a call per row, or under jax.vmap): one batch row of the same maths
        batched = [None if given.get(n) is None else given[n][None] for n in names]
        return _attention(*batched, **flags)[0]

    jax.nn.dot_product_attention = exact  # nnx.dot_product_attention calls it through jax.nn
    try:
        yield
    finally:
        jax.nn.dot_product_attention = original


def _attention(query, key, value, bias=None, mask=None, *, is_causal=False, scale=None, **_):
    # jax.nn.dot_product_attention's maths with the softmax in the inputs' dtype (it always takes float32); grouped
    # query heads as it groups them: query head n reads key / value head n // (N / K)
    groups = query.shape[-2] // key.shape[-2]
    key, value = jnp.repeat(key, groups, axis=-2), jnp.repeat(value, groups, axis=-2)
    logits = jnp.einsum("btnh,bsnh->bnts", query, key) * (scale or 1 / np.sqrt(query.shape[-1]))
    if bias is not None:
        logits = logits + bias
    if is_causal:
        mask = (
            jnp.tril(jnp.ones(logits.shape[-2:], bool))
            if mask is None
            else mask & jnp.tril(jnp.ones(logits.shape[-2:], bool))
        )
    if mask is not None:
        logits = jnp.where(mask, logits, jnp.finfo(logits.dtype).min)
    return jnp.einsum("bnts,bsnh->btnh", jax.nn.softmax(logits, axis=-1), value)
