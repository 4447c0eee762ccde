"""Port checker, torch half, counterfactuals of a transformer's core: the knobs that replay a Hugging Face
reference with one attention, rotary, gated-MLP or embedding convention changed (knobs.py applies them
with the others; torch only, as every replay of the reference is).

What it does: while an attention knob is on, every HF attention module (each one that dispatches
through transformers' AttentionInterface: GPT-2, the Llama family, BERT, ViT ...) computes its core
here, in the query's dtype, from the q, k, v and mask it is handed: softmax(q kᵀ · scale + mask) v,
with one change: no scale, or 1/√(model width) for 1/√(head width); the causal diagonal masked, or one
token ahead visible; the padding mask inverted; grouped-query heads tiled where HF repeats each one.
The rotary knobs rotate interleaved pairs (2i, 2i+1: GPT-J, Meta's checkpoints) where HF rotates
halves, or recompute inv_freq with another θ; the gated-MLP knob applies the activation to up_proj
instead of gate_proj; the embedding knobs scale the input embeddings by √d (after the checker has recorded
the embedding module's own output), leave out the √d a Gemma table applies itself, or drop the token-type
embeddings.
Gradient flow: unchanged; the replay's autograd runs through the counterfactual.
Port note: every function, attribute and hook is restored when the run ends; transformers is never
imported here (a model without an HF module gets a ValueError: the knob does not apply).
Shapes: query [B, H, Tq, d], key / value [B, Hkv, Tk, d], mask [B, 1|H, Tq, Tk] (bool: True attends;
float: additive) or None; the output [B, Tq, H, d], as HF's attention functions return it.
Reference: transformers' eager_attention_forward / sdpa_attention_forward, repeat_kv, rotate_half /
apply_rotary_pos_emb, LlamaMLP; Su et al. 2021 (RoFormer) for the rotary embedding.
"""

from __future__ import annotations

import contextlib
import functools
import math
import sys
from collections.abc import Callable, Iterator

import torch
from torch import nn

__all__ = ["KNOBS", "knob", "kind_of"]

# attention knob -> the scale it uses, from (heads, head width), in place of the module's own
_SCALES = {"attention_unscaled": lambda h, d: 1.0, "attention_scale_width": lambda h, d: (h * d) ** -0.5}
_MASKS = ("causal_strict", "causal_ahead", "padding_mask_inverted")
_CORE = (*_SCALES, *_MASKS, "gqa_tiled")
_THETAS = {"rope_theta_1e4": 1e4, "rope_theta_5e5": 5e5, "rope_theta_1e6": 1e6}
KNOBS = (
    *_CORE,
    "rotary_interleaved",
    *_THETAS,
    "gated_mlp_swapped",
    "embedding_scaled",
    "embedding_unscaled",
    "token_type_dropped",
)


def kind_of(module: nn.Module) -> str | None:
    """What a transformer part is, whatever its class: "attention" (an HF attention module, dispatching
    through AttentionInterface), "rotary" (a rotary embedding: an inv_freq buffer), "gated_mlp"
    (gate_proj, up_proj, down_proj and act_fn), else None."""
    cls = type(module)
    if cls.__module__.startswith("transformers.") and cls.__name__.endswith("Attention") and hasattr(module, "config"):
        return "attention"
    if isinstance(getattr(module, "inv_freq", None), torch.Tensor):
        return "rotary"
    if all(hasattr(module, n) for n in ("gate_proj", "up_proj", "down_proj", "act_fn")):
        return "gated_mlp"
    return None


@contextlib.contextmanager
def knob(model: nn.Module, names: tuple[str, ...]) -> Iterator[None]:
    """Applies the transformer knobs among `names` to `model` (and transformers) for the body of the with.

    Raises ValueError naming the knob when it has nothing to change in this model (no HF attention, no
    rotary embedding with another θ, no gated MLP, no token-type embeddings).
    """
    names = tuple(n for n in names if n in KNOBS)
    with contextlib.ExitStack() as stack:
        core = tuple(n for n in names if n in _CORE)
        if core:
            stack.enter_context(_attention(model, core))
        if "rotary_interleaved" in names:
            stack.enter_context(_rotary_interleaved(model))
        for name in (n for n in names if n in _THETAS):
            stack.enter_context(_theta(model, name))
        if "gated_mlp_swapped" in names:
            stack.enter_context(_gated_mlp_swapped(model))
        if "embedding_scaled" in names:
            stack.enter_context(_embedding_scaled(model))
        if "embedding_unscaled" in names:
            stack.enter_context(_embedding_unscaled(model))
        if "token_type_dropped" in names:
            stack.enter_context(_token_type_dropped(model))
        yield


def _patched(owner, attr: str, value) -> contextlib.AbstractContextManager:
    @contextlib.contextmanager
    def patch() -> Iterator[None]:
        original = getattr(owner, attr)
        setattr(owner, attr, value)
        try:
            yield
        finally:
            setattr(owner, attr, original)

    return patch()


def _attention(model: nn.Module, names: tuple[str, ...]) -> contextlib.AbstractContextManager:
    utils = sys.modules.get("transformers.modeling_utils")
    if utils is None or not any(kind_of(m) == "attention" for m in model.modules()):
        raise ValueError(f"knob {names[0]}: expected a Hugging Face attention module in the model, found none")
    interface = utils.AttentionInterface
    original = interface.get_interface

    def get_interface(self, attn_implementation, default):
        original(self, attn_implementation, default)  # its own checks: an unknown implementation still raises
        eager = attn_implementation in (None, "eager")  # eager returns the weights, sdpa None: as the module did
        return functools.partial(_attend, names=names, weights=eager)

    return _patched(interface, "get_interface", get_interface)


def _attend(module, query, key, value, attention_mask, dropout=0.0, scaling=None, is_causal=None, *, names,
            weights, **kwargs):  # fmt: skip
    window = kwargs.get("sliding_window")
    if window is not None and window >= key.shape[2]:  # Mistral's window of 4096 over a short batch: no window
        kwargs = {k: v for k, v in kwargs.items() if k != "sliding_window"}
    unmodelled = [k for k in ("softcap", "sliding_window", "position_bias", "s_aux") if kwargs.get(k) is not None]
    if unmodelled:  # a core this replay does not model: the knob does not apply (never a silent no-op)
        raise ValueError(f"knob {names[0]}: expected an attention core without {unmodelled[0]}, got one")
    heads, d = query.shape[1], query.shape[-1]
    rep = heads // key.shape[1]
    if rep > 1:  # HF's repeat_kv: query head h reads kv head h // rep; tiled: h % n_kv
        expand = (lambda t: t.repeat(1, rep, 1, 1)) if "gqa_tiled" in names else (lambda t: t.repeat_interleave(rep, 1))
        key, value = expand(key), expand(value)
    scale = d**-0.5 if scaling is None else scaling
    for name in (n for n in names if n in _SCALES):
        scale = _SCALES[name](heads, d)
    causal = bool(is_causal) if is_causal is not None else bool(getattr(module, "is_causal", False))
    allowed = _allowed(query.shape[2], key.shape[2], attention_mask, causal, names, query.device)
    scores = (query @ key.transpose(-1, -2)) * scale
    probs = scores.masked_fill(~allowed, torch.finfo(scores.dtype).min).softmax(-1)
    if not weights:  # SDPA's safe softmax: a query the reference's own mask leaves no key (left padding) gets zeros
        # (eager: uniform); one only the knob leaves without keys is uniform, as a port's finfo.min mask makes it
        own = _allowed(query.shape[2], key.shape[2], attention_mask, causal, (), query.device)
        probs = probs.masked_fill(~own.any(-1, keepdim=True), 0.0)
    probs = nn.functional.dropout(probs, p=dropout, training=module.training)
    return (probs @ value).transpose(1, 2).contiguous(), (probs if weights else None)


def _allowed(tq: int, tk: int, mask, causal: bool, names: tuple[str, ...], device) -> torch.Tensor:
    """Which keys each query attends, [.., Tq, Tk] bool, with the mask knobs among `names` applied."""
    if mask is not None:
        allowed = mask if mask.dtype == torch.bool else mask > torch.finfo(mask.dtype).min / 2
        if not any(n in names for n in _MASKS):
            return allowed
        keys = allowed[..., -1:, :]  # the last query sees every key it may: the padding, key by key
    else:
        keys = torch.ones(1, tk, dtype=torch.bool, device=device)
    i = torch.arange(tq, device=device)[:, None] + (tk - tq)
    j = torch.arange(tk, device=device)[None, :]
    shift = -1 if "causal_strict" in names else 1 if "causal_ahead" in names else 0
    triangle = (j <= i + shift) if causal else torch.ones(tq, tk, dtype=torch.bool, device=device)
    if "padding_mask_inverted" in names:
        keys = ~keys
    return triangle & keys


def _every_two(x: torch.Tensor) -> torch.Tensor:
    # the interleaved rotation: pairs (2i, 2i+1) -> (-x[2i+1], x[2i])
    return torch.stack((-x[..., 1::2], x[..., 0::2]), dim=-1).flatten(-2)


def _interleaved_rope(original: Callable) -> Callable:
    def apply(q, k, cos, sin, *args, unsqueeze_dim=1, **kwargs):
        if args or kwargs or cos.shape[-1] != q.shape[-1]:  # a partial rotary or another signature: as it was
            return original(q, k, cos, sin, *args, unsqueeze_dim=unsqueeze_dim, **kwargs)
        half = cos.shape[-1] // 2  # HF's tables are cat(freqs, freqs): the interleaved ones repeat each frequency
        cos = cos[..., :half].repeat_interleave(2, -1).unsqueeze(unsqueeze_dim)
        sin = sin[..., :half].repeat_interleave(2, -1).unsqueeze(unsqueeze_dim)
        return q * cos + _every_two(q) * sin, k * cos + _every_two(k) * sin

    return apply


@contextlib.contextmanager
def _rotary_interleaved(model: nn.Module) -> Iterator[None]:
    owners = [m for name, m in list(sys.modules.items())
              if name.startswith("transformers.models.") and callable(getattr(m, "apply_rotary_pos_emb", None))]  # fmt: skip
    if not owners or not any(kind_of(m) == "rotary" for m in model.modules()):
        raise ValueError("knob rotary_interleaved: expected a Hugging Face rotary embedding in the model, found none")
    with contextlib.ExitStack() as stack:
        for owner in owners:
            stack.enter_context(_patched(owner, "apply_rotary_pos_emb", _interleaved_rope(owner.apply_rotary_pos_emb)))
        yield


@contextlib.contextmanager
def _theta(model: nn.Module, name: str) -> Iterator[None]:
    theta = _THETAS[name]
    changed = []
    for m in model.modules():
        if kind_of(m) != "rotary" or getattr(m, "rope_type", "default") != "default" or m.inv_freq.numel() < 2:
            continue
        inv = m.inv_freq
        dim = 2 * inv.numel()
        own = float(inv[1].double()) ** (-dim / 2)  # inv_freq[k] = θ^(-2k/dim)
        if math.isclose(own, theta, rel_tol=1e-3):
            continue
        # HF's default rule with θ changed, in the table's dtype (HF's float32; the float64 pass widens it)
        new = 1.0 / (theta ** (torch.arange(0, dim, 2, dtype=torch.int64).to(inv.dtype) / dim))
        changed.append((m, inv))
        m.inv_freq = new.to(dtype=inv.dtype, device=inv.device)
    if not changed:
        raise ValueError(f"knob {name}: expected a default rotary embedding with θ other than {theta:g}, found none")
    try:
        yield
    finally:
        for m, inv in changed:
            m.inv_freq = inv


@contextlib.contextmanager
def _gated_mlp_swapped(model: nn.Module) -> Iterator[None]:
    gated = [m for m in model.modules() if kind_of(m) == "gated_mlp"]
    if not gated:
        raise ValueError("knob gated_mlp_swapped: expected a gated MLP (gate_proj, up_proj, down_proj), found none")
    for m in gated:  # the instance's forward: its submodules run (and are recorded) in the swapped roles
        m.forward = lambda x, m=m: m.down_proj(m.act_fn(m.up_proj(x)) * m.gate_proj(x))
    try:
        yield
    finally:
        for m in gated:
            del m.forward


@contextlib.contextmanager
def _after_recording(module: nn.Module, change: Callable) -> Iterator[None]:
    """`change(output)` replaces what `module` passes on, after every forward hook registered before the
    call (the checker's recorders): a hook re-added at each call, so it runs last."""
    handle = [None]

    def pre(m, args) -> None:
        if handle[0] is not None:
            handle[0].remove()
        handle[0] = m.register_forward_hook(lambda m, args, out: change(out))

    pre_handle = module.register_forward_pre_hook(pre)
    try:
        yield
    finally:
        pre_handle.remove()
        if handle[0] is not None:
            handle[0].remove()


def _embedding_scaled(model: nn.Module) -> contextlib.AbstractContextManager:
    owner = next((m for m in model.modules() if callable(getattr(m, "get_input_embeddings", None))), None)
    table = owner.get_input_embeddings() if owner is not None else None
    if not isinstance(table, nn.Embedding):
        table = next((m for m in model.modules() if isinstance(m, nn.Embedding)), None)
    if table is None or hasattr(table, "embed_scale"):  # Gemma's table scales itself: embedding_unscaled's case
        raise ValueError("knob embedding_scaled: expected an nn.Embedding that does not scale itself, found none")
    return _after_recording(table, lambda out: out * math.sqrt(table.embedding_dim))


@contextlib.contextmanager
def _embedding_unscaled(model: nn.Module) -> Iterator[None]:
    # Gemma's scaled word embedding multiplies its lookup by √d inside its forward: the plain lookup instead
    tables = [m for m in model.modules() if isinstance(m, nn.Embedding) and hasattr(m, "embed_scale")]
    if not tables:
        raise ValueError("knob embedding_unscaled: expected an embedding that scales itself (embed_scale), found none")
    for m in tables:
        m.forward = lambda ids, m=m: nn.Embedding.forward(m, ids)
    try:
        yield
    finally:
        for m in tables:
            del m.forward


@contextlib.contextmanager
def _token_type_dropped(model: nn.Module) -> Iterator[None]:
    tables = [m for name, m in model.named_modules() if name.split(".")[-1] == "token_type_embeddings"]
    if not tables:
        raise ValueError("knob token_type_dropped: expected a token_type_embeddings module in the model, found none")
    with contextlib.ExitStack() as stack:
        for table in tables:
            stack.enter_context(_after_recording(table, lambda out: out * 0))  # zero, still on the graph
        yield
