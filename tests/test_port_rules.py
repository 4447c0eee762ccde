"""Modules of other libraries and the user's own (issue 25, item 3): HF's Conv1D by its rule, a rule a user
registers for a class of their own, pattern mappings over layer indices, and the bad input of each.

The models are small MLPs: GPT-2's feed-forward (two transformers Conv1D, weight [in, out]) ported
with nnx.Linear, whose kernel is the same layout, untransposed.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

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

E, H = 6, 10
BATCH = {"x": np.random.default_rng(0).normal(size=(3, E)), "y": np.random.default_rng(1).normal(size=(3, E))}


def conv1d(nf: int, nx: int) -> nn.Module:
    """transformers' Conv1D (a pinned test dependency), imported when a test builds one: collecting this file
    on every pytest worker would otherwise import transformers there (seconds each)."""
    from transformers.pytorch_utils import Conv1D

    return Conv1D(nf, nx)


def hf_activation(name: str) -> nn.Module:
    """An activation module of transformers.activations, by class name (imported on use, as conv1d)."""
    from transformers import activations

    return getattr(activations, name)()


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


def test_the_torch_backend_never_imports_transformers() -> None:
    # an optional dependency: its classes are known by qualified name (torch_impl/_layout.py RULES)
    code = "import sys, detach_parity.torch_impl.backend.port; sys.exit('transformers' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


def test_conv1d_weight_is_a_dense_kernel_untransposed() -> None:
    model = GPT2MLP()
    with torch.no_grad():
        model.c_fc.bias.normal_()  # HF initialises it to zeros: a bias copied wrong would not show
    units = {u["path"]: u for u in backend("torch").port.structure(model)["units"]}
    assert units["c_fc"]["leaves"]["kernel"]["shape"] == (E, H)  # [in, out], as nnx.Linear's kernel
    assert units["c_fc"]["leaves"]["kernel"]["source"] == "c_fc.weight"
    assert not units["c_fc"]["bare"]
    read = backend("torch").port.read(model)
    # exact on purpose: Conv1D's [in, out] weight is read untransposed, a copy of the same values
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
    act = hf_activation(act) if isinstance(act, str) else act
    modules = {m["path"]: m for m in backend("torch").port.structure(GeluMLP(act))["modules"]}
    assert modules["act"]["config"].get("kind") == variant


def test_tanh_gelu_of_hf_ported_as_exact_is_named_the_other_way_round() -> None:
    torch_model = GeluMLP(hf_activation("NewGELUActivation"))  # GPT-2's gelu_new: the tanh formula, in Python
    assert _check(torch_model, PortGelu(approximate=True)).ok  # the correct port: jax.nn.gelu's default
    report = _check(torch_model, PortGelu(approximate=False))
    hint = [h for h in report.hints if h.pitfall == "P04"]
    assert hint and hint[0].confirmed, report.table()
    assert hint[0].title.startswith("GELU the other way round"), hint[0].title
    assert report.hints[0].pitfall == "P04"


def test_exact_gelu_bound_at_init_ported_as_tanh_is_confirmed() -> None:
    # HF's GELUActivation keeps F.gelu as it was at init: the knob reaches it through the module, by its variant
    torch_model = GeluMLP(hf_activation("GELUActivation"))
    assert _check(torch_model, PortGelu(approximate=False)).ok
    hint = [h for h in _check(torch_model, PortGelu(approximate=True)).hints if h.pitfall == "P04"]
    assert hint and hint[0].confirmed and "tanh approximation" in hint[0].title, hint


# --- a rule the user registers for a module class of their own ------------------------------------------------


class MyDense(nn.Module):
    """A user's dense layer: weight [out, in] under names of its own (w, b), as nn.Linear's but no nn.Linear."""

    def __init__(self, n_in: int, n_out: int) -> None:
        super().__init__()
        self.w, self.b = nn.Parameter(torch.randn(n_out, n_in) / n_in**0.5), nn.Parameter(torch.randn(n_out))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x @ self.w.T + self.b


class MyMLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.c_fc, self.c_proj = MyDense(E, H), MyDense(H, E)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.c_proj(torch.tanh(self.c_fc(x)))


class JDense(nnx.Module):
    """A user's NNX dense layer holding torch's layout: w [out, in], b."""

    def __init__(self, n_in: int, n_out: int) -> None:
        self.w, self.b = nnx.Param(jnp.zeros((n_out, n_in))), nnx.Param(jnp.zeros(n_out))

    def __call__(self, x: jax.Array) -> jax.Array:
        return x @ self.w[...].T + self.b[...]


class JMLP(nnx.Module):
    def __init__(self) -> None:
        self.c_fc, self.c_proj = JDense(E, H), JDense(H, E)

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.c_proj(jnp.tanh(self.c_fc(x)))


class TorchMLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.c_fc, self.c_proj = nn.Linear(E, H), nn.Linear(H, E)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.c_proj(torch.tanh(self.c_fc(x)))


@pytest.fixture(autouse=True)
def _tables_unchanged():
    """Every test leaves the rule tables as it found them (a registered rule is removed)."""
    from detach_parity.jax_impl.backend.layout import RULES as JAX_RULES
    from detach_parity.torch_impl._layout import RULES as TORCH_RULES

    tables = (TORCH_RULES, JAX_RULES)
    before = [dict(t) for t in tables]
    yield
    assert [dict(t) for t in tables] == before


def test_without_a_rule_a_users_layer_is_refused_naming_its_weights() -> None:
    with pytest.raises(ValueError, match=r"c_fc\.w"):
        _check(MyMLP(), PortMLP())


def test_a_registered_torch_rule_ports_a_users_layer_to_nnx_linear() -> None:
    with register_rule(MyDense, {"w": ("kernel", (1, 0)), "b": "bias"}) as rule:
        assert rule.framework == "torch"
        report = _check(MyMLP(), PortMLP())
        assert report.ok, report.table()
        weights = {r.key: r.torch for r in report.rows if r.section == "weights"}
        assert weights == {
            "c_fc/kernel": "c_fc.w",
            "c_fc/bias": "c_fc.b",
            "c_proj/kernel": "c_proj.w",
            "c_proj/bias": "c_proj.b",
        }
        assert {r.key for r in report.rows if r.section == "outputs"} >= {"c_fc", "c_proj"}
        # the layout is the rule's: without the transpose the [out, in] weight has no place in a [in, out] kernel
    with register_rule(MyDense, {"w": "kernel", "b": "bias"}), pytest.raises(ValueError, match="shape"):
        _check(MyMLP(), PortMLP())


def test_a_registered_nnx_rule_ports_nn_linear_to_a_users_nnx_layer() -> None:
    rule = register_rule(JDense, {"kernel": ("w", (1, 0)), "bias": "b"})
    try:
        assert rule.framework == "jax"
        report = _check(TorchMLP(), JMLP())
        assert report.ok, report.table()
        grads = {r.key: r.torch for r in report.rows if r.section == "grads"}
        assert grads["c_fc/w"] == "c_fc.weight" and grads["c_proj/b"] == "c_proj.bias", grads
    finally:
        rule.remove()
    rule.remove()  # a second remove does nothing


def test_a_rule_registered_twice_is_refused_naming_the_class() -> None:
    with register_rule(MyDense, {"w": ("kernel", (1, 0)), "b": "bias"}):
        with pytest.raises(ValueError, match="MyDense already has a rule"):
            register_rule(MyDense, {"w": "kernel", "b": "bias"})
    with pytest.raises(ValueError, match="Linear already has a rule"):
        register_rule(nn.Linear, {"weight": "kernel"})
    with register_rule(JDense, {"kernel": "w", "bias": "b"}), pytest.raises(ValueError, match="JDense already"):
        register_rule(JDense, {"kernel": "w", "bias": "b"})


@pytest.mark.parametrize(
    ("module_type", "leaves", "message"),
    [
        (int, {"w": "kernel"}, "module_type expected a subclass of torch.nn.Module or flax.nnx.Module"),
        (MyDense, {}, "leaves expected a non-empty dict"),
        (MyDense, {"w": "kernel", "b": "kernel"}, "distinct target names"),
        (MyDense, {"w": ("kernel", (0, 0)), "b": "bias"}, r"leaves\['w'\] permutation expected 0..n-1"),
        (MyDense, {"w": 3}, r"leaves\['w'\] expected a leaf name or \(name, permutation\)"),
    ],
)
def test_a_malformed_rule_is_refused_naming_the_field(module_type, leaves, message) -> None:
    with pytest.raises(ValueError, match=message):
        register_rule(module_type, leaves)


@pytest.mark.parametrize(
    ("leaves", "message"),
    [
        ({"w": ("kernel", (1, 0))}, r"MyDense: parameters \['b'\] are in no leaf of its rule"),
        ({"w": ("kernel", (1, 0)), "b": "bias", "wb": "x"}, "MyDense: its rule's leaf 'wb' is no attribute"),
        ({"w": ("kernel", (1, 0, 2)), "b": "bias"}, r"MyDense.w: permutation \(1, 0, 2\) expected 2 axes"),
    ],
)
def test_a_rule_that_does_not_fit_the_module_is_refused_naming_the_class(leaves, message) -> None:
    with register_rule(MyDense, leaves), pytest.raises(ValueError, match=message):
        _check(MyMLP(), PortMLP())


# --- pattern mappings: one line for every layer ---------------------------------------------------------------

LAYERS = 48


class Deep(nn.Module):
    """48 residual layers named as in HF: transformer.h.<i>.mlp.{c_fc, c_proj}."""

    def __init__(self, mlp: type = TorchMLP, layers: int = LAYERS) -> None:
        super().__init__()
        self.transformer = nn.Module()
        self.transformer.h = nn.ModuleList(nn.Module() for _ in range(layers))
        for layer in self.transformer.h:
            layer.mlp = mlp()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.transformer.h:
            x = x + 0.1 * layer.mlp(x)
        return x


class JDeep(nnx.Module):
    """Its port, named otherwise: blocks.<i>.ffn.{c_fc, c_proj}."""

    def __init__(self, layers: int = LAYERS) -> None:
        self.blocks = nnx.List([nnx.Dict(ffn=PortMLP()) for _ in range(layers)])

    def __call__(self, x: jax.Array) -> jax.Array:
        for block in self.blocks:
            x = x + 0.1 * block["ffn"](x)
        return x


def test_a_48_layer_model_needs_one_mapping_line() -> None:
    with pytest.raises(ValueError, match="parameter sets differ"):
        _check(Deep(), JDeep())
    report = _check(Deep(), JDeep(), mapping={"transformer.h.*.mlp": "blocks.*.ffn"})
    assert report.ok, report.table()
    weights = {r.key: r.torch for r in report.rows if r.section == "weights"}
    assert len(weights) == 4 * LAYERS
    assert weights["blocks/47/ffn/c_proj/kernel"] == "transformer.h.47.mlp.c_proj.weight"
    assert weights["blocks/0/ffn/c_fc/bias"] == "transformer.h.0.mlp.c_fc.bias"


def test_the_most_specific_key_applies() -> None:
    from detach_parity.shared.apps.check.mapping import translate

    mapping = {"h.*.mlp": "blocks.*.ffn", "h.3.mlp": "special", "h": "all"}
    assert translate("h.7.mlp.c_fc", mapping) == "blocks/7/ffn/c_fc"
    assert translate("h.3.mlp.c_fc", mapping) == "special/c_fc"
    assert translate("h.3.attn", mapping) == "all/3/attn"
    assert translate("h.*.x", {"*.*.x": "*.*.y"}) == "h/*/y"


@pytest.mark.parametrize(
    ("mapping", "message"),
    [
        ({"transformer.h.*.attn": "blocks.*.attention"}, r"\['transformer.h.\*.attn'\] \(no torch name starts so\)"),
        ({"transformer.h.*.mlp": "ffn"}, r"\['transformer.h.\*.mlp'\] send torch 'transformer.h.0.mlp.c_fc' and"),
        (
            {"transformer.h.*.mlp": "blocks.*.ffn", "transformer.*.0.mlp": "blocks.0.x"},
            r"keys \['transformer.h.\*.mlp', 'transformer.\*.0.mlp'\] both match torch 'transformer.h.0.mlp",
        ),
        ({"transformer.h.1*": "blocks"}, r"'transformer.h.1\*': expected `\*` as a whole path component"),
        ({"transformer.h.*": "blocks.*.*"}, "expected the target to use the key's 1 wildcard"),
    ],
)
def test_a_pattern_that_matches_nothing_or_two_things_is_refused_naming_it(mapping, message) -> None:
    with pytest.raises(ValueError, match=message):
        _check(Deep(layers=2), JDeep(2), mapping=mapping)


class Scales(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.h = nn.ModuleList(nn.Module() for _ in range(2))
        for layer in self.h:
            layer.gain = nn.Parameter(torch.ones(E))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.h[0].gain * self.h[1].gain


class JScales(nnx.Module):
    def __init__(self) -> None:
        self.gains = nnx.List([nnx.Param(jnp.ones(E)) for _ in range(2)])

    def __call__(self, x: jax.Array) -> jax.Array:
        return x * self.gains[0][...] * self.gains[1][...]


def test_a_pattern_over_bare_parameters_maps_each_and_refuses_two_to_one() -> None:
    assert _check(Scales(), JScales(), mapping={"h.*.gain": "gains.*"}).ok
    with pytest.raises(ValueError, match=r"\['h.\*.gain'\] send torch 'h.0.gain' and 'h.1.gain' to one NNX place"):
        _check(Scales(), JScales(), mapping={"h.*.gain": "gains.0"})


def test_the_readme_example_runs_as_written() -> None:
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    snippet = readme.split("**Which models.**", 1)[1].split("```python\n", 1)[1].split("```", 1)[0]
    reports = []

    def check(*args, **kwargs):  # the README's check_port, in float64 only, keeping the report
        reports.append(_check(*args[:2], **{k: v for k, v in kwargs.items() if k == "mapping"}))
        return reports[-1]

    names = {"MyDense": MyDense, "check_port": check, "torch_model": Deep(MyMLP, 3), "jax_model": JDeep(3)}
    exec(compile(snippet, "README.md", "exec"), {**names, "batch": BATCH, "losses": {}})
    assert reports and reports[0].ok, reports and reports[0].table()
    assert len([r for r in reports[0].rows if r.section == "weights"]) == 4 * 3


class PortHFMLP(nnx.Module):
    """An NNX port of transformers' GPT2MLP: c_fc, gelu, c_proj (its Conv1D weights are nnx.Linear kernels)."""

    def __init__(self, approximate: bool) -> None:
        rngs = nnx.Rngs(0)
        self.c_fc, self.c_proj, self.approximate = nnx.Linear(E, H, rngs=rngs), nnx.Linear(H, E, rngs=rngs), approximate

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.c_proj(jax.nn.gelu(self.c_fc(x), approximate=self.approximate))


def test_hf_gpt2_mlp_its_conv1d_and_gelu_new() -> None:
    gpt2 = pytest.importorskip("transformers.models.gpt2.modeling_gpt2")
    config = pytest.importorskip("transformers").GPT2Config(n_embd=E, n_head=2, n_layer=1, vocab_size=11)
    torch_model = gpt2.GPT2MLP(H, config).eval()  # Conv1D, NewGELUActivation (gelu_new), dropout off
    with torch.no_grad():
        torch_model.c_fc.bias.normal_()
    assert _check(torch_model, PortHFMLP(approximate=True)).ok
    report = _check(torch_model, PortHFMLP(approximate=False))
    assert not report.ok and report.hints[0].pitfall == "P04" and report.hints[0].confirmed, report.table()
    assert "other way round" in report.hints[0].title


class _TorchGRU(nn.Module):
    def __init__(self, lstm: bool = False) -> None:
        super().__init__()
        self.gru = (nn.LSTM if lstm else nn.GRU)(3, 4, batch_first=True)

    def forward(self, x):
        return self.gru(x)[0]


class HandGRU(nnx.Module):
    """torch's GRU by hand (fused r | z | n kernels, b_hn inside the reset gate), both biases kept."""

    def __init__(self, rngs: nnx.Rngs, names: tuple[str, str] = ("dense_i", "dense_h")) -> None:
        self.names = names
        setattr(self, names[0], nnx.Linear(3, 12, rngs=rngs))
        setattr(self, names[1], nnx.Linear(4, 12, rngs=rngs))

    def __call__(self, x):
        h, outs = jnp.zeros((x.shape[0], 4), x.dtype), []
        for t in range(x.shape[1]):
            i_r, i_z, i_n = jnp.split(getattr(self, self.names[0])(x[:, t]), 3, axis=-1)
            h_r, h_z, h_n = jnp.split(getattr(self, self.names[1])(h), 3, axis=-1)
            r, z = jax.nn.sigmoid(i_r + h_r), jax.nn.sigmoid(i_z + h_z)
            h = (1 - z) * jnp.tanh(i_n + r * h_n) + z * h
            outs.append(h)
        return jnp.stack(outs, axis=1)


class HandLSTM(nnx.Module):
    """torch's LSTM by hand in nnx.LSTMCell's per-gate layout (ii ... io, hi ... ho), both biases kept."""

    def __init__(self, rngs: nnx.Rngs) -> None:
        self.ii, self.if_, self.ig, self.io = (nnx.Linear(3, 4, rngs=rngs) for _ in range(4))
        self.hi, self.hf, self.hg, self.ho = (nnx.Linear(4, 4, rngs=rngs) for _ in range(4))

    def __call__(self, x):
        h = c = jnp.zeros((x.shape[0], 4), x.dtype)
        outs = []
        for t in range(x.shape[1]):
            xt = x[:, t]
            i = jax.nn.sigmoid(self.ii(xt) + self.hi(h))
            f = jax.nn.sigmoid(self.if_(xt) + self.hf(h))
            g = jnp.tanh(self.ig(xt) + self.hg(h))
            o = jax.nn.sigmoid(self.io(xt) + self.ho(h))
            c = f * c + i * g
            h = o * jnp.tanh(c)
            outs.append(h)
        return jnp.stack(outs, axis=1)


class _JaxGRU(nnx.Module):
    def __init__(self, cell: nnx.Module) -> None:
        self.gru = cell

    def __call__(self, x):
        return self.gru(x)


_SEQ = {"x": np.random.default_rng(0).normal(size=(2, 5, 3))}
_ARGS = dict(torch_loss=lambda m, b: (m(b["x"]) ** 2).mean(), jax_loss=lambda m, b: (m(b["x"]) ** 2).mean(), steps=2,
             torch_optimizer=lambda p: torch.optim.Adam(p, lr=1e-2), jax_optimizer=optax.adam(1e-2))  # fmt: skip


@pytest.mark.parametrize("lstm", [False, True])
def test_a_hand_written_cell_with_nnx_leaf_names_and_both_biases_is_recognised(lstm: bool) -> None:
    """No rule needed for a cell written by hand with nnx's own leaf names (fused dense_i / dense_h, or
    nnx.LSTMCell's per-gate ii ... ho) and both of torch's biases: recognised by its leaves, nothing folded."""
    torch.manual_seed(0)
    cell = HandLSTM(nnx.Rngs(0)) if lstm else HandGRU(nnx.Rngs(0))
    report = check_port(_TorchGRU(lstm).double(), _JaxGRU(cell), _SEQ, **_ARGS)
    assert report.ok, report.table()
    keys = {r.key for r in report.rows if r.section == "grads"}
    assert keys == ({f"gru/{g}/{leaf}" for g in ("ii", "if_", "ig", "io", "hi", "hf", "hg", "ho") for leaf in ("kernel", "bias")}
                    if lstm else {"gru/dense_i/kernel", "gru/dense_i/bias", "gru/dense_h/kernel", "gru/dense_h/bias"})  # fmt: skip
    assert not report.dropped  # both biases have a place: nothing folded, nothing dropped


def test_a_hand_written_cell_under_other_names_is_refused_with_the_rule_it_takes_and_matches_with_it() -> None:
    """A class of the user's holding a standard layer's leaves under names of its own: the refusal spells out
    the register_rule call (every canonical leaf it must name), and with that rule the port matches."""
    torch.manual_seed(0)
    with pytest.raises(
        ValueError,
        match=r"HandGRU at 'gru' has no leaf 'ih/kernel'.*register_rule\(HandGRU, \{'ih/kernel': <its leaf>, 'ih/bias': <its leaf>, 'hh/kernel': <its leaf>, 'hh/bias': <its leaf>\}\)",
    ):
        check_port(_TorchGRU().double(), _JaxGRU(HandGRU(nnx.Rngs(0), ("w_in", "w_rec"))), _SEQ, **_ARGS)
    rule = {"ih/kernel": "w_in/kernel", "ih/bias": "w_in/bias", "hh/kernel": "w_rec/kernel", "hh/bias": "w_rec/bias"}
    with register_rule(HandGRU, rule):
        report = check_port(_TorchGRU().double(), _JaxGRU(HandGRU(nnx.Rngs(0), ("w_in", "w_rec"))), _SEQ, **_ARGS)
    assert report.ok, report.table()
