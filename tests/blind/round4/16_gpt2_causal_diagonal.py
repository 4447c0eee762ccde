"""EXPECTED: causal_diagonal
WHERE: transformer.h.0.attn
The port builds its causal mask with tril(k=-1), hiding each token from itself too (the first token, seeing nothing, spreads its attention over every position).
"""
import jax
import jax.numpy as jnp
import numpy as np
import optax
import torch
from flax import nnx
from transformers import GPT2Config, GPT2LMHeadModel

torch.manual_seed(416)
rng = np.random.default_rng(416)
V, P, D, NH, L, B, T = 48, 16, 16, 4, 2, 4, 8
DH = D // NH

config = GPT2Config(vocab_size=V, n_positions=P, n_embd=D, n_layer=L, n_head=NH, n_inner=None,
                    activation_function="gelu_new", layer_norm_epsilon=1e-5,
                    resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=0, eos_token_id=0)
torch_model = GPT2LMHeadModel(config).eval()  # lm_head.weight is transformer.wte.weight
with torch.no_grad():
    for name, p in torch_model.named_parameters():
        if name.endswith(("ln_1.weight", "ln_2.weight", "ln_f.weight")):
            p.uniform_(0.6, 1.4)
        elif name.endswith("bias"):
            p.uniform_(-0.1, 0.1)
        elif p.dim() == 2:
            p.normal_(0.0, 0.2)


class CausalSelfAttention(nnx.Module):
    def __init__(self, rngs):
        self.c_attn = nnx.Linear(D, 3 * D, rngs=rngs)  # HF Conv1D weight is already [in, out]
        self.c_proj = nnx.Linear(D, D, rngs=rngs)

    def __call__(self, x):
        b, t, _ = x.shape
        q, k, v = jnp.split(self.c_attn(x), 3, axis=-1)
        q, k, v = (a.reshape(b, t, NH, DH).transpose(0, 2, 1, 3) for a in (q, k, v))  # [B, H, T, DH]
        scores = q @ k.transpose(0, 1, 3, 2) / jnp.sqrt(jnp.asarray(DH, x.dtype))
        causal = jnp.tril(jnp.ones((t, t), dtype=bool), k=-1)
        allowed = causal[None, None]
        scores = jnp.where(allowed, scores, jnp.finfo(scores.dtype).min)
        probs = jax.nn.softmax(scores, axis=-1)
        ctx = (probs @ v).transpose(0, 2, 1, 3).reshape(b, t, D)
        return self.c_proj(ctx)


class MLP(nnx.Module):
    def __init__(self, rngs):
        self.c_fc = nnx.Linear(D, 4 * D, rngs=rngs)
        self.c_proj = nnx.Linear(4 * D, D, rngs=rngs)

    def __call__(self, x):
        return self.c_proj(jax.nn.gelu(self.c_fc(x), approximate=True))  # gelu_new = tanh approximation


class Block(nnx.Module):
    def __init__(self, rngs):
        self.ln_1 = nnx.LayerNorm(D, epsilon=1e-5, rngs=rngs)
        self.attn = CausalSelfAttention(rngs)
        self.ln_2 = nnx.LayerNorm(D, epsilon=1e-5, rngs=rngs)
        self.mlp = MLP(rngs)

    def __call__(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT2Model(nnx.Module):
    def __init__(self, rngs):
        self.wte = nnx.Embed(V, D, rngs=rngs)
        self.wpe = nnx.Embed(P, D, rngs=rngs)
        self.h = nnx.List([Block(rngs) for _ in range(L)])
        self.ln_f = nnx.LayerNorm(D, epsilon=1e-5, rngs=rngs)

    def __call__(self, ids):
        positions = jnp.arange(ids.shape[1])
        x = self.wte(ids) + self.wpe(positions)[None]
        for block in self.h:
            x = block(x)
        return self.ln_f(x)


class GPT2LMHead(nnx.Module):
    def __init__(self, rngs):
        self.transformer = GPT2Model(rngs)

    def __call__(self, ids):
        h = self.transformer(ids)
        return self.transformer.wte.attend(h)  # lm_head tied to wte


jax_model = GPT2LMHead(nnx.Rngs(0))

ids = rng.integers(1, V, size=(B, T)).astype(np.int64)
labels = ids.copy()
labels[:, :3] = -100  # prompt positions are not trained on
labels[1, 6:] = -100
labels[3, 4] = -100
batch = {"input_ids": ids, "labels": labels}


def torch_loss(model, batch):
    # HF's labels= loss upcasts the logits to float32; the same shifted cross entropy, in the model's dtype:
    logits = model(input_ids=batch["input_ids"]).logits[:, :-1]
    labels = batch["labels"][:, 1:]
    return torch.nn.functional.cross_entropy(logits.reshape(-1, V), labels.reshape(-1), ignore_index=-100)


def jax_loss(model, batch):
    logits = model(batch["input_ids"])[:, :-1]
    labels = batch["labels"][:, 1:]
    keep = labels != -100
    logp = jax.nn.log_softmax(logits, -1)
    nll = -jnp.take_along_axis(logp, jnp.where(keep, labels, 0)[..., None], -1)[..., 0]
    return jnp.sum(jnp.where(keep, nll, 0.0)) / jnp.sum(keep)


def torch_optimizer(params):
    return torch.optim.AdamW(params, lr=1e-2, weight_decay=0.01)


jax_optimizer = optax.adamw(1e-2, weight_decay=0.01)
