"""Replays of the torch reference on recurrent layers and on the user's own training step
(torch_impl/backend/recurrent_knobs.py, knobs.py's adam_swapped): small hand-written ports, not the worked
ones, each with one porting bug, named by a confirmed replay; the same port without the bug matches."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
import torch
from detach_parity.shared.apps.check import check_port
from flax import nnx
from torch import nn

T, B, IN, H = 5, 3, 4, 6
RNG = np.random.default_rng(7)
SEQ = {"x": RNG.normal(size=(T, B, IN)), "h0": 0.7 * RNG.normal(size=(B, H)), "c0": 0.7 * RNG.normal(size=(B, H))}


def _check(tm, jm, batch, tloss, jloss, **kw):
    kw.setdefault("steps", 0)
    return check_port(tm, jm, batch, torch_loss=tloss, jax_loss=jloss, dtypes=("float64",), **kw)


def _biased(module: nn.Module) -> nn.Module:
    with torch.no_grad():  # away from the defaults: a zero bias would hide where b_hn is added
        for name, p in module.named_parameters():
            p.add_(torch.rand_like(p) - 0.5 if "bias" in name else 0)
    return module


class TGRU(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.gru = _biased(nn.GRU(IN, H))

    def forward(self, x, h0):
        return self.gru(x, h0[None])[0]


class JGRU(nnx.Module):
    """A time-major GRU with torch's fused r | z | n kernels and both biases."""

    def __init__(self, outside: bool) -> None:
        rngs, self.outside = nnx.Rngs(0), outside
        self.dense_i, self.dense_h = nnx.Linear(IN, 3 * H, rngs=rngs), nnx.Linear(H, 3 * H, rngs=rngs)

    def __call__(self, x, h0):
        b_hr, b_hz, b_hn = jnp.split(self.dense_h.bias[...], 3)

        def step(h, x_t):
            i_r, i_z, i_n = jnp.split(self.dense_i(x_t), 3, axis=-1)
            h_r, h_z, h_n = jnp.split(h @ self.dense_h.kernel[...], 3, axis=-1)
            r, z = jax.nn.sigmoid(i_r + h_r + b_hr), jax.nn.sigmoid(i_z + h_z + b_hz)
            n = jnp.tanh(i_n + r * h_n + b_hn) if self.outside else jnp.tanh(i_n + r * (h_n + b_hn))
            return (1 - z) * n + z * h, (1 - z) * n + z * h

        return jax.lax.scan(step, h0, x)[1]


@pytest.mark.parametrize("outside", [False, True])
def test_p08_b_hn_outside_the_reset_gate_is_named_by_a_replay(outside: bool) -> None:
    tm = TGRU()
    report = _check(tm, _JGRUHost(outside), SEQ, lambda m, b: (m(b["x"], b["h0"]) ** 2).mean(),
                    lambda m, b: (m(b["x"], b["h0"]) ** 2).mean())  # fmt: skip
    if not outside:
        assert report.ok, report.table()
    else:
        assert [(h.pitfall, h.confirmed) for h in report.hints[:1]] == [("P08", True)], report.table()
        assert "gru_bhn_outside" in report.hints[0].evidence


class _JGRUHost(nnx.Module):
    def __init__(self, outside: bool) -> None:
        self.gru = JGRU(outside)

    def __call__(self, x, h0):
        return self.gru(x, h0)


class TLSTM(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(1)
        self.lstm = _biased(nn.LSTM(IN, H))

    def forward(self, x, h0, c0):
        return self.lstm(x, (h0[None], c0[None]))[0]


class JLSTM(nnx.Module):
    """A time-major LSTM with torch's fused i | f | g | o kernels, both biases, and the carry as the port keeps it."""

    def __init__(self, gates: str, state_in: str) -> None:
        rngs, self.gates, self.state_in = nnx.Rngs(0), gates, state_in
        self.dense_i, self.dense_h = nnx.Linear(IN, 4 * H, rngs=rngs), nnx.Linear(H, 4 * H, rngs=rngs)

    def __call__(self, x, h0, c0):
        def step(carry, x_t):
            c, h = carry
            blocks = dict(zip(self.gates, jnp.split(self.dense_i(x_t) + self.dense_h(h), 4, axis=-1), strict=True))
            i, f, g, o = (
                jax.nn.sigmoid(blocks["i"]),
                jax.nn.sigmoid(blocks["f"]),
                jnp.tanh(blocks["g"]),
                jax.nn.sigmoid(blocks["o"]),
            )
            c = f * c + i * g
            return (c, o * jnp.tanh(c)), o * jnp.tanh(c)

        carry = (c0, h0) if self.state_in == "ch" else (h0, c0)  # "hc": torch's (h0, c0) read as nnx's (c, h)
        return jax.lax.scan(step, carry, x)[1]


class _JLSTMHost(nnx.Module):
    def __init__(self, gates: str = "ifgo", state_in: str = "ch") -> None:
        self.lstm = JLSTM(gates, state_in)

    def __call__(self, x, h0, c0):
        return self.lstm(x, h0, c0)


@pytest.mark.parametrize(("gates", "state_in", "knob"), [("ifgo", "ch", None), ("ifog", "ch", "lstm_gates_ifog"),
                                                          ("ifgo", "hc", "lstm_state_in_swapped")])  # fmt: skip
def test_p09_lstm_gate_and_state_order_are_named_by_replays(gates: str, state_in: str, knob: str | None) -> None:
    report = _check(TLSTM(), _JLSTMHost(gates, state_in), SEQ, lambda m, b: (m(b["x"], b["h0"], b["c0"]) ** 2).mean(),
                    lambda m, b: (m(b["x"], b["h0"], b["c0"]) ** 2).mean())  # fmt: skip
    if knob is None:
        assert report.ok, report.table()
    else:
        assert [(h.pitfall, h.confirmed) for h in report.hints[:1]] == [("P09", True)], report.table()
        assert f"({knob}:" in report.hints[0].evidence


class TMLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(2)
        self.fc1, self.fc2 = nn.Linear(IN, H), nn.Linear(H, 2)

    def forward(self, x):
        return self.fc2(torch.tanh(self.fc1(x)))


class JMLP(nnx.Module):
    def __init__(self, act=jnp.tanh) -> None:
        rngs, self.act = nnx.Rngs(0), act
        self.fc1, self.fc2 = nnx.Linear(IN, H, rngs=rngs), nnx.Linear(H, 2, rngs=rngs)

    def __call__(self, x):
        return self.fc2(self.act(self.fc1(x)))


XY = {"x": RNG.normal(size=(8, IN)), "y": RNG.normal(size=(8, 2))}


def _t_loss(m, b):
    return ((m(b["x"]) - b["y"]) ** 2).mean()


def _j_loss(m, b):
    return ((m(b["x"]) - b["y"]) ** 2).mean()


def _torch_step():
    optimizers = {}

    def step(model, batch):  # the user's own step: Adam with weight_decay is coupled L2
        opt = optimizers.setdefault(
            id(model), (model, torch.optim.Adam(model.parameters(), lr=0.01, weight_decay=0.1))
        )[1]  # the model kept: its id is never reused
        opt.zero_grad()
        loss = _t_loss(model, batch)
        loss.backward()
        opt.step()
        return loss.detach()

    return step


def _jax_step(tx):
    optimizers = {}

    def step(model, batch):
        opt = optimizers.setdefault(id(model), (model, nnx.Optimizer(model, tx, wrt=nnx.Param)))[
            1
        ]  # the model kept: its id is never reused
        loss, grads = nnx.value_and_grad(_j_loss)(model, batch)
        opt.update(model, grads)
        return loss

    return step


@pytest.mark.parametrize("decoupled", [False, True])
def test_p10_adam_decay_in_the_users_own_steps_is_named_by_a_replay(decoupled: bool) -> None:
    coupled = optax.chain(optax.add_decayed_weights(0.1), optax.adam(0.01))  # torch's Adam(weight_decay)
    tx = optax.adamw(0.01, weight_decay=0.1) if decoupled else coupled
    report = _check(TMLP(), JMLP(), XY, _t_loss, _j_loss, steps=3, torch_step=_torch_step(), jax_step=_jax_step(tx))
    if not decoupled:
        assert report.ok, report.table()
    else:
        assert [(h.pitfall, h.confirmed) for h in report.hints[:1]] == [("P10", True)], report.table()
        assert "adam_swapped" in report.hints[0].evidence
    # the replay patched torch.optim for its run only
    assert not getattr(torch.optim.Adam.step, "__name__", "") == "swapped"
    assert "step" not in vars(torch.optim.AdamW) or vars(torch.optim.AdamW)["step"].__name__ != "swapped"


class TBN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(3)
        self.fc, self.bn = nn.Linear(IN, H), nn.BatchNorm1d(H)
        with torch.no_grad():
            self.bn.running_mean.uniform_(-0.5, 0.5)
            self.bn.running_var.uniform_(0.5, 2.0)

    def forward(self, x):
        return self.bn(self.fc(x))


class JBN(nnx.Module):
    def __init__(self, training: bool) -> None:
        rngs = nnx.Rngs(0)
        self.fc = nnx.Linear(IN, H, rngs=rngs)
        self.bn = nnx.BatchNorm(H, momentum=0.9, epsilon=1e-5, use_running_average=not training, rngs=rngs)

    def __call__(self, x):
        return self.bn(self.fc(x))


@pytest.mark.parametrize("training", [False, True])
def test_p06_an_eval_batchnorm_left_training_in_the_port_is_named_by_a_replay(training: bool) -> None:
    report = _check(TBN().eval(), JBN(training), XY, lambda m, b: (m(b["x"]) ** 2).mean(),
                    lambda m, b: (m(b["x"]) ** 2).mean())  # fmt: skip
    if not training:
        assert report.ok, report.table()
    else:
        assert [(h.pitfall, h.confirmed) for h in report.hints[:1]] == [("P06", True)], report.table()
        assert "bn_batch_stats" in report.hints[0].evidence


class TStacked(nn.Module):
    def __init__(self, kind: type) -> None:
        super().__init__()
        torch.manual_seed(4)
        self.rnn = _biased(kind(IN, H, num_layers=2, batch_first=True))

    def forward(self, x):
        return self.rnn(x)[0]


class JStacked(nnx.Module):
    """One nnx.RNN per layer of torch's stacked nn.LSTM: layer k is the port's rnn/k."""

    def __init__(self) -> None:
        rngs = nnx.Rngs(0)
        self.rnn = nnx.List([nnx.RNN(nnx.LSTMCell(IN if k == 0 else H, H, rngs=rngs)) for k in range(2)])

    def __call__(self, x):
        for layer in self.rnn:
            x = layer(x)
        return x


def test_a_stacked_lstm_pairs_layer_by_layer_with_one_nnx_rnn_per_layer() -> None:
    batch = {"x": RNG.normal(size=(B, T, IN))}
    report = _check(TStacked(nn.LSTM), JStacked(), batch, lambda m, b: (m(b["x"]) ** 2).mean(),
                    lambda m, b: (m(b["x"]) ** 2).mean())  # fmt: skip
    assert report.ok, report.table()
    keys = {r.key for r in report.rows if r.section == "grads"}
    assert {"rnn/0/cell/ii/kernel", "rnn/1/cell/ho/kernel"} <= keys, sorted(keys)
    names = {r.torch for r in report.rows if r.section == "grads"}  # torch's own names, layer by layer
    assert {"rnn.weight_ih_l1", "rnn.bias_ih_l0 + rnn.bias_hh_l0"} <= names, names


def test_p18_weights_the_port_initialised_itself_are_named() -> None:
    """transfer=False with the NNX model's own initialisation: the weights differ from the start, and the hint says
    why (lecun_normal kernels and zero biases against torch's uniform ones), not a layout bug."""
    report = _check(TMLP(), JMLP(), XY, _t_loss, _j_loss, transfer=False)
    assert report.first_parting("float64").section == "weights", report.table()
    hints = [h for h in report.hints if h.pitfall == "P18"]
    assert hints and all(h.where.startswith("float64 weights ") for h in hints), report.table()
    assert {"P07", "P09"}.isdisjoint(report.named())


class TAct(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(5)
        self.fc1, self.act, self.fc2 = nn.Linear(IN, H), nn.GELU(approximate="tanh"), nn.Linear(H, 2)

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))


def test_an_inline_activation_is_inside_the_parting_interval_and_named_either_way() -> None:
    """torch's tanh GELU is a module, the port's exact GELU inline: the forward parts after fc1, at fc2, with torch's
    `act` (no NNX twin) between them; the replay with exact GELU names P04 the other way round."""
    report = _check(TAct(), JMLP(lambda x: jax.nn.gelu(x, approximate=False)), XY, _t_loss, _j_loss)
    assert report.interval() == ("fc1", ["act"], "fc2"), report.table()
    assert (report.hints[0].pitfall, report.hints[0].confirmed) == ("P04", True) and "gelu_exact" in report.hints[
        0
    ].evidence


class UnbiasedBN(nnx.Module):
    """A BatchNorm of the port's own, named like nnx's, updating its running variance with torch's unbiased one."""

    def __init__(self, n: int) -> None:
        self.scale, self.bias = nnx.Param(jnp.ones(n)), nnx.Param(jnp.zeros(n))
        self.mean, self.var = nnx.BatchStat(jnp.zeros(n)), nnx.BatchStat(jnp.ones(n))

    def __call__(self, x):
        m, v = x.mean(0), x.var(0)
        self.mean[...] = 0.9 * self.mean[...] + 0.1 * m
        self.var[...] = 0.9 * self.var[...] + 0.1 * v * x.shape[0] / (x.shape[0] - 1)
        return (x - m) / jnp.sqrt(v + 1e-5) * self.scale[...] + self.bias[...]


class TTwoBN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(6)
        self.fc1, self.bn1, self.fc2, self.bn2 = nn.Linear(IN, H), nn.BatchNorm1d(H), nn.Linear(H, 2), nn.BatchNorm1d(2)

    def forward(self, x):
        return self.bn2(self.fc2(torch.tanh(self.bn1(self.fc1(x)))))


class JTwoBN(nnx.Module):
    def __init__(self, stock_second: bool) -> None:
        rngs = nnx.Rngs(0)
        self.fc1, self.bn1, self.fc2 = nnx.Linear(IN, H, rngs=rngs), UnbiasedBN(H), nnx.Linear(H, 2, rngs=rngs)
        # the stock nnx.BatchNorm's running variance is the biased one: the bug, in this BatchNorm only
        self.bn2 = nnx.BatchNorm(2, momentum=0.9, epsilon=1e-5, rngs=rngs) if stock_second else UnbiasedBN(2)

    def __call__(self, x):
        return self.bn2(self.fc2(jnp.tanh(self.bn1(self.fc1(x)))))


@pytest.mark.parametrize("stock_second", [False, True])
def test_p06_the_biased_variance_in_one_batchnorm_of_two_is_named_by_a_replay_of_that_one(stock_second: bool) -> None:
    report = _check(TTwoBN(), JTwoBN(stock_second), XY, _t_loss, _j_loss, steps=2, torch_optimizer=lambda p: torch.optim.SGD(p, lr=0.1),
                    jax_optimizer=optax.sgd(0.1))  # fmt: skip
    if not stock_second:
        assert report.ok, report.table()
    else:
        first = report.hints[0]
        assert (first.pitfall, first.confirmed) == ("P06", True), report.table()
        assert "bn_biased_var@bn2" in first.evidence and first.title.endswith("(in bn2 only)")


TD = {"x": RNG.normal(size=(6, IN)), "action": RNG.integers(0, 2, size=6), "target": RNG.normal(size=6)}


def _t_td(m, b):
    q = m(b["x"]).gather(1, b["action"][:, None])  # [B, 1]
    return nn.functional.mse_loss(q.squeeze(-1), b["target"])


@pytest.mark.parametrize(("squeezed", "written"), [(True, False), (False, False), (False, True)])
def test_p14_a_td_loss_broadcast_is_named_by_a_replay(squeezed: bool, written: bool) -> None:
    """The Q-value of the taken action is [B, 1]: a port that does not squeeze it compares every pair with the [B]
    target. Torch with F.mse_loss, or with the difference written out, replayed as the [B, B] broadcast."""

    def t_loss(m, b):
        if not written:
            return _t_td(m, b)
        q = m(b["x"]).gather(1, b["action"][:, None]).squeeze(-1)
        return ((q - b["target"]) ** 2).mean()

    def j_loss(m, b):
        q = jnp.take_along_axis(m(b["x"]), b["action"][:, None], axis=1)  # [B, 1]
        return jnp.mean(((q[:, 0] if squeezed else q) - b["target"]) ** 2)

    report = _check(TMLP(), JMLP(), TD, t_loss, j_loss)
    if squeezed:
        assert report.ok, report.table()
    else:
        assert report.first_parting("float64").section == "loss", report.table()
        assert [(h.pitfall, h.confirmed) for h in report.hints[:1]] == [("P14", True)], report.table()
    assert torch.Tensor.__sub__ is torch._C.TensorBase.__sub__  # the replay's patch is gone


SCALE = 1e39  # a loss scale beyond float32 (inf there), a number in float64


def _scaled_torch_step(skip: bool):
    optimizers = {}

    def step(model, batch):
        opt = optimizers.setdefault(id(model), (model, torch.optim.SGD(model.parameters(), lr=0.1)))[
            1
        ]  # the model kept: its id is never reused
        opt.zero_grad()
        loss = _t_loss(model, batch)
        (loss * SCALE).backward()
        grads = [q.grad for q in model.parameters()]
        if not skip or all(torch.isfinite(g).all() for g in grads):  # GradScaler's rule: skip on inf / nan
            for g in grads:
                g.div_(SCALE)
            opt.step()
        return loss.detach()

    return step


def _scaled_jax_step():
    optimizers = {}

    def step(model, batch):  # a fixed scale, the update applied whatever the gradients
        opt = optimizers.setdefault(id(model), (model, nnx.Optimizer(model, optax.sgd(0.1), wrt=nnx.Param)))[
            1
        ]  # the model kept: its id is never reused
        loss, grads = nnx.value_and_grad(lambda m, b: _j_loss(m, b) * SCALE)(model, batch)
        opt.update(model, jax.tree.map(lambda g: g / SCALE, grads))
        return loss / SCALE

    return step


def test_p15_a_step_torch_skips_on_overflow_and_the_port_applies_is_named() -> None:
    """float64 holds the scaled gradients, float32 overflows them: torch skips the step (GradScaler's rule), the
    port applies it. The float32-only difference is named P15, not rounding (P16)."""
    kw = dict(steps=2, jax_step=_scaled_jax_step(), dtypes=("float64", "float32"))
    report = check_port(TMLP(), JMLP(), XY, torch_loss=_t_loss, jax_loss=_j_loss, torch_step=_scaled_torch_step(True),
                        **kw)  # fmt: skip
    assert not report.failed("float64") and report.failed("float32", "steps"), report.table()
    assert report.skipped["float32"]["torch"] and "jax" not in report.skipped["float32"]
    assert report.named() == ["P15"], report.table()
