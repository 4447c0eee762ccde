"""Every diagnosis of the port checker, each on the smallest port that has the bug (shared/apps/check/diagnose.py;
the hints that name a scenario rather than a pitfall go through its constants, so that this file is not
taken for a test of those scenarios):
the report names the pitfall, with the evidence that makes it a hypothesis (or a confirmed replay)."""

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

RNG = np.random.default_rng(0)


def _check(tm, jm, batch, tloss, jloss, **kw):
    kw.setdefault("steps", 0)
    kw.setdefault("dtypes", ("float64",))
    return check_port(tm, jm, batch, torch_loss=tloss, jax_loss=jloss, **kw)


def _hint(report, pitfall):
    hints = [h for h in report.hints if h.pitfall == pitfall]
    assert hints, report.table()
    return hints[0]


def _mse(out, y):
    return ((out - y) ** 2).mean()


XY = {"x": RNG.normal(size=(5, 3)).astype(np.float32), "y": RNG.normal(size=(5, 2)).astype(np.float32)}


class TLin(nn.Module):
    def __init__(self, bias: bool = True) -> None:
        super().__init__()
        self.fc = nn.Linear(3, 2, bias=bias)

    def forward(self, x):
        return self.fc(x)


class JLin(nnx.Module):
    def __init__(self, bias: bool = True) -> None:
        self.fc = nnx.Linear(3, 2, use_bias=bias, rngs=nnx.Rngs(0))

    def __call__(self, x):
        return self.fc(x)


def t_mse(m, b):
    return _mse(m(b["x"]), b["y"])


def j_mse(m, b):
    return _mse(m(b["x"]), b["y"])


# --- P01 std convention: the output of the normalising module is off by sqrt(N/(N-1)), N = 5 ------------------


class TStd(nn.Module):
    def forward(self, x):
        return (x - x.mean(0)) / x.std(0)  # unbiased (N - 1)


class JStd(nnx.Module):
    def __call__(self, x):
        return (x - x.mean(0)) / jnp.std(x, 0)  # biased (N)


class TStdNet(TLin):
    def __init__(self) -> None:
        super().__init__()
        self.norm = TStd()

    def forward(self, x):
        return self.norm(self.fc(x))


class JStdNet(JLin):
    def __init__(self) -> None:
        super().__init__()
        self.norm = JStd()

    def __call__(self, x):
        return self.norm(self.fc(x))


def test_p01_std_convention_ratio() -> None:
    report = _check(TStdNet(), JStdNet(), XY, t_mse, j_mse)
    hints = [h for h in report.hints if h.pitfall == "P01"]
    assert any("N = 5" in h.evidence and h.where == "float64 outputs norm" for h in hints), report.named()
    assert hints[0].confirmed and "std_correction_flipped" in hints[0].evidence  # the replay reproduces the port


class TInline(nn.Module):
    """Standardisation inside the forward, no module of its own: the difference first shows after the next Linear."""

    def __init__(self, unbiased: bool) -> None:
        super().__init__()
        self.fc1, self.fc2, self.unbiased = nn.Linear(3, 4), nn.Linear(4, 2), unbiased

    def forward(self, x):
        h = torch.tanh(self.fc1(x))
        return self.fc2((h - h.mean(-1, keepdim=True)) / h.std(-1, keepdim=True, unbiased=self.unbiased))


class JInline(nnx.Module):
    def __init__(self, ddof: int) -> None:
        self.fc1, self.fc2, self.ddof = nnx.Linear(3, 4, rngs=nnx.Rngs(0)), nnx.Linear(4, 2, rngs=nnx.Rngs(1)), ddof

    def __call__(self, x):
        h = jnp.tanh(self.fc1(x))
        return self.fc2((h - h.mean(-1, keepdims=True)) / jnp.std(h, -1, keepdims=True, ddof=self.ddof))


@pytest.mark.parametrize(("unbiased", "ddof"), [(True, 0), (False, 1), (True, 1)])
def test_p01_a_std_inside_the_forward_is_named_by_a_replay_either_way(unbiased: bool, ddof: int) -> None:
    batch = {"x": RNG.normal(size=(6, 3)), "y": RNG.normal(size=(6, 2))}
    report = _check(TInline(unbiased).double(), JInline(ddof), batch, lambda m, b: _mse(m(b["x"]), b["y"]),
                    lambda m, b: _mse(m(b["x"]), b["y"]))  # fmt: skip
    if unbiased == bool(ddof):  # the same convention on both sides: a match, no hint
        assert report.ok and not report.hints, report.table()
        return
    h = _hint(report, "P01")
    assert h.confirmed and h.where == "float64 outputs fc2", report.named()  # first seen after the next Linear


# --- P02 / P13: the gradient of a norm at the zero vector, NaN in JAX where torch has 0 ---------------------------


def test_p02_nan_at_a_zero_norm() -> None:
    batch = {"x": np.vstack([np.zeros((1, 3)), RNG.normal(size=(3, 3))]).astype(np.float32)}
    report = _check(
        TLin(bias=False),
        JLin(bias=False),
        batch,
        lambda m, b: torch.linalg.vector_norm(m(b["x"]), dim=1).sum(),
        lambda m, b: jnp.linalg.norm(m(b["x"]), axis=1).sum(),
    )
    h = _hint(report, "P02")
    assert "NaN in JAX where torch is finite" in h.evidence and "fc/kernel" in h.where
    assert "P13" in report.named()  # the other way to a NaN gradient, named as the alternative


# --- P03: a tie split; the same total gradient shared out differently over tied entries --------------------------


class TMax(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.ones(3, 2))

    def forward(self, x):
        return (x * self.scale).max(dim=1).values  # torch: all of it to the first maximum


class JMax(nnx.Module):
    def __init__(self) -> None:
        self.scale = nnx.Param(jnp.ones((3, 2)))

    def __call__(self, x):
        return jnp.max(x * self.scale[...], axis=1)  # JAX: shared out over the ties


def test_p03_tie_split() -> None:
    x = np.abs(RNG.normal(size=(4, 3, 2)))
    x[:, 1] = x[:, 0] + 0.0  # tied maxima where x[:, 0] > x[:, 2]
    x[:, 2] = 0.5 * x[:, 0]
    h = _hint(
        _check(TMax(), JMax(), {"x": x.astype(np.float32)}, lambda m, b: m(b["x"]).sum(), lambda m, b: m(b["x"]).sum()),
        "P03",
    )
    assert "same total gradient" in h.evidence and h.where == "float64 grads scale"


# --- P09: LSTM biases folded into nnx.LSTMCell move half as far; the carry order (c, h) ---------------------------

SEQ = {"x": RNG.normal(size=(2, 4, 3)).astype(np.float32), "y": RNG.normal(size=(2, 2)).astype(np.float32)}


class TLstm(nn.Module):
    def __init__(self, use_final_state: bool = False) -> None:
        super().__init__()
        self.rnn, self.head, self.final = nn.LSTM(3, 4, batch_first=True), nn.Linear(4, 2), use_final_state

    def forward(self, x):
        out, (h, c) = self.rnn(x)
        return self.head(h[0] if self.final else out[:, -1])


class JLstm(nnx.Module):
    def __init__(self, carry_index: int | None = None) -> None:
        r = nnx.Rngs(0)
        self.rnn = nnx.RNN(nnx.LSTMCell(3, 4, rngs=r), return_carry=carry_index is not None)
        self.head, self.index = nnx.Linear(4, 2, rngs=r), carry_index

    def __call__(self, x):
        if self.index is None:
            return self.head(self.rnn(x)[:, -1])
        carry, _ = self.rnn(x)
        return self.head(carry[self.index])  # nnx carry (c, h): index 1 is h


def test_p09_folded_lstm_biases_move_half_as_far() -> None:
    report = _check(
        TLstm(), JLstm(), SEQ, t_mse, j_mse, steps=1,
        torch_optimizer=lambda p: torch.optim.SGD(p, lr=0.5), jax_optimizer=optax.sgd(0.5),
    )  # fmt: skip
    assert report.failed("float64", "steps") and not report.failed("float64", "grads")  # the forward matches
    h = _hint(report, "P09")
    assert "0.5 × torch's" in h.evidence and "rnn.bias_ih_l0 + rnn.bias_hh_l0" in h.evidence


def test_p09_lstm_carry_order() -> None:
    assert _check(TLstm(use_final_state=True), JLstm(carry_index=1), SEQ, t_mse, j_mse).ok
    report = _check(TLstm(use_final_state=True), JLstm(carry_index=0), SEQ, t_mse, j_mse)
    assert _hint(report, "P09").confirmed


def test_p09_gate_order_in_a_users_loader() -> None:
    class TCell(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.cell = nn.LSTMCell(3, 4)

        def forward(self, x):
            return self.cell(x)[0]

    class JCell(nnx.Module):
        def __init__(self) -> None:
            self.cell = nnx.OptimizedLSTMCell(3, 4, rngs=nnx.Rngs(0))

        def __call__(self, x):
            return self.cell((jnp.zeros((x.shape[0], 4), x.dtype),) * 2, x)[1]

    tm, jm = TCell(), JCell()
    w_ih, w_hh = (getattr(tm.cell, n).detach().numpy() for n in ("weight_ih", "weight_hh"))
    order = [0, 1, 3, 2]  # the user's loader writes i | f | o | g
    reorder = lambda w: np.concatenate([np.split(w, 4)[i] for i in order]).T  # noqa: E731
    jm.cell.dense_i.kernel.set_value(jnp.asarray(reorder(w_ih)))
    jm.cell.dense_h.kernel.set_value(jnp.asarray(reorder(w_hh)))
    jm.cell.dense_h.bias.set_value(jnp.asarray((tm.cell.bias_ih + tm.cell.bias_hh).detach().numpy()))
    report = _check(tm, jm, {"x": XY["x"]}, lambda m, b: m(b["x"]).sum(), lambda m, b: m(b["x"]).sum(), transfer=False)
    h = _hint(report, "P09")
    assert "gate blocks are torch's in the order [0, 1, 3, 2]" in h.evidence


# --- P05: a static convention in the two modules' settings (here with a second bug, so no replay fixes all) ------


def test_p05_epsilon_settings_named_even_beside_another_bug() -> None:
    class TLn(TLin):
        def __init__(self) -> None:
            super().__init__()
            self.ln = nn.LayerNorm(2)

        def forward(self, x):
            return self.ln(self.fc(x))

    class JLn(JLin):
        def __init__(self) -> None:
            super().__init__()
            self.ln = nnx.LayerNorm(2, rngs=nnx.Rngs(0))  # epsilon 1e-6

        def __call__(self, x):
            return 1.01 * self.ln(self.fc(x))  # and a second, unexplained difference

    report = _check(TLn(), JLn(), XY, t_mse, j_mse)
    assert not any(h.confirmed for h in report.hints)
    assert any(h.pitfall == "P05" and "torch eps 1e-05, nnx epsilon 1e-06" in h.evidence for h in report.hints)


# --- P10: torch Adam's weight decay is L2 in the gradient, optax.adamw's is decoupled -----------------------------


def test_p10_adam_l2_vs_adamw() -> None:
    report = _check(
        TLin(), JLin(), XY, t_mse, j_mse, steps=2,
        torch_optimizer=lambda p: torch.optim.Adam(p, lr=0.1, weight_decay=0.1),
        jax_optimizer=optax.adamw(0.1, weight_decay=0.1),
    )  # fmt: skip
    assert _hint(report, "P10").confirmed


# --- P11: torch's Embedding(padding_idx) never trains that row; nnx.Embed has no padding_idx ---------------------


def test_p11_embedding_padding_row() -> None:
    class TEmb(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Embedding(5, 2, padding_idx=0)

        def forward(self, t):
            return self.embed(t).sum(1)

    class JEmb(nnx.Module):
        def __init__(self) -> None:
            self.embed = nnx.Embed(5, 2, rngs=nnx.Rngs(0))

        def __call__(self, t):
            return self.embed(t).sum(1)

    batch = {"x": np.array([[0, 1, 2], [3, 0, 4]]), "y": XY["y"][:2]}
    report = _check(TEmb(), JEmb(), batch, t_mse, j_mse)
    h = _hint(report, "P11")
    assert (
        "differs only in row(s) [0], where torch's is zero" in h.evidence and h.where == "float64 grads embed/embedding"
    )
    # any other difference is not a padding row: a table whose row 0 torch does train (nothing to do with padding_idx)
    other = _check(TEmb(), JEmb(), {"x": np.array([[1, 1, 2], [3, 2, 4]]), "y": XY["y"][:2]},
                   t_mse, lambda m, b: 2 * j_mse(m, b))  # fmt: skip
    assert not other.ok and "P11" not in other.named(), other.named()


# --- P16: differences in float32 only; float32 inside float64 (attention's softmax) ------------------------------


def test_p16_float32_only_difference() -> None:
    report = _check(
        TLin(), JLin(), {"x": XY["x"]},
        lambda m, b: torch.logsumexp(m(b["x"]) + 100, dim=1).mean(),
        lambda m, b: jnp.log(jnp.sum(jnp.exp(m(b["x"]) + 100), axis=1)).mean(),  # e^100 overflows float32 only
        dtypes=("float64", "float32"),
    )  # fmt: skip
    assert not report.failed("float64") and report.failed("float32")
    assert "float64 matches everywhere" in _hint(report, "P16").evidence


def test_p16_attention_softmax_taken_in_float32_is_not_the_ports_bug() -> None:
    class TAtt(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.attn = nn.MultiheadAttention(4, 2, batch_first=True)

        def forward(self, x):
            return self.attn(x, x, x, need_weights=False)[0]

    class JAtt(nnx.Module):
        def __init__(self) -> None:
            self.attn = nnx.MultiHeadAttention(2, 4, decode=False, rngs=nnx.Rngs(0))  # default attention_fn

        def __call__(self, x):
            return self.attn(x)

    batch = {"x": RNG.normal(size=(2, 3, 4)).astype(np.float32)}
    report = _check(TAtt(), JAtt(), batch, lambda m, b: m(b["x"]).sum(), lambda m, b: m(b["x"]).sum(),
                    dtypes=("float64", "float32"))  # fmt: skip
    # the float64 pass takes its softmax in float64: a correct port matches, and the report says where it widened
    assert report.ok and report.verdict() == "match", report.table()
    assert any(n.startswith("float64 pass: the port computes `attn` in float32: widened") for n in report.notes)


# --- P17: the soft target update with τ and 1 − τ swapped (user's own steps) -------------------------------------

TAU = 0.1


class TQ(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.online, self.target = nn.Linear(3, 2), nn.Linear(3, 2)

    def forward(self, x):
        return self.online(x)


class JQ(nnx.Module):
    def __init__(self) -> None:
        r = nnx.Rngs(0)
        self.online, self.target = nnx.Linear(3, 2, rngs=r), nnx.Linear(3, 2, rngs=r)

    def __call__(self, x):
        return self.online(x)


def _torch_step(extra=None):
    optimizers = {}

    def step(model, batch):  # the optimizer belongs to the model the checker hands in (its own copy)
        opt = optimizers.setdefault(id(model), (model, torch.optim.SGD(model.online.parameters(), lr=0.5)))[
            1
        ]  # the model kept: its id is never reused
        opt.zero_grad()
        loss = t_mse(model, batch)
        loss.backward()
        if extra:
            extra(model)
        opt.step()
        with torch.no_grad():
            for p, q in zip(model.target.parameters(), model.online.parameters(), strict=True):
                p.lerp_(q, TAU)  # target <- target + τ (online - target)
        return loss.detach()

    return step


def _jax_step(swapped: bool, tx=None):
    optimizers = {}

    def step(model, batch):
        wrt = nnx.All(nnx.Param, nnx.PathContains("online"))
        opt = optimizers.setdefault(id(model), (model, nnx.Optimizer(model, tx or optax.sgd(0.5), wrt=wrt)))[
            1
        ]  # the model kept: its id is never reused
        loss, grads = nnx.value_and_grad(j_mse, argnums=nnx.DiffState(0, wrt))(model, batch)
        opt.update(model, grads)
        online, target = nnx.state(model.online, nnx.Param), nnx.state(model.target, nnx.Param)
        new = (
            optax.incremental_update(target, online, TAU) if swapped else optax.incremental_update(online, target, TAU)
        )
        nnx.update(model.target, new)
        return loss

    return step


def test_p17_soft_update_argument_order() -> None:
    good = _check(TQ(), JQ(), XY, t_mse, j_mse, steps=2, torch_step=_torch_step(), jax_step=_jax_step(False))
    assert good.ok, good.table()
    report = _check(TQ(), JQ(), XY, t_mse, j_mse, steps=2, torch_step=_torch_step(), jax_step=_jax_step(True))
    h = _hint(report, "P17")
    assert "τ = 0.1" in h.evidence and "target" in h.where


# --- grad_clipping: torch's clip_grad_norm_ divides by ‖g‖ + 1e-6, optax.clip_by_global_norm by ‖g‖ -------------


def test_clip_epsilon() -> None:
    torch.manual_seed(8)  # the weights where the two leaves' factors agree to 1e-14 yet round apart at 12 decimals
    clip = lambda m: torch.nn.utils.clip_grad_norm_(m.online.parameters(), 0.01)  # noqa: E731
    report = _check(
        TQ(), JQ(), XY, t_mse, j_mse, steps=1,
        torch_step=_torch_step(extra=clip), jax_step=_jax_step(False, optax.chain(optax.clip_by_global_norm(0.01), optax.sgd(0.5))),
    )  # fmt: skip
    h = _hint(report, "grad_clipping")
    assert "(‖g‖ + 1e-6) / ‖g‖" in h.evidence


# --- maml: first vs second order (the JAX port stops the inner gradient) -----------------------------------------


def _maml_torch(m, b):
    inner = _mse(m(b["x"]), b["y"])
    gw, gb = torch.autograd.grad(inner, (m.fc.weight, m.fc.bias), create_graph=True)
    return _mse(b["x"] @ (m.fc.weight - 0.5 * gw).T + (m.fc.bias - 0.5 * gb), b["y"] ** 2)


def _maml_jax(m, b):
    kernel, bias = m.fc.kernel[...], m.fc.bias[...]
    gk, gb = jax.grad(lambda k, c: _mse(b["x"] @ k + c, b["y"]), argnums=(0, 1))(kernel, bias)
    m(b["x"])  # the same submodule call as torch's inner step
    gk, gb = jax.lax.stop_gradient(gk), jax.lax.stop_gradient(gb)  # the bug: first order
    return _mse(b["x"] @ (kernel - 0.5 * gk) + (bias - 0.5 * gb), b["y"] ** 2)


def test_first_vs_second_order() -> None:
    h = _hint(_check(TLin(), JLin(), XY, _maml_torch, _maml_jax), "maml")
    assert h.confirmed


# --- the gradient flow: a stop missing or extra in the JAX port ---------------------------------------------------


class TEnc(nn.Module):
    def __init__(self, detach: bool) -> None:
        super().__init__()
        self.enc, self.head, self.detach = nn.Linear(3, 3), nn.Linear(3, 2), detach

    def forward(self, x):
        f = self.enc(x)
        return self.head(f.detach() if self.detach else f)


class JEnc(nnx.Module):
    def __init__(self, stop: bool) -> None:
        r = nnx.Rngs(0)
        self.enc, self.head, self.stop = nnx.Linear(3, 3, rngs=r), nnx.Linear(3, 2, rngs=r), stop

    def __call__(self, x):
        f = self.enc(x)
        return self.head(jax.lax.stop_gradient(f) if self.stop else f)


@pytest.mark.parametrize(
    ("detach", "stop", "text"),
    [
        (
            True,
            False,
            "`enc/*`: torch None (no path from the loss), JAX non-zero: the JAX port is missing a stop_gradient",
        ),
        (False, True, "`enc/*`: torch non-zero, JAX exact zeros: the JAX port stops a gradient torch lets through"),
    ],
)
def test_missing_or_extra_stop(detach: bool, stop: bool, text: str) -> None:
    assert _check(TEnc(detach), JEnc(detach), XY, t_mse, j_mse).ok  # the same stop on both sides matches
    report = _check(TEnc(detach), JEnc(stop), XY, t_mse, j_mse)
    assert [f.text for f in report.mismatches] == [text]
    assert _hint(report, "basics").evidence == text


# --- a new diagnosis is one record: the engine runs what the catalogue declares -------------------------------


def test_a_new_diagnosis_is_one_record(monkeypatch) -> None:
    """A throwaway pitfall, "a loss summed where torch averages", added as one record (no engine change):
    before, the report says "unexplained"; with the record, its signature names it on the loss."""
    from detach_parity.shared.apps.check import catalogue

    def j_sum(m, b):
        return ((m(b["x"]) - b["y"]) ** 2).sum()  # the bug: a sum, torch's loss is a mean

    assert "unexplained" in _check(TLin(), JLin(), XY, t_mse, j_sum).named()

    def summed(row, j, t):
        n = XY["y"].size
        if row.section == "loss" and np.isclose(float(j), n * float(t), rtol=1e-12):
            return f"JAX's loss is {n} × torch's: a sum over the {n} entries where torch takes their mean"
        return None

    record = catalogue.Diagnosis(
        "P99", "a sum where torch averages", signatures=(catalogue.Signature("values", summed),)
    )
    monkeypatch.setitem(catalogue.CATALOGUE, "P99", record)
    h = _hint(_check(TLin(), JLin(), XY, t_mse, j_sum), "P99")
    assert h.where == "float64 loss loss" and "10 × torch's" in h.evidence and not h.confirmed


# --- P07 in the port's forward: torch's x Wᵀ written against Flax's [in, out] kernel -------------------------------


class TSquare(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(3, 4), nn.Linear(4, 4)

    def forward(self, x):
        return self.fc2(torch.tanh(self.fc1(x)))


class HandDense(nnx.Module):
    """A dense layer written by hand: kernel [in, out] (Flax's layout); `transposed` multiplies as torch writes it."""

    def __init__(self, d_in: int, d_out: int, transposed: bool) -> None:
        self.kernel = nnx.Param(jnp.zeros((d_in, d_out)))
        self.bias = nnx.Param(jnp.zeros((d_out,)))
        self.transposed = transposed

    def __call__(self, x):
        return (x @ self.kernel[...].T if self.transposed else x @ self.kernel[...]) + self.bias[...]


class JSquare(nnx.Module):
    def __init__(self, transposed: bool) -> None:
        self.fc1 = nnx.Linear(3, 4, rngs=nnx.Rngs(0))
        self.fc2 = HandDense(4, 4, transposed)

    def __call__(self, x):
        return self.fc2(jnp.tanh(self.fc1(x)))


@pytest.mark.parametrize("transposed", [True, False])
def test_p07_a_square_layer_multiplied_by_its_kernel_transposed_is_named_by_a_replay(transposed: bool) -> None:
    batch = {"x": RNG.normal(size=(5, 3)), "y": RNG.normal(size=(5, 4))}
    report = _check(TSquare().double(), JSquare(transposed), batch, lambda m, b: _mse(m(b["x"]), b["y"]),
                    lambda m, b: _mse(m(b["x"]), b["y"]))  # fmt: skip
    if not transposed:  # the correct hand-written layer: no difference, no hint
        assert report.ok and not report.hints, report.table()
        return
    h = _hint(report, "P07")
    assert h.confirmed and h.title.startswith("a Linear's layout in the port's forward"), report.named()
    assert h.where == "float64 outputs fc2" and "linear_transposed" in h.evidence
