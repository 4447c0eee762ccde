"""EXPECTED: correct
WHERE: none
LINES: none
RELATION: none
A ResNet stem plus one BasicBlock (3x3 stride-2 conv, inference BatchNorm, 1x1 stride-2 downsample shortcut), SGD with Nesterov momentum, ported with nnx layers; the port matches.
"""
import jax
import jax.numpy as jnp
import numpy as np
import optax
import torch
import torch.nn as tnn
import torch.nn.functional as F
from flax import nnx

torch.manual_seed(1515)


class TorchBasicBlock(tnn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = tnn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)
        self.bn1 = tnn.BatchNorm2d(cout)
        self.conv2 = tnn.Conv2d(cout, cout, 3, padding=1, bias=False)
        self.bn2 = tnn.BatchNorm2d(cout)
        self.downsample = tnn.Sequential(tnn.Conv2d(cin, cout, 1, stride=stride, bias=False), tnn.BatchNorm2d(cout))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + self.downsample(x))


class TorchResNet(tnn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = tnn.Conv2d(3, 8, 3, padding=1, bias=False)
        self.bn1 = tnn.BatchNorm2d(8)
        self.layer1 = TorchBasicBlock(8, 16, 2)
        self.fc = tnn.Linear(16, 5)

    def forward(self, x):
        x = F.relu(self.bn1(self.conv1(x)))
        x = self.layer1(x)
        return self.fc(x.mean(dim=(2, 3)))


torch_model = TorchResNet().eval()
with torch.no_grad():
    for name, p in torch_model.named_parameters():
        if p.dim() == 1 and "fc" not in name and name.endswith("weight"):
            p.uniform_(0.6, 1.5)
        elif name.endswith("bias"):
            p.uniform_(-0.3, 0.3)
        else:
            p.normal_(0.0, 0.3)
    for m in torch_model.modules():
        if isinstance(m, tnn.BatchNorm2d):
            m.running_mean.uniform_(-0.4, 0.4)
            m.running_var.uniform_(0.5, 2.0)


def bn(c, rngs):
    return nnx.BatchNorm(c, use_running_average=True, epsilon=1e-5, rngs=rngs)


class BasicBlock(nnx.Module):
    def __init__(self, cin, cout, stride, rngs):
        self.conv1 = nnx.Conv(cin, cout, (3, 3), strides=(stride, stride), padding=((1, 1), (1, 1)), use_bias=False, rngs=rngs)
        self.bn1 = bn(cout, rngs)
        self.conv2 = nnx.Conv(cout, cout, (3, 3), padding=((1, 1), (1, 1)), use_bias=False, rngs=rngs)
        self.bn2 = bn(cout, rngs)
        self.downsample = nnx.List([nnx.Conv(cin, cout, (1, 1), strides=(stride, stride), use_bias=False, rngs=rngs),
                                    bn(cout, rngs)])

    def __call__(self, x):
        out = nnx.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        shortcut = self.downsample[1](self.downsample[0](x))
        return nnx.relu(out + shortcut)


class ResNet(nnx.Module):
    def __init__(self, rngs):
        self.conv1 = nnx.Conv(3, 8, (3, 3), padding=((1, 1), (1, 1)), use_bias=False, rngs=rngs)
        self.bn1 = bn(8, rngs)
        self.layer1 = BasicBlock(8, 16, 2, rngs)
        self.fc = nnx.Linear(16, 5, rngs=rngs)

    def __call__(self, x):  # NCHW in
        x = jnp.transpose(x, (0, 2, 3, 1))
        x = nnx.relu(self.bn1(self.conv1(x)))
        x = self.layer1(x)
        return self.fc(x.mean(axis=(1, 2)))


jax_model = ResNet(nnx.Rngs(15))

rng = np.random.default_rng(1515)
batch = {"x": rng.normal(size=(2, 3, 8, 8)).astype(np.float32), "y": np.array([4, 0], dtype=np.int64)}


def torch_loss(model, batch):
    return F.cross_entropy(model(batch["x"]), batch["y"])


def jax_loss(model, batch):
    return optax.softmax_cross_entropy_with_integer_labels(model(batch["x"]), batch["y"]).mean()


def torch_optimizer(params):
    return torch.optim.SGD(params, lr=0.1, momentum=0.9, nesterov=True)


jax_optimizer = optax.sgd(0.1, momentum=0.9, nesterov=True)
