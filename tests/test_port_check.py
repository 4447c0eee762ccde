"""The port checker on the worked ports: the correct ones match to 1e-10 in float64 (weights, outputs,
gradients, K steps), every buggy one is named, bad input is refused by name, and the user's models,
optimizer factories and global settings are left exactly as they were (shared/apps/check)."""

from __future__ import annotations

import jax
import numpy as np
import pytest
import torch
from detach_parity.shared.apps.backends import backend
from detach_parity.shared.apps.check import (
    TOLERANCE,
    PortInputError,
    PortMismatch,
    assert_port_matches,
    check_port,
    transfer_back,
    transfer_weights,
)
from detach_parity.shared.apps.check.ports import WORKED, case, check_worked, steps_for, variants
from flax import nnx
from torch import nn

BUGGY = [(name, v, pid) for name in WORKED for v, pid in variants(name).items() if pid]
# the gradient-flow diff says it in words
FLOW = {
    "embed_stop_gradient": "`embed/*`: torch None (requires_grad False), JAX zero but moved by the update: weight decay on a frozen leaf",
    "embed_trained": "`embed/*`: torch None (requires_grad False), JAX non-zero: the JAX port neither stops nor freezes it",
}


def test_weights_across_reach_bare_parameters_and_leave_the_source_alone() -> None:
    # first and fast: a bare nn.Parameter (the transformer's position table) is copied without a graph
    class T(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.pos = nn.Parameter(torch.arange(6.0).reshape(3, 2))

    class J(nnx.Module):
        def __init__(self) -> None:
            self.pos = nnx.Param(np.zeros((3, 2), np.float32))

    t, j = T(), J()
    transfer_weights(t, j)
    np.testing.assert_array_equal(np.asarray(j.pos.get_value()), np.arange(6.0).reshape(3, 2))  # exact: a copy
    transfer_back(J(), t)  # zeros back into torch: in place, no autograd record
    assert t.pos.requires_grad and t.pos.grad_fn is None and not t.pos.detach().numpy().any()


@pytest.mark.parametrize("name", WORKED)
def test_correct_port_matches_to_1e10_in_float64_and_within_noise_in_float32(name: str) -> None:
    report = check_worked(name, "correct")
    assert report.ok, report.table()
    sections = {(r.dtype, r.section) for r in report.rows}
    assert {
        (dt, s) for dt in ("float64", "float32") for s in ("weights", "outputs", "loss", "grads", "steps")
    } <= sections
    f64 = [r for r in report.rows if r.dtype == "float64"]
    assert (
        TOLERANCE["float64"].rtol == 1e-10 and TOLERANCE["float64"].atol == 1e-12
    )  # |jax-torch| <= 1e-12 + 1e-10 |torch|
    assert all(r.ok and r.used <= 1 for r in f64)
    steps = {r.step for r in f64 if r.section == "steps"}
    assert steps == {1, 2, 3, 4, 5}  # K = 5 by default
    assert not report.hints and not report.mismatches and not report.dropped
    # a real forward was compared: outputs of several submodules, each with a non-trivial value
    assert sum(r.section == "outputs" for r in f64) >= 4


@pytest.mark.parametrize(("name", "variant", "pitfall"), BUGGY, ids=[f"{n}:{v}" for n, v, _ in BUGGY])
def test_each_buggy_port_is_named(name: str, variant: str, pitfall: str) -> None:
    report = check_worked(name, variant, steps=steps_for(name, variant), dtypes=("float64",))
    assert not report.ok
    assert pitfall in report.named(), report.table()
    hint = next(h for h in report.hints if h.pitfall == pitfall)
    assert hint.evidence and hint.where and hint.page.endswith(".html")
    assert "unexplained" not in report.named()
    assert [f.text for f in report.mismatches] == ([FLOW[variant]] if variant in FLOW else [])
    if variant == "nnx_gru_cell":
        assert report.dropped and "b_hn" in report.dropped[0] and "rnn.bias_hh_l0" in report.dropped[0]
        assert report.hints[0].confirmed and report.hints[0].pitfall == "P08"


def test_the_catalogue_and_the_backends_knobs_are_one_to_one() -> None:
    """Every knob a backend implements is named by exactly one record's replay on that side, and every
    record's knob is implemented there; every record links a page (its pitfall or scenario)."""
    from detach_parity.shared.apps import docs
    from detach_parity.shared.apps.check import catalogue
    from detach_parity.shared.apps.check.diagnose import page

    named: dict[str, list[str]] = {"torch": [], "jax": []}
    for _, replay in catalogue.replays():
        named[replay.side] += [k for k in replay.knob.split("+") if "+" not in replay.knob]
    # matmul_default changes nothing on a CPU (full float32 whatever the setting): the backend omits it there
    implemented = {side: set(backend(side).port_run.knobs()) for side in ("torch", "jax")}
    implemented["jax"] |= {"matmul_default"}
    for side in ("torch", "jax"):
        assert sorted(named[side]) == sorted(implemented[side]), side
    assert {"gelu_tanh", "norm_eps", "bn_momentum", "mask_inverted", "adam_swapped"} <= implemented["torch"]
    sheet = docs.cheatsheet_page()
    for d in catalogue.CATALOGUE.values():  # a pitfall's or a scenario's record links its lesson
        # the cheatsheet's transformer and layer tables
        core = d in catalogue.attention.RECORDS + catalogue.layers.RECORDS and f"| `{d.id}` |" in sheet
        core = core or (d in catalogue.precision.RECORDS and "## Precision in bfloat16 (port checker)" in sheet)
        assert d.title and (page(d.id).endswith(".html") or d.id == "tied_weights" or core), d.id


def _snapshot(torch_model: nn.Module, jax_model: nnx.Module) -> dict:
    return {
        "torch": {k: v.detach().clone() for k, v in torch_model.state_dict().items()},
        "grads": [p.grad for p in torch_model.parameters()],
        "training": [m.training for m in torch_model.modules()],
        "requires_grad": [p.requires_grad for p in torch_model.parameters()],
        "jax": backend("jax").port.native(jax_model),
        "dtypes": {k: str(v.dtype) for k, v in backend("jax").port.native(jax_model).items()},
    }


def test_the_users_models_optimizers_and_settings_are_untouched() -> None:
    args = case("cnn", "correct")
    calls = []

    def factory(params):  # the user's optimizer factory: called by the checker on its own copies only
        params = list(params)
        calls.append({id(p) for p in params})
        return args["torch_optimizer"](params)

    before = _snapshot(args["torch_model"], args["jax_model"])
    rng = torch.random.get_rng_state()
    torch.set_float32_matmul_precision("medium")
    try:
        with jax.default_matmul_precision("bfloat16"):
            x64 = jax.config.jax_enable_x64
            report = check_port(
                args["torch_model"], args["jax_model"], args["batch"], torch_loss=args["torch_loss"],
                jax_loss=args["jax_loss"], torch_optimizer=factory, jax_optimizer=args["jax_optimizer"], steps=1,
            )  # fmt: skip
            assert jax.config.jax_default_matmul_precision == "bfloat16"
            assert jax.config.jax_enable_x64 == x64
        assert torch.get_float32_matmul_precision() == "medium"
    finally:
        torch.set_float32_matmul_precision("highest")
    assert report.ok, report.table()
    after = _snapshot(args["torch_model"], args["jax_model"])
    for k, v in before["torch"].items():
        assert torch.equal(after["torch"][k], v), k  # exact: the user's model untouched
    assert after["grads"] == before["grads"] == [None] * len(before["grads"])
    assert after["training"] == before["training"] and after["requires_grad"] == before["requires_grad"]
    for k, v in before["jax"].items():
        np.testing.assert_array_equal(after["jax"][k], v, err_msg=k)  # exact: the user's port untouched
    assert after["dtypes"] == before["dtypes"]
    assert torch.equal(torch.random.get_rng_state(), rng)
    assert torch.get_default_dtype() == torch.float32 and torch.is_grad_enabled()
    own = {id(p) for p in args["torch_model"].parameters()}
    assert len(calls) == 2 and all(not (c & own) for c in calls)  # one copy per dtype, never the user's parameters


class _Tiny(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(3, 2)
        self.drop = nn.Dropout(0.5)

    def forward(self, x):
        return self.drop(self.fc(x))


class _JTiny(nnx.Module):
    def __init__(self, out: int = 2) -> None:
        self.fc = nnx.Linear(3, out, rngs=nnx.Rngs(0))

    def __call__(self, x):
        return self.fc(x)


def _tloss(m, b):
    return (m(b["x"]) ** 2).mean()


def _jloss(m, b):
    return (m(b["x"]) ** 2).mean()


BATCH = {"x": np.random.default_rng(0).normal(size=(4, 3)).astype(np.float32)}


def _nan_tiny() -> _Tiny:
    m = _Tiny().eval()
    with torch.no_grad():
        m.fc.weight[0, 0] = float("nan")
    return m


class _NoParams(nnx.Module):
    def __call__(self, x):
        return x


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"torch_model": _Tiny().train()}, r"Dropout at drop has dropout p=0.5 in train mode: compare in eval mode"),
        ({"jax_model": _JTiny(out=3)}, r"'fc/kernel' has shape \(3, 3\), the torch weights give \(3, 2\)"),
        ({"batch": {"x": np.array([[np.nan, 0, 0]])}}, r"batch\['x'\]: expected finite values, got 1 NaN / inf"),
        ({"batch": {"y": BATCH["x"]}}, r"torch_loss\(model, batch\) raised KeyError: 'x' \(batch: \{'y'"),
        (
            {"batch": {"x": np.zeros((4, 5), np.float32)}},
            r"torch_loss\(model, batch\) raised RuntimeError: .*\(batch: \{'x': \(\(4, 5\)",
        ),
        ({"batch": "x"}, r"batch: expected a non-empty dict of numpy arrays, got str"),
        (
            {"torch_loss": lambda m, b: m(b["x"]) ** 2},
            r"torch_loss: expected a scalar torch.Tensor, got Tensor of shape \(4, 2\)",
        ),
        (
            {"jax_loss": lambda m, b: m(b["x"]).sum(-1)},
            r"jax_loss: expected a scalar jax.Array, got .* of shape \(4,\)",
        ),
        (
            {"torch_optimizer": lambda p: torch.optim.SGD(p, 0.1)},
            r"torch_optimizer / jax_optimizer: expected both or neither",
        ),
        ({"steps": -1}, r"steps: expected an integer in \[0, 100\], got -1"),
        ({"steps": 10**9}, r"steps: expected an integer in \[0, 100\], got 1000000000"),
        ({"transfer": "no"}, r"transfer: expected True or False, got 'no'"),
        (
            {"torch_optimizer": 3, "jax_optimizer": "sgd"},
            r"torch_optimizer: expected a function params -> torch.optim.Optimizer, got int 3",
        ),
        ({"mapping": {"nope": "nothing"}}, r"mapping: expected torch path prefixes of the model, got \['nope'\]"),
        (
            {"batch": {"x": np.zeros((0, 3), np.float32)}},
            r"batch\['x'\]: expected a non-empty array, got shape \(0, 3\)",
        ),
        (
            {
                "torch_loss": lambda m, b: _tloss(m, b) * float("nan"),
                "jax_loss": lambda m, b: _jloss(m, b) * float("nan"),
            },
            r"torch_loss: expected a finite loss on the batch \(float64\), got nan",
        ),
        ({"torch_model": _nan_tiny()}, r"torch_model: expected finite weights, got NaN / inf in fc.weight"),
        (
            {"torch_model": nn.Identity(), "jax_model": _NoParams()},
            r"torch_model: expected parameters or buffers to compare, got none",
        ),
        ({"torch_model": object()}, r"torch_model: expected a torch.nn.Module, got object"),
        ({"jax_model": object()}, r"jax_model: expected a flax.nnx.Module, got object"),
    ],
)
def test_bad_input_is_refused_by_name(kwargs: dict, message: str) -> None:
    args = {
        "torch_model": _Tiny().eval(),
        "jax_model": _JTiny(),
        "batch": BATCH,
        "torch_loss": _tloss,
        "jax_loss": _jloss,
    }
    args.update(kwargs)
    with pytest.raises(PortInputError, match=message):
        check_port(args.pop("torch_model"), args.pop("jax_model"), args.pop("batch"), steps=kwargs.get("steps", 0), **{
            k: v for k, v in args.items() if k != "steps"
        })  # fmt: skip


def test_assert_port_matches_fails_with_the_report() -> None:
    args = {"torch_loss": _tloss, "jax_loss": lambda m, b: 1.01 * _jloss(m, b), "steps": 0, "dtypes": ("float64",)}
    with pytest.raises(PortMismatch, match=r"(?s)first parting at loss loss.*\[unexplained\].*the port DIFFERS"):
        assert_port_matches(_Tiny().eval(), _JTiny(), BATCH, **args)
    report = assert_port_matches(_Tiny().eval(), _JTiny(), BATCH, **{**args, "jax_loss": _jloss})
    assert report.ok and report.to_json()["ok"] and report.to_json()["compared"] == len(report.rows)
