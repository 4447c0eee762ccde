"""Adversarial findings (issue 43): torch models the checker read wrong or refused for no good reason.

- A subclass with leaves beyond its inherited rule (loralib's LoRALinear(nn.Linear): lora_A, lora_B) is
  refused naming them and the register_rule call; with that rule its adapter is copied and compared.
- A model or submodule compiled with torch.compile is read through `_orig_mod` and run eagerly, noted.
- Weight norm (torch.nn.utils.parametrizations.weight_norm and the older weight_norm hook) is compared
  as what trains: g and v, at their canonical leaves `kernel_g` [n] (n = the weight's size along the
  norm's dim) and `kernel_v` (the kernel's layout); a port with another dim differs at its module.
"""

from __future__ import annotations

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
import torch
from detach_parity import check_port, register_rule
from detach_parity.shared.apps.check.match import PortInputError
from flax import nnx
from torch import nn

RNG = np.random.default_rng(43)
BATCH = {"x": RNG.normal(size=(5, 4)), "y": RNG.normal(size=(5, 2))}
ADAM = dict(torch_optimizer=lambda p: torch.optim.Adam(p, lr=1e-2), jax_optimizer=optax.adam(1e-2))


def torch_loss(m, b):
    return ((m(b["x"]) - b["y"]) ** 2).mean()


def jax_loss(m, b):
    return jnp.mean((m(b["x"]) - b["y"]) ** 2)


def _check(torch_model, jax_model, batch=BATCH, **kwargs):
    kwargs = {"dtypes": ("float64",), "steps": 0, **kwargs}
    return check_port(torch_model, jax_model, batch, torch_loss=torch_loss, jax_loss=jax_loss, **kwargs)


def _first_bad(report) -> str:
    bad = [r for r in report.rows if not r.ok]
    return f"{bad[0].section} {bad[0].key}" if bad else ""


class Net(nn.Module):
    """fc (4 -> width, any layer), tanh, out (width -> 2)."""

    def __init__(self, fc: nn.Module, width: int = 4) -> None:
        super().__init__()
        self.fc, self.out = fc, nn.Linear(width, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(torch.tanh(self.fc(x)))


class JNet(nnx.Module):
    def __init__(self, fc: nnx.Module, width: int = 4) -> None:
        self.fc, self.out = fc, nnx.Linear(width, 2, rngs=nnx.Rngs(1))

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.out(jnp.tanh(self.fc(x)))


# --- 1. a subclass's own leaves: LoRA ---------------------------------------------------------------------------


class LoRALinear(nn.Linear):
    """loralib's LoRA layer: nn.Linear plus a rank-r adapter, B zero at init: y = x W^T + b + s x A^T B^T."""

    def __init__(self, n_in: int, n_out: int, r: int = 2, alpha: float = 4.0) -> None:
        super().__init__(n_in, n_out)
        self.lora_A = nn.Parameter(torch.randn(r, n_in) / n_in**0.5)
        self.lora_B = nn.Parameter(torch.zeros(n_out, r))
        self.scaling = alpha / r

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x) + (x @ self.lora_A.T @ self.lora_B.T) * self.scaling


class JLoRA(nnx.Module):
    """Its NNX port: kernel [in, out], bias, lora_A [in, r], lora_B [r, out]; `applied=False` forgets the adapter."""

    def __init__(self, n_in: int, n_out: int, r: int = 2, alpha: float = 4.0, applied: bool = True) -> None:
        self.kernel, self.bias = nnx.Param(jnp.zeros((n_in, n_out))), nnx.Param(jnp.zeros(n_out))
        self.lora_A, self.lora_B = nnx.Param(jnp.zeros((n_in, r))), nnx.Param(jnp.zeros((r, n_out)))
        self.scaling, self.applied = alpha / r, applied

    def __call__(self, x: jax.Array) -> jax.Array:
        y = x @ self.kernel[...] + self.bias[...]
        return y + (x @ self.lora_A[...] @ self.lora_B[...]) * self.scaling if self.applied else y


LORA_RULE = {"weight": ("kernel", (1, 0)), "bias": "bias", "lora_A": ("lora_A", (1, 0)), "lora_B": ("lora_B", (1, 0))}


def test_a_subclass_with_leaves_beyond_its_inherited_rule_is_refused_naming_them_and_the_rule() -> None:
    torch.manual_seed(0)
    port = JNet(nnx.Linear(4, 4, rngs=nnx.Rngs(0)))  # no adapter at all: it "matched" with steps=0
    with pytest.raises(PortInputError) as info:
        _check(Net(LoRALinear(4, 4)), port)
    message = str(info.value)
    assert "LoRALinear at 'fc' inherits Linear's rule" in message, message
    assert "['lora_A', 'lora_B']" in message, message
    assert (
        "register_rule(LoRALinear, {'weight': ('kernel', (1, 0)), 'bias': 'bias', 'lora_A': <its NNX leaf>, "
        "'lora_B': <its NNX leaf>})" in message
    ), message


def test_a_parameter_attached_to_a_ruled_module_is_refused_naming_it() -> None:
    fc = nn.Linear(4, 4)
    fc.gain = nn.Parameter(torch.ones(4))  # on the instance: nn.Linear's own rule does not hold it
    with pytest.raises(PortInputError, match=r"Linear at 'fc' holds \['gain'\] beyond the leaves of its rule"):
        _check(Net(fc), JNet(nnx.Linear(4, 4, rngs=nnx.Rngs(0))))


def test_lora_with_its_rule_is_compared_leaf_by_leaf() -> None:
    torch.manual_seed(0)
    with register_rule(LoRALinear, LORA_RULE):
        report = _check(Net(LoRALinear(4, 4)), JNet(JLoRA(4, 4)), steps=3, **ADAM)
        assert report.ok, report.table()
        grads = {r.key: r.torch for r in report.rows if r.section == "grads"}
        assert grads["fc/lora_A"] == "fc.lora_A" and grads["fc/lora_B"] == "fc.lora_B", grads
        forgot = _check(Net(LoRALinear(4, 4)), JNet(JLoRA(4, 4, applied=False)), steps=3, **ADAM)
        assert not forgot.ok and _first_bad(forgot) == "grads fc/lora_B", forgot.table()  # B = 0: the output agrees
        with pytest.raises(PortInputError, match="lora_A"):  # no adapter in the port: no place for it
            _check(Net(LoRALinear(4, 4)), JNet(nnx.Linear(4, 4, rngs=nnx.Rngs(0))))


# --- 5. torch.compile -------------------------------------------------------------------------------------------


def _counting_backend(calls: list):
    """A torch.compile backend that counts its compilations and runs the graph as traced (no inductor)."""

    def compile_fx(gm, example_inputs):
        calls.append(1)
        return gm.forward

    return compile_fx


@pytest.mark.parametrize("where", ["model", "submodule", "in_place"])
def test_a_compiled_model_is_read_through_orig_mod_and_run_eagerly(where: str) -> None:
    torch.manual_seed(0)
    calls: list = []
    model = Net(nn.Linear(4, 4))
    if where == "model":
        model = torch.compile(model, backend=_counting_backend(calls))
    elif where == "submodule":
        model.fc = torch.compile(model.fc, backend=_counting_backend(calls))
    else:
        model.fc.compile(backend=_counting_backend(calls))  # nn.Module.compile: no wrapper, compiled in place
    report = _check(model, JNet(nnx.Linear(4, 4, rngs=nnx.Rngs(0))), steps=2, **ADAM)
    assert report.ok, report.table()
    assert not any("ties what torch keeps apart" in h.title for h in report.hints)
    note = [n for n in report.notes if "torch.compile" in n]
    at = "(model)" if where == "model" else "fc"
    assert note and f"at {at}" in note[0] and "eager" in note[0], report.notes
    weights = {r.key: r.torch for r in report.rows if r.section == "weights"}
    assert weights["fc/kernel"] == "fc.weight", weights  # the torch names without _orig_mod
    assert calls == []  # the check ran the original module, never the compiled code


# --- 10. weight norm: g and v are what trains -------------------------------------------------------------------


def _weight_norm(layer: nn.Module, form: str, dim: int | None = 0) -> nn.Module:
    if form == "hook":
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)  # torch deprecates the hook form; users still have it
            return nn.utils.weight_norm(layer, dim=dim)
    return nn.utils.parametrizations.weight_norm(layer, dim=dim)


class JWeightNorm(nnx.Module):
    """A weight-normed dense (or conv) layer by hand: kernel = kernel_v * kernel_g / ||kernel_v||, the norm
    over every axis but `axis` (the canonical kernel's axis that g scales: -1 per output feature)."""

    def __init__(self, shape: tuple[int, ...], axis: int = -1, conv: bool = False, keepdims: bool = False) -> None:
        self.axis = axis % len(shape)
        # keepdims: g with the kernel's rank, its other axes of size 1 ([1, 1, out]), as torch keeps it ([out, 1, 1])
        g = tuple(n if a == self.axis else 1 for a, n in enumerate(shape)) if keepdims else shape[axis]
        self.kernel_v, self.kernel_g = nnx.Param(jnp.zeros(shape)), nnx.Param(jnp.zeros(g))
        self.bias, self.conv = nnx.Param(jnp.zeros(shape[-1])), conv

    def __call__(self, x: jax.Array) -> jax.Array:
        v, g = self.kernel_v[...], self.kernel_g[...]
        others = tuple(a for a in range(v.ndim) if a != self.axis)
        g = g if g.ndim == v.ndim else jnp.expand_dims(g, others)
        scale = g / jnp.sqrt(jnp.sum(v**2, axis=others, keepdims=True))
        if self.conv:  # [B, C, L] -> channels last, 'same' padding for a window of 3
            y = jax.lax.conv_general_dilated(
                jnp.moveaxis(x, 1, -1), v * scale, (1,), [(1, 1)], dimension_numbers=("NWC", "WIO", "NWC")
            )
            return (y + self.bias[...]).mean(1)
        return x @ (v * scale) + self.bias[...]


class ConvNet(nn.Module):
    def __init__(self, form: str) -> None:
        super().__init__()
        self.fc, self.out = _weight_norm(nn.Conv1d(3, 4, 3, padding=1), form), nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(torch.tanh(self.fc(x).mean(2)))


@pytest.mark.parametrize("form", ["parametrizations", "hook"])
def test_weight_norm_is_compared_as_g_and_v(form: str) -> None:
    torch.manual_seed(0)
    report = _check(Net(_weight_norm(nn.Linear(4, 4), form)), JNet(JWeightNorm((4, 4))), steps=3, **ADAM)
    assert report.ok, report.table()
    grads = {r.key: r.torch for r in report.rows if r.section == "grads"}
    g, v = ("fc.parametrizations.weight.original0", "fc.parametrizations.weight.original1")
    if form == "hook":
        g, v = "fc.weight_g", "fc.weight_v"
    assert grads["fc/kernel_g"] == g and grads["fc/kernel_v"] == v, grads
    note = [n for n in report.notes if "weight norm" in n]
    assert note and "fc" in note[0] and "dim=0" in note[0] and "kernel axis -1" in note[0], report.notes


@pytest.mark.parametrize("form", ["parametrizations", "hook"])
def test_a_weight_normed_conv_is_compared_as_g_and_v_in_the_kernels_layout(form: str) -> None:
    torch.manual_seed(0)
    batch = {"x": RNG.normal(size=(2, 3, 6)), "y": RNG.normal(size=(2, 2))}
    port = JNet(JWeightNorm((3, 3, 4), conv=True))  # kernel_v [window, in, out], kernel_g [out]
    report = _check(ConvNet(form), port, batch, steps=2, **ADAM)
    assert report.ok, report.table()


def test_a_g_held_with_the_kernels_rank_is_the_same_g() -> None:
    """A port may hold g as torch does, with the kernel's rank ([1, 1, out] for torch's [out, 1, 1]): the same
    leaf reshaped, matched; a g of another size is still refused at the leaf."""
    torch.manual_seed(0)
    batch = {"x": RNG.normal(size=(2, 3, 6)), "y": RNG.normal(size=(2, 2))}
    port = JNet(JWeightNorm((3, 3, 4), conv=True, keepdims=True))  # kernel_g [1, 1, out]
    report = _check(ConvNet("parametrizations"), port, batch, steps=2, **ADAM)
    assert report.ok, report.table()
    other = JNet(JWeightNorm((3, 3, 4), axis=1, conv=True, keepdims=True))  # g per input channel: [1, 3, 1]
    with pytest.raises(PortInputError, match=r"fc/kernel_g. has shape \(1, 3, 1\), the torch weights give \(4,\)"):
        _check(ConvNet("parametrizations"), other, batch)


def test_weight_norm_along_another_dim_differs_at_its_module() -> None:
    torch.manual_seed(0)
    model = Net(nn.utils.parametrizations.weight_norm(nn.Linear(4, 4), dim=0))  # g per output feature
    report = _check(model, JNet(JWeightNorm((4, 4), axis=0)))  # the port's g per input feature: dim=1
    assert not report.ok and _first_bad(report) == "outputs fc", report.table()
    # not square: the port's g has another size than torch's, refused at the leaf with both shapes
    model = Net(nn.utils.parametrizations.weight_norm(nn.Linear(4, 3), dim=0), width=3)
    with pytest.raises(PortInputError, match=r"fc/kernel_g. has shape \(4,\), the torch weights give \(3,\)"):
        _check(model, JNet(JWeightNorm((4, 3), axis=0), width=3))


class JGV(nnx.Module):
    """A weight-normed dense layer holding g and v under names of its own (registered with an NNX rule)."""

    def __init__(self) -> None:
        self.g, self.v, self.b = nnx.Param(jnp.zeros(4)), nnx.Param(jnp.zeros((4, 4))), nnx.Param(jnp.zeros(4))

    def __call__(self, x: jax.Array) -> jax.Array:
        v = self.v[...]
        return x @ (v * self.g[...] / jnp.sqrt(jnp.sum(v**2, axis=0, keepdims=True))) + self.b[...]


def test_g_and_v_swapped_by_the_ports_rule_are_refused_at_the_leaf() -> None:
    torch.manual_seed(0)
    model = Net(nn.utils.parametrizations.weight_norm(nn.Linear(4, 4)))
    with register_rule(JGV, {"kernel_g": "g", "kernel_v": "v", "bias": "b"}):
        assert _check(model, JNet(JGV())).ok
    with register_rule(JGV, {"kernel_g": "v", "kernel_v": "g", "bias": "b"}):
        with pytest.raises(PortInputError, match=r"fc/(g|v)|kernel_(g|v)"):
            _check(model, JNet(JGV()))


def test_other_parametrizations_are_still_refused_by_name() -> None:
    model = Net(nn.utils.parametrizations.spectral_norm(nn.Linear(4, 4)))
    with pytest.raises(PortInputError, match=r"Linear at fc has parametrized \['weight'\] \(_SpectralNorm"):
        _check(model, JNet(nnx.Linear(4, 4, rngs=nnx.Rngs(0))))
