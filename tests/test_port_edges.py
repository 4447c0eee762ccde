"""What real models contain, handled or refused by name (issue 25 items 8 and 9): parametrized weights,
integer buffers in another width, meta and complex leaves, a batch tensor that requires grad, the user's own
optimizer; an internal error has its own exit code; the checker runs clean with warnings as errors."""

from __future__ import annotations

import warnings

import jax.numpy as jnp
import numpy as np
import optax
import pytest
import torch
from detach_parity import check_port
from detach_parity.shared.apps.check import cli as check_cli
from detach_parity.shared.apps.check.match import PortInputError
from detach_parity.shared.apps.cli import main
from flax import nnx
from torch import nn

RNG = np.random.default_rng(7)
BATCH = {"x": RNG.normal(size=(4, 3)), "y": RNG.normal(size=(4, 2))}


def torch_loss(m, b):
    return ((m(b["x"]) - b["y"]) ** 2).mean()


def jax_loss(m, b):
    return jnp.mean((m(b["x"]) - b["y"]) ** 2)


def _port() -> nnx.Module:
    return nnx.Linear(3, 2, rngs=nnx.Rngs(0))


def _check(torch_model, jax_model, batch=BATCH, **kwargs):
    return check_port(torch_model, jax_model, batch, torch_loss=torch_loss, jax_loss=jax_loss, **kwargs)


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: nn.utils.parametrizations.spectral_norm(nn.Linear(3, 2)), "parametrized ['weight'] (_SpectralNorm"),
        (lambda: nn.Linear(3, 2, device="meta"), "weight is on the meta device"),
        (lambda: nn.Linear(3, 2, dtype=torch.complex64), "weight is complex64"),
    ],
    ids=["spectral_norm", "meta", "complex"],  # weight norm is compared as its g and v (test_port_adversarial.py)
)
def test_leaves_the_checker_cannot_copy_are_refused_by_name(make, message) -> None:
    with pytest.raises(PortInputError, match="torch_model: .*") as info:
        _check(make(), _port())
    assert message in str(info.value)


def test_the_older_spectral_norm_hook_is_refused_by_name() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # torch deprecates the hook form; users still have it
        model = nn.utils.spectral_norm(nn.Linear(3, 2))
    with pytest.raises(PortInputError, match=r"Linear at \(model\) has SpectralNorm .*remove_spectral_norm"):
        _check(model, _port())


def test_a_complex_nnx_leaf_is_refused_by_name() -> None:
    port = _port()
    port.kernel.set_value(port.kernel.get_value().astype(jnp.complex64))
    with pytest.raises(PortInputError, match="jax_model: kernel is complex64"):
        _check(nn.Linear(3, 2), port)


class _Counted(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.l = nn.Linear(3, 2)
        self.register_buffer("count", torch.tensor([3, 4], dtype=torch.int64))

    def forward(self, x):
        return self.l(x) + self.count.to(x.dtype)


class _CountedPort(nnx.Module):
    def __init__(self, count) -> None:
        self.l = nnx.Linear(3, 2, rngs=nnx.Rngs(0))
        self.count = nnx.BatchStat(jnp.array(count, dtype=jnp.int32))  # JAX's default integer width

    def __call__(self, x):
        return self.l(x) + self.count[...].astype(x.dtype)


def test_an_integer_buffer_in_another_width_with_equal_values_matches() -> None:
    report = _check(_Counted(), _CountedPort([3, 4]))
    assert report.ok, report.table()
    rows = [r for r in report.rows if r.section == "weights" and r.key.endswith("count")]
    assert len(rows) == 2 and all(r.ok for r in rows)  # compared in both passes, not skipped


def test_an_integer_buffer_with_other_values_still_differs() -> None:
    torch_model = _Counted()
    port = _CountedPort([3, 5])
    report = _check(torch_model, port, transfer=False)
    assert not report.ok
    assert any(r.key.endswith("count") and not r.ok for r in report.rows)


def test_a_batch_tensor_that_requires_grad_is_read_for_its_values() -> None:
    model = nn.Linear(3, 2)
    batch = {"x": torch.tensor(BATCH["x"], requires_grad=True), "y": torch.tensor(BATCH["y"])}
    report = _check(model, _port(), batch)
    assert report.ok, report.table()
    assert batch["x"].grad is None  # the user's tensor is read, not differentiated


def test_the_users_own_optimizer_is_refused_and_their_grads_are_untouched() -> None:
    model = nn.Linear(3, 2)
    own = torch.optim.SGD(model.parameters(), lr=0.1)
    torch_loss(model, {k: torch.tensor(v, dtype=torch.float32) for k, v in BATCH.items()}).backward()
    grad, weight = model.weight.grad.clone(), model.weight.detach().clone()
    with pytest.raises(PortInputError, match=r"torch_optimizer: .*SGD holding 2 other tensor\(s\)"):
        _check(model, _port(), torch_optimizer=lambda params: own, jax_optimizer=optax.sgd(0.1))
    assert torch.equal(model.weight.grad, grad) and torch.equal(model.weight, weight)  # untouched, bit for bit


def test_an_internal_error_exits_3_with_one_line_and_the_traceback_on_request(monkeypatch, capsys) -> None:
    def broken(*args, **kwargs):
        raise RuntimeError("boom inside the checker")

    monkeypatch.setattr(check_cli, "check_port", broken)
    assert main(["check", "cnn", "--steps", "0"]) == 3
    err = capsys.readouterr().err
    assert "internal error: RuntimeError: boom inside the checker" in err and "Traceback" not in err
    assert main(["--traceback", "check", "cnn", "--steps", "0"]) == 3
    err = capsys.readouterr().err
    assert "Traceback (most recent call last)" in err and "in broken" in err


def test_the_checker_runs_clean_with_warnings_as_errors() -> None:
    """A user's `pytest -W error` runs check_port: no deprecation of the package's own (flax's State methods)."""
    kwargs = check_cli.case("gru", "correct")
    model_t, model_j, batch = kwargs.pop("torch_model"), kwargs.pop("jax_model"), kwargs.pop("batch")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        report = check_port(model_t, model_j, batch, steps=1, **kwargs)
    assert report.ok, report.named()


class _TorchBN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.bn = nn.BatchNorm1d(3)

    def forward(self, x):
        return self.bn(x)


class BatchNorm(nnx.Module):
    """The user's own BatchNorm (named like nnx's, no momentum attribute), inference only: batch statistics
    in eval mode, the bug of blind case round2/06."""

    def __init__(self) -> None:
        self.scale, self.bias = nnx.Param(jnp.ones(3)), nnx.Param(jnp.zeros(3))
        self.mean, self.var = nnx.BatchStat(jnp.zeros(3)), nnx.BatchStat(jnp.ones(3))

    def __call__(self, x):
        return (x - x.mean(0)) / jnp.sqrt(x.var(0) + 1e-5) * self.scale[...] + self.bias[...]


class _JaxBN(nnx.Module):
    def __init__(self) -> None:
        self.bn = BatchNorm()

    def __call__(self, x):
        return self.bn(x)


def test_a_batchnorm_of_the_users_own_is_judged_not_an_internal_error() -> None:
    """A class of the user's named BatchNorm has no nnx momentum: the momentum signature says nothing (it raised
    KeyError: 'momentum', exit 3); its batch statistics in eval mode are named by a replay."""
    tm = _TorchBN().double().eval()
    with torch.no_grad():
        tm.bn.running_mean.fill_(0.3)
        tm.bn.running_var.fill_(2.0)
    batch = {"x": np.random.default_rng(0).normal(size=(4, 3))}
    report = check_port(tm, _JaxBN(), batch, torch_loss=lambda m, b: m(b["x"]).pow(2).mean(),
                        jax_loss=lambda m, b: (m(b["x"]) ** 2).mean(), steps=0)  # fmt: skip
    assert not report.ok and report.first_parting("float64").key == "bn", report.table()
    # no momentum to compare: no momentum hint; the bug itself (batch statistics in eval mode) is replayed
    assert [(h.pitfall, h.confirmed) for h in report.hints] == [("P06", True)], report.table()
    assert "bn_batch_stats" in report.hints[0].evidence and "momentum" not in report.hints[0].title


class _Scale(nn.Module):
    def forward(self, x):
        return x * 4.0  # the scale inside the module (as HF's scaled embedding applies √hidden)


class _Inside(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1, self.s, self.fc2 = nn.Linear(5, 8), _Scale(), nn.Linear(8, 3)

    def forward(self, x):
        return self.fc2(self.s(self.fc1(x)))


class _Identity(nnx.Module):
    def __call__(self, x):
        return x


class _After(nnx.Module):
    def __init__(self, factor: float = 4.0) -> None:
        rngs = nnx.Rngs(0)
        self.fc1, self.s, self.fc2, self.factor = (
            nnx.Linear(5, 8, rngs=rngs),
            _Identity(),
            nnx.Linear(8, 3, rngs=rngs),
            factor,
        )

    def __call__(self, x):
        return self.fc2(self.s(self.fc1(x)) * self.factor)  # the same scale, after the module


def test_a_module_boundary_drawn_elsewhere_is_a_fact_when_everything_training_reads_matches() -> None:
    """Issue: a correct Gemma port applied √hidden after embed_tokens: that output parted by 0.8, everything downstream
    matched, and the verdict was DIFFERS. The verdict is what training sees; the boundary is a stated fact."""
    batch = {"x": np.random.default_rng(0).normal(size=(4, 5)), "y": np.random.default_rng(1).normal(size=(4, 3))}
    opt = dict(torch_optimizer=lambda p: torch.optim.Adam(p, 1e-2), jax_optimizer=optax.adam(1e-2))
    report = check_port(_Inside(), _After(), batch, torch_loss=torch_loss, jax_loss=jax_loss, steps=2, **opt)
    assert report.ok and report.verdict() == "match", report.table()
    assert [r.key for r in report.explained] == ["s", "s"]  # float64 and float32: the one module, nothing else
    note = next(n for n in report.notes if n.startswith("boundary:"))
    assert "s's output differs (the port's is torch's times 0.25 everywhere)" in note
    # a real difference downstream is still one: the scale applied twice
    wrong = check_port(_Inside(), _After(16.0), batch, torch_loss=torch_loss, jax_loss=jax_loss, steps=2, **opt)
    assert not wrong.ok and wrong.failed("float64", "loss")
