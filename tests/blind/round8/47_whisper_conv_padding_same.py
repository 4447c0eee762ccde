"""EXPECTED: conv_padding_side
WHERE: encoder.conv2
LINES: 80-80
RELATION: none
HF WhisperEncoder (two GELU convs, the second stride 2, frozen sinusoidal positions, pre-LN layers) under a mean-pooled classifier, ported by hand with the position table frozen through the optimizer filter: the port's stride-2 conv2 uses padding='SAME', which pads 0 on the left and 1 on the right, where torch pads 1 on each side.
"""
import jax
import jax.numpy as jnp
import numpy as np
import optax
import torch
from flax import nnx
from transformers import WhisperConfig
from transformers.models.whisper.modeling_whisper import WhisperEncoder

torch.manual_seed(817)
MEL, D, NH, F, L, SRC, NCLS = 8, 32, 4, 64, 2, 8, 3
HD = D // NH
cfg = WhisperConfig(num_mel_bins=MEL, d_model=D, encoder_layers=L, encoder_attention_heads=NH, encoder_ffn_dim=F,
                    max_source_positions=SRC, activation_function="gelu", dropout=0.0, attention_dropout=0.0,
                    activation_dropout=0.0, encoder_layerdrop=0.0, attn_implementation="sdpa")


class TorchWhisperClassifier(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = WhisperEncoder(cfg)
        self.head = torch.nn.Linear(D, NCLS)

    def forward(self, input_features):  # [B, MEL, 2 * SRC]
        return self.head(self.encoder(input_features).last_hidden_state.mean(dim=1))


torch_model = TorchWhisperClassifier().eval()
with torch.no_grad():
    for name, p in torch_model.named_parameters():
        if "embed_positions" in name:
            continue  # frozen sinusoids (requires_grad False in HF)
        if "layer_norm" in name and name.endswith("weight"):
            p.uniform_(0.6, 1.4)
        elif name.endswith("bias"):
            p.uniform_(-0.2, 0.2)
        else:
            p.normal_(0.0, 0.25)


class WhisperAttention(nnx.Module):
    def __init__(self, rngs):
        self.q_proj = nnx.Linear(D, D, rngs=rngs)
        self.k_proj = nnx.Linear(D, D, use_bias=False, rngs=rngs)
        self.v_proj = nnx.Linear(D, D, rngs=rngs)
        self.out_proj = nnx.Linear(D, D, rngs=rngs)

    def __call__(self, x):
        b, t, _ = x.shape
        q = (self.q_proj(x) * HD ** -0.5).reshape(b, t, NH, HD)
        k = self.k_proj(x).reshape(b, t, NH, HD)
        v = self.v_proj(x).reshape(b, t, NH, HD)
        w = jax.nn.softmax(jnp.einsum("bqhd,bkhd->bhqk", q, k), axis=-1)
        return self.out_proj(jnp.einsum("bhqk,bkhd->bqhd", w, v).reshape(b, t, D))


class WhisperEncoderLayer(nnx.Module):
    def __init__(self, rngs):
        self.self_attn = WhisperAttention(rngs)
        self.self_attn_layer_norm = nnx.LayerNorm(D, epsilon=1e-5, rngs=rngs)
        self.fc1 = nnx.Linear(D, F, rngs=rngs)
        self.fc2 = nnx.Linear(F, D, rngs=rngs)
        self.final_layer_norm = nnx.LayerNorm(D, epsilon=1e-5, rngs=rngs)

    def __call__(self, x):
        x = x + self.self_attn(self.self_attn_layer_norm(x))
        x = x + self.fc2(jax.nn.gelu(self.fc1(self.final_layer_norm(x)), approximate=False))
        return x


class WhisperEncoderPort(nnx.Module):
    def __init__(self, rngs):
        self.conv1 = nnx.Conv(MEL, D, (3,), padding=((1, 1),), rngs=rngs)
        self.conv2 = nnx.Conv(D, D, (3,), strides=(2,), padding="SAME", rngs=rngs)
        self.embed_positions = nnx.Embed(SRC, D, rngs=rngs)
        self.layers = nnx.List([WhisperEncoderLayer(rngs) for _ in range(L)])
        self.layer_norm = nnx.LayerNorm(D, epsilon=1e-5, rngs=rngs)

    def __call__(self, feats):  # [B, MEL, T] as torch's
        x = jnp.transpose(feats, (0, 2, 1))
        x = jax.nn.gelu(self.conv1(x), approximate=False)
        x = jax.nn.gelu(self.conv2(x), approximate=False)
        x = x + self.embed_positions.embedding[...][None, : x.shape[1]]
        for layer in self.layers:
            x = layer(x)
        return self.layer_norm(x)


class WhisperClassifier(nnx.Module):
    def __init__(self, rngs):
        self.encoder = WhisperEncoderPort(rngs)
        self.head = nnx.Linear(D, NCLS, rngs=rngs)

    def __call__(self, input_features):
        return self.head(self.encoder(input_features).mean(axis=1))


jax_model = WhisperClassifier(nnx.Rngs(0))

_r = np.random.default_rng(817)
batch = {"input_features": _r.normal(size=(2, MEL, 2 * SRC)).astype(np.float32), "y": np.array([2, 0], dtype=np.int64)}


def torch_loss(model, batch):
    return torch.nn.functional.cross_entropy(model(batch["input_features"]), batch["y"])


def jax_loss(model, batch):
    return optax.softmax_cross_entropy_with_integer_labels(model(batch["input_features"]), batch["y"]).mean()


def torch_optimizer(params):
    return torch.optim.SGD([p for p in params if p.requires_grad], lr=0.05, momentum=0.9)


# the sinusoidal position table is frozen in HF: train every Param but it
jax_optimizer = (optax.sgd(0.05, momentum=0.9), nnx.All(nnx.Param, nnx.Not(nnx.PathContains("embed_positions"))))
