"""EXPECTED: flatten_order
WHERE: classifier
The port flattens the NHWC feature map as it is (H, W, C order) before the linear head, whose kernel is loaded as weight.T, where torch flattens in C, H, W order.
"""
import jax
import jax.numpy as jnp
import numpy as np
import optax
import torch
from flax import nnx

torch.manual_seed(503)
rng = np.random.default_rng(503)
B, C_IN, C1, C2, HW, N_CLS = 4, 3, 8, 12, 8, 5


class TorchVGG(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.features = torch.nn.Sequential(
            torch.nn.Conv2d(C_IN, C1, 3, padding=1), torch.nn.BatchNorm2d(C1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
            torch.nn.Conv2d(C1, C2, 3, padding=1), torch.nn.BatchNorm2d(C2), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        )
        self.classifier = torch.nn.Linear(C2 * (HW // 4) * (HW // 4), N_CLS)

    def forward(self, x):  # NCHW
        return self.classifier(torch.flatten(self.features(x), 1))


torch_model = TorchVGG()  # train mode
with torch.no_grad():
    for i in (1, 5):
        bn = torch_model.features[i]
        bn.weight.uniform_(0.5, 1.5)
        bn.bias.uniform_(-0.5, 0.5)
        bn.running_mean.uniform_(-0.5, 0.5)
        bn.running_var.uniform_(0.5, 2.0)
    torch_model.features[0].bias.uniform_(-0.3, 0.3)
    torch_model.classifier.bias.uniform_(-0.3, 0.3)


class TorchBatchNorm(nnx.BatchNorm):
    """nnx.BatchNorm with torch's conventions: momentum given as flax's share of the old value (0.9 for torch's 0.1)
    and the running variance updated with the unbiased batch variance."""

    def __call__(self, x):
        old_var = self.var.value
        y = super().__call__(x)
        n = x.size // x.shape[-1]
        batch_var = jax.lax.stop_gradient(x.var(axis=(0, 1, 2)))
        self.var.value = self.momentum * old_var + (1 - self.momentum) * batch_var * n / (n - 1)
        return y


class ReLU(nnx.Module):
    def __call__(self, x):
        return jax.nn.relu(x)


class MaxPool(nnx.Module):
    def __call__(self, x):  # NHWC
        return nnx.max_pool(x, (2, 2), strides=(2, 2))


class VGG(nnx.Module):
    def __init__(self, rngs):
        self.features = nnx.List([
            nnx.Conv(C_IN, C1, (3, 3), padding=((1, 1), (1, 1)), rngs=rngs),
            TorchBatchNorm(C1, momentum=0.9, epsilon=1e-5, rngs=rngs), ReLU(), MaxPool(),
            nnx.Conv(C1, C2, (3, 3), padding=((1, 1), (1, 1)), rngs=rngs),
            TorchBatchNorm(C2, momentum=0.9, epsilon=1e-5, rngs=rngs), ReLU(), MaxPool(),
        ])
        self.classifier = nnx.Linear(C2 * (HW // 4) * (HW // 4), N_CLS, rngs=rngs)

    def __call__(self, x):  # NCHW in, as torch
        h = jnp.transpose(x, (0, 2, 3, 1))
        for layer in self.features:
            h = layer(h)
        h = h.reshape(h.shape[0], -1)
        return self.classifier(h)


jax_model = VGG(nnx.Rngs(0))

batch = {
    "x": rng.normal(size=(B, C_IN, HW, HW)).astype(np.float32),
    "y": np.array([0, 3, 4, 1], dtype=np.int64),
}


def torch_loss(model, batch):
    return torch.nn.functional.cross_entropy(model(batch["x"]), batch["y"])


def jax_loss(model, batch):
    return optax.softmax_cross_entropy_with_integer_labels(model(batch["x"]), batch["y"]).mean()


def torch_optimizer(params):
    return torch.optim.SGD(params, lr=0.1, momentum=0.9)


jax_optimizer = optax.sgd(0.1, momentum=0.9)
