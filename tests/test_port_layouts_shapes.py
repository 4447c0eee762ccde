"""Output layouts come from the modules' rules, never from the shapes (issue 25, item 4).

Each shape coincidence that fooled the shape heuristic (C = H = W after a conv and its norms, C = L
for Conv1d, T = B for a time-major GRU / LSTM, an LSTMCell's (h, c) against nnx's ((c, h), h)) has a
correct port that matches and a buggy one that differs where it parts; the flatten before a CNN's
head has a correct NHWC port (its loader permutes the dense rows) that matches and a port that
flattens in the wrong order, named. Tiny models, float64 only where float32 adds nothing.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import optax
import pytest
import torch
from detach_parity import check_port
from detach_parity.shared.apps.check.pairing import to_nnx
from flax import nnx
from torch import nn

F64 = {"param_dtype": jnp.float64}
RNG = np.random.default_rng(0)


def _check(tm, jm, batch, jax_loss, steps=0, **kw):
    def torch_loss(m, b):
        return ((m(b["x"]) - b["y"]) ** 2).mean()

    opts = dict(torch_optimizer=lambda p: torch.optim.SGD(p, lr=0.1), jax_optimizer=optax.sgd(0.1)) if steps else {}
    return check_port(tm, jm, batch, torch_loss=torch_loss, jax_loss=jax_loss, steps=steps, dtypes=("float64",),
                      **opts, **kw)  # fmt: skip


def _first(report) -> str:
    return report.first_parting("float64").where


def _outputs(report) -> dict[str, bool]:
    return {r.key: r.ok for r in report.rows if r.section == "outputs"}


# ---- C = H = W: a conv with 8 channels on 8 x 8 images, BatchNorm and GroupNorm after it ----


class TorchConv(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv, self.bn, self.gn, self.head = nn.Conv2d(8, 8, 3, padding=1), nn.BatchNorm2d(8), nn.GroupNorm(2, 8), nn.Linear(8, 3)  # fmt: skip

    def forward(self, x):
        return self.head(self.gn(self.bn(self.conv(x))).mean((2, 3)))


class JaxConv(nnx.Module):
    def __init__(self, r=None) -> None:
        r = r or nnx.Rngs(0)
        self.conv = nnx.Conv(8, 8, (3, 3), padding=1, rngs=r, **F64)
        self.bn = nnx.BatchNorm(8, use_running_average=True, epsilon=1e-5, rngs=r, **F64)
        self.gn = nnx.GroupNorm(8, num_groups=2, epsilon=1e-5, rngs=r, **F64)
        self.head = nnx.Linear(8, 3, rngs=r, **F64)

    def __call__(self, x):
        return self.head(self.gn(self.bn(self.conv(x))).mean((1, 2)))


def _conv_case():
    tm = TorchConv().eval()
    with torch.no_grad():  # statistics far from 0 / 1, so that a wrong axis shows
        tm.bn.running_mean.uniform_(-1, 1), tm.bn.running_var.uniform_(0.5, 2)
    batch = {"x": RNG.normal(size=(4, 8, 8, 8)), "y": RNG.normal(size=(4, 3))}
    return tm, batch


def test_conv_with_as_many_channels_as_pixels_matches_through_its_norms() -> None:
    tm, batch = _conv_case()
    report = _check(tm, JaxConv(), batch, lambda m, b: ((m(jnp.moveaxis(b["x"], 1, -1)) - b["y"]) ** 2).mean())
    assert report.ok, report.table()
    assert _outputs(report) == {"conv": True, "bn": True, "gn": True, "head": True, "(model)": True}


def test_conv_with_a_transposed_image_parts_at_the_conv() -> None:
    tm, batch = _conv_case()
    # the port feeds [B, C, W, H]: C = H = W, so every shape still fits; only the rule can tell
    report = _check(tm, JaxConv(), batch, lambda m, b: ((m(jnp.transpose(b["x"], (0, 3, 2, 1))) - b["y"]) ** 2).mean())
    assert not report.ok
    assert _first(report) == "float64 outputs conv"


# ---- C = L: Conv1d with as many channels as steps ----


class TorchConv1d(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv, self.head = nn.Conv1d(6, 6, 3, padding=1), nn.Linear(6, 2)

    def forward(self, x):
        return self.head(self.conv(x).mean(2))


class JaxConv1d(nnx.Module):
    def __init__(self) -> None:
        r = nnx.Rngs(0)
        self.conv, self.head = nnx.Conv(6, 6, (3,), padding=1, rngs=r, **F64), nnx.Linear(6, 2, rngs=r, **F64)

    def __call__(self, x):
        return self.head(self.conv(x).mean(1))


@pytest.mark.parametrize("buggy", [False, True])
def test_conv1d_with_as_many_channels_as_steps(buggy: bool) -> None:
    batch = {"x": RNG.normal(size=(3, 6, 6)), "y": RNG.normal(size=(3, 2))}
    # the buggy port skips the move to channels last: [B, C, L] read as [B, L, C], the same shape
    to_nnx_layout = (lambda x: x) if buggy else (lambda x: jnp.moveaxis(x, 1, -1))
    report = _check(TorchConv1d(), JaxConv1d(), batch, lambda m, b: ((m(to_nnx_layout(b["x"])) - b["y"]) ** 2).mean())
    assert report.ok is not buggy, report.table()
    if buggy:
        assert _first(report) == "float64 outputs conv"
    else:
        assert _outputs(report)["conv"] is True


# ---- T = B: time-major GRU / LSTM ----


class TorchRNN(nn.Module):
    def __init__(self, cls) -> None:
        super().__init__()
        self.rnn, self.head = cls(3, 5), nn.Linear(5, 2)  # batch_first=False: [T, B, H]

    def forward(self, x):
        return self.head(self.rnn(x)[0])


class JaxRNN(nnx.Module):
    def __init__(self, cell, time_major: bool, swap: bool) -> None:
        r = nnx.Rngs(0)
        self.rnn = nnx.RNN(cell(3, 5, rngs=r, **F64), time_major=time_major)
        self.head, self.swap = nnx.Linear(5, 2, rngs=r, **F64), swap

    def __call__(self, x):  # x [T, B, F] as torch's
        if self.swap:  # a batch-major RNN: [B, T, F] in, [B, T, H] out, back to [T, B, 2]
            return jnp.swapaxes(self.head(self.rnn(jnp.swapaxes(x, 0, 1))), 0, 1)
        return self.head(self.rnn(x))


@pytest.mark.parametrize(
    "cls, cell, port, ok",
    [
        (nn.GRU, nnx.GRUCell, (False, True), True),
        (nn.LSTM, nnx.LSTMCell, (True, False), True),
        (nn.GRU, nnx.GRUCell, (False, False), False),
        (nn.LSTM, nnx.LSTMCell, (False, False), False),
    ],
    ids=["gru-batch-major-port", "lstm-time-major-port", "gru-time-major-read-as-batch-major", "lstm-ditto"],
)
def test_time_major_recurrent_layer_with_as_many_steps_as_rows(cls, cell, port, ok: bool) -> None:
    tm = TorchRNN(cls)
    if cls is nn.GRU:
        with torch.no_grad():
            tm.rnn.bias_hh_l0[10:] = 0  # b_hn: no place in nnx.GRUCell (P08), not this test's business
    batch = {"x": RNG.normal(size=(4, 4, 3)), "y": RNG.normal(size=(4, 4, 2))}
    # T = B: [T, B, H] and [B, T, H] have one shape; the buggy port scans its batch axis as time
    report = _check(tm, JaxRNN(cell, *port), batch, lambda m, b: ((m(jnp.asarray(b["x"])) - b["y"]) ** 2).mean())
    assert report.ok is ok, report.table()
    if ok:
        assert _outputs(report) == {"rnn[0]": True, "head": True, "(model)": True}
    else:
        assert _first(report) == "float64 outputs rnn[0]"


# ---- a loop over nn.LSTMCell: torch returns (h, c), nnx.LSTMCell ((c, h), h) ----


class TorchCellLoop(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.cell, self.head = nn.LSTMCell(3, 5), nn.Linear(5, 2)

    def forward(self, x):
        h = c = torch.zeros(x.shape[0], 5, dtype=x.dtype)
        for t in range(x.shape[1]):
            h, c = self.cell(x[:, t], (h, c))
        return self.head(h)


class JaxCellLoop(nnx.Module):
    def __init__(self, swapped: bool) -> None:
        r = nnx.Rngs(0)
        self.cell, self.head, self.swapped = nnx.LSTMCell(3, 5, rngs=r, **F64), nnx.Linear(5, 2, rngs=r, **F64), swapped

    def __call__(self, x):
        carry = (jnp.zeros((x.shape[0], 5), x.dtype),) * 2
        for t in range(x.shape[1]):
            (c, h), _ = self.cell(carry, x[:, t])
            carry = (h, c) if self.swapped else (c, h)  # the bug: torch's (h, c) order handed to nnx
        return self.head(carry[0] if self.swapped else carry[1])


@pytest.mark.parametrize("swapped", [False, True])
def test_lstm_cell_outputs_pair_by_structure(swapped: bool) -> None:
    batch = {"x": RNG.normal(size=(5, 3, 3)), "y": RNG.normal(size=(5, 2))}
    report = _check(TorchCellLoop(), JaxCellLoop(swapped), batch, lambda m, b: ((m(b["x"]) - b["y"]) ** 2).mean())
    assert report.ok is not swapped, report.table()
    outputs = _outputs(report)
    # torch's h ([0]) pairs with nnx's h, torch's c ([1]) with nnx's c: 3 calls, two states each
    assert sorted(outputs) == sorted([f"cell#{i}[{n}]" for i in range(3) for n in (0, 1)] + ["head", "(model)"])
    if swapped:  # the first call starts from zeros (either order); the second parts, at h first
        assert outputs["cell#0[0]"] and outputs["cell#0[1]"]
        assert _first(report) == "float64 outputs cell#1[0]"
    else:
        assert all(outputs.values())


# ---- the flatten before a CNN's head: NCHW features in torch, NHWC in the port ----

C, H, W, K = 3, 4, 5, 2


class TorchFlat(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv, self.head = nn.Conv2d(2, C, 3, padding=1), nn.Linear(C * H * W, K)

    def forward(self, x):
        return self.head(torch.relu(self.conv(x)).flatten(1))  # rows of head.weight in [C, H, W] order


class JaxFlat(nnx.Module):
    def __init__(self, nchw: bool = False) -> None:
        r = nnx.Rngs(0)
        self.conv, self.head = nnx.Conv(2, C, (3, 3), padding=1, rngs=r, **F64), nnx.Linear(C * H * W, K, rngs=r, **F64)
        self.nchw = nchw

    def __call__(self, x):
        y = jax_relu(self.conv(jnp.moveaxis(x, 1, -1)))  # [B, H, W, C]
        y = jnp.moveaxis(y, -1, 1) if self.nchw else y  # flattened as torch does, or channels last
        return self.head(y.reshape(y.shape[0], -1))


def jax_relu(x):
    return jnp.maximum(x, 0)


def _loaded(tm: TorchFlat, permute_rows: bool) -> JaxFlat:
    """The user's own loader: conv kernel [kh, kw, in, out]; head kernel [in, out] with its rows in the
    order the port flattens ([H, W, C] when `permute_rows`)."""
    jm = JaxFlat()
    w = tm.head.weight.detach().numpy().T  # [C·H·W, K]
    if permute_rows:
        w = w.reshape(C, H, W, K).transpose(1, 2, 0, 3).reshape(C * H * W, K)
    jm.conv.kernel[...] = jnp.asarray(tm.conv.weight.detach().numpy().transpose(2, 3, 1, 0))
    jm.conv.bias[...] = jnp.asarray(tm.conv.bias.detach().numpy())
    jm.head.kernel[...], jm.head.bias[...] = jnp.asarray(w), jnp.asarray(tm.head.bias.detach().numpy())
    return jm


def _flat_batch():
    return {"x": RNG.normal(size=(3, 2, H, W)), "y": RNG.normal(size=(3, K))}


def test_nhwc_port_whose_loader_permutes_the_head_rows_matches() -> None:
    tm = TorchFlat().double()
    report = _check(tm, _loaded(tm, permute_rows=True), _flat_batch(), lambda m, b: ((m(b["x"]) - b["y"]) ** 2).mean(),
                    steps=2, transfer=False)  # fmt: skip
    assert report.ok, report.table()
    assert any(
        n.startswith("head/kernel: its rows are torch's in channels-last flatten order ([3, 4, 5]")
        for n in report.notes
    )
    rows = {(r.section, r.step, r.key): r for r in report.rows}
    assert rows[("weights", None, "head/kernel")].ok and rows[("grads", None, "head/kernel")].ok
    assert rows[("steps", 2, "head/kernel")].ok


@pytest.mark.parametrize("transfer", [True, False])
def test_a_port_that_flattens_channels_last_with_torchs_rows_is_named(transfer: bool) -> None:
    tm = TorchFlat().double()
    jm = _loaded(tm, permute_rows=False) if not transfer else JaxFlat()
    report = _check(tm, jm, _flat_batch(), lambda m, b: ((m(b["x"]) - b["y"]) ** 2).mean(), transfer=transfer)
    assert not report.ok
    assert _first(report) == "float64 outputs head"  # the conv matches: the flatten is where it parts
    assert _outputs(report)["conv"] is True
    hint = report.hints[0]
    assert (hint.pitfall, hint.confirmed) == ("P07", True), report.named()  # a layout bug of the head's rows
    assert hint.title.startswith("flatten order") and "flattened channels last" in hint.evidence


def test_a_port_that_flattens_as_torch_does_matches_with_the_weights_copied() -> None:
    report = _check(
        TorchFlat().double(), JaxFlat(nchw=True), _flat_batch(), lambda m, b: ((m(b["x"]) - b["y"]) ** 2).mean()
    )
    assert report.ok, report.table()
    assert not any("flatten order" in n for n in report.notes)


def test_axes_names_permute_split_and_squeeze() -> None:
    # exact on purpose: a permutation, split or squeeze moves the same values, it computes nothing
    t = RNG.normal(size=(2, 3, 12))  # [B, T, H·D], torch's q_proj output
    split = to_nnx(t, ("B", "T", "F"), ("B", "T", "F.0", "F.1"), (2, 3, 4, 3))
    np.testing.assert_array_equal(split, t.reshape(2, 3, 4, 3))
    h_n = RNG.normal(size=(1, 2, 5))  # torch's [L, B, H] state, nnx's carry [B, H]
    np.testing.assert_array_equal(to_nnx(h_n, ("L", "B", "H"), ("B", "H"), (2, 5)), h_n[0])
    x = RNG.normal(size=(2, 4, 4, 4))  # C = H = W: the names decide, not the shapes
    np.testing.assert_array_equal(
        to_nnx(x, ("B", "C", "S1", "S2"), ("B", "S1", "S2", "C"), (2, 4, 4, 4)), np.moveaxis(x, 1, -1)
    )
    assert to_nnx(RNG.normal(size=(2, 2, 5)), ("L", "B", "H"), ("B", "H"), (2, 5)) is None  # two layers: no pair


def test_the_flatten_knob_reorders_every_way_of_flattening_and_restores_torch() -> None:
    from detach_parity.torch_impl.backend.knobs import knob

    x = torch.arange(24.0).reshape(2, 3, 4)  # [B, C, L]
    nhwc = x.movedim(1, -1).reshape(2, -1)
    with knob(nn.Linear(2, 2), "flatten_channels_last"):
        flats = [
            x.flatten(1),
            torch.flatten(x, 1),
            nn.Flatten()(x),
            x.view(2, -1),
            x.reshape(2, 12),
            torch.reshape(x, (2, -1)),
        ]
        other = x.reshape(6, 4)  # not a flatten of the features: as torch does it
    # exact on purpose: every flatten only reorders the same values (no arithmetic to round)
    assert all(torch.equal(f, nhwc) for f in flats)
    assert torch.equal(other, torch.arange(24.0).reshape(6, 4))
    assert "view" not in vars(torch.Tensor) and torch.equal(x.flatten(1), torch.arange(24.0).reshape(2, 12))
