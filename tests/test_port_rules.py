"""Modules of other libraries and the user's own (issue 25, item 3): HF's Conv1D by its rule, a rule a user
registers for a class of their own, pattern mappings over layer indices, and the bad input of each.

The models are small MLPs: GPT-2's feed-forward (two transformers Conv1D, weight [in, out]) ported
with nnx.Linear, whose kernel is the same layout, untransposed.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from detach_parity import check_port
from detach_parity.shared.apps.backends import backend
from flax import nnx
from torch import nn

E, H = 6, 10
BATCH = {"x": np.random.default_rng(0).normal(size=(3, E)), "y": np.random.default_rng(1).normal(size=(3, E))}
conv1d = pytest.importorskip("transformers.pytorch_utils").Conv1D


def torch_loss(model, batch):
    return ((model(batch["x"]) - batch["y"]) ** 2).mean()


def jax_loss(model, batch):
    return jnp.mean((model(batch["x"]) - batch["y"]) ** 2)


class GPT2MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.c_fc, self.c_proj = conv1d(H, E), conv1d(E, H)  # Conv1D(nf=out, nx=in)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.c_proj(torch.tanh(self.c_fc(x)))


class PortMLP(nnx.Module):
    def __init__(self) -> None:
        rngs = nnx.Rngs(0)
        self.c_fc, self.c_proj = nnx.Linear(E, H, rngs=rngs), nnx.Linear(H, E, rngs=rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.c_proj(jnp.tanh(self.c_fc(x)))


def _check(torch_model, jax_model, **kwargs):
    kwargs = {"dtypes": ("float64",), "steps": 0, **kwargs}
    return check_port(torch_model, jax_model, BATCH, torch_loss=torch_loss, jax_loss=jax_loss, **kwargs)


def test_conv1d_weight_is_a_dense_kernel_untransposed() -> None:
    model = GPT2MLP()
    with torch.no_grad():
        model.c_fc.bias.normal_()  # HF initialises it to zeros: a bias copied wrong would not show
    units = {u["path"]: u for u in backend("torch").port.structure(model)["units"]}
    assert units["c_fc"]["leaves"]["kernel"]["shape"] == (E, H)  # [in, out], as nnx.Linear's kernel
    assert units["c_fc"]["leaves"]["kernel"]["source"] == "c_fc.weight"
    assert not units["c_fc"]["bare"]
    read = backend("torch").port.read(model)
    np.testing.assert_array_equal(read["c_fc"]["kernel"], model.c_fc.weight.detach().numpy())
    np.testing.assert_array_equal(read["c_proj"]["bias"], model.c_proj.bias.detach().numpy())


def test_gpt2_mlp_of_conv1d_ported_with_linear_matches() -> None:
    model = GPT2MLP()
    with torch.no_grad():
        model.c_fc.bias.normal_()
    report = _check(model, PortMLP())
    assert report.ok, report.table()
    outputs = {r.key: r.torch for r in report.rows if r.section == "outputs"}
    assert {"c_fc", "c_proj"} <= set(outputs), outputs
    weights = {r.key: r.torch for r in report.rows if r.section == "weights"}
    assert weights["c_proj/kernel"] == "c_proj.weight" and weights["c_fc/bias"] == "c_fc.bias"


class SquareConv1D(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = conv1d(E, E)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(x)


class PortSquare(nnx.Module):
    def __init__(self, transposed: bool) -> None:
        self.proj, self.transposed = nnx.Linear(E, E, rngs=nnx.Rngs(0)), transposed

    def __call__(self, x: jax.Array) -> jax.Array:
        if self.transposed:  # the bug a [out, in] reading of Conv1D's weight makes: x @ W.T
            return x @ self.proj.kernel[...].T + self.proj.bias[...]
        return self.proj(x)


def test_conv1d_read_as_out_in_is_caught_at_its_output() -> None:
    assert _check(SquareConv1D(), PortSquare(transposed=False)).ok
    report = _check(SquareConv1D(), PortSquare(transposed=True))
    assert not report.ok
    bad = [r for r in report.rows if not r.ok]
    assert bad[0].section == "outputs" and bad[0].key == "(model)", report.table()  # the weights themselves agree


# --- activation modules read for their variant: GELU either way round -----------------------------------------

activations = pytest.importorskip("transformers.activations")


class GeluMLP(nn.Module):
    def __init__(self, act: nn.Module) -> None:
        super().__init__()
        self.fc, self.act, self.out = nn.Linear(E, H), act, nn.Linear(H, E)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(self.act(self.fc(x)))


class PortGelu(nnx.Module):
    def __init__(self, approximate: bool) -> None:
        rngs = nnx.Rngs(0)
        self.fc, self.out, self.approximate = nnx.Linear(E, H, rngs=rngs), nnx.Linear(H, E, rngs=rngs), approximate

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.out(jax.nn.gelu(self.fc(x), approximate=self.approximate))


@pytest.mark.parametrize(
    ("act", "variant"),
    [
        (nn.GELU(), "gelu_exact"),
        (nn.GELU(approximate="tanh"), "gelu_tanh"),
        (nn.SiLU(), "silu"),
        ("GELUActivation", "gelu_exact"),
        ("NewGELUActivation", "gelu_tanh"),
        ("GELUTanh", "gelu_tanh"),
        ("SiLUActivation", "silu"),
        (nn.ReLU(), None),
    ],
)
def test_activation_modules_are_read_for_their_variant(act, variant) -> None:
    act = getattr(activations, act)() if isinstance(act, str) else act
    modules = {m["path"]: m for m in backend("torch").port.structure(GeluMLP(act))["modules"]}
    assert modules["act"]["config"].get("kind") == variant


def test_tanh_gelu_of_hf_ported_as_exact_is_named_the_other_way_round() -> None:
    torch_model = GeluMLP(activations.NewGELUActivation())  # GPT-2's gelu_new: the tanh formula, in Python
    assert _check(torch_model, PortGelu(approximate=True)).ok  # the correct port: jax.nn.gelu's default
    report = _check(torch_model, PortGelu(approximate=False))
    hint = [h for h in report.hints if h.pitfall == "P04"]
    assert hint and hint[0].confirmed, report.table()
    assert hint[0].title.startswith("GELU the other way round"), hint[0].title
    assert report.hints[0].pitfall == "P04"


def test_exact_gelu_bound_at_init_ported_as_tanh_is_confirmed() -> None:
    # HF's GELUActivation keeps F.gelu as it was at init: the knob reaches it through the module, by its variant
    torch_model = GeluMLP(activations.GELUActivation())
    assert _check(torch_model, PortGelu(approximate=False)).ok
    hint = [h for h in _check(torch_model, PortGelu(approximate=True)).hints if h.pitfall == "P04"]
    assert hint and hint[0].confirmed and "tanh approximation" in hint[0].title, hint
