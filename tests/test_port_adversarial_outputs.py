"""Adversarial outputs (issue 43 items 4 and 9): correct ports whose submodule outputs part for reasons no bug
explains, judged by what the loss sees, with the reason named.

- An MoE router (HF's MixtralTopKRouter: logits, scores and expert indices) against a port returning scores and
  indices: the arrays pair by what they hold, not by position (a float32 island's scores were compared with the
  port's integer indices, and HF's logits with the port's scores); the chosen experts compare as index sets, and
  experts tied within rounding are said to tie.
- Left padding under a causal mask: a query that sees no key gets zeros from torch's scaled_dot_product_attention
  and a uniform average from jax.nn.dot_product_attention (measured below on torch 2.13: a boolean and an additive
  -inf mask both give zeros). The loss never reads those rows: they are named as such, P12 is confirmed by its
  replay, and the verdict is "match"; a real bug elsewhere in the same port still differs.
Shapes: B batch, T tokens, D width, V vocabulary, E experts, K experts per token, N = B·T tokens.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
import torch
import torch.nn.functional as F
from detach_parity import check_port
from flax import nnx
from torch import nn

V, D, FF, B, T = 13, 8, 16, 2, 5
ADAM = dict(torch_optimizer=lambda p: torch.optim.Adam(p, lr=1e-2), jax_optimizer=optax.adam(1e-2))


def _lm_batch(seed: int, lengths, left: bool) -> dict:
    rng = np.random.default_rng(seed)
    lengths = np.asarray(lengths)
    pos = np.arange(T)[None, :]
    mask = pos >= (T - lengths)[:, None] if left else pos < lengths[:, None]
    return {"ids": rng.integers(1, V, size=(len(lengths), T)), "mask": mask.astype(np.int64)}


def torch_lm_loss(model, b):
    """Next-token NLL over the positions whose input and target are both real tokens (a pad reads nothing)."""
    logp = torch.log_softmax(model(b["ids"], b["mask"])[:, :-1], dim=-1)
    nll = -logp.gather(-1, b["ids"][:, 1:, None])[..., 0]
    w = (b["mask"][:, 1:] * b["mask"][:, :-1]).to(logp.dtype)
    return (nll * w).sum() / w.sum()


def jax_lm_loss(model, b):
    logp = jax.nn.log_softmax(model(b["ids"], b["mask"])[:, :-1], axis=-1)
    nll = -jnp.take_along_axis(logp, b["ids"][:, 1:, None], axis=-1)[..., 0]
    w = (b["mask"][:, 1:] * b["mask"][:, :-1]).astype(logp.dtype)
    return (nll * w).sum() / w.sum()


# --- item 9: an MoE router ----------------------------------------------------------------------------------


def _hf_moe(e: int, k: int):
    from transformers import MixtralConfig
    from transformers.models.mixtral.modeling_mixtral import MixtralSparseMoeBlock

    config = MixtralConfig(
        hidden_size=D, intermediate_size=FF, num_local_experts=e, num_experts_per_tok=k, experts_implementation="eager"
    )
    return MixtralSparseMoeBlock(config)


class _TorchMoELM(nn.Module):
    """Embedding -> HF's MixtralSparseMoeBlock (its router returns logits [N, E], scores [N, K], indices [N, K])
    -> head."""

    def __init__(self, e: int, k: int) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.emb, self.moe, self.head = nn.Embedding(V, D), _hf_moe(e, k), nn.Linear(D, V)
        with torch.no_grad():
            for p in self.moe.parameters():
                p.normal_(0.0, 0.5)

    def forward(self, ids, mask):
        x = self.emb(ids)
        return self.head(x + self.moe(x))


class _Router(nnx.Module):
    """HF's MixtralTopKRouter ported: softmax in float32, top-k renormalised; returns (weights, indices)."""

    def __init__(self, e: int, k: int, renormalise: bool = True, expert_order: bool = False) -> None:
        self.weight = nnx.Param(jnp.zeros((e, D)))  # torch's layout [E, D]
        self.k, self.renormalise, self.expert_order = k, renormalise, expert_order

    def __call__(self, x):
        probs = jax.nn.softmax((x @ self.weight[...].T).astype(jnp.float32), axis=-1)
        top, idx = jax.lax.top_k(probs, self.k)  # ties: the lowest index first (torch.topk may take others)
        if self.expert_order:  # the chosen experts by index, not by score: the same choice, other slots
            order = jnp.argsort(idx, axis=-1)
            top, idx = jnp.take_along_axis(top, order, axis=-1), jnp.take_along_axis(idx, order, axis=-1)
        return (top / top.sum(axis=-1, keepdims=True) if self.renormalise else top), idx


class _Experts(nnx.Module):
    def __init__(self, e: int) -> None:
        self.gate_up_proj = nnx.Param(jnp.zeros((e, 2 * FF, D)))  # torch's layout
        self.down_proj = nnx.Param(jnp.zeros((e, D, FF)))
        self.e = e

    def __call__(self, x, weights, idx):
        out = jnp.zeros_like(x)
        for e in range(self.e):
            gate, up = jnp.split(x @ self.gate_up_proj[e].T, 2, axis=-1)
            w = jnp.sum(jnp.where(idx == e, weights, 0.0), axis=-1)  # this expert's routing weight, 0 if not chosen
            out = out + ((jax.nn.silu(gate) * up) @ self.down_proj[e].T * w[:, None]).astype(x.dtype)
        return out


class _MoE(nnx.Module):
    def __init__(self, e: int, k: int, **router) -> None:
        self.gate, self.experts = _Router(e, k, **router), _Experts(e)

    def __call__(self, x):
        flat = x.reshape(-1, x.shape[-1])
        weights, idx = self.gate(flat)
        return self.experts(flat, weights, idx).reshape(x.shape)


class _JaxMoELM(nnx.Module):
    def __init__(self, e: int, k: int, **router) -> None:
        rngs = nnx.Rngs(0)
        self.emb, self.moe, self.head = nnx.Embed(V, D, rngs=rngs), _MoE(e, k, **router), nnx.Linear(D, V, rngs=rngs)

    def __call__(self, ids, mask):
        x = self.emb(ids)
        return self.head(x + self.moe(x))


def _check(tm, jm, batch, **kwargs):
    return check_port(tm, jm, batch, torch_loss=torch_lm_loss, jax_loss=jax_lm_loss, **kwargs)


def test_a_routers_tuple_pairs_by_what_it_holds_and_matches_in_both_passes() -> None:
    """Issue 43.9: E = K = 2 (as the blind Mixtral case): HF's logits [N, 2] fit the port's scores' shape and were
    paired with them (0.975 apart in float32), HF's float scores with the port's int32 indices ("dtype jax int32
    != torch float64"); everything training reads matched and the router's rows were called a module boundary."""
    report = _check(_TorchMoELM(2, 2), _JaxMoELM(2, 2), _lm_batch(1, [T, T - 1], left=False), steps=2, **ADAM)
    assert report.ok and report.verdict() == "match", report.table()
    gate = {(r.dtype, r.key): r for r in report.rows if r.section == "outputs" and r.key.startswith("moe/gate")}
    # HF's scores [1] with the port's weights, its indices [2] with the port's; its logits [0] have no twin
    assert sorted(gate) == [(d, f"moe/gate[{n}]") for d in ("float32", "float64") for n in (1, 2)], sorted(gate)
    assert all(r.ok and not r.explained for r in gate.values())
    assert gate[("float64", "moe/gate[1]")].max_abs < 1e-12  # scores widened to float64 on both sides
    assert not [n for n in report.notes if n.startswith("boundary:")], report.notes


def test_the_chosen_experts_compare_as_index_sets() -> None:
    """A port that lists each token's experts by index (torch.topk lists them by score): the same choice and the
    same weights, in other slots; before, the indices and weights differed and were called a module boundary."""
    report = _check(
        _TorchMoELM(4, 2), _JaxMoELM(4, 2, expert_order=True), _lm_batch(1, [T, T], left=False), steps=1, **ADAM
    )
    assert report.ok and report.verdict() == "match" and not report.explained, report.table()
    assert not [n for n in report.notes if n.startswith("boundary:")], report.notes
    gate = [r for r in report.rows if r.section == "outputs" and r.key in ("moe/gate[1]", "moe/gate[2]")]
    assert len(gate) == 4 and all(r.ok for r in gate)


def test_experts_tied_within_rounding_are_said_to_tie_not_called_a_difference() -> None:
    """Three experts with one router row score alike in every token: torch.topk takes others among them than
    jax.lax.top_k (which takes the lowest index). The experts are alike too, so the layer's output is the same;
    the MoE is frozen (a tie changes which expert a token trains: their gradients would differ, and should)."""
    tm, jm = _TorchMoELM(4, 2), _JaxMoELM(4, 2)
    with torch.no_grad():
        for i in (2, 3):
            tm.moe.gate.weight[i] = tm.moe.gate.weight[1]
            tm.moe.experts.gate_up_proj[i] = tm.moe.experts.gate_up_proj[1]
            tm.moe.experts.down_proj[i] = tm.moe.experts.down_proj[1]
    tm.moe.requires_grad_(False)
    opt = dict(
        torch_optimizer=ADAM["torch_optimizer"],
        jax_optimizer=(optax.adam(1e-2), nnx.All(nnx.Param, nnx.Not(nnx.PathContains("moe")))),
    )
    report = _check(tm, jm, _lm_batch(2, [T, T], left=False), steps=1, **opt)
    idx = [r for r in report.rows if r.section == "outputs" and r.key == "moe/gate[2]"]
    assert len(idx) == 2 and all(r.ok and r.explained.startswith("tie: ") for r in idx), report.table()
    assert report.ok and report.verdict() == "match, explained", report.table()
    assert "a correct top-k of the same numbers" in report.table()


def test_a_routers_real_bug_still_differs_at_the_router() -> None:
    """The top-k weights not renormalised (blind round 6 case 27): the router's scores part, the loss too."""
    report = _check(_TorchMoELM(4, 2), _JaxMoELM(4, 2, renormalise=False), _lm_batch(3, [T, T], left=False), steps=0)
    assert not report.ok and report.first_parting("float64").key == "moe/gate[1]", report.table()


# --- item 4: fully masked attention rows ---------------------------------------------------------------------

H = 2  # heads


def test_torch_gives_an_empty_attention_row_zeros_and_jax_a_uniform_average() -> None:
    """The premise, measured (torch 2.13, the math kernel on the CPU): a query that sees no key."""
    rng = np.random.default_rng(0)
    q, k, v = (torch.from_numpy(rng.normal(size=(1, 1, 3, 4))) for _ in range(3))
    allowed = torch.tensor([[False, False, False], [True, True, False], [True, True, True]])
    additive = torch.zeros(3, 3, dtype=torch.float64).masked_fill(~allowed, float("-inf"))
    for mask in (allowed, additive):
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)[0, 0]
        assert torch.all(out[0] == 0) and torch.all(torch.isfinite(out))
    j = jax.nn.dot_product_attention(
        *(jnp.asarray(a.numpy()).transpose(0, 2, 1, 3) for a in (q, k, v)),
        mask=jnp.asarray(allowed.numpy())[None, None],
    )
    np.testing.assert_allclose(np.asarray(j)[0, 0, 0], v[0, 0].mean(0).numpy(), rtol=1e-6)


class _TorchAttention(nn.Module):
    def __init__(self, additive: bool) -> None:
        super().__init__()
        self.q, self.k, self.v, self.o = (nn.Linear(D, D) for _ in range(4))
        self.additive = additive

    def forward(self, x, allowed):
        b, t, _ = x.shape
        heads = lambda a: a.view(b, t, H, D // H).transpose(1, 2)  # noqa: E731  [B, H, T, D/H]
        mask = (
            torch.zeros(allowed.shape, dtype=x.dtype).masked_fill(~allowed, float("-inf")) if self.additive else allowed
        )
        y = F.scaled_dot_product_attention(heads(self.q(x)), heads(self.k(x)), heads(self.v(x)), attn_mask=mask)
        return self.o(y.transpose(1, 2).reshape(b, t, D))


class _TorchAttentionLM(nn.Module):
    """Embedding -> causal self-attention with a padding mask (residual) -> head: [B, T] ids -> [B, T, V]."""

    def __init__(self, additive: bool = False) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.emb, self.attn, self.head = nn.Embedding(V, D), _TorchAttention(additive), nn.Linear(D, V)

    def forward(self, ids, mask):
        t = ids.shape[1]
        allowed = torch.tril(torch.ones(t, t, dtype=torch.bool))[None, None] & mask.bool()[:, None, None, :]
        x = self.emb(ids)
        return self.head(x + self.attn(x, allowed))


class _JaxAttention(nnx.Module):
    def __init__(self, scale: float | None, rngs) -> None:
        self.q, self.k, self.v, self.o = (nnx.Linear(D, D, rngs=rngs) for _ in range(4))
        self.scale = scale

    def __call__(self, x, allowed):
        b, t, _ = x.shape
        heads = lambda a: a.reshape(b, t, H, D // H)  # noqa: E731  [B, T, H, D/H]
        y = jax.nn.dot_product_attention(
            heads(self.q(x)), heads(self.k(x)), heads(self.v(x)), mask=allowed, scale=self.scale
        )
        return self.o(y.reshape(b, t, D))


class _JaxAttentionLM(nnx.Module):
    def __init__(self, scale: float | None = None) -> None:
        rngs = nnx.Rngs(0)
        self.emb, self.attn, self.head = (
            nnx.Embed(V, D, rngs=rngs),
            _JaxAttention(scale, rngs),
            nnx.Linear(D, V, rngs=rngs),
        )

    def __call__(self, ids, mask):
        t = ids.shape[1]
        allowed = jnp.tril(jnp.ones((t, t), bool))[None, None] & mask.astype(bool)[:, None, None, :]
        x = self.emb(ids)
        return self.head(x + self.attn(x, allowed))


LEFT = _lm_batch(4, [T, T - 2, T - 3], left=True)  # 0 + 2 + 3 = 5 query rows that see no key, of 3 x 5 = 15


@pytest.mark.parametrize("additive", [False, True], ids=["boolean_mask", "additive_inf_mask"])
def test_rows_the_loss_never_reads_are_named_p12_and_the_port_matches(additive: bool) -> None:
    """Issue 43.4: those rows differ in attn, attn.o, head and the model's output; the loss, every gradient and
    every step match. They were called a module boundary (before: DIFFERS, unexplained); now they are entries the
    loss never reads, found by the gradient arriving there (zero on both sides), and P12 is confirmed by a replay
    of torch with JAX's convention for an empty row."""
    report = _check(_TorchAttentionLM(additive), _JaxAttentionLM(), LEFT, steps=2, **ADAM)
    assert report.ok and report.verdict() == "match", report.table()
    assert [(h.pitfall, h.confirmed) for h in report.hints] == [("P12", True)], report.table()
    assert "masked_rows_uniform" in report.hints[0].evidence and report.named() == ["P12"]
    unread = {(r.dtype, r.key) for r in report.explained if r.explained.startswith("unread: ")}
    assert unread == {(d, k) for d in ("float64", "float32") for k in ("attn/o", "attn", "head", "(model)")}, unread
    assert not [r for r in report.explained if not r.explained.startswith("unread: ")], report.table()
    note = next(n for n in report.notes if n.startswith("unread: "))
    assert "5 of 15 rows ([1, 0], [1, 1], [2, 0], [2, 1], [2, 2])" in note and "exactly zero on both sides" in note
    assert "P12: a fully masked attention row" in note and not [n for n in report.notes if n.startswith("boundary:")]


def test_a_real_bug_beside_the_unread_rows_still_differs() -> None:
    """The same port with the attention unscaled (scale=1): the loss reads that; nothing is called unread."""
    report = _check(_TorchAttentionLM(), _JaxAttentionLM(scale=1.0), LEFT, steps=2, **ADAM)
    assert not report.ok and report.verdict() == "differs", report.table()
    assert report.failed("float64", "loss") and report.failed("float64", "grads")
    assert not [r for r in report.rows if r.explained.startswith("unread: ")]
    assert "P12" not in report.named()


class _JaxStoppedKeys(_JaxAttention):
    def __call__(self, x, allowed):
        b, t, _ = x.shape
        heads = lambda a: a.reshape(b, t, H, D // H)  # noqa: E731
        k = jax.lax.stop_gradient(self.k(x))  # GRAD-FLOW: a stop torch does not have (the bug)
        y = jax.nn.dot_product_attention(heads(self.q(x)), heads(k), heads(self.v(x)), mask=allowed)
        return self.o(y.reshape(b, t, D))


def test_a_gradient_bug_beside_the_unread_rows_differs_and_is_located_by_the_backward() -> None:
    """A stop on the keys in the port: the forward (and the loss) match, the gradients do not. The unread rows are
    stated as such, so the forward matches and the backward localisation runs (with them as differences it did not):
    the gradient arriving at attn.k parts."""
    port = _JaxAttentionLM()
    port.attn = _JaxStoppedKeys(None, nnx.Rngs(0))
    report = _check(_TorchAttentionLM(), port, LEFT, steps=0)
    assert not report.ok and report.verdict() == "differs" and not report.failed("float64", "loss"), report.table()
    assert report.failed("float64", "grads") and not report.failed("float64", "outputs")
    assert {r.key for r in report.rows if r.explained.startswith("unread: ")} >= {"attn", "head", "(model)"}
    assert report.backward_parting() is not None and report.backward_parting().key == "attn/k", report.table()


class _JaxInvertedMask(_JaxAttention):
    """The mask's complement passed to jax.nn.dot_product_attention (a port reading torch's True as masked)."""

    def __call__(self, x, allowed):
        return super().__call__(x, ~allowed)


def test_the_masks_complement_passed_to_jax_is_named_p12_and_confirmed() -> None:
    """Blind round 7's mask-polarity kind on F.scaled_dot_product_attention (not nn.MultiheadAttention, whose
    replay inverts its own masks): the replay inverts each boolean mask, an empty row averaged as JAX does."""
    jm = _JaxAttentionLM()
    jm.attn = _JaxInvertedMask(None, nnx.Rngs(0))
    report = _check(_TorchAttentionLM(), jm, LEFT, steps=2, **ADAM)
    assert not report.ok and report.verdict() == "differs", report.table()
    assert [(h.pitfall, h.confirmed) for h in report.hints][:1] == [("P12", True)], report.table()
    assert "sdpa_mask_inverted" in report.hints[0].evidence and report.named() == ["P12"]
