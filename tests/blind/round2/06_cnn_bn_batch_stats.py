"""EXPECTED: bn_batch_stats
WHERE: bn
In eval mode the port's BatchNorm normalises with the batch's statistics instead of the running mean and variance.
"""
import jax
import jax.numpy as jnp
import numpy as np
import optax
import torch
from flax import nnx

torch.manual_seed(2)
rng = np.random.default_rng(2)
C_IN, C, N_CLS, HW, B = 3, 8, 4, 6, 3


class TorchCNN(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(C_IN, C, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(C)
        self.head = torch.nn.Linear(C * HW * HW, N_CLS)

    def forward(self, x):  # x: NCHW
        h = torch.relu(self.bn(self.conv(x)))
        return self.head(h.flatten(1))  # flattens C, H, W


torch_model = TorchCNN().eval()  # eval: BatchNorm normalises with its running statistics
with torch.no_grad():
    torch_model.bn.weight.uniform_(0.5, 1.5)
    torch_model.bn.bias.uniform_(-0.5, 0.5)
    torch_model.bn.running_mean.uniform_(-0.5, 0.5)
    torch_model.bn.running_var.uniform_(0.5, 2.0)


class BatchNorm(nnx.Module):
    """torch BatchNorm2d over NHWC, inference only."""

    def __init__(self, num_features, epsilon=1e-5):
        self.scale = nnx.Param(jnp.ones((num_features,)))
        self.bias = nnx.Param(jnp.zeros((num_features,)))
        self.mean = nnx.BatchStat(jnp.zeros((num_features,)))
        self.var = nnx.BatchStat(jnp.ones((num_features,)))
        self.epsilon = epsilon

    def __call__(self, x):
        mu, var = x.mean(axis=(0, 1, 2)), x.var(axis=(0, 1, 2))  # batch statistics, as in training
        return (x - mu) / jnp.sqrt(var + self.epsilon) * self.scale.value + self.bias.value


class JaxCNN(nnx.Module):
    def __init__(self, rngs):
        self.conv = nnx.Conv(C_IN, C, (3, 3), padding=((1, 1), (1, 1)), rngs=rngs)
        self.bn = BatchNorm(C)
        self.head = nnx.Linear(C * HW * HW, N_CLS, rngs=rngs)

    def __call__(self, x):  # x: NCHW, as torch gets it
        h = jnp.transpose(x, (0, 2, 3, 1))  # NHWC
        h = jax.nn.relu(self.bn(self.conv(h)))
        h = jnp.transpose(h, (0, 3, 1, 2)).reshape(h.shape[0], -1)  # torch's C, H, W order
        return self.head(h)


jax_model = JaxCNN(nnx.Rngs(0))

batch = {
    "x": rng.normal(size=(B, C_IN, HW, HW)).astype(np.float32),
    "y": np.array([0, 3, 1], dtype=np.int64),
}


def torch_loss(model, batch):
    return torch.nn.functional.cross_entropy(model(batch["x"]), batch["y"])


def jax_loss(model, batch):
    return optax.softmax_cross_entropy_with_integer_labels(model(batch["x"]), batch["y"]).mean()


def torch_optimizer(params):
    return torch.optim.SGD(params, lr=0.05, momentum=0.9)


jax_optimizer = optax.sgd(0.05, momentum=0.9)
