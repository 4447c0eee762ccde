"""EXPECTED: batchnorm_momentum
WHERE: bn1
The port passes torch's momentum=0.1 straight to bn1's nnx.BatchNorm (subclass), which then keeps 10 % of the old running statistics instead of 90 %.
"""
import jax
import jax.numpy as jnp
import numpy as np
import optax
import torch
from flax import nnx

torch.manual_seed(1)
rng = np.random.default_rng(1)
B, C_IN, C, N_CLS, HW = 4, 3, 8, 5, 8


class TorchCNN(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(C_IN, C, 3, padding=1)
        self.bn1 = torch.nn.BatchNorm2d(C)  # momentum 0.1: new = 0.9 * old + 0.1 * batch
        self.conv2 = torch.nn.Conv2d(C, C, 3, stride=2, padding=1)
        self.bn2 = torch.nn.BatchNorm2d(C)
        self.head = torch.nn.Linear(C * (HW // 2) * (HW // 2), N_CLS)

    def forward(self, x):  # x: NCHW
        h = torch.relu(self.bn1(self.conv1(x)))
        h = torch.relu(self.bn2(self.conv2(h)))
        return self.head(h.flatten(1))


torch_model = TorchCNN()  # train mode: batch statistics, running statistics updated
with torch.no_grad():
    for bn in (torch_model.bn1, torch_model.bn2):
        bn.weight.uniform_(0.5, 1.5)
        bn.bias.uniform_(-0.5, 0.5)
        bn.running_mean.uniform_(-0.5, 0.5)
        bn.running_var.uniform_(0.5, 2.0)
    torch_model.conv1.bias.uniform_(-0.3, 0.3)


class BatchNorm(nnx.BatchNorm):
    """nnx.BatchNorm (flax convention: momentum is the share of the old value kept) storing torch's unbiased
    batch variance in the running variance."""

    def __call__(self, x):
        old_var = self.var.value
        y = super().__call__(x)
        n = x.size // x.shape[-1]
        batch_var = jax.lax.stop_gradient(x.var(axis=(0, 1, 2)))
        self.var.value = self.momentum * old_var + (1 - self.momentum) * batch_var * n / (n - 1)
        return y


class JaxCNN(nnx.Module):
    def __init__(self, rngs):
        self.conv1 = nnx.Conv(C_IN, C, (3, 3), padding=((1, 1), (1, 1)), rngs=rngs)
        self.bn1 = BatchNorm(C, momentum=0.1, epsilon=1e-5, rngs=rngs)
        self.conv2 = nnx.Conv(C, C, (3, 3), strides=(2, 2), padding=((1, 1), (1, 1)), rngs=rngs)
        self.bn2 = BatchNorm(C, momentum=0.9, epsilon=1e-5, rngs=rngs)
        self.head = nnx.Linear(C * (HW // 2) * (HW // 2), N_CLS, rngs=rngs)

    def __call__(self, x):  # x: NCHW, as torch gets it
        h = jnp.transpose(x, (0, 2, 3, 1))  # NHWC
        h = jax.nn.relu(self.bn1(self.conv1(h)))
        h = jax.nn.relu(self.bn2(self.conv2(h)))
        h = jnp.transpose(h, (0, 3, 1, 2)).reshape(h.shape[0], -1)  # torch's C, H, W order
        return self.head(h)


jax_model = JaxCNN(nnx.Rngs(0))

batch = {
    "x": rng.normal(size=(B, C_IN, HW, HW)).astype(np.float32),
    "y": np.array([0, 4, 2, 1], dtype=np.int64),
}


def torch_loss(model, batch):
    return torch.nn.functional.cross_entropy(model(batch["x"]), batch["y"])


def jax_loss(model, batch):
    return optax.softmax_cross_entropy_with_integer_labels(model(batch["x"]), batch["y"]).mean()


def torch_optimizer(params):
    return torch.optim.SGD(params, lr=0.1, momentum=0.9)


jax_optimizer = optax.sgd(0.1, momentum=0.9)
