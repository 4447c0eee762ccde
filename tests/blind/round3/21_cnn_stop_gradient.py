"""EXPECTED: stop_gradient
WHERE: blocks.1
The port wraps the residual branch of blocks.1 in jax.lax.stop_gradient, so the forward matches exactly but blocks.1's convolutions and norms get no gradient.
"""
import jax
import jax.numpy as jnp
import numpy as np
import optax
import torch
from flax import nnx

torch.manual_seed(7)
rng = np.random.default_rng(7)
B, C_IN, C, N_CLS, HW = 4, 3, 8, 5, 6


class ResBlock(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(C, C, 3, padding=1, bias=False)
        self.bn1 = torch.nn.BatchNorm2d(C)
        self.conv2 = torch.nn.Conv2d(C, C, 3, padding=1, bias=False)
        self.bn2 = torch.nn.BatchNorm2d(C)

    def forward(self, x):
        branch = self.bn2(self.conv2(torch.relu(self.bn1(self.conv1(x)))))
        return torch.relu(x + branch)


class TorchResNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = torch.nn.Conv2d(C_IN, C, 3, padding=1)
        self.blocks = torch.nn.ModuleList([ResBlock() for _ in range(2)])
        self.head = torch.nn.Linear(C, N_CLS)

    def forward(self, x):  # NCHW
        h = torch.relu(self.stem(x))
        for blk in self.blocks:
            h = blk(h)
        return self.head(h.mean(dim=(2, 3)))  # global average pooling


torch_model = TorchResNet()
with torch.no_grad():
    for m in torch_model.modules():
        if isinstance(m, torch.nn.BatchNorm2d):
            m.weight.uniform_(0.5, 1.5)
            m.bias.uniform_(-0.4, 0.4)
            m.running_mean.uniform_(-0.3, 0.3)
            m.running_var.uniform_(0.5, 2.0)
    torch_model.stem.bias.uniform_(-0.2, 0.2)
torch_model.eval()  # BatchNorm uses the running statistics


class JaxResBlock(nnx.Module):
    def __init__(self, rngs, stop_branch=False):
        self.conv1 = nnx.Conv(C, C, (3, 3), padding=((1, 1), (1, 1)), use_bias=False, rngs=rngs)
        self.bn1 = nnx.BatchNorm(C, use_running_average=True, epsilon=1e-5, rngs=rngs)
        self.conv2 = nnx.Conv(C, C, (3, 3), padding=((1, 1), (1, 1)), use_bias=False, rngs=rngs)
        self.bn2 = nnx.BatchNorm(C, use_running_average=True, epsilon=1e-5, rngs=rngs)
        self.stop_branch = stop_branch

    def __call__(self, x):  # NHWC
        branch = self.bn2(self.conv2(jax.nn.relu(self.bn1(self.conv1(x)))))
        if self.stop_branch:
            branch = jax.lax.stop_gradient(branch)
        return jax.nn.relu(x + branch)


class JaxResNet(nnx.Module):
    def __init__(self, rngs):
        self.stem = nnx.Conv(C_IN, C, (3, 3), padding=((1, 1), (1, 1)), rngs=rngs)
        self.blocks = nnx.List([JaxResBlock(rngs), JaxResBlock(rngs, stop_branch=True)])
        self.head = nnx.Linear(C, N_CLS, rngs=rngs)

    def __call__(self, x):  # x: NCHW, as torch gets it
        h = jax.nn.relu(self.stem(jnp.transpose(x, (0, 2, 3, 1))))
        for blk in self.blocks:
            h = blk(h)
        return self.head(h.mean(axis=(1, 2)))


jax_model = JaxResNet(nnx.Rngs(0))

batch = {
    "x": rng.normal(size=(B, C_IN, HW, HW)).astype(np.float32),
    "y": np.array([1, 3, 0, 4], dtype=np.int64),
}


def torch_loss(model, batch):
    return torch.nn.functional.cross_entropy(model(batch["x"]), batch["y"])


def jax_loss(model, batch):
    return optax.softmax_cross_entropy_with_integer_labels(model(batch["x"]), batch["y"]).mean()


def torch_optimizer(params):
    return torch.optim.SGD(params, lr=0.1, momentum=0.9, nesterov=True)


jax_optimizer = optax.sgd(0.1, momentum=0.9, nesterov=True)
