"""Round 6 writer A: generates the 16 cases from one parametric template (correct ports) plus exact one-place edits.
Run: python3 make_cases.py   (rewrites NN_*.py; each bug edit must match exactly once; LINES filled in)
"""
import os

HERE = os.path.dirname(os.path.abspath(__file__))

HEAD = '''"""EXPECTED: {kind}
WHERE: {where}
LINES: {lines}
{sentence}
"""
import jax
import jax.numpy as jnp
import numpy as np
import optax
import torch
from flax import nnx
from transformers import {cfg}, {cls}

torch.manual_seed({seed})
rng = np.random.default_rng({seed})
V, D, NH, NKV, F, L, B, T = 48, 32, 4, 2, 64, 2, 2, 12
DH = D // NH
THETA, EPS = {theta}, 1e-6
{extra_consts}
config = {cfg}(vocab_size=V, hidden_size=D, intermediate_size=F, num_hidden_layers=L,
{pad}num_attention_heads=NH, num_key_value_heads=NKV, head_dim=DH, max_position_embeddings=64,
{pad}rms_norm_eps=EPS, rope_parameters={{"rope_type": "default", "rope_theta": THETA}},
{pad}attn_implementation="eager", tie_word_embeddings={tied}, bos_token_id=0, eos_token_id=0, pad_token_id=0{cfg_extra})
torch_model = {cls}(config).eval()
with torch.no_grad():
    for name, p in torch_model.named_parameters():
        if name.endswith("norm.weight"):
            p.uniform_({norm_lo}, {norm_hi})  # perturbed from the default
        elif "embed_tokens" in name:
            p.normal_(0.0, 1.0)  # hidden states of RMS about 1, a trained model's scale
        elif name.endswith("bias"):
            p.uniform_(-0.5, 0.5)
        else:
            p.normal_(0.0, 0.25)
'''

RMS_HF = '''

class RMSNorm(nnx.Module):
    """HF LlamaRMSNorm: statistics in float32, weight applied in the input dtype."""

    def __init__(self, dim, eps):
        self.scale = nnx.Param(jnp.ones((dim,), jnp.float32))
        self.eps = eps

    def __call__(self, x):
        h = x.astype(jnp.float32)
        var = jnp.mean(h * h, axis=-1, keepdims=True)
        h = h * jax.lax.rsqrt(var + self.eps)
        return self.scale[...] * h.astype(x.dtype)
'''

RMS_GEMMA = '''

class GemmaRMSNorm(nnx.Module):
    """HF GemmaRMSNorm: x.float() * rsqrt(mean(x^2) + eps) * (1 + weight.float()), cast back at the end."""

    def __init__(self, dim, eps):
        self.scale = nnx.Param(jnp.zeros((dim,), jnp.float32))
        self.eps = eps

    def __call__(self, x):
        h = x.astype(jnp.float32)
        h = h * jax.lax.rsqrt(jnp.mean(h * h, axis=-1, keepdims=True) + self.eps)
        h = h * (1.0 + self.scale[...].astype(jnp.float32))
        return h.astype(x.dtype)
'''

ROT = '''

def rotate_half(a):
    half = a.shape[-1] // 2
    return jnp.concatenate([-a[..., half:], a[..., :half]], axis=-1)


def rotary_tables(t, dtype):
    """HF's rotary table: float32 positions and frequencies, cos / sin cast to the activations' dtype."""
    inv_freq = 1.0 / (THETA ** (jnp.arange(0, DH, 2, dtype=jnp.float32) / DH))
    pos = jnp.arange(t, dtype=jnp.float32)
    ang = pos[:, None] * inv_freq[None, :]
    emb = jnp.concatenate([ang, ang], axis=-1)[None, :, None, :]  # [1, T, 1, DH]
    return jnp.cos(emb).astype(dtype), jnp.sin(emb).astype(dtype)
'''

ATTN_HAND = '''

class Attention(nnx.Module):
    def __init__(self, rngs):
        self.q_proj = nnx.Linear(D, NH * DH, use_bias={qkvb}{dt}, rngs=rngs)
        self.k_proj = nnx.Linear(D, NKV * DH, use_bias={qkvb}{dt}, rngs=rngs)
        self.v_proj = nnx.Linear(D, NKV * DH, use_bias={qkvb}{dt}, rngs=rngs)
        self.o_proj = nnx.Linear(NH * DH, D, use_bias=False{dt}, rngs=rngs)

    def __call__(self, x, cos, sin, allowed):
        b, t, _ = x.shape
        q = self.q_proj(x).reshape(b, t, NH, DH)
        k = self.k_proj(x).reshape(b, t, NKV, DH)
        v = self.v_proj(x).reshape(b, t, NKV, DH)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        k = jnp.repeat(k, NH // NKV, axis=2)
        v = jnp.repeat(v, NH // NKV, axis=2)
{core}
        return self.o_proj(o.reshape(b, t, NH * DH))
'''

CORE_HAND = '''        s = jnp.einsum("bqhd,bkhd->bhqk", q, k) * DH ** -0.5
        s = jnp.where(allowed, s, jnp.finfo(s.dtype).min)
        p = jax.nn.softmax(s.astype(jnp.float32), axis=-1).astype(q.dtype)  # HF: softmax(dtype=float32).to(q.dtype)
        o = jnp.einsum("bhqk,bkhd->bqhd", p, v)'''

CORE_DPA = '''        o = jax.nn.dot_product_attention(q, k, v, mask=allowed)  # its softmax runs in float32'''

CORE_FLAXW = '''        p = nnx.nn.attention.dot_product_attention_weights(q, k, mask=allowed)  # flax's attention, its defaults
        o = jnp.einsum("bhqk,bkhd->bqhd", p, v)'''

EMBED = '''


class Embed(nnx.Module):
    """The lookup follows the table's dtype (nnx.Embed pins dtype to the table's dtype at construction)."""

    def __init__(self, num, features, rngs):
        self.embedding = nnx.Param(jax.random.normal(rngs.params(), (num, features), jnp.float32))

    def __call__(self, ids):
        return jnp.take(self.embedding[...], ids, axis=0)

    def attend(self, h):
        return h @ self.embedding[...].T
'''

MLP = '''

class MLP(nnx.Module):
    def __init__(self, rngs):
        self.gate_proj = nnx.Linear(D, F, use_bias=False{dt}, rngs=rngs)
        self.up_proj = nnx.Linear(D, F, use_bias=False{dt}, rngs=rngs)
        self.down_proj = nnx.Linear(F, D, use_bias=False{dt}, rngs=rngs)

    def __call__(self, x):
        return self.down_proj({act}(self.gate_proj(x)) * self.up_proj(x))
'''

MOE = '''

class MixtralTopKRouter(nnx.Module):
    def __init__(self):
        self.weight = nnx.Param(jnp.zeros((E, D), jnp.float32))  # torch layout [experts, hidden]

    def __call__(self, x):
        logits = x @ self.weight[...].T
        probs = jax.nn.softmax(logits.astype(jnp.float32), axis=-1)  # HF: softmax(router_logits.float())
        top, idx = jax.lax.top_k(probs, TOPK)
        return top / top.sum(axis=-1, keepdims=True), idx


class MixtralExperts(nnx.Module):
    def __init__(self):
        self.gate_up_proj = nnx.Param(jnp.zeros((E, 2 * F, D), jnp.float32))  # torch layout
        self.down_proj = nnx.Param(jnp.zeros((E, D, F), jnp.float32))

    def __call__(self, x, weights, idx):
        out = jnp.zeros_like(x)
        for e in range(E):
            gate, up = jnp.split(x @ self.gate_up_proj[e].T, 2, axis=-1)
            h = (jax.nn.silu(gate) * up) @ self.down_proj[e].T
            w = jnp.sum(jnp.where(idx == e, weights, 0.0), axis=-1)  # this expert's routing weight (0 if not chosen)
            out = out + (h * w[:, None]).astype(out.dtype)
        return out


class MixtralSparseMoeBlock(nnx.Module):
    def __init__(self):
        self.gate = MixtralTopKRouter()
        self.experts = MixtralExperts()

    def __call__(self, x):
        b, t, d = x.shape
        flat = x.reshape(-1, d)
        weights, idx = self.gate(flat)
        return self.experts(flat, weights, idx).reshape(b, t, d)
'''

LAYER = '''

class DecoderLayer(nnx.Module):
    def __init__(self, rngs):
        self.input_layernorm = {norm}
        self.self_attn = Attention(rngs)
        self.post_attention_layernorm = {norm}
        self.mlp = {mlp}

    def __call__(self, x, cos, sin, allowed):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, allowed)
        return x + self.mlp(self.post_attention_layernorm(x))


class Model(nnx.Module):
    def __init__(self, rngs):
        self.embed_tokens = {embed}
        self.layers = nnx.List([DecoderLayer(rngs) for _ in range(L)])
        self.norm = {norm}

    def __call__(self, ids, key_mask):
        t = ids.shape[1]
        x = self.embed_tokens(ids){embscale}
        cos, sin = rotary_tables(t, x.dtype)
        allowed = jnp.tril(jnp.ones((t, t), dtype=bool))[None, None] & key_mask[:, None, None, :]
        for layer in self.layers:
            x = layer(x, cos, sin, allowed)
        return self.norm(x)


class ForCausalLM(nnx.Module):
    def __init__(self, rngs):
        self.model = Model(rngs)
{head_init}
    def __call__(self, input_ids, attention_mask):
        h = self.model(input_ids, attention_mask.astype(bool))
        return {head_call}


jax_model = ForCausalLM(nnx.Rngs(0))

lengths = np.array([T, T - 3])
batch = {{
    "input_ids": rng.integers(1, V, size=(B, T)).astype(np.int64),
    "attention_mask": (np.arange(T)[None, :] < lengths[:, None]).astype(np.int64),  # right padding
}}


def torch_loss(model, batch):
    ids, mask = batch["input_ids"], batch["attention_mask"]
    logits = model(input_ids=ids, attention_mask=mask).logits
    logp = torch.log_softmax(logits[:, :-1].float(), dim=-1)  # HF's loss upcasts the logits
    nll = -logp.gather(-1, ids[:, 1:, None])[..., 0]
    w = mask[:, 1:].float()
    return (nll * w).sum() / w.sum()


def jax_loss(model, batch):
    ids, mask = batch["input_ids"], batch["attention_mask"]
    logits = model(ids, mask)
    logp = jax.nn.log_softmax(logits[:, :-1].astype(jnp.float32), axis=-1)
    nll = -jnp.take_along_axis(logp, ids[:, 1:, None], axis=-1)[..., 0]
    w = mask[:, 1:].astype(jnp.float32)
    return (nll * w).sum() / w.sum()
'''

OPT_ADAM = '''

def torch_optimizer(params):
    return torch.optim.Adam(params, lr=5e-3)


jax_optimizer = optax.adam(5e-3)
'''

OPT_ADAMW = '''

def torch_optimizer(params):
    return torch.optim.AdamW(params, lr=5e-3, weight_decay=0.01)


jax_optimizer = optax.adamw(5e-3, weight_decay=0.01)
'''

OPT_STEPS = '''
LR, WD = 5e-3, 0.01
_torch_opts = {}


def torch_step(model, batch):
    if id(model) not in _torch_opts:
        _torch_opts[id(model)] = (model, torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=WD))
    opt = _torch_opts[id(model)][1]
    opt.zero_grad()
    loss = torch_loss(model, batch)
    loss.backward()
    opt.step()
    return loss


_jax_opts = {}


def jax_step(model, batch):
    if id(model) not in _jax_opts:
        _jax_opts[id(model)] = (model, nnx.Optimizer(model, optax.adamw(LR, weight_decay=WD), wrt=nnx.Param))
    opt = _jax_opts[id(model)][1]
    loss, grads = nnx.value_and_grad(jax_loss)(model, batch)
    opt.update(model, grads)
    return loss
'''

ARCH = {
    "mistral": dict(cfg="MistralConfig", cls="MistralForCausalLM", cfg_extra=", sliding_window=None", theta="1000000.0"),
    "llama": dict(cfg="LlamaConfig", cls="LlamaForCausalLM", cfg_extra="", theta="10000.0"),
    "qwen2": dict(cfg="Qwen2Config", cls="Qwen2ForCausalLM", cfg_extra=", use_sliding_window=False", theta="1000000.0"),
    "gemma": dict(cfg="GemmaConfig", cls="GemmaForCausalLM", cfg_extra=', hidden_activation="gelu_pytorch_tanh"',
                  theta="10000.0"),
    "mixtral": dict(cfg="MixtralConfig", cls="MixtralForCausalLM", theta="1000000.0",
                    cfg_extra=(',\n' + ' ' * 15 + 'num_local_experts=E, num_experts_per_tok=TOPK, '
                               'sliding_window=None, experts_implementation="eager"')),
}


def build(arch, kind="correct", where="none", sentence="", seed=600, style="hand", opt="adam", mixed=False):
    a = ARCH[arch]
    dt = ", dtype=jnp.bfloat16, param_dtype=jnp.float32" if mixed else ""
    gemma = arch == "gemma"
    pad = " " * (len(a["cfg"]) + 10)
    extra_consts = "E, TOPK = 2, 2  # two experts, both chosen: the routing weights are the renormalised softmax\n" \
        if arch == "mixtral" else ""
    src = HEAD.format(kind=kind, where=where, lines="{LINES}", sentence=sentence, cfg=a["cfg"], cls=a["cls"],
                      seed=seed, theta=a["theta"], extra_consts=extra_consts, pad=pad, tied=str(gemma),
                      cfg_extra=a["cfg_extra"].replace("\n" + " " * 15, "\n" + pad),
                      norm_lo=-0.4 if gemma else 0.6, norm_hi=0.4 if gemma else 1.4)
    if style == "stock" or mixed:
        norm = f"nnx.RMSNorm(D, epsilon=EPS{dt}, rngs=rngs)"
    elif gemma:
        src += RMS_GEMMA
        norm = "GemmaRMSNorm(D, EPS)"
    else:
        src += RMS_HF
        norm = "RMSNorm(D, EPS)"
    src += ROT
    core = {"hand": CORE_HAND, "stock": CORE_DPA, "flaxw": CORE_FLAXW}[style]
    src += ATTN_HAND.format(qkvb=str(arch == "qwen2"), dt=dt, core=core)
    if arch == "mixtral":
        src += MOE
        mlp = "MixtralSparseMoeBlock()"
    else:
        src += MLP.format(dt=dt, act="gelu_tanh" if gemma else "jax.nn.silu")
        mlp = "MLP(rngs)"
        if gemma:
            src = src.replace("\nclass MLP(nnx.Module):", "\ndef gelu_tanh(x):\n    return jax.nn.gelu(x, approximate=True)  "
                              "# HF gelu_pytorch_tanh\n\n\nclass MLP(nnx.Module):")
    if gemma:
        head_init = ""
        head_call = "self.model.embed_tokens.attend(h)  # tied lm_head"
        embscale = "\n        x = x * jnp.asarray(D ** 0.5, x.dtype)  # HF: embed_scale.to(weight.dtype), in the hidden dtype"
    else:
        head_init = f"        self.lm_head = nnx.Linear(D, V, use_bias=False{dt}, rngs=rngs)\n"
        head_call = "self.lm_head(h)"
        embscale = ""
    if style == "stock" or mixed:
        embed = f"nnx.Embed(V, D{dt}, rngs=rngs)"
    else:
        src += EMBED
        embed = "Embed(V, D, rngs)"
    src += LAYER.format(embed=embed, norm=norm, mlp=mlp, dt=dt, embscale=embscale, head_init=head_init, head_call=head_call)
    src += {"adam": OPT_ADAM, "adamw": OPT_ADAMW, "steps": OPT_STEPS}[opt]
    if mixed:
        src += '\ntorch_precision = "mixed"  # float32 parameters, torch.autocast("cpu", torch.bfloat16)\n' \
               'jax_precision = "mixed"  # float32 parameters, every module built with dtype=jnp.bfloat16\n'
    return src


def edit(src, old, new):
    assert src.count(old) == 1, (src.count(old), old)
    start = src[:src.index(old)].count("\n") + 1
    src = src.replace(old, new)
    return src, (start, start + len(new.rstrip("\n").split("\n")) - 1)


ADAM_OPT = (OPT_ADAM.lstrip("\n"), OPT_ADAM.lstrip("\n").replace("torch.optim.Adam(params, lr=5e-3)",
                                                              "torch.optim.AdamW(params, lr=5e-3, weight_decay=0.01)"))

CASES = [
    # (file, arch, kind, where, sentence, build kwargs, [(old, new)])
    ("01_mistral_correct.py", "mistral", "correct", "none",
     "Correct port of HF MistralForCausalLM (GQA 4/2, rope_theta 1e6, padded batch): hand-written attention and RMSNorm with HF's float32 casts (norm statistics, rotary table, attention softmax, loss log-softmax).",
     dict(seed=601), []),
    ("02_mistral_rmsnorm_eps.py", "mistral", "rmsnorm_eps", "model.layers.0.input_layernorm",
     "The port's RMSNorm adds epsilon 1e-5 where the config says 1e-6 (hidden states of RMS about 1).",
     dict(seed=602), [("        self.eps = eps\n", "        self.eps = 1e-5\n")]),
    ("03_mistral_weight_decay_dropped.py", "mistral", "weight_decay_dropped", "optimizer",
     "torch's AdamW(lr, weight_decay=0.01) is ported as optax.adam(lr): the decoupled weight decay is dropped.",
     dict(seed=603), [ADAM_OPT]),
    ("04_mistral_softmax_bf16.py", "mistral", "softmax_bf16", "model.layers.0.self_attn",
     "The attention softmax runs in the scores' dtype (bfloat16 in a bfloat16 model) where HF upcasts to float32; every other cast is HF's.",
     dict(seed=604), [('        p = jax.nn.softmax(s.astype(jnp.float32), axis=-1).astype(q.dtype)  # HF: softmax(dtype=float32).to(q.dtype)\n',
                       '        p = jax.nn.softmax(s, axis=-1)\n')]),
    ("05_gemma_correct.py", "gemma", "correct", "none",
     "Correct port of HF GemmaForCausalLM: GemmaRMSNorm x.float() * (1 + weight.float()), embeddings scaled by sqrt(hidden) in the hidden dtype, GeGLU with gelu tanh, tied lm_head, HF's float32 casts.",
     dict(seed=605), []),
    ("06_gemma_rmsnorm_bf16.py", "gemma", "rmsnorm_bf16", "model.layers.0.input_layernorm",
     "GemmaRMSNorm is computed in the input's dtype (no float32 upcast of the statistics or of 1 + weight).",
     dict(seed=606), [("        h = x.astype(jnp.float32)\n        h = h * jax.lax.rsqrt(jnp.mean(h * h, axis=-1, keepdims=True) + self.eps)\n"
                       "        h = h * (1.0 + self.scale[...].astype(jnp.float32))\n        return h.astype(x.dtype)\n",
                       "        h = x\n        h = h * jax.lax.rsqrt(jnp.mean(h * h, axis=-1, keepdims=True) + self.eps)\n"
                       "        h = h * (1.0 + self.scale[...])\n        return h\n")]),
    ("07_gemma_log_softmax_bf16.py", "gemma", "log_softmax_bf16", "loss",
     "The loss's log-softmax runs on the logits' dtype (no float32 upcast) where HF's loss upcasts the logits.",
     dict(seed=607), [("    logp = jax.nn.log_softmax(logits[:, :-1].astype(jnp.float32), axis=-1)\n",
                       "    logp = jax.nn.log_softmax(logits[:, :-1], axis=-1)\n")]),
    ("08_llama_correct_mixed.py", "llama", "correct", "none",
     "Correct mixed-precision port of HF LlamaForCausalLM: float32 parameters, every NNX module built with dtype=jnp.bfloat16, HF's float32 casts kept (torch side: autocast).",
     dict(seed=608, mixed=True), []),
    ("09_llama_rotary_bf16.py", "llama", "rotary_bf16", "model.rotary_emb",
     "The rotary cos / sin table is computed from positions and frequencies in the activations' dtype instead of float32.",
     dict(seed=609), [("    inv_freq = 1.0 / (THETA ** (jnp.arange(0, DH, 2, dtype=jnp.float32) / DH))\n    pos = jnp.arange(t, dtype=jnp.float32)\n",
                       "    inv_freq = 1.0 / (THETA ** (jnp.arange(0, DH, 2, dtype=dtype) / DH))\n    pos = jnp.arange(t, dtype=dtype)\n")]),
    ("10_llama_correct_stock_dpa.py", "llama", "correct", "none",
     "Correct port of HF LlamaForCausalLM with stock nnx.RMSNorm / nnx.Linear / nnx.Embed and jax.nn.dot_product_attention (float32 softmax inside).",
     dict(seed=610, style="stock"), []),
    ("11_qwen2_correct.py", "qwen2", "correct", "none",
     "Correct port of HF Qwen2ForCausalLM (biases on q / k / v), HF's float32 casts, AdamW ported as optax.adamw.",
     dict(seed=611, opt="adamw"), []),
    ("12_qwen2_softmax_bf16.py", "qwen2", "softmax_bf16", "model.layers.0.self_attn",
     "The attention weights come from flax's nnx.dot_product_attention_weights with its defaults, whose softmax runs in the inputs' dtype (bfloat16) where HF upcasts to float32.",
     dict(seed=612, opt="adamw"), [(CORE_HAND + "\n", CORE_FLAXW + "\n")]),
    ("13_mixtral_correct.py", "mixtral", "correct", "none",
     "Correct port of HF MixtralForCausalLM (2 experts, top-2): router softmax and top-k weights in float32 as HF, experts in torch's 3-D layout.",
     dict(seed=613), []),
    ("14_mixtral_router_bf16.py", "mixtral", "router_bf16", "model.layers.0.mlp.gate",
     "The router's softmax and top-k weights are computed in the hidden dtype instead of float32.",
     dict(seed=614), [("        probs = jax.nn.softmax(logits.astype(jnp.float32), axis=-1)  # HF: softmax(router_logits.float())\n",
                       "        probs = jax.nn.softmax(logits, axis=-1)\n")]),
    ("15_qwen2_rmsnorm_eps.py", "qwen2", "rmsnorm_eps", "model.layers.0.input_layernorm",
     "The port's RMSNorm adds epsilon 1e-5 where the config says 1e-6 (hidden states of RMS about 1).",
     dict(seed=615, opt="adamw"), [("        self.eps = eps\n", "        self.eps = 1e-5\n")]),
    ("16_llama_weight_decay_dropped.py", "llama", "weight_decay_dropped", "optimizer",
     "In its own step functions the port writes torch AdamW(lr, weight_decay=0.01) as optax.adam(lr), dropping the decoupled weight decay.",
     dict(seed=616, opt="steps"), [("nnx.Optimizer(model, optax.adamw(LR, weight_decay=WD), wrt=nnx.Param)",
                                    "nnx.Optimizer(model, optax.adam(LR), wrt=nnx.Param)")]),
]


def main():
    for fname, arch, kind, where, sentence, kw, edits in CASES:
        src = build(arch, kind, where, sentence, **kw)
        lines = None
        for old, new in edits:
            src, rng = edit(src, old, new)
            lines = rng if lines is None else (min(lines[0], rng[0]), max(lines[1], rng[1]))
        lines_s = "none" if lines is None else f"{lines[0]}-{lines[1]}"
        src = src.replace("{LINES}", lines_s, 1)
        open(os.path.join(HERE, fname), "w").write(src)
        print(fname, lines_s)


if __name__ == "__main__":
    main()
