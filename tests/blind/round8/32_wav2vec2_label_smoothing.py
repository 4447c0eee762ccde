"""EXPECTED: label_smoothing_off
WHERE: loss
LINES: 95-95
RELATION: none
HF Wav2Vec2FeatureEncoder (group-norm conv stack, 3 convs) under a mean-pooled linear classifier trained with label smoothing 0.1, ported with stock nnx layers: the port spreads the smoothing mass over the K - 1 wrong classes (LS / (K - 1) off target) where torch's label_smoothing gives LS / K to every class.
"""
import jax
import jax.numpy as jnp
import numpy as np
import optax
import torch
from flax import nnx
from transformers import Wav2Vec2Config
from transformers.models.wav2vec2.modeling_wav2vec2 import Wav2Vec2FeatureEncoder

torch.manual_seed(811)
NCLS, LS = 5, 0.1
cfg = Wav2Vec2Config(conv_dim=(16, 16, 16), conv_kernel=(10, 3, 3), conv_stride=(5, 2, 2), conv_bias=False,
                     feat_extract_norm="group", feat_extract_activation="gelu")


class TorchAudioClassifier(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.feature_extractor = Wav2Vec2FeatureEncoder(cfg)
        self.classifier = torch.nn.Linear(16, NCLS)

    def forward(self, input_values):
        feats = self.feature_extractor(input_values)  # [B, C, T']
        return self.classifier(feats.mean(dim=-1))


torch_model = TorchAudioClassifier().eval()
with torch.no_grad():
    for name, p in torch_model.named_parameters():
        if "layer_norm.weight" in name:
            p.uniform_(0.6, 1.4)
        elif name.endswith("bias"):
            p.uniform_(-0.3, 0.3)
        else:
            p.normal_(0.0, 0.3)


class ConvLayer(nnx.Module):
    def __init__(self, c_in, c_out, k, s, rngs, group_norm=False):
        self.conv = nnx.Conv(c_in, c_out, (k,), strides=(s,), padding="VALID", use_bias=False, rngs=rngs)
        if group_norm:
            self.layer_norm = nnx.GroupNorm(c_out, num_groups=c_out, epsilon=1e-5, rngs=rngs)
        self.group_norm = group_norm

    def __call__(self, x):  # x [B, T, C]
        x = self.conv(x)
        if self.group_norm:
            x = self.layer_norm(x)
        return jax.nn.gelu(x, approximate=False)


class FeatureEncoder(nnx.Module):
    def __init__(self, rngs):
        dims = (1,) + tuple(cfg.conv_dim)
        self.conv_layers = nnx.List([
            ConvLayer(dims[i], dims[i + 1], cfg.conv_kernel[i], cfg.conv_stride[i], rngs, group_norm=(i == 0))
            for i in range(len(cfg.conv_dim))])

    def __call__(self, wav):
        x = wav[:, :, None]
        for layer in self.conv_layers:
            x = layer(x)
        return x


class AudioClassifier(nnx.Module):
    def __init__(self, rngs):
        self.feature_extractor = FeatureEncoder(rngs)
        self.classifier = nnx.Linear(16, NCLS, rngs=rngs)

    def __call__(self, input_values):
        return self.classifier(self.feature_extractor(input_values).mean(axis=1))


jax_model = AudioClassifier(nnx.Rngs(0))

_r = np.random.default_rng(811)
batch = {"input_values": _r.normal(size=(2, 400)).astype(np.float32),
         "labels": np.array([1, 3], dtype=np.int64)}


def torch_loss(model, batch):
    return torch.nn.functional.cross_entropy(model(batch["input_values"]), batch["labels"], label_smoothing=LS)


def jax_loss(model, batch):
    logits = model(batch["input_values"])
    onehot = jax.nn.one_hot(batch["labels"], NCLS, dtype=logits.dtype)
    target = onehot * (1.0 - LS) + LS / (NCLS - 1) * (1.0 - onehot)
    return optax.softmax_cross_entropy(logits, target).mean()


def torch_optimizer(params):
    return torch.optim.AdamW(params, lr=5e-3, weight_decay=0.05)


jax_optimizer = optax.adamw(5e-3, weight_decay=0.05)
