"""EXPECTED: stop_gradient
WHERE: transformer.h.0.attn
The port wraps block 0's attention keys in jax.lax.stop_gradient: the forward matches, the gradients do not.
"""
import jax
import jax.numpy as jnp
import numpy as np
import optax
import torch
from flax import nnx
from transformers import GPT2Config, GPT2LMHeadModel

torch.manual_seed(27)
rng = np.random.default_rng(27)
V, P, D, NH, L, B, T = 32, 12, 24, 3, 2, 2, 6
DH = D // NH

config = GPT2Config(vocab_size=V, n_positions=P, n_embd=D, n_layer=L, n_head=NH, n_inner=2 * D,
                    activation_function="gelu_new", layer_norm_epsilon=1e-5,
                    resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=0, eos_token_id=0)
torch_model = GPT2LMHeadModel(config).eval()
with torch.no_grad():
    for name, p in torch_model.named_parameters():
        if "ln_" in name and name.endswith("weight"):
            p.normal_(1.0, 0.2)
        elif name.endswith("bias"):
            p.normal_(0.0, 0.1)
        elif "wpe" in name:
            p.normal_(0.0, 0.5)
        else:
            p.normal_(0.0, 0.25)


class Attention(nnx.Module):
    def __init__(self, layer_idx, rngs):
        self.layer_idx = layer_idx
        self.c_attn = nnx.Linear(D, 3 * D, rngs=rngs)
        self.c_proj = nnx.Linear(D, D, rngs=rngs)

    def __call__(self, x):
        b, t, _ = x.shape
        qkv = self.c_attn(x).reshape(b, t, 3, NH, DH)
        q, k, v = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]  # [B, T, H, DH]
        if self.layer_idx == 0:
            k = jax.lax.stop_gradient(k)
        w = jnp.einsum("bqhd,bkhd->bhqk", q, k) * (1.0 / np.sqrt(DH))
        future = jnp.triu(jnp.ones((t, t), dtype=bool), k=1)
        w = jnp.where(future, -jnp.inf, w)
        out = jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(w, axis=-1), v)
        return self.c_proj(out.reshape(b, t, D))


class FeedForward(nnx.Module):
    def __init__(self, rngs):
        self.c_fc = nnx.Linear(D, 2 * D, rngs=rngs)
        self.c_proj = nnx.Linear(2 * D, D, rngs=rngs)

    def __call__(self, x):
        h = nnx.gelu(self.c_fc(x), approximate=True)  # HF "gelu_new"
        return self.c_proj(h)


class Block(nnx.Module):
    def __init__(self, layer_idx, rngs):
        self.ln_1 = nnx.LayerNorm(D, epsilon=1e-5, rngs=rngs)
        self.attn = Attention(layer_idx, rngs)
        self.ln_2 = nnx.LayerNorm(D, epsilon=1e-5, rngs=rngs)
        self.mlp = FeedForward(rngs)

    def __call__(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class Transformer(nnx.Module):
    def __init__(self, rngs):
        self.wte = nnx.Embed(V, D, rngs=rngs)
        self.wpe = nnx.Embed(P, D, rngs=rngs)
        self.h = nnx.List([Block(i, rngs) for i in range(L)])
        self.ln_f = nnx.LayerNorm(D, epsilon=1e-5, rngs=rngs)


class GPT2LMHeadPort(nnx.Module):
    def __init__(self, rngs):
        self.transformer = Transformer(rngs)

    def __call__(self, ids):
        tr = self.transformer
        x = tr.wte(ids) + tr.wpe(jnp.arange(ids.shape[1]))
        for block in tr.h:
            x = block(x)
        h = tr.ln_f(x)
        return h @ tr.wte.embedding.value.T  # tied head


jax_model = GPT2LMHeadPort(nnx.Rngs(1))

batch = {"input_ids": rng.integers(0, V, size=(B, T)).astype(np.int64)}  # no padding


def torch_loss(model, batch):
    ids = batch["input_ids"]
    logits = model(input_ids=ids).logits
    return torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, V), ids[:, 1:].reshape(-1))


def jax_loss(model, batch):
    ids = batch["input_ids"]
    logits = model(ids)
    return optax.softmax_cross_entropy_with_integer_labels(logits[:, :-1], ids[:, 1:]).mean()


_torch_opts = {}


def torch_step(model, batch):
    opt = _torch_opts.get(id(model))
    if opt is None:
        opt = _torch_opts[id(model)] = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    opt.zero_grad()
    loss = torch_loss(model, batch)
    loss.backward()
    opt.step()
    return loss


_jax_opts = {}


@nnx.jit
def _train_step(model, opt, batch):
    loss, grads = nnx.value_and_grad(jax_loss)(model, batch)
    opt.update(model, grads)
    return loss


def jax_step(model, batch):
    opt = _jax_opts.get(id(model))
    if opt is None:
        opt = _jax_opts[id(model)] = nnx.Optimizer(model, optax.sgd(0.05, momentum=0.9), wrt=nnx.Param)
    return _train_step(model, opt, batch)
