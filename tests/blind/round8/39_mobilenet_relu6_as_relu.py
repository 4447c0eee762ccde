"""EXPECTED: activation_swapped
WHERE: block0
LINES: 79-79
RELATION: none
MobileNetV2 inverted-residual blocks (expand 1x1, depthwise 3x3, project 1x1, ReLU6, inference BatchNorm) ported with stock nnx layers: after the depthwise conv the port applies ReLU where MobileNetV2 applies ReLU6 (clipped at 6).
"""
import jax
import jax.numpy as jnp
import numpy as np
import optax
import torch
import torch.nn as tnn
from flax import nnx

torch.manual_seed(813)
C, E, NCLS = 16, 4, 3


class InvertedResidual(tnn.Module):  # MobileNetV2 block, stride 1, in == out: expand 1x1, depthwise 3x3, project 1x1
    def __init__(self, c, expand):
        super().__init__()
        h = c * expand
        self.expand = tnn.Conv2d(c, h, 1, bias=False)
        self.bn1 = tnn.BatchNorm2d(h)
        self.depthwise = tnn.Conv2d(h, h, 3, padding=1, groups=h, bias=False)
        self.bn2 = tnn.BatchNorm2d(h)
        self.project = tnn.Conv2d(h, c, 1, bias=False)
        self.bn3 = tnn.BatchNorm2d(c)

    def forward(self, x):
        h = torch.nn.functional.relu6(self.bn1(self.expand(x)))
        h = torch.nn.functional.relu6(self.bn2(self.depthwise(h)))
        return x + self.bn3(self.project(h))


class TorchMobileNet(tnn.Module):
    def __init__(self):
        super().__init__()
        self.stem = tnn.Conv2d(3, C, 3, stride=2, padding=1, bias=False)
        self.stem_bn = tnn.BatchNorm2d(C)
        self.block0 = InvertedResidual(C, E)
        self.block1 = InvertedResidual(C, E)
        self.classifier = tnn.Linear(C, NCLS)

    def forward(self, x):
        x = torch.nn.functional.relu6(self.stem_bn(self.stem(x)))
        x = self.block1(self.block0(x))
        return self.classifier(x.mean(dim=(2, 3)))


torch_model = TorchMobileNet().eval()  # inference-mode BatchNorm: running statistics
with torch.no_grad():
    for m in torch_model.modules():
        if isinstance(m, tnn.BatchNorm2d):
            m.weight.uniform_(0.8, 2.0)
            m.bias.uniform_(-0.3, 0.8)
            m.running_mean.uniform_(-0.2, 0.2)
            m.running_var.uniform_(0.3, 1.5)
        elif isinstance(m, tnn.Conv2d):
            m.weight.normal_(0.0, 0.6)
        elif isinstance(m, tnn.Linear):
            m.weight.normal_(0.0, 0.05)


class InvertedResidualNNX(nnx.Module):
    def __init__(self, c, expand, rngs):
        h = c * expand
        bn = lambda n: nnx.BatchNorm(n, use_running_average=True, epsilon=1e-5, rngs=rngs)  # noqa: E731
        self.expand = nnx.Conv(c, h, (1, 1), use_bias=False, rngs=rngs)
        self.bn1 = bn(h)
        self.depthwise = nnx.Conv(h, h, (3, 3), padding=((1, 1), (1, 1)), feature_group_count=h, use_bias=False,
                                  rngs=rngs)
        self.bn2 = bn(h)
        self.project = nnx.Conv(h, c, (1, 1), use_bias=False, rngs=rngs)
        self.bn3 = bn(c)

    def __call__(self, x):
        h = jax.nn.relu6(self.bn1(self.expand(x)))
        h = jax.nn.relu(self.bn2(self.depthwise(h)))
        out = x + self.bn3(self.project(h))
        return out


class MobileNet(nnx.Module):
    def __init__(self, rngs):
        self.stem = nnx.Conv(3, C, (3, 3), strides=(2, 2), padding=((1, 1), (1, 1)), use_bias=False, rngs=rngs)
        self.stem_bn = nnx.BatchNorm(C, use_running_average=True, epsilon=1e-5, rngs=rngs)
        self.block0 = InvertedResidualNNX(C, E, rngs)
        self.block1 = InvertedResidualNNX(C, E, rngs)
        self.classifier = nnx.Linear(C, NCLS, rngs=rngs)

    def __call__(self, x):  # x [B, 3, H, W] as torch's
        x = jnp.transpose(x, (0, 2, 3, 1))
        x = jax.nn.relu6(self.stem_bn(self.stem(x)))
        x = self.block1(self.block0(x))
        return self.classifier(x.mean(axis=(1, 2)))


jax_model = MobileNet(nnx.Rngs(0))

_r = np.random.default_rng(813)
batch = {"x": (2.0 * _r.normal(size=(2, 3, 16, 16))).astype(np.float32), "y": np.array([2, 0], dtype=np.int64)}


def torch_loss(model, batch):
    return torch.nn.functional.cross_entropy(model(batch["x"]), batch["y"])


def jax_loss(model, batch):
    return optax.softmax_cross_entropy_with_integer_labels(model(batch["x"]), batch["y"]).mean()


def torch_optimizer(params):
    return torch.optim.SGD(params, lr=2e-3, momentum=0.9)


jax_optimizer = optax.sgd(2e-3, momentum=0.9)
