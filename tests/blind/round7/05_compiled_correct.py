"""EXPECTED: correct
WHERE: none
LINES: none
A small CNN whose torch reference is wrapped by torch.compile(model), ported as an ordinary NNX module (NHWC, the head after a global mean pool).
"""
import jax
import jax.numpy as jnp
import numpy as np
import optax
import torch
from flax import nnx

torch.manual_seed(705)


class TorchCNN(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.conv2 = torch.nn.Conv2d(8, 16, 3, stride=2, padding=1)
        self.fc = torch.nn.Linear(16, 5)

    def forward(self, x):  # x [B, 3, H, W]
        h = torch.relu(self.conv1(x))
        h = torch.nn.functional.silu(self.conv2(h))
        return self.fc(h.mean(dim=(2, 3)))


_eager = TorchCNN()
with torch.no_grad():
    for m in (_eager.conv1, _eager.conv2, _eager.fc):
        m.bias.uniform_(-0.2, 0.2)
torch_model = torch.compile(_eager)


class JaxCNN(nnx.Module):
    def __init__(self, rngs):
        self.conv1 = nnx.Conv(3, 8, (3, 3), padding=((1, 1), (1, 1)), rngs=rngs)
        self.conv2 = nnx.Conv(8, 16, (3, 3), strides=(2, 2), padding=((1, 1), (1, 1)), rngs=rngs)
        self.fc = nnx.Linear(16, 5, rngs=rngs)

    def __call__(self, x):  # x [B, 3, H, W] as torch's
        h = jnp.transpose(x, (0, 2, 3, 1))
        h = jax.nn.relu(self.conv1(h))
        h = jax.nn.silu(self.conv2(h))
        return self.fc(h.mean(axis=(1, 2)))


jax_model = JaxCNN(nnx.Rngs(0))

_r = np.random.default_rng(705)
batch = {"x": _r.normal(size=(2, 3, 8, 8)), "y": _r.integers(0, 5, size=(2,)).astype(np.int64)}


def torch_loss(model, batch):
    return torch.nn.functional.cross_entropy(model(batch["x"]), batch["y"])


def jax_loss(model, batch):
    return optax.softmax_cross_entropy_with_integer_labels(model(batch["x"]), batch["y"]).mean()


def torch_optimizer(params):
    return torch.optim.SGD(params, lr=0.05, momentum=0.9)


jax_optimizer = optax.sgd(0.05, momentum=0.9)
