"""The transformer core's diagnoses (catalogue/attention.py, torch_impl/backend/transformer_knobs.py) and the
backward localisation, on small Hugging Face models ported here by hand (not the worked ports): each port
carries one convention of its own, and the report must name it with a confirmed replay of the torch
reference; a correct port must match; a stop_gradient inside a block whose forward matches is located by the
gradient arriving at each module."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from detach_parity.shared.apps.check import check_port
from flax import nnx

transformers = pytest.importorskip("transformers")

V, D, NH, NKV, F, T = 29, 16, 4, 2, 24, 6
DH = D // NH
THETA = 5e5
CONVENTIONS = dict(scale="head", causal=0, kv="repeat", rope="half", theta=THETA, mlp="gate", embed_scale=False,
                   mask_inverted=False, stop_keys=False, dpa=False)  # fmt: skip


def _llama() -> torch.nn.Module:
    config = transformers.LlamaConfig(
        vocab_size=V, hidden_size=D, intermediate_size=F, num_hidden_layers=2, num_attention_heads=NH,
        num_key_value_heads=NKV, max_position_embeddings=16, rms_norm_eps=1e-5, tie_word_embeddings=False,
        rope_parameters={"rope_type": "default", "rope_theta": THETA}, bos_token_id=0, eos_token_id=0, pad_token_id=0,
    )  # fmt: skip
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config).eval()
    with torch.no_grad():  # away from the defaults: unit norm scales would hide an epsilon, tiny weights a scale
        for name, p in model.named_parameters():
            p.copy_(torch.rand_like(p) + 0.5 if name.endswith("norm.weight") else torch.randn_like(p) * 0.3)
    return model


def _rotate(x, layout: str):
    if layout == "half":  # HF's rotate_half: (i, i + d/2)
        x1, x2 = jnp.split(x, 2, axis=-1)
        return jnp.concatenate([-x2, x1], axis=-1)
    return jnp.stack([-x[..., 1::2], x[..., 0::2]], axis=-1).reshape(x.shape)  # interleaved pairs (2i, 2i+1)


def _rope(x, c: dict):  # x [B, T, H, DH], in float64 (HF computes its tables in float32: an island the checker knows)
    inv_freq = 1.0 / (c["theta"] ** (jnp.arange(0, DH, 2, dtype=x.dtype) / DH))
    freqs = jnp.arange(x.shape[1], dtype=x.dtype)[:, None] * inv_freq[None, :]
    emb = jnp.concatenate([freqs, freqs], -1) if c["rope"] == "half" else jnp.repeat(freqs, 2, axis=-1)
    return x * jnp.cos(emb)[None, :, None] + _rotate(x, c["rope"]) * jnp.sin(emb)[None, :, None]


class Attention(nnx.Module):
    def __init__(self, c: dict, rngs: nnx.Rngs) -> None:
        self.c = c
        self.q_proj = nnx.Linear(D, NH * DH, use_bias=False, rngs=rngs)
        self.k_proj = nnx.Linear(D, NKV * DH, use_bias=False, rngs=rngs)
        self.v_proj = nnx.Linear(D, NKV * DH, use_bias=False, rngs=rngs)
        self.o_proj = nnx.Linear(NH * DH, D, use_bias=False, rngs=rngs)

    def __call__(self, x, keys):
        c, (b, t, _) = self.c, x.shape
        q = _rope(self.q_proj(x).reshape(b, t, NH, DH), c)
        k = _rope(self.k_proj(x).reshape(b, t, NKV, DH), c)
        if c["stop_keys"]:
            k = jax.lax.stop_gradient(k)  # the bug: the keys' gradient never reaches k_proj
        v = self.v_proj(x).reshape(b, t, NKV, DH)
        if c["dpa"]:  # jax.nn.dot_product_attention groups the query heads itself (n reads kv head n // (NH / NKV))
            allowed = jnp.tril(jnp.ones((t, t), dtype=bool))[None, None] & keys[:, None, None, :]
            calls = {
                "args": lambda: jax.nn.dot_product_attention(q, k, v, mask=allowed),
                "keywords": lambda: jax.nn.dot_product_attention(query=q, key=k, value=v, mask=allowed),
                "vmap": lambda: jax.vmap(lambda *a: jax.nn.dot_product_attention(*a[:3], mask=a[3]))(q, k, v, allowed),
            }  # fmt: skip
            return self.o_proj(calls[c["dpa"]]().reshape(b, t, D))
        expand = (lambda a: jnp.tile(a, (1, 1, NH // NKV, 1))) if c["kv"] == "tile" else (
            lambda a: jnp.repeat(a, NH // NKV, axis=2))  # fmt: skip
        k, v = expand(k), expand(v)
        scale = {"head": DH**-0.5, "none": 1.0, "width": D**-0.5}[c["scale"]]
        s = jnp.einsum("bqhd,bkhd->bhqk", q, k) * scale
        causal = jnp.tril(jnp.ones((t, t), dtype=bool), k=c["causal"])
        allowed = causal[None, None] & (~keys if c["mask_inverted"] else keys)[:, None, None, :]
        s = jnp.where(allowed, s, jnp.finfo(s.dtype).min)
        return self.o_proj(jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(s, -1), v).reshape(b, t, D))


class MLP(nnx.Module):
    def __init__(self, c: dict, rngs: nnx.Rngs) -> None:
        self.c = c
        self.gate_proj = nnx.Linear(D, F, use_bias=False, rngs=rngs)
        self.up_proj = nnx.Linear(D, F, use_bias=False, rngs=rngs)
        self.down_proj = nnx.Linear(F, D, use_bias=False, rngs=rngs)

    def __call__(self, x):
        gate, up = (self.up_proj, self.gate_proj) if self.c["mlp"] == "swapped" else (self.gate_proj, self.up_proj)
        return self.down_proj(jax.nn.silu(gate(x)) * up(x))


class Layer(nnx.Module):
    def __init__(self, c: dict, rngs: nnx.Rngs) -> None:
        self.input_layernorm = nnx.RMSNorm(D, epsilon=1e-5, rngs=rngs)
        self.self_attn = Attention(c, rngs)
        self.post_attention_layernorm = nnx.RMSNorm(D, epsilon=1e-5, rngs=rngs)
        self.mlp = MLP(c, rngs)

    def __call__(self, x, keys):
        x = x + self.self_attn(self.input_layernorm(x), keys)
        return x + self.mlp(self.post_attention_layernorm(x))


class Body(nnx.Module):
    def __init__(self, c: dict, rngs: nnx.Rngs, stop_in: int) -> None:
        self.c = c
        self.embed_tokens = nnx.Embed(V, D, rngs=rngs)
        self.layers = nnx.List([Layer(dict(c, stop_keys=c["stop_keys"] and i == stop_in), rngs) for i in range(2)])
        self.norm = nnx.RMSNorm(D, epsilon=1e-5, rngs=rngs)

    def __call__(self, ids, keys):
        x = self.embed_tokens(ids)
        x = x * D**0.5 if self.c["embed_scale"] else x
        for layer in self.layers:
            x = layer(x, keys)
        return self.norm(x)


class LlamaLM(nnx.Module):
    def __init__(self, stop_in: int = 1, **conventions) -> None:
        rngs = nnx.Rngs(0)
        self.model = Body(dict(CONVENTIONS, **conventions), rngs, stop_in)
        self.lm_head = nnx.Linear(D, V, use_bias=False, rngs=rngs)

    def __call__(self, ids, keys):
        return self.lm_head(self.model(ids, keys))


RNG = np.random.default_rng(5)
BATCH = {
    "ids": RNG.integers(1, V, size=(3, T)),
    "mask": (np.arange(T)[None] < np.array([[6], [5], [3]])).astype(np.int64),
}


def t_loss(model, b):
    logits = model(input_ids=b["ids"], attention_mask=b["mask"]).logits
    return (logits.log_softmax(-1)[..., 0] * b["mask"]).sum() / b["mask"].sum() + (logits**2).mean()


def j_loss(model, b):
    logits = model(b["ids"], b["mask"].astype(bool))
    return (jax.nn.log_softmax(logits, -1)[..., 0] * b["mask"]).sum() / b["mask"].sum() + (logits**2).mean()


def _check(torch_model, jax_model, batch=BATCH, tloss=t_loss, jloss=j_loss):
    return check_port(torch_model, jax_model, batch, torch_loss=tloss, jax_loss=jloss, steps=0, dtypes=("float64",))


@pytest.fixture(scope="module")
def llama() -> torch.nn.Module:
    return _llama()


@pytest.mark.parametrize("dpa", [False, "args", "keywords", "vmap"])
def test_a_correct_port_of_a_llama_family_model_matches(llama, dpa) -> None:
    report = _check(llama, LlamaLM(dpa=dpa))
    assert report.ok, report.table()
    # grouped-query heads through jax.nn.dot_product_attention (positional, by keyword, unbatched under vmap): its
    # softmax, which JAX takes in float32, widened to float64 in this pass (stated), every row at the float64 bound
    facts = [n for n in report.notes if n.startswith("float64 pass: the port computes")]
    assert bool(facts) == bool(dpa) and all("self_attn` in float32: widened to float64" in n for n in facts), facts
    assert report.verdict() == "match" and max(r.max_abs for r in report.rows if r.dtype == "float64") < 1e-12


def test_the_attention_replays_reach_a_windowed_model_and_a_no_op_changes_nothing() -> None:
    """Mistral passes sliding_window=4096 over a short batch: the replay models it (no window), so a knob that
    does not apply to these heads (gqa_tiled with as many kv heads as query heads) leaves every logit as it was,
    left-padded rows included (SDPA's zeros for a query with no key), and the scale knob changes them."""
    from detach_parity.torch_impl.backend.knobs import knob

    config = transformers.MistralConfig(vocab_size=V, hidden_size=D, intermediate_size=F, num_hidden_layers=1,
                                        num_attention_heads=NH, num_key_value_heads=NH, sliding_window=4096)  # fmt: skip
    torch.manual_seed(3)
    model = transformers.MistralForCausalLM(config).double().eval()
    ids, mask = torch.tensor(BATCH["ids"]), torch.tensor([[1] * T, [0] + [1] * (T - 1), [0, 0] + [1] * (T - 2)])
    with torch.no_grad():
        before = model(input_ids=ids, attention_mask=mask).logits
        with knob(model, "gqa_tiled"):
            same = model(input_ids=ids, attention_mask=mask).logits
        with knob(model, "attention_unscaled"):
            unscaled = model(input_ids=ids, attention_mask=mask).logits
    torch.testing.assert_close(same, before, rtol=0, atol=1e-12)
    assert float((unscaled - before).abs().max()) > 1e-4


@pytest.mark.parametrize(
    ("convention", "pitfall", "knob"),
    [
        ({"scale": "none"}, "attention_scale", "attention_unscaled"),
        ({"scale": "width"}, "attention_scale", "attention_scale_width"),
        ({"causal": -1}, "causal_diagonal", "causal_strict"),
        ({"causal": 1}, "causal_diagonal", "causal_ahead"),
        ({"mask_inverted": True}, "P12", "padding_mask_inverted"),
        ({"kv": "tile"}, "gqa_heads", "gqa_tiled"),
        ({"rope": "interleaved"}, "rotary_layout", "rotary_interleaved"),
        ({"theta": 1e4}, "rotary_theta", "rope_theta_1e4"),
        ({"mlp": "swapped"}, "gated_mlp_order", "gated_mlp_swapped"),
        ({"embed_scale": True}, "embedding_scale", "embedding_scaled"),
    ],
)
def test_each_transformer_convention_is_named_by_a_confirmed_replay(llama, convention, pitfall, knob) -> None:
    report = _check(llama, LlamaLM(**convention))
    assert not report.ok
    first = report.hints[0]
    assert (first.pitfall, first.confirmed) == (pitfall, True), report.table()
    assert f"({knob}:" in first.evidence
    assert "all" in first.evidence and "match" in first.evidence


def test_two_conventions_at_once_are_both_named_by_one_joined_replay(llama) -> None:
    """GQA tiled and SwiGLU swapped in one port: the tiled replay alone leaves the MLP's differences; joined to the
    gated-MLP one, everything matches, and both bugs are named, each where it shows first."""
    report = _check(llama, LlamaLM(kv="tile", mlp="swapped"))
    confirmed = [h for h in report.hints if h.confirmed]
    assert [h.pitfall for h in confirmed] == ["gqa_heads", "gated_mlp_order"], report.table()
    assert all("(gqa_tiled+gated_mlp_swapped:" in h.evidence and "gqa_tiled alone leaves" in h.evidence
               for h in confirmed)  # fmt: skip
    assert "self_attn" in confirmed[0].where and ".mlp" in confirmed[1].where.replace("/", ".")


def test_what_a_partial_replay_leaves_is_said_as_a_second_difference(llama) -> None:
    """GQA tiled and a loss scaled by 1.001, which no catalogue convention explains: the tiled replay is a
    hypothesis, and the differences it leaves are counted and placed, not left unmentioned."""
    report = _check(llama, LlamaLM(kv="tile"), jloss=lambda m, b: j_loss(m, b) * 1.001)
    names = report.named()
    assert names[0] == "gqa_heads" and "unexplained" in names, report.table()
    left = next(h for h in report.hints if h.pitfall == "unexplained")
    assert "differences left unexplained" in left.title and "a second bug" in left.evidence


def test_a_stop_inside_a_block_whose_forward_matches_is_located_by_the_backward(llama) -> None:
    report = _check(llama, LlamaLM(stop_keys=True, stop_in=1))
    assert not report.failed("float64", "outputs") and not report.failed("float64", "loss")
    back = report.backward_parting()
    assert back is not None and back.torch == "model.layers.1.self_attn.k_proj", report.table()
    # downstream of it, every incoming gradient matches: the modules after layer 1's keys in backward order
    rows = {r.key: r for r in report.rows if r.section == "backward"}
    assert rows["model/layers/1/self_attn/o_proj"].ok and rows["model/layers/1/mlp"].ok
    assert report.hints[0].pitfall == "basics" and "k_proj" in report.hints[0].where
    back = [h for h in report.hints if h.where.startswith("float64 backward ")]
    assert back and "the port stops it there (a stop_gradient)" in back[0].evidence  # JAX's incoming gradient: zeros
    assert report.to_json()["backward_parting"]["torch"] == "model.layers.1.self_attn.k_proj"
    assert any(
        line.startswith("float64: backward parting at model/layers/1/self_attn/k_proj") for line in report.lines()
    )


class TResidual(torch.nn.Module):
    """A hand-written torch block that detaches its branch's input: the forward equals the port's."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(1)
        self.inp = torch.nn.Linear(4, 8)
        self.branch = torch.nn.Linear(8, 8)
        self.out = torch.nn.Linear(8, 2)

    def forward(self, x):
        h = self.inp(x)
        return self.out(h + torch.tanh(self.branch(h.detach())))  # the branch does not train `inp`


class JResidual(nnx.Module):
    def __init__(self) -> None:
        rngs = nnx.Rngs(0)
        self.inp, self.branch, self.out = (
            nnx.Linear(4, 8, rngs=rngs),
            nnx.Linear(8, 8, rngs=rngs),
            nnx.Linear(8, 2, rngs=rngs),
        )

    def __call__(self, x):
        h = self.inp(x)
        return self.out(h + jnp.tanh(self.branch(h)))  # the port lets it through


def test_a_detach_in_the_torch_reference_is_located_by_the_backward_too() -> None:
    batch = {"x": RNG.normal(size=(5, 4)).astype(np.float32)}
    report = _check(TResidual(), JResidual(), batch, lambda m, b: (m(b["x"]) ** 2).mean(),
                    lambda m, b: (m(b["x"]) ** 2).mean())  # fmt: skip
    back = report.backward_parting()
    assert back is not None and back.torch == "inp", report.table()
    assert {r.key for r in report.failed("float64", "backward")} == {"inp"}
    # torch's gradient at inp comes from one path, the port's from two: neither is zero, it arrives changed
    assert any(h.pitfall == "basics" and "arrives changed" in h.evidence for h in report.hints), report.table()


def _bert():
    config = transformers.BertConfig(vocab_size=V, hidden_size=D, num_hidden_layers=1, num_attention_heads=NH,
                                     intermediate_size=F, max_position_embeddings=16, type_vocab_size=2,
                                     hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)  # fmt: skip
    torch.manual_seed(2)
    model = transformers.BertModel(config, add_pooling_layer=False).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.2)
    return model


class BertEmbeddings(nnx.Module):
    def __init__(self, token_types: bool, rngs: nnx.Rngs) -> None:
        self.token_types = token_types
        self.word_embeddings = nnx.Embed(V, D, rngs=rngs)
        self.position_embeddings = nnx.Embed(16, D, rngs=rngs)
        self.token_type_embeddings = nnx.Embed(2, D, rngs=rngs)
        self.LayerNorm = nnx.LayerNorm(D, epsilon=1e-12, rngs=rngs)

    def __call__(self, ids, types):
        x = self.word_embeddings(ids) + self.position_embeddings(jnp.arange(ids.shape[1]))[None]
        return self.LayerNorm(x + self.token_type_embeddings(types) if self.token_types else x)


class BertSelfAttention(nnx.Module):
    def __init__(self, rngs: nnx.Rngs) -> None:
        self.query, self.key, self.value = (nnx.Linear(D, D, rngs=rngs) for _ in range(3))

    def __call__(self, x, keys):
        b, t, _ = x.shape
        q, k, v = (f(x).reshape(b, t, NH, DH) for f in (self.query, self.key, self.value))
        s = jnp.where(keys[:, None, None, :], jnp.einsum("bqhd,bkhd->bhqk", q, k) * DH**-0.5, jnp.finfo(x.dtype).min)
        return jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(s, -1), v).reshape(b, t, D)


class BertAddNorm(nnx.Module):  # HF's BertSelfOutput / BertOutput: LayerNorm(dense(h) + x)
    def __init__(self, width: int, rngs: nnx.Rngs) -> None:
        self.dense, self.LayerNorm = nnx.Linear(width, D, rngs=rngs), nnx.LayerNorm(D, epsilon=1e-12, rngs=rngs)

    def __call__(self, h, x):
        return self.LayerNorm(self.dense(h) + x)


class BertAttention(nnx.Module):
    def __init__(self, rngs: nnx.Rngs) -> None:
        self.self, self.output = BertSelfAttention(rngs), BertAddNorm(D, rngs)

    def __call__(self, x, keys):
        return self.output(self.self(x, keys), x)


class BertIntermediate(nnx.Module):
    def __init__(self, rngs: nnx.Rngs) -> None:
        self.dense = nnx.Linear(D, F, rngs=rngs)

    def __call__(self, x):
        return jax.nn.gelu(self.dense(x), approximate=False)


class BertLayer(nnx.Module):
    def __init__(self, rngs: nnx.Rngs) -> None:
        self.attention, self.intermediate, self.output = (
            BertAttention(rngs),
            BertIntermediate(rngs),
            BertAddNorm(F, rngs),
        )

    def __call__(self, x, keys):
        x = self.attention(x, keys)
        return self.output(self.intermediate(x), x)


class BertEncoder(nnx.Module):
    def __init__(self, rngs: nnx.Rngs) -> None:
        self.layer = nnx.List([BertLayer(rngs)])

    def __call__(self, x, keys):
        return self.layer[0](x, keys)


class Bert(nnx.Module):
    def __init__(self, token_types: bool = True) -> None:
        rngs = nnx.Rngs(0)
        self.embeddings, self.encoder = BertEmbeddings(token_types, rngs), BertEncoder(rngs)

    def __call__(self, ids, types, keys):
        return self.encoder(self.embeddings(ids, types), keys)


@pytest.mark.parametrize("token_types", [True, False])
def test_token_type_embeddings_left_out_are_named(token_types: bool) -> None:
    batch = dict(BATCH, types=(np.arange(T)[None] >= 3).repeat(3, 0).astype(np.int64))
    tloss = lambda m, b: (
        m(b["ids"], attention_mask=b["mask"], token_type_ids=b["types"]).last_hidden_state ** 3
    ).mean()  # noqa: E731
    jloss = lambda m, b: (m(b["ids"], b["types"], b["mask"].astype(bool)) ** 3).mean()  # noqa: E731
    report = check_port(_bert(), Bert(token_types), batch, torch_loss=tloss, jax_loss=jloss, steps=0,
                        dtypes=("float64",))  # fmt: skip
    if token_types:
        assert report.ok, report.table()
    else:
        assert (report.hints[0].pitfall, report.hints[0].confirmed) == ("token_type", True), report.table()
        assert report.named() == ["token_type"]  # the table's zero gradient is the same bug, not a second one


def test_the_forward_parting_is_an_interval_between_compared_modules(llama) -> None:
    """Gate and up swapped: both projections match (same inputs, same weights), down_proj is the first to differ:
    the report says the forward parts after up_proj, at down_proj (the product between them is not a module)."""
    report = _check(llama, LlamaLM(mlp="swapped"))
    assert report.interval() == ("model.layers.0.mlp.up_proj", [], "model.layers.0.mlp.down_proj"), report.table()
    assert report.to_json()["interval"] == {"after": "model.layers.0.mlp.up_proj", "unpaired": [],
                                            "at": "model.layers.0.mlp.down_proj"}  # fmt: skip
    assert "float64: the forward parts after model.layers.0.mlp.up_proj (its output matches)" in report.table()
    assert _check(llama, LlamaLM()).interval() is None  # no parting, no interval


def test_a_module_with_no_twin_feeding_the_parting_is_in_the_interval(llama) -> None:
    """θ wrong in a port that computes its rotary tables inline: the forward parts inside the attention core
    (after v_proj, at o_proj), and the interval names model.rotary_emb, which ran before the first layer and
    whose cos / sin the attention takes as inputs; the gate / up swap's interval is fed by no such module."""
    report = _check(llama, LlamaLM(theta=1e4))
    assert report.interval() == ("model.layers.0.self_attn.v_proj", ["model.rotary_emb"],
                                 "model.layers.0.self_attn.o_proj"), report.table()  # fmt: skip
    assert any("feeding it, with no NNX twin to compare: model.rotary_emb" in line for line in report.lines())
    assert "model.rotary_emb" in report.feeds["model.layers.0.self_attn"]
    assert "model.layers.0.input_layernorm" in report.feeds["model.layers.0.self_attn"]  # paired: not listed


def test_a_gemma_table_scaled_by_itself_is_replayed_unscaled_and_never_scaled_twice() -> None:
    """Gemma multiplies its lookup by √d inside the embedding module: embedding_unscaled gives the plain lookup (a
    port that leaves the scale out), and embedding_scaled does not apply (it would scale twice)."""
    from detach_parity.torch_impl.backend.knobs import knob

    config = transformers.GemmaConfig(vocab_size=V, hidden_size=D, intermediate_size=F, num_hidden_layers=1,
                                      num_attention_heads=NH, num_key_value_heads=NH, head_dim=DH)  # fmt: skip
    torch.manual_seed(4)
    model = transformers.GemmaForCausalLM(config).double().eval()
    table, ids = model.get_input_embeddings(), torch.tensor(BATCH["ids"])
    with torch.no_grad(), knob(model, "embedding_unscaled"):
        torch.testing.assert_close(table(ids), table.weight[ids], rtol=0, atol=0)
    with torch.no_grad():  # restored: the table scales again
        torch.testing.assert_close(table(ids), table.weight[ids] * D**0.5, rtol=1e-12, atol=0)
    with pytest.raises(ValueError, match="embedding_scaled: expected an nn.Embedding that does not scale itself"):
        with knob(model, "embedding_scaled"):
            pass
