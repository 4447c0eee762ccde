"""Port checker, JAX half, a hand-written norm recognised by what it is: the rule of a user's NNX norm class.

What it does: HF calls a norm's gain `weight`, and the natural NNX port of LlamaRMSNorm, T5LayerNorm or a
LayerNorm mirrors it (`self.weight = nnx.Param(jnp.ones(d)); self.eps = 1e-6`). torch's side knows such a
norm by what it is (torch_impl/_layout.py, `norm_like`); so does this one: a class of the user's whose only
state is one or two 1-D nnx.Param of one size, held by the module itself, and an epsilon under one of
EPS_NAMES. One leaf is the canonical `scale`; of two, the one named like a gain (weight, scale, gamma, ...)
is `scale` and the one named like a bias (bias, beta, ...) is `bias` (one of them named so: the other is the
other). Where that cannot be told (two leaves named neither way, no epsilon, other state), `suggestion` writes
out the one-line rule the refusal gives, with the class's own leaf names.
Gradient flow: none here; leaves are renamed, never changed.
Port note: a norm's size is its leaves' size; a leaf of another size (a 2-D one, a scalar) is not a norm's.
Shapes: scale [D], bias [D] (canonical, as the NNX leaves).
Reference: transformers' LlamaRMSNorm / T5LayerNorm (weight, variance_epsilon); flax.nnx.RMSNorm (scale).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np
from flax import nnx

__all__ = ["EPS_NAMES", "norm_rule", "suggestion"]

EPS_NAMES = ("epsilon", "eps", "variance_epsilon")  # torch_impl/_layout.py's EPS_NAMES: a norm's epsilon
_GAIN = ("scale", "weight", "gamma", "gain", "g", "w")  # what a norm's gain is called
_BIAS = ("bias", "beta", "shift", "offset", "b")  # and its bias


def _own(module) -> dict[str, tuple]:
    """The module's nnx.Param leaves {path: shape}, in the state's order."""
    return {
        "/".join(map(str, p)): tuple(v.get_value().shape) for p, v in nnx.to_flat_state(nnx.state(module, nnx.Param))
    }


def _eps(module) -> bool:
    return any(isinstance(getattr(module, n, None), float | np.floating) for n in EPS_NAMES)


def _by_name(own: Mapping[str, tuple]) -> dict[str, str]:
    """{canonical leaf: own leaf} for the leaves whose names tell: the one named like a gain, the one like a bias."""
    names: dict[str, str] = {}
    for canon, like in (("scale", _GAIN), ("bias", _BIAS)):
        named = [n for n in own if n.lower() in like]
        if len(named) == 1:
            names[canon] = named[0]
    return names


def _assigned(own: Mapping[str, tuple]) -> tuple[dict[str, str], str]:
    """{canonical leaf: own leaf} (one leaf: the scale; of two, the names tell one and the other is the other),
    and why not where the names do not tell ("" if they do)."""
    if len(own) == 1:
        return {"scale": next(iter(own))}, ""
    names = _by_name(own)
    if len(own) == 2 and len(names) == 2:
        return names, ""
    if len(own) == 2 and names:  # one named: the other leaf is the other
        other = next(n for n in own if n not in names.values())
        return {**names, **{k: other for k in ("scale", "bias") if k not in names}}, ""
    return {}, f"which of {sorted(own)} is the gain and which the bias cannot be told by their names"


def _facts(module) -> tuple[dict[str, str], str]:
    """(canonical -> own leaf, "") for a hand-written norm; ({}, why it is not one) otherwise."""
    if type(module).__module__.startswith("flax."):
        return {}, "a flax module"
    own = _own(module)
    if not own or len(own) > 2 or any("/" in n or len(s) != 1 for n, s in own.items()):
        return {}, f"its parameters {sorted(own)} are not one or two 1-D arrays of its own"
    if len(set(own.values())) != 1:
        return {}, f"its 1-D parameters have different sizes {sorted(set(own.values()))}"
    if any(True for _ in nnx.to_flat_state(nnx.state(module, nnx.BatchStat))):
        return {}, "it holds running statistics"
    names, why = _assigned(own)
    if not why and not _eps(module):
        why = f"no epsilon attribute ({' / '.join(EPS_NAMES)}) says it is a norm"
    return (names, "") if not why else ({}, why)


def norm_rule(module) -> tuple[Callable, Callable] | None:
    """The rule (to, back) of a hand-written NNX norm (see the module docstring), or None for anything else.

    to(module, canonical, grad) renames torch's `scale` (and `bias`) to the module's own leaves; canonical
    leaves other than the norm's are handed on as they are (a torch twin holding them bare, under the port's
    names; else the caller refuses them, with `suggestion`). back(module, leaves) gives them under both: the
    canonical names and the module's own (that bare twin's).
    """
    names, _ = _facts(module)
    if not names:
        return None

    def to(m, c, grad):
        if set(c) != set(names):  # torch holds another norm (a bias where the port has none): refused by the caller
            return dict(c), {k: [k] for k in c}, {}
        return {names[k]: c[k] for k in c}, {names[k]: [k] for k in c}, {}

    def back(m, n):
        inverse = {own: canon for canon, own in names.items()}
        return {**n, **{inverse[k]: v for k, v in n.items()}} if set(n) == set(inverse) else dict(n)

    return to, back


def suggestion(module, canonical: Mapping) -> str | None:
    """The register_rule call that maps `canonical` (torch's norm leaves: scale, bias) onto `module`'s own
    1-D leaves, filled in with its names, and why it was not recognised; None where `module` is no candidate
    (not norm leaves, or parameters that are not its own 1-D arrays).

    A leaf named like a gain is the scale, one named like a bias the bias; the others are taken in the
    module's order, and the message says that it guessed.
    """
    if not canonical or not set(canonical) <= {"scale", "bias"} or type(module).__module__.startswith("flax."):
        return None
    own = _own(module)
    if not own or any("/" in n or len(s) != 1 for n, s in own.items()):
        return None
    names = _assigned(own)[0] or _by_name(own)  # where the names tell; else those that do
    rest = [n for n in own if n not in names.values()]
    guessed = sum(k not in names for k in canonical) > 1 and len(rest) > 1  # two leaves, neither named
    filled = {k: names.get(k) or (rest.pop(0) if rest else None) for k in canonical}
    _, why = _facts(module)
    if not why:  # a norm by its leaves, but not torch's: a bias on one side only
        why = f"torch's norm holds {sorted(canonical)}, the port's {sorted(own)}"
    text = ", ".join(f"{k!r}: {v!r}" if v else f"{k!r}: <its leaf>" for k, v in filled.items())
    order = " (a guess of which is which: check which one the forward multiplies)" if guessed else ""
    return f"register_rule({type(module).__name__}, {{{text}}}){order}; not recognised as a norm: {why}"
