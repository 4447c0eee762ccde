"""Layer, loss and optimizer conventions a port writes by hand (catalogue/layers.py, torch_impl/backend/
layer_knobs.py; P19's step signature in catalogue/optimizers.py): small ports written here, not the worked ones,
each with one bug, named; the same port without the bug matches."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
import torch
import torch.nn.functional as F
from detach_parity.shared.apps.check import check_port
from flax import nnx
from torch import nn

RNG = np.random.default_rng(11)
B, C, HW, IN, H, V = 3, 4, 8, 5, 6, 7


def _check(tm, jm, batch, tloss, jloss, **kw):
    kw.setdefault("steps", 0)
    return check_port(tm, jm, batch, torch_loss=tloss, jax_loss=jloss, dtypes=("float64",), **kw)


class TConv(nn.Module):
    def __init__(self, stride: int) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.conv1 = nn.Conv2d(2, C, 3, padding=1)
        self.conv2 = nn.Conv2d(C, C, 3, stride=stride, padding=1)

    def forward(self, x):
        return self.conv2(torch.relu(self.conv1(x)))


class JConv(nnx.Module):
    """NHWC inside, NCHW at the boundary (the checker hands torch's layout)."""

    def __init__(self, stride: int, padding) -> None:
        rngs = nnx.Rngs(0)
        self.conv1 = nnx.Conv(2, C, (3, 3), padding=((1, 1), (1, 1)), rngs=rngs)
        self.conv2 = nnx.Conv(C, C, (3, 3), strides=(stride, stride), padding=padding, rngs=rngs)

    def __call__(self, x):
        y = self.conv2(nnx.relu(self.conv1(jnp.transpose(x, (0, 2, 3, 1)))))
        return jnp.transpose(y, (0, 3, 1, 2))


IMAGES = {"x": RNG.normal(size=(B, 2, HW, HW))}
_SQUARE = lambda m, b: (m(b["x"]) ** 2).mean()  # noqa: E731


@pytest.mark.parametrize(("stride", "padding"), [(2, ((1, 1), (1, 1))), (2, "SAME"), (1, "SAME")])
def test_a_same_padded_strided_convolution_is_named_by_a_replay(stride: int, padding) -> None:
    """torch pads (1, 1) at stride 2 on an even input, XLA's "SAME" (0, 1): the outputs agree in shape and differ;
    at stride 1 with an odd kernel "SAME" is torch's padding=1, a correct port. At stride 2 the output is
    [B, 4, 4, 4]: NCHW and NHWC have one shape, and the port's NCHW output pairs as it is."""
    report = _check(TConv(stride), JConv(stride, padding), IMAGES, _SQUARE, _SQUARE)
    if padding != "SAME" or stride == 1:
        assert report.ok, report.table()
    else:
        assert [(h.pitfall, h.confirmed) for h in report.hints[:1]] == [("conv_padding", True)], report.table()
        assert report.first_parting().torch == "conv2"
        assert report.named() == ["conv_padding"]


def test_the_same_padding_replay_does_not_apply_where_same_is_torchs_padding() -> None:
    from detach_parity.torch_impl.backend.knobs import knob

    model = nn.Sequential(nn.Conv2d(2, C, 3, padding=1), nn.Conv1d(C, C, 5, padding=2, dilation=1))
    with pytest.raises(ValueError, match="knob conv_padding_same: expected an nn.Conv1d / 2d / 3d"):
        with knob(model, "conv_padding_same"):
            pass
    assert "forward" not in vars(model[0])


def test_the_same_padding_replay_pads_the_odd_unit_at_the_end() -> None:
    """Against XLA's own "SAME": jax.lax.conv_general_dilated on the same weights, odd and even sizes."""
    import jax
    from detach_parity.torch_impl.backend.knobs import knob

    conv = nn.Conv2d(2, 3, 3, stride=2, padding=1).double()
    for size in (7, 8):
        x = RNG.normal(size=(1, 2, size, size + 1))
        with knob(conv, "conv_padding_same"), torch.no_grad():
            got = conv(torch.from_numpy(x)).numpy()
        want = (
            jax.lax.conv_general_dilated(
                x, conv.weight.detach().numpy(), (2, 2), "SAME", precision=jax.lax.Precision.HIGHEST
            )
            + conv.bias.detach().numpy()[:, None, None]
        )
        # JAX computes in float32 here (x64 is the user's setting, never ours): a padding off by one is O(1)
        np.testing.assert_allclose(got, np.asarray(want), rtol=1e-5, atol=1e-5)
    assert "forward" not in vars(conv)


class TLM(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(1)
        self.embed, self.head = nn.Embedding(V, H), nn.Linear(H, V)

    def forward(self, ids):
        return self.head(torch.tanh(self.embed(ids)))


class JLM(nnx.Module):
    def __init__(self) -> None:
        rngs = nnx.Rngs(0)
        self.embed, self.head = nnx.Embed(V, H, rngs=rngs), nnx.Linear(H, V, rngs=rngs)

    def __call__(self, ids):
        return self.head(jnp.tanh(self.embed(ids)))


TOKENS = {"ids": RNG.integers(0, V, size=(B, 5)), "labels": np.where(RNG.random((B, 5)) < 0.4, -100,
                                                                     RNG.integers(0, V, size=(B, 5)))}  # fmt: skip


def _t_ce(m, b):
    return F.cross_entropy(m(b["ids"]).reshape(-1, V), b["labels"].reshape(-1))  # ignore_index=-100, mean


@pytest.mark.parametrize("over_every_position", [False, True])
def test_a_cross_entropy_mean_over_ignored_positions_is_named_by_a_replay(over_every_position: bool) -> None:
    def j_ce(m, b):
        valid = b["labels"] != -100
        nll = optax.softmax_cross_entropy_with_integer_labels(m(b["ids"]), jnp.where(valid, b["labels"], 0))
        total = jnp.where(valid, nll, 0.0).sum()
        return total / (valid.size if over_every_position else valid.sum())

    assert (TOKENS["labels"] == -100).any() and (TOKENS["labels"] != -100).any()
    report = _check(TLM(), JLM(), TOKENS, _t_ce, j_ce)
    if not over_every_position:
        assert report.ok, report.table()
    else:
        assert [(h.pitfall, h.confirmed) for h in report.hints[:1]] == [("ignore_index", True)], report.table()
        assert report.first_parting().section == "loss"
    assert F.cross_entropy.__name__ == "cross_entropy"  # the replay restored torch's own


class TMLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(2)
        self.fc1, self.fc2 = nn.Linear(IN, H), nn.Linear(H, 1)

    def forward(self, x):
        return self.fc2(torch.tanh(self.fc1(x)))


class JMLP(nnx.Module):
    def __init__(self) -> None:
        rngs = nnx.Rngs(0)
        self.fc1, self.fc2 = nnx.Linear(IN, H, rngs=rngs), nnx.Linear(H, 1, rngs=rngs)

    def __call__(self, x):
        return self.fc2(jnp.tanh(self.fc1(x)))


XY = {"x": RNG.normal(size=(8, IN)), "y": RNG.normal(size=(8, 1))}
_MSE = lambda m, b: ((m(b["x"]) - b["y"]) ** 2).mean()  # noqa: E731
LR, WD = 0.05, 0.01


@pytest.mark.parametrize(
    ("torch_optimizer", "jax_optimizer", "who"),
    [
        (
            lambda p: torch.optim.SGD(p, lr=LR, weight_decay=WD),
            optax.chain(optax.add_decayed_weights(WD), optax.sgd(LR)),
            None,
        ),  # fmt: skip
        (lambda p: torch.optim.SGD(p, lr=LR, weight_decay=WD), optax.sgd(LR), "torch"),  # P19's lost decay
        (lambda p: torch.optim.SGD(p, lr=LR), optax.chain(optax.add_decayed_weights(WD), optax.sgd(LR)), "the port"),
        (lambda p: torch.optim.AdamW(p, lr=LR, weight_decay=WD), optax.adam(LR), "torch"),  # AdamW ported as adam
    ],
)
def test_p19_a_weight_decay_on_one_side_only_is_named_from_the_first_steps_updates(
    torch_optimizer, jax_optimizer, who
) -> None:
    """Δ_jax − Δ_torch = c · w with one c = ±lr · wd on every leaf: a decay one step applies and the other does not;
    a relative 5e-4 per step here (P19's lesson: 5e-6, invisible in float32 after one step, 1e-2 after 1,000)."""
    report = _check(TMLP(), JMLP(), XY, _MSE, _MSE, steps=2, torch_optimizer=torch_optimizer,
                    jax_optimizer=jax_optimizer)  # fmt: skip
    if who is None:
        assert report.ok, report.table()
        return
    hints = [h for h in report.hints if h.pitfall == "P19"]
    assert hints and report.hints[0].pitfall == "P19", report.table()
    assert f"{who} shrinks every weight by {LR * WD:.6g} · w" in hints[0].evidence, hints[0].evidence
    assert "P10" not in report.named()  # not Adam's coupled decay: the step differs by c · w exactly


@pytest.mark.parametrize("tspec", [None, ("out", ("B", "C", "S1", "S2"))])
def test_an_output_whose_two_layouts_share_a_shape_pairs_in_the_ports_layout(tspec) -> None:
    """[B, 8, 8, 8] after a stride: channels first and channels last have one shape; the port's array, in either
    layout, pairs with torch's in that layout (a residual block without an output rule, a model returning NCHW)."""
    from detach_parity.shared.apps.check.pairing import pair

    t = RNG.normal(size=(3, 8, 8, 8))
    for j in (np.moveaxis(t, 1, -1), t):
        [(n, m, moved)] = pair([t], [tspec], [j], [None])
        assert (n, m) == (0, 0)
        np.testing.assert_array_equal(moved, j)  # exact: a transpose in numpy moves values, never rounds them


def test_p19_leaves_a_decay_on_a_frozen_leaf_to_the_freeze() -> None:
    """torch freezes fc1 (AdamW skips it), the port stops its gradient and its AdamW still decays it: the step
    differs by c · w on fc1 alone, the frozen-leaf signature (frozen_backbone), not a decay lost everywhere."""
    tm = TMLP()
    tm.fc1.requires_grad_(False)

    def j_mse(m, b):
        return ((m.fc2(jnp.tanh(jax.lax.stop_gradient(m.fc1(b["x"])))) - b["y"]) ** 2).mean()

    report = _check(tm, JMLP(), XY, _MSE, j_mse, steps=2, jax_optimizer=optax.adamw(LR, weight_decay=0.1),
                    torch_optimizer=lambda p: torch.optim.AdamW(p, lr=LR, weight_decay=0.1))  # fmt: skip
    assert "frozen_backbone" in report.named() and "P19" not in report.named(), report.table()
