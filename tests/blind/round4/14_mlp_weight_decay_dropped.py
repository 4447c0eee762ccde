"""EXPECTED: weight_decay_dropped
WHERE: optimizer
In its own step functions the port writes torch AdamW(lr, weight_decay=0.1) as optax.adam(lr), dropping the decoupled weight decay.
"""
import jax
import jax.numpy as jnp
import numpy as np
import optax
import torch
from flax import nnx

torch.manual_seed(414)
rng = np.random.default_rng(414)
B, D_IN, H, D_OUT = 4, 8, 16, 2
LR, WD = 1e-2, 0.1


class TorchMLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.hidden = torch.nn.Linear(D_IN, H)
        self.hidden2 = torch.nn.Linear(H, H)
        self.head = torch.nn.Linear(H, D_OUT)

    def forward(self, x):
        h = torch.nn.functional.gelu(self.hidden(x))
        h = h + torch.nn.functional.gelu(self.hidden2(h))  # residual
        return self.head(h)


torch_model = TorchMLP()
with torch.no_grad():
    for m in (torch_model.hidden, torch_model.hidden2, torch_model.head):
        m.weight.mul_(1.5)
        m.bias.uniform_(-0.4, 0.4)


class JaxMLP(nnx.Module):
    def __init__(self, rngs):
        self.hidden = nnx.Linear(D_IN, H, rngs=rngs)
        self.hidden2 = nnx.Linear(H, H, rngs=rngs)
        self.head = nnx.Linear(H, D_OUT, rngs=rngs)

    def __call__(self, x):
        h = nnx.gelu(self.hidden(x), approximate=False)  # torch's default gelu is the exact erf form
        h = h + nnx.gelu(self.hidden2(h), approximate=False)
        return self.head(h)


jax_model = JaxMLP(nnx.Rngs(0))

batch = {
    "x": rng.normal(size=(B, D_IN)).astype(np.float32),
    "y": rng.normal(size=(B, D_OUT)).astype(np.float32),
}


def torch_loss(model, batch):
    return torch.nn.functional.smooth_l1_loss(model(batch["x"]), batch["y"], beta=1.0)


def jax_loss(model, batch):
    return optax.huber_loss(model(batch["x"]), batch["y"], delta=1.0).mean()


_torch_opts = {}


def torch_step(model, batch):
    if id(model) not in _torch_opts:
        _torch_opts[id(model)] = (model, torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=WD))
    opt = _torch_opts[id(model)][1]
    opt.zero_grad()
    loss = torch_loss(model, batch)
    loss.backward()
    opt.step()
    return loss


_jax_opts = {}


def jax_step(model, batch):
    if id(model) not in _jax_opts:
        _jax_opts[id(model)] = (model, nnx.Optimizer(model, optax.adam(LR), wrt=nnx.Param))
    opt = _jax_opts[id(model)][1]
    loss, grads = nnx.value_and_grad(jax_loss)(model, batch)
    opt.update(model, grads)
    return loss
