"""EXPECTED: correct
WHERE: none
An MLP regressor trained with torch.nn.utils.clip_grad_norm_ before each SGD-momentum step (own training steps); the port writes torch's formula, scale min(max_norm / (||g|| + 1e-6), 1), as an optax.stateless transformation chained before optax.sgd, and matches in float64.
"""
import jax
import jax.numpy as jnp
import numpy as np
import optax
import torch
from flax import nnx

torch.manual_seed(515)
rng = np.random.default_rng(515)
B, I, H, O = 4, 8, 16, 3
MAX_NORM, LR, SCALE = 2e-6, 2000.0, 1e-5  # the loss is scaled so that ||g|| ~ 1e-5: clipping is active every step


class TorchMLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(I, H)
        self.fc2 = torch.nn.Linear(H, H)
        self.out = torch.nn.Linear(H, O)

    def forward(self, x):
        return self.out(torch.tanh(self.fc2(torch.tanh(self.fc1(x)))))


torch_model = TorchMLP()
with torch.no_grad():
    for m in (torch_model.fc1, torch_model.fc2, torch_model.out):
        m.bias.uniform_(-0.4, 0.4)


class MLP(nnx.Module):
    def __init__(self, rngs):
        self.fc1 = nnx.Linear(I, H, rngs=rngs)
        self.fc2 = nnx.Linear(H, H, rngs=rngs)
        self.out = nnx.Linear(H, O, rngs=rngs)

    def __call__(self, x):
        return self.out(jnp.tanh(self.fc2(jnp.tanh(self.fc1(x)))))


jax_model = MLP(nnx.Rngs(0))

batch = {
    "x": rng.normal(size=(B, I)).astype(np.float32),
    "y": rng.normal(size=(B, O)).astype(np.float32),
}


def torch_loss(model, batch):
    return SCALE * ((model(batch["x"]) - batch["y"]) ** 2).mean()


def jax_loss(model, batch):
    return SCALE * jnp.mean((model(batch["x"]) - batch["y"]) ** 2)


_TORCH_OPT, _JAX_OPT = {}, {}


def torch_step(model, batch):
    if id(model) not in _TORCH_OPT:
        _TORCH_OPT[id(model)] = (model, torch.optim.SGD(model.parameters(), lr=LR, momentum=0.9))
    opt = _TORCH_OPT[id(model)][1]
    opt.zero_grad()
    loss = torch_loss(model, batch)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), MAX_NORM)
    opt.step()
    return loss


def torch_clip(max_norm):
    """torch.nn.utils.clip_grad_norm_: g * min(max_norm / (||g|| + 1e-6), 1), applied at every step."""
    return optax.stateless(
        lambda g, _: optax.tree.scale(jnp.minimum(max_norm / (optax.tree.norm(g) + 1e-6), 1.0), g))


def jax_step(model, batch):
    if id(model) not in _JAX_OPT:
        tx = optax.chain(torch_clip(MAX_NORM), optax.sgd(LR, momentum=0.9))
        _JAX_OPT[id(model)] = (model, nnx.Optimizer(model, tx, wrt=nnx.Param))
    opt = _JAX_OPT[id(model)][1]
    loss, grads = nnx.value_and_grad(jax_loss)(model, batch)
    opt.update(model, grads)
    return loss
