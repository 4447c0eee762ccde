"""Adversarial findings (issue 43, items 6 and 7): NNX ports the checker refused for their leaf names, and a
user's rule with a wrong permutation the checker called "unexplained".

- A hand-written NNX norm under HF's names (one 1-D `weight` and an `eps` / `variance_epsilon`: LlamaRMSNorm,
  T5LayerNorm; `weight` + `bias` + `eps`: a LayerNorm) is recognised by what it is, as torch's side does:
  `weight` -> scale, `bias` -> bias. Where gain and bias cannot be told apart, or nothing says it is a norm,
  the refusal gives the register_rule line filled in with the class's own leaf names, and that line works.
- A rule (torch's or NNX's) whose permutation is wrong for a leaf of the same shape either way (a square
  weight, a conv kernel with as many inputs as outputs) loads, and its outputs differ: P07 is named,
  confirmed by replaying torch with the leaf in the other arrangement, at the rule's modules, with the
  rule that reads it so; that rule, registered, matches.
"""

from __future__ import annotations

import ast

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
import torch
from detach_parity import check_port, register_rule
from detach_parity.shared.apps.backends import backend
from flax import nnx
from torch import nn

E = 6
RNG = np.random.default_rng(43)
BATCH = {"x": RNG.normal(size=(3, E)), "y": RNG.normal(size=(3, E))}
ADAM = dict(torch_optimizer=lambda p: torch.optim.Adam(p, lr=1e-2), jax_optimizer=optax.adam(1e-2))


def torch_loss(model, batch):
    return ((model(batch["x"]) - batch["y"]) ** 2).mean()


def jax_loss(model, batch):
    return jnp.mean((model(batch["x"]) - batch["y"]) ** 2)


def _check(torch_model, jax_model, batch=BATCH, **kwargs):
    kwargs = {"dtypes": ("float64",), "steps": 0, **kwargs}
    return check_port(torch_model, jax_model, batch, torch_loss=torch_loss, jax_loss=jax_loss, **kwargs)


@pytest.fixture(autouse=True)
def _tables_unchanged():
    """Every test leaves the rule tables as it found them (a registered rule is removed)."""
    from detach_parity.jax_impl.backend.layout import RULES as JAX_RULES
    from detach_parity.shared.apps.check.rules import registered
    from detach_parity.torch_impl._layout import RULES as TORCH_RULES

    before = [dict(TORCH_RULES), dict(JAX_RULES), registered()]
    yield
    assert [dict(TORCH_RULES), dict(JAX_RULES), registered()] == before


# --- item 6: hand-written norms under HF's leaf names ------------------------------------------------------


class RMSNorm(nnx.Module):
    """LlamaRMSNorm as a user ports it: HF's names (weight, variance_epsilon or eps), no mean subtracted."""

    def __init__(self, d: int, eps_name: str = "eps") -> None:
        self.weight = nnx.Param(jnp.ones(d))
        setattr(self, eps_name, 1e-6)
        self.eps_name = eps_name

    def __call__(self, x):
        x32 = x.astype(jnp.float32)  # HF computes the statistics in float32
        var = jnp.mean(x32 * x32, axis=-1, keepdims=True)
        return self.weight[...] * (x32 * jax.lax.rsqrt(var + getattr(self, self.eps_name))).astype(x.dtype)


class LayerNorm(nnx.Module):
    """nn.LayerNorm as a user ports it: torch's names weight, bias, eps (or a gain and a bias of other names)."""

    def __init__(self, d: int, names: tuple[str, str] = ("weight", "bias")) -> None:
        self.names, self.eps = names, 1e-5
        setattr(self, names[0], nnx.Param(jnp.ones(d)))
        setattr(self, names[1], nnx.Param(jnp.zeros(d)))

    def __call__(self, x):
        mean = x.mean(-1, keepdims=True)
        var = ((x - mean) ** 2).mean(-1, keepdims=True)
        gain, bias = (getattr(self, n)[...] for n in self.names)
        return (x - mean) * jax.lax.rsqrt(var + self.eps) * gain + bias


class TwoLeafNorm(nnx.Module):
    """A LayerNorm whose leaves are named neither like a gain nor like a bias: `a` multiplies, `c` adds."""

    def __init__(self, d: int) -> None:
        self.a, self.c, self.eps = nnx.Param(jnp.ones(d)), nnx.Param(jnp.zeros(d)), 1e-5

    def __call__(self, x):
        mean = x.mean(-1, keepdims=True)
        var = ((x - mean) ** 2).mean(-1, keepdims=True)
        return (x - mean) * jax.lax.rsqrt(var + self.eps) * self.a[...] + self.c[...]


class NoEpsNorm(nnx.Module):
    """An RMSNorm whose epsilon is a literal in its forward: nothing says it is a norm."""

    def __init__(self, d: int) -> None:
        self.weight = nnx.Param(jnp.ones(d))

    def __call__(self, x):
        return self.weight[...] * x * jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + 1e-6)


class TorchNormed(nn.Module):
    def __init__(self, norm: nn.Module) -> None:
        super().__init__()
        self.fc, self.norm = nn.Linear(E, E), norm
        with torch.no_grad():  # a gain and a bias away from ones and zeros: a swap or a loss would show
            for p in norm.parameters():
                p.copy_(torch.randn(p.shape))

    def forward(self, x):
        return self.norm(self.fc(x))


class JaxNormed(nnx.Module):
    def __init__(self, norm: nnx.Module) -> None:
        self.fc, self.norm = nnx.Linear(E, E, rngs=nnx.Rngs(0)), norm

    def __call__(self, x):
        return self.norm(self.fc(x))


def _hf_norm(kind: str) -> nn.Module:
    """transformers' own norm classes (a pinned test dependency), imported when a test builds one."""
    if kind == "llama":
        from transformers.models.llama.modeling_llama import LlamaRMSNorm

        return LlamaRMSNorm(E, eps=1e-6)
    from transformers.models.t5.modeling_t5 import T5LayerNorm

    return T5LayerNorm(E, eps=1e-6)


@pytest.mark.parametrize("kind, eps_name", [("llama", "eps"), ("t5", "variance_epsilon")])
def test_a_hand_written_rms_norm_under_hfs_names_needs_no_rule(kind: str, eps_name: str) -> None:
    """LlamaRMSNorm / T5LayerNorm (weight, variance_epsilon; no mean subtracted) ported as `weight` and an
    epsilon: its weight is the norm's scale, copied, compared and trained as such."""
    torch.manual_seed(0)
    report = _check(TorchNormed(_hf_norm(kind)).double(), JaxNormed(RMSNorm(E, eps_name)), steps=2, **ADAM)
    assert report.ok, report.table()
    grads = {r.key: r.torch for r in report.rows if r.section == "grads"}
    assert grads["norm/weight"] == "norm.weight", grads
    assert "norm" in {r.key for r in report.rows if r.section == "outputs"}


@pytest.mark.parametrize("gain, bias", [("weight", "bias"), ("gamma", "shift_"), ("mult", "beta")])
def test_a_hand_written_layer_norm_maps_its_gain_to_scale_and_its_bias_to_bias(gain: str, bias: str) -> None:
    """weight -> scale, bias -> bias (HF's names); a gain or a bias named so, the other by elimination."""
    torch.manual_seed(0)
    torch_model, jax_model = TorchNormed(nn.LayerNorm(E)).double(), JaxNormed(LayerNorm(E, (gain, bias)))
    report = _check(torch_model, jax_model, steps=2, **ADAM)
    assert report.ok, report.table()
    grads = {r.key: r.torch for r in report.rows if r.section == "grads"}
    assert (grads[f"norm/{gain}"], grads[f"norm/{bias}"]) == ("norm.weight", "norm.bias"), grads
    # and back (NNX -> canonical): the port's gain reads as the canonical scale
    port = backend("jax").port
    port.load(jax_model, {"norm": {"scale": np.full(E, 2.0), "bias": np.full(E, 3.0)}})
    back = port.read(jax_model, ["norm"])["norm"]
    assert back["scale"][0] == back[gain][0] == 2.0 and back["bias"][0] == 3.0


def test_the_worked_llama_port_with_hand_written_hf_named_norms_matches() -> None:
    """The worked Llama port (jax_impl/backend/ports/llama.py) with every nnx.RMSNorm replaced by the
    hand-written norm a user writes from HF's source: `weight` and `eps`."""
    from detach_parity.shared.apps.check.ports import case

    args = case("llama")
    model = args.pop("jax_model")
    for path, sub in list(nnx.iter_modules(model)):
        if isinstance(sub, nnx.RMSNorm):
            parent = model
            for part in path[:-1]:
                parent = parent[int(part)] if isinstance(part, int) or str(part).isdigit() else getattr(parent, part)
            setattr(parent, path[-1], RMSNorm(sub.scale[...].shape[0]))
    torch_model, batch = args.pop("torch_model"), args.pop("batch")
    report = check_port(torch_model, model, batch, steps=1, dtypes=("float64",), **args)
    assert report.ok, report.table()
    keys = {r.key for r in report.rows if r.section == "grads"}
    assert {"model/norm/weight", "model/layers/0/input_layernorm/weight"} <= keys, sorted(keys)


class TorchGammaNorm(nn.Module):
    """A torch norm of the user's under other names than `weight` (gamma, eps): torch's side holds it bare."""

    def __init__(self) -> None:
        super().__init__()
        self.gamma, self.eps = nn.Parameter(torch.randn(E)), 1e-6

    def forward(self, x):
        return self.gamma * x * torch.rsqrt((x * x).mean(-1, keepdim=True) + self.eps)


class GammaNorm(nnx.Module):
    def __init__(self, d: int) -> None:
        self.gamma, self.eps = nnx.Param(jnp.ones(d)), 1e-6

    def __call__(self, x):
        return self.gamma[...] * x * jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + self.eps)


def test_a_norm_torch_holds_bare_keeps_its_names_both_ways() -> None:
    """torch's side recognises no norm without a `weight` (its gamma is a bare parameter, canonical `gamma`):
    the NNX twin's `gamma` takes it as it is, and comes back as it is (transfer_back)."""
    from detach_parity import transfer_back

    torch.manual_seed(0)
    torch_model = nn.Sequential(nn.Linear(E, E), TorchGammaNorm()).double()
    jax_model = nnx.Sequential(nnx.Linear(E, E, rngs=nnx.Rngs(0)), GammaNorm(E))
    report = _check(torch_model, jax_model)
    assert report.ok, report.table()
    with torch.no_grad():
        torch_model[1].gamma.zero_()
    transfer_back(jax_model, torch_model)
    assert torch.equal(torch_model[1].gamma, torch.tensor(np.asarray(jax_model.layers[1].gamma[...])))


@pytest.mark.parametrize(
    "norm, torch_norm, rule",
    [
        (TwoLeafNorm, lambda: nn.LayerNorm(E), "register_rule(TwoLeafNorm, {'scale': 'a', 'bias': 'c'})"),
        (NoEpsNorm, lambda: nn.RMSNorm(E, eps=1e-6), "register_rule(NoEpsNorm, {'scale': 'weight'})"),
    ],
    ids=["two_leaves_named_neither_way", "no_epsilon"],
)
def test_an_ambiguous_hand_written_norm_is_refused_with_its_rule_filled_in_and_that_rule_works(
    norm, torch_norm, rule: str
) -> None:
    """Two leaves named neither like a gain nor like a bias, or no epsilon attribute: refused with the one-line
    rule filled in with the class's own leaf names (not `<its leaf>`); registered as written, it matches."""
    torch.manual_seed(0)
    with pytest.raises(ValueError, match=r"has no leaf 'scale'") as refused:
        _check(TorchNormed(torch_norm()).double(), JaxNormed(norm(E)))
    assert rule in str(refused.value) and "<its leaf>" not in str(refused.value), refused.value
    leaves = ast.literal_eval(rule.removeprefix(f"register_rule({norm.__name__}, ").removesuffix(")"))
    with register_rule(norm, leaves):
        report = _check(TorchNormed(torch_norm()).double(), JaxNormed(norm(E)))
    assert report.ok, report.table()


# --- item 7: a wrong permutation in a user's rule -----------------------------------------------------------


class MyDense(nn.Module):
    """A user's torch dense layer holding torch's layout: w [out, in] (its rule needs the transpose)."""

    def __init__(self, n_in: int, n_out: int) -> None:
        super().__init__()
        self.w, self.b = nn.Parameter(torch.randn(n_out, n_in) / n_in**0.5), nn.Parameter(torch.randn(n_out))

    def forward(self, x):
        return x @ self.w.T + self.b


class MyKernelDense(MyDense):
    """A user's torch dense layer holding Flax's layout: w [in, out] (its rule needs no permutation)."""

    def forward(self, x):
        return x @ self.w + self.b


class TorchMLP(nn.Module):
    def __init__(self, layer: type) -> None:
        super().__init__()
        self.c_fc, self.c_proj = layer(E, E), layer(E, E)

    def forward(self, x):
        return self.c_proj(torch.tanh(self.c_fc(x)))


class PortMLP(nnx.Module):
    def __init__(self, act=jnp.tanh) -> None:
        rngs = nnx.Rngs(0)
        self.c_fc, self.c_proj, self.act = nnx.Linear(E, E, rngs=rngs), nnx.Linear(E, E, rngs=rngs), act

    def __call__(self, x):
        return self.c_proj(self.act(self.c_fc(x)))


def _p07(report):
    hints = [h for h in report.hints if h.pitfall == "P07"]
    assert not report.ok and hints and hints[0].confirmed, report.hints
    return hints[0]


@pytest.mark.parametrize(
    "layer, wrong, right",
    [
        (MyDense, {"w": "kernel", "b": "bias"}, {"w": ("kernel", (1, 0)), "b": "bias"}),  # identity for a transpose
        (MyKernelDense, {"w": ("kernel", (1, 0)), "b": "bias"}, {"w": "kernel", "b": "bias"}),  # the other way
    ],
)
def test_a_torch_rules_wrong_permutation_of_a_square_weight_is_named_p07_at_its_modules(layer, wrong, right) -> None:
    torch.manual_seed(0)
    with register_rule(layer, wrong):
        hint = _p07(_check(TorchMLP(layer).double(), PortMLP(), steps=1, **ADAM))
    assert hint.where == "float64 outputs c_fc", hint
    assert "in c_fc, c_proj" in hint.title and "leaf_permuted" in hint.evidence, hint
    spec = ", ".join(f"{k!r}: {v!r}" for k, v in right.items())
    assert f"register_rule({layer.__name__}, {{{spec}}})" in hint.title, hint.title
    with register_rule(layer, right):  # the rule the hint gives
        report = _check(TorchMLP(layer).double(), PortMLP(), steps=1, **ADAM)
    assert report.ok, report.table()


class JConv(nnx.Module):
    """A user's NNX conv holding torch's kernel layout [out, in, kh, kw], applied as torch's NCHW conv."""

    def __init__(self, c: int, k: int) -> None:
        self.w, self.b = nnx.Param(jnp.zeros((c, c, k, k))), nnx.Param(jnp.zeros(c))

    def __call__(self, x):  # x [B, C, H, W]
        y = jax.lax.conv_general_dilated(
            x, self.w[...], (1, 1), ((1, 1), (1, 1)), dimension_numbers=("NCHW", "OIHW", "NCHW")
        )
        return y + self.b[...][:, None, None]


class TorchConvNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(4, 4, 3, padding=1)

    def forward(self, x):
        return torch.tanh(self.conv(x))


class JaxConvNet(nnx.Module):
    def __init__(self) -> None:
        self.conv = JConv(4, 3)

    def __call__(self, x):
        return jnp.tanh(self.conv(x))


_IMAGES = {"x": RNG.normal(size=(2, 4, 5, 5)), "y": RNG.normal(size=(2, 4, 5, 5))}
_RIGHT = (3, 2, 0, 1)  # canonical [kh, kw, in, out] -> [out, in, kh, kw]


@pytest.mark.parametrize("wrong", [(2, 3, 0, 1), (3, 2, 1, 0)], ids=["in_out_swapped", "window_swapped"])
def test_an_nnx_rules_wrong_permutation_of_a_conv_kernel_is_named_p07_at_its_module(wrong) -> None:
    torch.manual_seed(0)
    with register_rule(JConv, {"kernel": ("w", wrong), "bias": "b"}):
        hint = _p07(_check(TorchConvNet().double(), JaxConvNet(), _IMAGES))
    assert hint.where == "float64 outputs conv" and "in conv:" in hint.title, hint
    assert f"register_rule(JConv, {{'kernel': ('w', {_RIGHT}), 'bias': 'b'}})" in hint.title, hint.title
    with register_rule(JConv, {"kernel": ("w", _RIGHT), "bias": "b"}):
        report = _check(TorchConvNet().double(), JaxConvNet(), _IMAGES)
    assert report.ok, report.table()


def test_a_right_rule_is_not_blamed_for_another_bug() -> None:
    """Negative control: the rule is right, the port's activation is not (sigmoid for tanh): no replay of
    the rule's leaves makes the differences vanish, so P07 is not named."""
    torch.manual_seed(0)
    with register_rule(MyDense, {"w": ("kernel", (1, 0)), "b": "bias"}):
        report = _check(TorchMLP(MyDense).double(), PortMLP(jax.nn.sigmoid))
    assert not report.ok and not [h for h in report.hints if h.pitfall == "P07"], report.hints


def test_the_leaf_permuted_knob_restores_the_model_and_refuses_bad_input() -> None:
    """The knob shadows the weight for the forward only: parameters, their order and values are untouched
    after it; a malformed spec, a leaf the rule lacks or axes that change the shape are refused by name."""
    from detach_parity.torch_impl.backend.knobs import knob

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(E, E)).double()
    x = torch.randn(2, E, dtype=torch.float64)
    before = [(n, p.detach().clone()) for n, p in model.named_parameters()]
    with knob(model, "leaf_permuted@0:kernel=1,0"):
        permuted = model(x)
    assert torch.allclose(permuted, x @ model[0].weight + model[0].bias)  # W for Wᵀ: the kernel transposed
    assert [(n, p) for n, p in model.named_parameters()] and "weight" not in vars(model[0])
    assert all(n == m and torch.equal(p, q) for (n, p), (m, q) in zip(before, model.named_parameters(), strict=True))
    assert torch.allclose(model(x), x @ model[0].weight.T + model[0].bias)
    for bad, message in [
        ("leaf_permuted@0", "expected leaf_permuted@<module paths>"),
        ("leaf_permuted@0:scale=1,0", "expected a parameter leaf of its rule, got 'scale'"),
        ("leaf_permuted@nope:kernel=1,0", "expected a submodule path"),
    ]:
        with pytest.raises(ValueError, match=message), knob(model, bad):
            pass
    wide = nn.Sequential(nn.Linear(E, E + 1)).double()
    with pytest.raises(ValueError, match=r"axes \(1, 0\) expected to keep kernel's shape \(6, 7\)"):
        with knob(wide, "leaf_permuted@0:kernel=1,0"):
            pass
