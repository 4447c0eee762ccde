"""EXPECTED: conv_padding
WHERE: conv3
The port writes the torch Conv1d conv3 (padding=0) as nnx.Conv with its default padding, which is 'SAME', so it keeps T steps where torch keeps T - 2.
"""
import jax
import jax.numpy as jnp
import numpy as np
import optax
import torch
from flax import nnx

torch.manual_seed(402)
rng = np.random.default_rng(402)
B, C_IN, C1, C2, T, N_CLS = 3, 6, 12, 16, 8, 5


class TorchSeqCNN(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = torch.nn.Conv1d(C_IN, C1, kernel_size=3, padding=1)
        self.conv2 = torch.nn.Conv1d(C1, C2, kernel_size=3, padding=2, dilation=2)
        self.conv3 = torch.nn.Conv1d(C2, C2, kernel_size=3, padding=0)
        self.head = torch.nn.Linear(C2, N_CLS)

    def forward(self, x):  # x: [B, C, T]
        h = torch.relu(self.conv1(x))
        h = torch.tanh(self.conv2(h))
        h = torch.relu(self.conv3(h))  # T - 2 steps
        return self.head(h.mean(dim=2))


torch_model = TorchSeqCNN()
with torch.no_grad():
    for m in (torch_model.conv1, torch_model.conv2, torch_model.conv3, torch_model.head):
        m.weight.mul_(1.5)
        m.bias.uniform_(-0.3, 0.3)


class JaxSeqCNN(nnx.Module):
    def __init__(self, rngs):
        self.conv1 = nnx.Conv(C_IN, C1, kernel_size=(3,), padding=((1, 1),), rngs=rngs)
        self.conv2 = nnx.Conv(C1, C2, kernel_size=(3,), padding=((2, 2),), kernel_dilation=(2,), rngs=rngs)
        self.conv3 = nnx.Conv(C2, C2, kernel_size=(3,), rngs=rngs)
        self.head = nnx.Linear(C2, N_CLS, rngs=rngs)

    def __call__(self, x):  # x: [B, C, T] as torch gets it
        h = jnp.transpose(x, (0, 2, 1))  # [B, T, C]
        h = jax.nn.relu(self.conv1(h))
        h = jnp.tanh(self.conv2(h))
        h = jax.nn.relu(self.conv3(h))
        return self.head(h.mean(axis=1))


jax_model = JaxSeqCNN(nnx.Rngs(0))

batch = {
    "x": rng.normal(size=(B, C_IN, T)).astype(np.float32),
    "y": np.array([0, 3, 4], dtype=np.int64),
}


def torch_loss(model, batch):
    return torch.nn.functional.cross_entropy(model(batch["x"]), batch["y"])


def jax_loss(model, batch):
    return optax.softmax_cross_entropy_with_integer_labels(model(batch["x"]), batch["y"]).mean()


def torch_optimizer(params):
    return torch.optim.Adam(params, lr=1e-2)


jax_optimizer = optax.adam(1e-2)
