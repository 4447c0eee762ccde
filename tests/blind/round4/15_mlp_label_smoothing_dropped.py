"""EXPECTED: label_smoothing_dropped
WHERE: loss
The classifier's torch loss is F.cross_entropy(label_smoothing=0.1); the port's optax.softmax_cross_entropy_with_integer_labels has no smoothing.
"""
import jax
import jax.numpy as jnp
import numpy as np
import optax
import torch
from flax import nnx

torch.manual_seed(415)
rng = np.random.default_rng(415)
B, D_IN, H, N_CLS = 4, 12, 20, 6

torch_model = torch.nn.Sequential(
    torch.nn.Linear(D_IN, H),
    torch.nn.LayerNorm(H),
    torch.nn.ReLU(),
    torch.nn.Linear(H, H),
    torch.nn.ReLU(),
    torch.nn.Linear(H, N_CLS),  # the classifier head
)
with torch.no_grad():
    torch_model[1].weight.uniform_(0.6, 1.4)
    torch_model[1].bias.uniform_(-0.2, 0.2)
    for i in (0, 3, 5):
        torch_model[i].bias.uniform_(-0.3, 0.3)


class JaxClassifier(nnx.Module):
    def __init__(self, rngs):
        self.layers = nnx.List([
            nnx.Linear(D_IN, H, rngs=rngs),
            nnx.LayerNorm(H, epsilon=1e-5, rngs=rngs),
            None,
            nnx.Linear(H, H, rngs=rngs),
            None,
            nnx.Linear(H, N_CLS, rngs=rngs),
        ])

    def __call__(self, x):
        h = jax.nn.relu(self.layers[1](self.layers[0](x)))
        h = jax.nn.relu(self.layers[3](h))
        return self.layers[5](h)


jax_model = JaxClassifier(nnx.Rngs(0))
mapping = {"0": "layers.0", "1": "layers.1", "3": "layers.3", "5": "layers.5"}

batch = {
    "x": rng.normal(size=(B, D_IN)).astype(np.float32),
    "y": np.array([2, 0, 5, 3], dtype=np.int64),
}


def torch_loss(model, batch):
    return torch.nn.functional.cross_entropy(model(batch["x"]), batch["y"], label_smoothing=0.1)


def jax_loss(model, batch):
    return optax.softmax_cross_entropy_with_integer_labels(model(batch["x"]), batch["y"]).mean()


def torch_optimizer(params):
    return torch.optim.Adam(params, lr=1e-2)


jax_optimizer = optax.adam(1e-2)
