"""EXPECTED: correct
WHERE: module
Correct port: a small ResNet (stem, a stride-2 residual block with a 1x1 projection shortcut, train-mode BatchNorm, global average pool) in NHWC, explicit paddings, torch's unbiased running variance, 3 SGD-Nesterov steps.
"""
import jax
import jax.numpy as jnp
import numpy as np
import optax
import torch
from flax import nnx

torch.manual_seed(403)
rng = np.random.default_rng(403)
B, C_IN, C1, C2, HW, N_CLS = 3, 3, 4, 8, 16, 6


class BasicBlock(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(C1, C2, 3, stride=2, padding=1, bias=False)
        self.bn1 = torch.nn.BatchNorm2d(C2)
        self.conv2 = torch.nn.Conv2d(C2, C2, 3, stride=1, padding=1, bias=False)
        self.bn2 = torch.nn.BatchNorm2d(C2)
        self.proj = torch.nn.Conv2d(C1, C2, 1, stride=2, bias=False)
        self.proj_bn = torch.nn.BatchNorm2d(C2)

    def forward(self, x):
        h = torch.relu(self.bn1(self.conv1(x)))
        h = self.bn2(self.conv2(h))
        return torch.relu(h + self.proj_bn(self.proj(x)))


class TorchResNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = torch.nn.Conv2d(C_IN, C1, 3, padding=1, bias=False)
        self.stem_bn = torch.nn.BatchNorm2d(C1)
        self.block = BasicBlock()
        self.pool = torch.nn.AdaptiveAvgPool2d(1)
        self.fc = torch.nn.Linear(C2, N_CLS)

    def forward(self, x):  # NCHW
        h = torch.relu(self.stem_bn(self.stem(x)))
        h = self.block(h)
        return self.fc(self.pool(h).flatten(1))


torch_model = TorchResNet()  # train mode
with torch.no_grad():
    for m in torch_model.modules():
        if isinstance(m, torch.nn.BatchNorm2d):
            m.weight.uniform_(0.5, 1.5)
            m.bias.uniform_(-0.4, 0.4)
            m.running_mean.uniform_(-0.5, 0.5)
            m.running_var.uniform_(0.5, 2.0)
    torch_model.fc.bias.uniform_(-0.3, 0.3)


class BatchNorm(nnx.BatchNorm):
    """nnx.BatchNorm (momentum = share of the old value kept) with torch's unbiased batch variance in the running var."""

    def __call__(self, x):
        old_var = self.var.value
        y = super().__call__(x)
        n = x.size // x.shape[-1]
        batch_var = jax.lax.stop_gradient(x.var(axis=(0, 1, 2)))
        self.var.value = self.momentum * old_var + (1 - self.momentum) * batch_var * n / (n - 1)
        return y


def bn(c, rngs):
    return BatchNorm(c, momentum=0.9, epsilon=1e-5, rngs=rngs)


class JaxBlock(nnx.Module):
    def __init__(self, rngs):
        self.conv1 = nnx.Conv(C1, C2, (3, 3), strides=(2, 2), padding=((1, 1), (1, 1)), use_bias=False, rngs=rngs)
        self.bn1 = bn(C2, rngs)
        self.conv2 = nnx.Conv(C2, C2, (3, 3), padding=((1, 1), (1, 1)), use_bias=False, rngs=rngs)
        self.bn2 = bn(C2, rngs)
        self.proj = nnx.Conv(C1, C2, (1, 1), strides=(2, 2), padding="VALID", use_bias=False, rngs=rngs)
        self.proj_bn = bn(C2, rngs)

    def __call__(self, x):
        h = jax.nn.relu(self.bn1(self.conv1(x)))
        h = self.bn2(self.conv2(h))
        return jax.nn.relu(h + self.proj_bn(self.proj(x)))


class JaxResNet(nnx.Module):
    def __init__(self, rngs):
        self.stem = nnx.Conv(C_IN, C1, (3, 3), padding=((1, 1), (1, 1)), use_bias=False, rngs=rngs)
        self.stem_bn = bn(C1, rngs)
        self.block = JaxBlock(rngs)
        self.fc = nnx.Linear(C2, N_CLS, rngs=rngs)

    def __call__(self, x):  # x: NCHW as torch gets it
        h = jnp.transpose(x, (0, 2, 3, 1))  # NHWC
        h = jax.nn.relu(self.stem_bn(self.stem(h)))
        h = self.block(h)
        h = h.mean(axis=(1, 2))  # global average pool over H, W
        return self.fc(h)


jax_model = JaxResNet(nnx.Rngs(0))

batch = {
    "x": rng.normal(size=(B, C_IN, HW, HW)).astype(np.float32),
    "y": np.array([1, 5, 2], dtype=np.int64),
}


def torch_loss(model, batch):
    return torch.nn.functional.cross_entropy(model(batch["x"]), batch["y"])


def jax_loss(model, batch):
    return optax.softmax_cross_entropy_with_integer_labels(model(batch["x"]), batch["y"]).mean()


def torch_optimizer(params):
    return torch.optim.SGD(params, lr=0.05, momentum=0.9, nesterov=True)


jax_optimizer = optax.sgd(0.05, momentum=0.9, nesterov=True)
