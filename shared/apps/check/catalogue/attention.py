"""The transformer core: the attention's scale and causal diagonal, grouped-query heads, the rotary
embedding's layout and θ, the gated MLP's order, the input embedding's scale and token types.

Each is a convention a port of a Hugging Face model re-implements by hand, and gets wrong without an
error: the shapes agree, the numbers do not. The evidence is a replay of the torch reference with the
port's convention (torch_impl/backend/transformer_knobs.py), confirmed when every difference vanishes.
These records have no lesson of their own: the cheatsheet's "Transformer core" table lists them.
"""

from __future__ import annotations

from .kinds import Diagnosis, Replay, table

__all__ = ["RECORDS", "ATTENTION", "cheatsheet"]

ATTENTION = frozenset({"attention"})  # an HF attention module, by what it is (transformer_knobs.kind_of)
_ROTARY = frozenset({"rotary"})
_EMBEDDING = frozenset({"Embedding"})

RECORDS = (
    Diagnosis(
        "attention_scale",
        "attention scores scaled otherwise than by 1/√(head width)",
        replays=(
            Replay(
                "torch",
                "attention_unscaled",
                "the attention scores left unscaled (no 1/√d)",
                title="attention scores not scaled: the port leaves out 1/√(head width)",
                modules=ATTENTION,
            ),
            Replay(
                "torch",
                "attention_scale_width",
                "the attention scores scaled by 1/√(model width)",
                title="attention scaled by 1/√(model width) where the model uses 1/√(head width)",
                modules=ATTENTION,
            ),
        ),
    ),
    Diagnosis(
        "causal_diagonal",
        "the causal mask off by one on its diagonal",
        replays=(
            Replay(
                "torch",
                "causal_strict",
                "the causal mask hides each token from itself too (tril(k=-1))",
                title="causal mask off by one: each token cannot attend to itself",
                modules=ATTENTION,
            ),
            Replay(
                "torch",
                "causal_ahead",
                "the causal mask lets each token see one token ahead (tril(k=1))",
                title="causal mask off by one: each token sees the next one",
                modules=ATTENTION,
            ),
        ),
    ),
    Diagnosis(
        "gqa_heads",
        "grouped-query heads tiled (query head h reads key/value head h mod n_kv) where HF repeats each "
        "(h // n_rep, repeat_kv)",
        replays=(
            Replay(
                "torch",
                "gqa_tiled",
                "key / value heads tiled (jnp.tile) instead of repeated (jnp.repeat)",
                modules=ATTENTION,
            ),
        ),
    ),
    Diagnosis(
        "rotary_layout",
        "rotary embedding layout: HF rotates halves (i, i + d/2), the port interleaved pairs (2i, 2i+1)",
        replays=(
            Replay(
                "torch",
                "rotary_interleaved",
                "RoPE rotates interleaved pairs (2i, 2i+1): GPT-J's, Meta's layout",
                modules=_ROTARY,
            ),
        ),
    ),
    Diagnosis(
        "rotary_theta",
        "rotary base θ differs from the model's",
        replays=tuple(
            Replay(
                "torch",
                knob,
                f"RoPE's inv_freq from θ = {theta}",
                title=f"rotary θ: the port uses {theta}",
                modules=_ROTARY,
            )
            for knob, theta in (
                ("rope_theta_1e4", "10000"),
                ("rope_theta_5e5", "500000"),
                ("rope_theta_1e6", "1000000"),
            )
        ),
    ),
    Diagnosis(
        "gated_mlp_order",
        "gated MLP: the activation on up_proj and the product with gate_proj (gate and up swapped)",
        replays=(
            Replay(
                "torch",
                "gated_mlp_swapped",
                "down(act(up(x)) · gate(x)) for down(act(gate(x)) · up(x))",
                modules=frozenset({"gated_mlp"}),
            ),
        ),
    ),
    Diagnosis(
        "embedding_scale",
        "input embeddings scaled by √(width) where the model does not scale them (a Gemma / T5 habit), or not "
        "where it does (Gemma)",
        replays=(
            Replay(
                "torch", "embedding_scaled", "the input embeddings multiplied by √(embedding width)", modules=_EMBEDDING
            ),
            Replay(
                "torch",
                "embedding_unscaled",
                "the √(width) a scaled embedding table applies (Gemma) left out",
                title="input embeddings not scaled: the port leaves out the √(width) the model applies (Gemma)",
                modules=_EMBEDDING,
            ),
        ),
    ),
    Diagnosis(
        "token_type",
        "token-type embeddings left out (BERT's token_type_ids)",
        replays=(Replay("torch", "token_type_dropped", "no token-type embedding added", modules=_EMBEDDING),),
    ),
)


def cheatsheet() -> list[str]:
    """The cheatsheet's "Transformer core" section (docs/cheatsheet.md): each record, what its replays change."""
    intro = ("Conventions a hand port of a Hugging Face model re-implements; `detach-parity check` names one when a "
             "replay of the torch reference with the port's convention makes every difference vanish.")  # fmt: skip
    return table("Transformer core (port checker)", intro, RECORDS)
