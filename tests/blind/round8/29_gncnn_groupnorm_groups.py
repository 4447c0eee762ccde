"""EXPECTED: groupnorm_groups_wrong
WHERE: gn2
LINES: 45-45
RELATION: none
A CNN with nn.GroupNorm (4 groups, then 2 groups of 8 channels) and SGD with momentum and weight decay, ported with stock nnx layers: the port reads torch's GroupNorm(2, 16) as groups of 2 channels (group_size=2, 8 groups) where torch has 2 groups of 8.
"""
import jax
import jax.numpy as jnp
import numpy as np
import optax
import torch
from flax import nnx

torch.manual_seed(714)


class TorchCNN(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(3, 16, 3, padding=1)
        self.gn1 = torch.nn.GroupNorm(4, 16, eps=1e-5)
        self.conv2 = torch.nn.Conv2d(16, 16, 3, padding=1)
        self.gn2 = torch.nn.GroupNorm(2, 16, eps=1e-5)
        self.fc = torch.nn.Linear(16, 4)

    def forward(self, x):  # x [B, 3, H, W]
        h = torch.relu(self.gn1(self.conv1(x)))
        h = torch.relu(self.gn2(self.conv2(h)))
        return self.fc(h.mean(dim=(2, 3)))


torch_model = TorchCNN()
with torch.no_grad():
    for gn in (torch_model.gn1, torch_model.gn2):
        gn.weight.uniform_(0.6, 1.4)
        gn.bias.uniform_(-0.3, 0.3)
    torch_model.conv1.bias.uniform_(-0.01, 0.01)  # small, like the inputs: group variance about 1e-4


class JaxCNN(nnx.Module):
    def __init__(self, rngs):
        self.conv1 = nnx.Conv(3, 16, (3, 3), padding=((1, 1), (1, 1)), rngs=rngs)
        self.gn1 = nnx.GroupNorm(16, num_groups=4, epsilon=1e-5, use_fast_variance=False, rngs=rngs)
        self.conv2 = nnx.Conv(16, 16, (3, 3), padding=((1, 1), (1, 1)), rngs=rngs)
        self.gn2 = nnx.GroupNorm(16, num_groups=None, group_size=2, epsilon=1e-5, use_fast_variance=False, rngs=rngs)
        self.fc = nnx.Linear(16, 4, rngs=rngs)

    def __call__(self, x):  # x [B, 3, H, W] as torch's
        h = jnp.transpose(x, (0, 2, 3, 1))
        h = jax.nn.relu(self.gn1(self.conv1(h)))
        h = jax.nn.relu(self.gn2(self.conv2(h)))
        return self.fc(h.mean(axis=(1, 2)))


jax_model = JaxCNN(nnx.Rngs(0))

_r = np.random.default_rng(714)
batch = {"x": 0.02 * _r.normal(size=(2, 3, 8, 8)), "y": _r.integers(0, 4, size=(2,)).astype(np.int64)}


def torch_loss(model, batch):
    return torch.nn.functional.cross_entropy(model(batch["x"]), batch["y"])


def jax_loss(model, batch):
    return optax.softmax_cross_entropy_with_integer_labels(model(batch["x"]), batch["y"]).mean()


def torch_optimizer(params):
    return torch.optim.SGD(params, lr=0.05, momentum=0.9, weight_decay=5e-3)


jax_optimizer = optax.chain(optax.add_decayed_weights(5e-3), optax.sgd(0.05, momentum=0.9))
