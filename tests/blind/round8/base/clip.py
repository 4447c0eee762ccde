"""EXPECTED: correct
WHERE: none
LINES: none
RELATION: none
SENTENCE
"""
import jax
import jax.numpy as jnp
import numpy as np
import optax
import torch
from flax import nnx
from transformers import CLIPVisionConfig, CLIPVisionModel

torch.manual_seed(816)
D, NH, F, L, IMG, PATCH, NCLS = 32, 4, 48, 2, 16, 4, 4
HD = D // NH
NPOS = (IMG // PATCH) ** 2 + 1
cfg = CLIPVisionConfig(hidden_size=D, intermediate_size=F, num_hidden_layers=L, num_attention_heads=NH,
                       image_size=IMG, patch_size=PATCH, num_channels=3, hidden_act="quick_gelu",
                       layer_norm_eps=1e-5, attention_dropout=0.0, attn_implementation="sdpa")


class TorchCLIPClassifier(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.clip = CLIPVisionModel(cfg)
        self.head = torch.nn.Linear(D, NCLS)

    def forward(self, pixel_values):
        return self.head(self.clip(pixel_values=pixel_values).pooler_output)


torch_model = TorchCLIPClassifier().eval()
with torch.no_grad():
    for name, p in torch_model.named_parameters():
        if ("layer_norm" in name or "layrnorm" in name or "layernorm" in name) and name.endswith("weight"):
            p.uniform_(0.6, 1.4)
        elif name.endswith("bias"):
            p.uniform_(-0.2, 0.2)
        else:
            p.normal_(0.0, 0.3)


class CLIPEmbeddings(nnx.Module):
    def __init__(self, rngs):
        self.class_embedding = nnx.Param(jnp.zeros((D,)))
        self.patch_embedding = nnx.Conv(3, D, (PATCH, PATCH), strides=(PATCH, PATCH), padding="VALID",
                                        use_bias=False, rngs=rngs)
        self.position_embedding = nnx.Embed(NPOS, D, rngs=rngs)

    def __call__(self, pixel_values):  # [B, 3, H, W] as torch's
        b = pixel_values.shape[0]
        patches = self.patch_embedding(jnp.transpose(pixel_values, (0, 2, 3, 1))).reshape(b, -1, D)
        cls = jnp.broadcast_to(self.class_embedding[...], (b, 1, D))
        x = jnp.concatenate([cls, patches], axis=1)
        return x + self.position_embedding(jnp.arange(NPOS))[None]


class CLIPAttention(nnx.Module):
    def __init__(self, rngs):
        self.q_proj, self.k_proj, self.v_proj, self.out_proj = (nnx.Linear(D, D, rngs=rngs) for _ in range(4))

    def __call__(self, x):
        b, t, _ = x.shape
        q = self.q_proj(x).reshape(b, t, NH, HD)
        k = self.k_proj(x).reshape(b, t, NH, HD)
        v = self.v_proj(x).reshape(b, t, NH, HD)
        w = jax.nn.softmax(jnp.einsum("bqhd,bkhd->bhqk", q, k) * HD ** -0.5, axis=-1)
        return self.out_proj(jnp.einsum("bhqk,bkhd->bqhd", w, v).reshape(b, t, D))


class CLIPMLP(nnx.Module):
    def __init__(self, rngs):
        self.fc1 = nnx.Linear(D, F, rngs=rngs)
        self.fc2 = nnx.Linear(F, D, rngs=rngs)

    def __call__(self, x):
        h = self.fc1(x)
        h = h * jax.nn.sigmoid(1.702 * h)
        return self.fc2(h)


class CLIPEncoderLayer(nnx.Module):
    def __init__(self, rngs):
        self.self_attn = CLIPAttention(rngs)
        self.layer_norm1 = nnx.LayerNorm(D, epsilon=1e-5, rngs=rngs)
        self.mlp = CLIPMLP(rngs)
        self.layer_norm2 = nnx.LayerNorm(D, epsilon=1e-5, rngs=rngs)

    def __call__(self, x):
        x = x + self.self_attn(self.layer_norm1(x))
        return x + self.mlp(self.layer_norm2(x))


class CLIPEncoder(nnx.Module):
    def __init__(self, rngs):
        self.layers = nnx.List([CLIPEncoderLayer(rngs) for _ in range(L)])

    def __call__(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


class CLIPVisionTransformer(nnx.Module):
    def __init__(self, rngs):
        self.embeddings = CLIPEmbeddings(rngs)
        self.pre_layrnorm = nnx.LayerNorm(D, epsilon=1e-5, rngs=rngs)
        self.encoder = CLIPEncoder(rngs)
        self.post_layernorm = nnx.LayerNorm(D, epsilon=1e-5, rngs=rngs)

    def __call__(self, pixel_values):
        x = self.encoder(self.pre_layrnorm(self.embeddings(pixel_values)))
        pooled = x[:, 0]
        return self.post_layernorm(pooled)


class CLIPClassifier(nnx.Module):
    def __init__(self, rngs):
        self.clip = CLIPVisionTransformer(rngs)  # HF 5: CLIPVisionModel holds the transformer's modules itself
        self.head = nnx.Linear(D, NCLS, rngs=rngs)

    def __call__(self, pixel_values):
        return self.head(self.clip(pixel_values))


jax_model = CLIPClassifier(nnx.Rngs(0))

_r = np.random.default_rng(816)
batch = {"pixel_values": _r.normal(size=(2, 3, IMG, IMG)).astype(np.float32), "y": np.array([3, 1], dtype=np.int64)}


def torch_loss(model, batch):
    return torch.nn.functional.cross_entropy(model(batch["pixel_values"]), batch["y"])


def jax_loss(model, batch):
    return optax.softmax_cross_entropy_with_integer_labels(model(batch["pixel_values"]), batch["y"]).mean()


def torch_optimizer(params):
    return torch.optim.SGD(params, lr=0.05, momentum=0.9)


jax_optimizer = optax.sgd(0.05, momentum=0.9)
