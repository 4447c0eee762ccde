"""EXPECTED: correct
WHERE: module
ViT.
"""
import jax
import jax.numpy as jnp
import numpy as np
import optax
import torch
from flax import nnx
from transformers import ViTConfig, ViTForImageClassification

torch.manual_seed(0)
rng = np.random.default_rng(0)
IMG, PATCH, C_IN, D, NH, F, L, N_CLS, B = 8, 4, 3, 16, 2, 24, 1, 3, 3
DH, N_PATCH = D // NH, (IMG // PATCH) ** 2
EPS = 1e-12

config = ViTConfig(image_size=IMG, patch_size=PATCH, num_channels=C_IN, hidden_size=D, num_hidden_layers=L,
                   num_attention_heads=NH, intermediate_size=F, num_labels=N_CLS, hidden_act="gelu",
                   layer_norm_eps=EPS, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, qkv_bias=True)
torch_model = ViTForImageClassification(config).eval()
with torch.no_grad():
    for name, p in torch_model.named_parameters():
        if "layernorm" in name and name.endswith("weight"):
            p.uniform_(0.6, 1.4)
        elif name.endswith("bias"):
            p.uniform_(-0.1, 0.1)
        else:
            p.normal_(0.0, 0.3)


class PatchEmbeddings(nnx.Module):
    def __init__(self, rngs):
        self.projection = nnx.Conv(C_IN, D, (PATCH, PATCH), strides=(PATCH, PATCH), padding="VALID", rngs=rngs)

    def __call__(self, pixel_values):  # NCHW
        h = self.projection(jnp.transpose(pixel_values, (0, 2, 3, 1)))  # [B, H/P, W/P, D]
        return h.reshape(h.shape[0], -1, D)  # patches in row-major (h, w) order, as torch's flatten(2)


class Embeddings(nnx.Module):
    def __init__(self, rngs):
        self.cls_token = nnx.Param(jnp.zeros((1, 1, D)))
        self.position_embeddings = nnx.Param(jnp.zeros((1, N_PATCH + 1, D)))
        self.patch_embeddings = PatchEmbeddings(rngs)

    def __call__(self, pixel_values):
        x = self.patch_embeddings(pixel_values)
        cls = jnp.broadcast_to(self.cls_token.value, (x.shape[0], 1, D))
        return jnp.concatenate([cls, x], axis=1) + self.position_embeddings.value


class SelfAttention(nnx.Module):
    def __init__(self, rngs):
        self.q_proj = nnx.Linear(D, D, rngs=rngs)
        self.k_proj = nnx.Linear(D, D, rngs=rngs)
        self.v_proj = nnx.Linear(D, D, rngs=rngs)
        self.o_proj = nnx.Linear(D, D, rngs=rngs)

    def __call__(self, x):
        b, t, _ = x.shape
        q, k, v = (m(x).reshape(b, t, NH, DH) for m in (self.q_proj, self.k_proj, self.v_proj))
        s = jnp.einsum("bqhd,bkhd->bhqk", q, k) * DH ** -0.5
        ctx = jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(s, axis=-1), v).reshape(b, t, D)
        return self.o_proj(ctx)


class MLP(nnx.Module):
    def __init__(self, rngs):
        self.fc1 = nnx.Linear(D, F, rngs=rngs)
        self.fc2 = nnx.Linear(F, D, rngs=rngs)

    def __call__(self, x):
        return self.fc2(jax.nn.gelu(self.fc1(x), approximate=False))


class Layer(nnx.Module):
    def __init__(self, rngs):
        self.layernorm_before = nnx.LayerNorm(D, epsilon=EPS, rngs=rngs)
        self.attention = SelfAttention(rngs)
        self.layernorm_after = nnx.LayerNorm(D, epsilon=EPS, rngs=rngs)
        self.mlp = MLP(rngs)

    def __call__(self, x):
        x = x + self.attention(self.layernorm_before(x))
        return x + self.mlp(self.layernorm_after(x))


class ViT(nnx.Module):
    def __init__(self, rngs):
        self.embeddings = Embeddings(rngs)
        self.layers = nnx.List([Layer(rngs) for _ in range(L)])
        self.layernorm = nnx.LayerNorm(D, epsilon=EPS, rngs=rngs)

    def __call__(self, pixel_values):
        x = self.embeddings(pixel_values)
        for layer in self.layers:
            x = layer(x)
        return self.layernorm(x)


class ViTClassifier(nnx.Module):
    def __init__(self, rngs):
        self.vit = ViT(rngs)
        self.classifier = nnx.Linear(D, N_CLS, rngs=rngs)

    def __call__(self, pixel_values):
        h = self.vit(pixel_values)
        return self.classifier(h[:, 0])  # the CLS token


jax_model = ViTClassifier(nnx.Rngs(0))

batch = {
    "pixel_values": rng.normal(size=(B, C_IN, IMG, IMG)).astype(np.float32),
    "labels": np.array([2, 0, 1], dtype=np.int64),
}


def torch_loss(model, batch):
    logits = model(pixel_values=batch["pixel_values"]).logits
    return torch.nn.functional.cross_entropy(logits, batch["labels"])


def jax_loss(model, batch):
    logits = model(batch["pixel_values"])
    return optax.softmax_cross_entropy_with_integer_labels(logits, batch["labels"]).mean()


def torch_optimizer(params):
    return torch.optim.SGD(params, lr=0.05, momentum=0.9, nesterov=True)


jax_optimizer = optax.sgd(0.05, momentum=0.9, nesterov=True)
