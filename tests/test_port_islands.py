"""Float32 islands: a float64 reference that computes parts in float32 (HF's Llama RMSNorm, rotary cos / sin,
labels= loss) runs them in float64 in the float64 pass, and so does a port that mirrors those casts: every
row is judged at the float64 bound, the islands stated as facts (a bound raised to float32's from the first
island on passed real bugs: an epsilon 10x off, hidden states scaled by 1.0001). An op with no float64
kernel, or a table built in float32 that cannot be rebuilt, is named, and judged at float32 from there.

The reference here is an RMSNorm written as HF writes LlamaRMSNorm (`weight`, `variance_epsilon`, the
sum of squares in float32), between two Linears; its NNX port computes in float64 throughout.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from detach_parity import check_port
from detach_parity.shared.apps.backends import backend
from detach_parity.shared.apps.check import TOLERANCE
from flax import nnx
from torch import nn

BATCH = {"x": np.random.default_rng(0).standard_normal((4, 5)) * 0.1, "y": np.zeros((4, 3))}


class HFStyleRMSNorm(nn.Module):
    """transformers' LlamaRMSNorm, as written there: its class is no torch class the rule table names."""

    def __init__(self, size: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.variance_epsilon = eps

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        dtype = hidden.dtype
        hidden = hidden.to(torch.float32)  # float32 even in a float64 model
        hidden = hidden * torch.rsqrt(hidden.pow(2).mean(-1, keepdim=True) + self.variance_epsilon)
        return self.weight * hidden.to(dtype)


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1, self.norm, self.fc2 = nn.Linear(5, 8), HFStyleRMSNorm(8), nn.Linear(8, 3)

    def forward(self, x):
        return self.fc2(self.norm(self.fc1(x)))


class Port(nnx.Module):
    def __init__(self, epsilon: float = 1e-6) -> None:
        rngs = nnx.Rngs(0)
        self.fc1, self.fc2 = nnx.Linear(5, 8, rngs=rngs), nnx.Linear(8, 3, rngs=rngs)
        self.norm = nnx.RMSNorm(8, epsilon=epsilon, rngs=rngs)

    def __call__(self, x):
        return self.fc2(self.norm(self.fc1(x)))


def torch_loss(model, batch):
    return ((model(batch["x"]) - batch["y"]) ** 2).mean()


def jax_loss(model, batch):
    return jnp.mean((model(batch["x"]) - batch["y"]) ** 2)


def _check(port: Port, **kwargs):
    return check_port(Net(), port, BATCH, torch_loss=torch_loss, jax_loss=jax_loss, steps=0, **kwargs)


def test_a_norm_of_another_library_is_recognised_by_what_it_is() -> None:
    units = {u["path"]: u for u in backend("torch").port.structure(Net())["units"]}
    assert units["norm"]["type"] == "HFStyleRMSNorm" and not units["norm"]["bare"]
    assert set(units["norm"]["leaves"]) == {"scale"}  # weight -> scale, as nn.RMSNorm's; no bias
    modules = {m["path"]: m for m in backend("torch").port.structure(Net())["modules"]}
    assert modules["norm"]["config"]["eps"] == 1e-6 and modules["norm"]["config"]["kind"] == "norm"


@pytest.fixture(scope="module")
def correct():
    """The correct port's report, read by every test below that asks for it (one check)."""
    return _check(Port())


def test_a_correct_port_matches_at_the_float64_bound_with_the_island_widened_and_stated(correct) -> None:
    report = correct
    assert report.ok and report.verdict() == "match", report.table()
    assert not report.explained  # nothing is judged at float32's bound: the island ran in float64
    rows = [r for r in report.rows if r.dtype == "float64"]
    assert {r.section for r in rows} >= {"outputs", "loss", "grads"}
    assert all(r.bound < 1e-8 for r in rows)  # the float64 bound (float32's would be 1e-6 and more)
    assert max(r.max_abs for r in rows) < 1e-14  # float64 rounding: the island's float32 is gone
    facts = [n for n in report.notes if n.startswith("float64 pass:")]
    assert facts == [
        "float64 pass: the reference computes `norm` in float32: widened to float64 on both sides (every row "
        "judged at the float64 bound; the float32 pass runs them as written)"
    ]


def test_a_difference_below_float32s_rounding_inside_the_island_differs() -> None:
    """The bug the old float32 bound let through: epsilon 1e-6 against 1.2e-6, well below float32's rounding of
    the float32 bound the pass used to judge from the island on (activations of RMS 0.1), is a difference at
    the float64 bound."""
    report = _check(Port(epsilon=1.2e-6))
    assert not report.ok and report.verdict() == "differs", report.table()
    first = report.first_parting("float64")
    assert (first.section, first.key) == ("outputs", "norm")
    assert 1e-10 < first.max_rel < TOLERANCE["float32"].rtol / 10
    assert "P05" in report.named(), report.table()


def test_a_bug_larger_than_float32_inside_the_island_is_still_caught() -> None:
    report = _check(Port(epsilon=1e-3))
    assert not report.ok and report.verdict() == "differs"
    assert "P05" in report.named(), report.table()  # the epsilon, read from variance_epsilon


class CastingPort(Port):
    """A port that mirrors HF's precision: the norm's statistics in float32, cast back."""

    def __call__(self, x):
        h = self.fc1(x)
        h32 = h.astype(jnp.float32)
        h = (h32 * jax.lax.rsqrt(jnp.mean(h32**2, -1, keepdims=True) + 1e-6)).astype(h.dtype)
        return self.fc2(self.norm.scale[...] * h)


def test_the_ports_own_float32_casts_are_widened_too() -> None:
    report = _check(CastingPort())
    assert report.ok and report.verdict() == "match", report.table()
    assert max(r.max_abs for r in report.rows if r.dtype == "float64") < 1e-12
    facts = [n for n in report.notes if n.startswith("float64 pass: the port")]
    assert len(facts) == 1 and "the port computes `(model)` in float32: widened" in facts[0], report.notes


def test_the_float32_pass_is_judged_as_before(correct) -> None:
    report = correct
    assert [r for r in report.rows if r.dtype == "float32"] and not [
        r for r in report.explained if r.dtype == "float32"
    ]


@torch.library.custom_op("detach_parity_tests::twice_f32", mutates_args=())
def twice_f32(x: torch.Tensor) -> torch.Tensor:
    """2x, with a float32 kernel only: an op the float64 pass cannot widen."""
    if x.dtype != torch.float32:
        raise RuntimeError(f"twice_f32: no kernel for {x.dtype}")
    return x * 2


twice_f32.register_fake(lambda x: torch.empty_like(x))
twice_f32.register_autograd(lambda ctx, g: g * 2)


class Float32OpNorm(HFStyleRMSNorm):
    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return super().forward(twice_f32(hidden.float()).to(hidden.dtype) / 2)


def test_an_op_without_a_float64_kernel_is_named_and_judged_at_float32_from_its_module() -> None:
    net = Net()
    net.norm = Float32OpNorm(8)
    report = check_port(net, Port(), BATCH, torch_loss=torch_loss, jax_loss=jax_loss, steps=0)
    assert report.ok and report.verdict() == "match, explained", report.table()
    why = {r.explained for r in report.explained}
    assert len(why) == 1 and "not widened: detach_parity_tests.twice_f32 has no float64 kernel" in why.pop()
    assert "norm" in {r.key for r in report.explained} and "fc1" not in {r.key for r in report.explained}


class Scaled(nn.Module):
    """A table derived in float32 when built (as HF's rotary inv_freq), in a module with no config to rebuild it."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("gain", torch.full((8,), 1.0) / 3.0, persistent=False)

    def forward(self, x):
        return x * self.gain * 3.0


class ScaledNet(Net):
    def __init__(self) -> None:
        super().__init__()
        self.scaled = Scaled()

    def forward(self, x):
        return self.fc2(self.scaled(self.norm(self.fc1(x))))


def test_a_buffer_built_in_float32_that_cannot_be_rebuilt_is_named() -> None:
    report = check_port(ScaledNet(), Port(), BATCH, torch_loss=torch_loss, jax_loss=jax_loss, steps=0)
    assert report.verdict() == "match, explained", report.table()
    why = {r.explained for r in report.explained}
    assert len(why) == 1 and "scaled.gain was built in float32 before the pass" in why.pop()


class Rotary(nn.Module):
    """HF's shape of a derived table: built from a config, float32 whatever the default dtype."""

    def __init__(self, config) -> None:
        super().__init__()
        self.config = config
        self.register_buffer("gain", torch.full((config["size"],), 1.0, dtype=torch.float) / 3.0, persistent=False)

    def forward(self, x):
        return x * self.gain * 3.0


def test_a_buffer_built_in_float32_is_rebuilt_from_its_config_in_float64() -> None:
    net = ScaledNet()
    net.scaled = Rotary({"size": 8})
    twin = backend("torch").port.copy_model(net, "float64")
    assert twin.scaled.gain.dtype == torch.float64
    # within an ulp of float64's 1/3 (the rebuild computes it again); float32's is 1e-8 away
    np.testing.assert_array_max_ulp(float(twin.scaled.gain[0]), 1.0 / 3.0, maxulp=1)
    assert net.scaled.gain.dtype == torch.float32  # the user's model untouched
    report = check_port(net, Port(), BATCH, torch_loss=torch_loss, jax_loss=jax_loss, steps=0)
    assert report.verdict() == "match", report.table()
    assert max(r.max_abs for r in report.rows if r.dtype == "float64") < 1e-12


def test_float32_steps_that_differ_only_where_the_float64_gradient_is_rounding_are_explained() -> None:
    """Adam turns any gradient into steps of ~lr: on entries whose float64 gradient is below float32's resolution
    (attention's key bias, which softmax ignores) float32 steps are noise; elsewhere a difference still differs."""
    from detach_parity.shared.apps.check.compare import Judge, Pass
    from detach_parity.shared.apps.check.match import Plan
    from detach_parity.shared.apps.check.noise import NOISE, noise_entries

    grads = {"attn/bias": np.array([3e-2, -1e-17, 2e-18, 4e-2]), "head/kernel": np.array([[0.0, 1e-3]])}
    noise = noise_entries(grads)
    assert list(noise) == ["attn/bias"]  # an exact zero is not noise: float32 keeps it zero and Adam leaves it
    np.testing.assert_array_equal(noise["attn/bias"], [False, True, True, False])  # a mask of one fixed input: exact
    weights = {"attn/bias": np.zeros(4, np.float32), "head/kernel": np.zeros((1, 2), np.float32)}
    p = Pass("float32", expected=weights, actual=weights)
    t = {"loss": np.float32(1.0), "values": {"attn/bias": np.array([0.1, 0.01, -0.01, 0.2], np.float32)}}
    lr_noise = {"loss": np.float32(1.0), "values": {"attn/bias": np.array([0.1, -0.01, 0.01, 0.2], np.float32)}}
    real = {"loss": np.float32(1.0), "values": {"attn/bias": np.array([0.1, -0.01, 0.01, 0.25], np.float32)}}
    rows = Judge(p, Plan(), True, noise=noise).step(1, t, lr_noise)
    bias = next(r for r in rows if r.key == "attn/bias")
    assert bias.ok and bias.explained == NOISE + " (2 entries of 4)"
    rows = Judge(p, Plan(), True, noise=noise).step(1, t, real)  # off the noise entries: a real difference
    bias = next(r for r in rows if r.key == "attn/bias")
    assert not bias.ok and not bias.explained and bias.max_abs > 0.04
    assert not next(
        r for r in Judge(p, Plan(), True).step(1, t, lr_noise) if r.key == "attn/bias"
    ).ok  # no float64 facts


@jax.custom_jvp
def _twice(x):
    return 2 * x


_twice.defjvp(lambda primals, tangents: (_twice(primals[0]), 2 * tangents[0]))


class CustomRulePort(Port):
    """A port whose float32 region has a derivative rule of its own (a custom_jvp): run as written."""

    def __call__(self, x):
        h = self.fc1(x)
        return self.fc2(self.norm(_twice(h.astype(jnp.float32)).astype(h.dtype) / 2))


def test_a_port_region_with_its_own_derivative_rule_is_named_and_judged_at_float32_from_its_module() -> None:
    report = _check(CustomRulePort())
    assert report.verdict() == "match, explained", report.table()
    why = {r.explained for r in report.explained}
    assert len(why) == 1 and "the port computes `(model)` in float32, not widened: custom_jvp_call" in why.pop()
    assert {r.dtype for r in report.explained} == {"float64"}


class ScaledEmbedding(nn.Module):
    """Gemma's shape of a scale: a float32 scalar buffer beside the Python number it was made of."""

    def __init__(self, scale: float) -> None:
        super().__init__()
        self.scalar_scale = scale
        self.register_buffer("scale", torch.tensor(scale), persistent=False)

    def forward(self, x):
        return x * self.scale.to(x.dtype)


def test_a_scalar_buffer_beside_its_python_number_is_rebuilt_from_the_number() -> None:
    net = ScaledNet()
    net.scaled = ScaledEmbedding(32**0.5)  # float32(√32) is 1.7e-8 off
    twin = backend("torch").port.copy_model(net, "float64")
    assert twin.scaled.scale.dtype == torch.float64
    np.testing.assert_array_max_ulp(float(twin.scaled.scale), 32**0.5, maxulp=1)  # float64's, to an ulp
    assert abs(float(net.scaled.scale) - 32**0.5) > 1e-8  # the user's model keeps its float32 buffer


class LiteralPort(Port):
    """The port's norm in float32 with its epsilon a Python number: traced as float32(1e-6), 3e-9 off."""

    def __call__(self, x):
        h = self.fc1(x)
        h32 = h.astype(jnp.float32)
        h = (h32 * jax.lax.rsqrt(jnp.mean(h32**2, -1, keepdims=True) + 1e-6)).astype(h.dtype)
        return self.fc2(self.norm.scale[...] * h)


def test_a_float32_literal_widens_to_the_decimal_the_port_wrote() -> None:
    """torch keeps `+ self.variance_epsilon` a Python float; the port's `+ 1e-6` on a float32 array is traced as a
    float32 literal: widened to 1e-6 itself, not to float32's rounding of it, the two sides agree at the float64 bound
    even where the normalised values are small (an RMS of 1e-3: eps matters)."""
    net = Net()
    with torch.no_grad():  # normalised values of RMS about 3e-4: var and eps of one size
        net.fc1.weight.mul_(1e-3)
        net.fc1.bias.mul_(1e-3)
    report = check_port(net, LiteralPort(), BATCH, torch_loss=torch_loss, jax_loss=jax_loss, steps=0)
    assert report.ok and report.verdict() == "match", report.table()


def test_the_ports_own_step_run_as_written_is_said_and_judged_at_float32_from_the_steps() -> None:
    """A user's jax_step runs as the user wrote it (the checker widens its own steps only): where its loss comes back
    in float32 in the float64 pass, the steps are judged at float32's bound, with the reason and the way out."""
    import optax

    opts: dict = {}

    def torch_step(model, batch):
        opt = opts.setdefault(id(model), (model, torch.optim.SGD(model.parameters(), lr=0.1)))[1]
        opt.zero_grad()
        loss = torch_loss(model, batch)
        loss.backward()
        opt.step()
        return loss

    def jax_step(model, batch):
        opt = opts.setdefault(id(model), (model, nnx.Optimizer(model, optax.sgd(0.1), wrt=nnx.Param)))[1]
        loss, grads = nnx.value_and_grad(lambda m: jax_loss(m, batch).astype(jnp.float32))(model)
        opt.update(model, grads)
        return loss

    report = check_port(Net(), CastingPort(), BATCH, torch_loss=torch_loss, jax_loss=jax_loss, torch_step=torch_step,
                        jax_step=jax_step, steps=2, dtypes=("float64",))  # fmt: skip
    assert report.ok, report.table()
    why = {r.explained for r in report.explained}
    assert {r.section for r in report.explained} == {"steps"} and len(why) == 1
    assert "the port's own jax_step computes its loss in float32" in why.pop()
