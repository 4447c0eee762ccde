"""EXPECTED: cls_token_position
WHERE: vit.embeddings
LINES: 52-52
RELATION: permutation axis 1
HF ViTForImageClassification (16x16 images, 4x4 patches, class token, pre-LN block) ported by hand: the port appends the class token after the patches where ViT prepends it (and the classifier still reads token 0).
"""
import jax
import jax.numpy as jnp
import numpy as np
import optax
import torch
from flax import nnx
from transformers import ViTConfig, ViTForImageClassification

torch.manual_seed(57)
D, NH, HD, FF, NCLS, EPS = 32, 4, 8, 48, 5, 1e-12
config = ViTConfig(image_size=16, patch_size=4, num_channels=3, hidden_size=D, num_hidden_layers=1,
                   num_attention_heads=NH, intermediate_size=FF, hidden_act="gelu", layer_norm_eps=EPS,
                   hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, num_labels=NCLS,
                   qkv_bias=False, attn_implementation="sdpa")
torch_model = ViTForImageClassification(config).eval()
with torch.no_grad():
    for name, p in torch_model.named_parameters():
        if "layernorm" in name and name.endswith("weight"):
            p.uniform_(0.6, 1.4)
        elif name.endswith("bias"):
            p.uniform_(-0.2, 0.2)
        elif "cls_token" in name or "position_embeddings" in name:
            p.normal_(0.0, 0.5)
        else:
            p.normal_(0.0, 0.25)


class PatchEmbeddings(nnx.Module):
    def __init__(self, rngs):
        self.projection = nnx.Conv(3, D, kernel_size=(4, 4), strides=(4, 4), padding="VALID", rngs=rngs)

    def __call__(self, pixels):  # NCHW in, like torch
        x = self.projection(jnp.transpose(pixels, (0, 2, 3, 1)))
        return x.reshape(x.shape[0], -1, D)


class ViTEmbeddings(nnx.Module):
    def __init__(self, rngs):
        self.cls_token = nnx.Param(jnp.zeros((1, 1, D)))
        self.position_embeddings = nnx.Param(jnp.zeros((1, 17, D)))
        self.patch_embeddings = PatchEmbeddings(rngs)

    def __call__(self, pixels):
        patches = self.patch_embeddings(pixels)
        cls = jnp.broadcast_to(self.cls_token[...], (patches.shape[0], 1, D))
        tokens = jnp.concatenate([patches, cls], axis=1)
        return tokens + self.position_embeddings[...]


class ViTAttention(nnx.Module):
    def __init__(self, rngs):
        self.q_proj = nnx.Linear(D, D, use_bias=False, rngs=rngs)
        self.k_proj = nnx.Linear(D, D, use_bias=False, rngs=rngs)
        self.v_proj = nnx.Linear(D, D, use_bias=False, rngs=rngs)
        self.o_proj = nnx.Linear(D, D, rngs=rngs)

    def __call__(self, x):
        B, N, _ = x.shape
        q = self.q_proj(x).reshape(B, N, NH, HD)
        k = self.k_proj(x).reshape(B, N, NH, HD)
        v = self.v_proj(x).reshape(B, N, NH, HD)
        logits = jnp.einsum("bnhd,bmhd->bhnm", q, k) * HD ** -0.5
        attn = jax.nn.softmax(logits, axis=-1)
        ctx = jnp.einsum("bhnm,bmhd->bnhd", attn, v).reshape(B, N, D)
        return self.o_proj(ctx)


class ViTMLP(nnx.Module):
    def __init__(self, rngs):
        self.fc1 = nnx.Linear(D, FF, rngs=rngs)
        self.fc2 = nnx.Linear(FF, D, rngs=rngs)

    def __call__(self, x):
        return self.fc2(nnx.gelu(self.fc1(x), approximate=False))


class ViTLayer(nnx.Module):
    def __init__(self, rngs):
        self.attention = ViTAttention(rngs)
        self.layernorm_before = nnx.LayerNorm(D, epsilon=EPS, rngs=rngs)
        self.layernorm_after = nnx.LayerNorm(D, epsilon=EPS, rngs=rngs)
        self.mlp = ViTMLP(rngs)

    def __call__(self, x):
        x = x + self.attention(self.layernorm_before(x))
        x = x + self.mlp(self.layernorm_after(x))
        return x


class ViTModel(nnx.Module):
    def __init__(self, rngs):
        self.embeddings = ViTEmbeddings(rngs)
        self.layers = nnx.List([ViTLayer(rngs)])
        self.layernorm = nnx.LayerNorm(D, epsilon=EPS, rngs=rngs)

    def __call__(self, pixels):
        x = self.embeddings(pixels)
        for layer in self.layers:
            x = layer(x)
        return self.layernorm(x)


class ViTClassifier(nnx.Module):
    def __init__(self, rngs):
        self.vit = ViTModel(rngs)
        self.classifier = nnx.Linear(D, NCLS, rngs=rngs)

    def __call__(self, pixels):
        return self.classifier(self.vit(pixels)[:, 0])


jax_model = ViTClassifier(nnx.Rngs(1))

rng = np.random.default_rng(57)
batch = {"pixel_values": rng.normal(size=(2, 3, 16, 16)).astype(np.float32),
         "labels": np.array([3, 1], dtype=np.int64)}


def torch_loss(model, batch):
    logits = model(pixel_values=batch["pixel_values"]).logits
    return torch.nn.functional.cross_entropy(logits, batch["labels"])


def jax_loss(model, batch):
    logits = model(batch["pixel_values"])
    return optax.softmax_cross_entropy_with_integer_labels(logits, batch["labels"]).mean()


def torch_optimizer(params):
    return torch.optim.AdamW(params, lr=5e-3)


jax_optimizer = optax.adamw(5e-3, weight_decay=0.01)
