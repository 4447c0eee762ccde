"""The port checker's layout rules, every one both ways: torch weights into an NNX twin give the same
function (float64, 1e-12), NNX weights back into torch give the same function, the round trips are exact,
and whatever no rule pairs is an error that names it (torch_impl/_layout.py, jax_impl/backend/port.py)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from detach_parity.jax_impl.backend.ports.gru import TorchGRUCell
from detach_parity.shared.apps.backends import backend
from detach_parity.shared.apps.check import PortInputError, transfer_back, transfer_weights
from flax import nnx
from torch import nn


def attention(query, key, value, bias=None, mask=None, **_):
    """Softmax attention in the inputs' dtype (the worked ports keep torch's float32 softmax: a float32 island in
    a float64 run outside the checker, which widens it): q, k, v [B, T, heads, D/heads]."""
    logits = jnp.einsum("bqhd,bkhd->bhqk", query, key) / jnp.sqrt(query.shape[-1]).astype(query.dtype)
    if mask is not None:
        logits = jnp.where(mask, logits, jnp.finfo(logits.dtype).min)
    return jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(logits, axis=-1), value)


F64 = {"param_dtype": jnp.float64}
RNG = np.random.default_rng(0)


class TWrap(nn.Module):
    def __init__(self, m: nn.Module) -> None:
        super().__init__()
        self.m = m


class JWrap(nnx.Module):
    def __init__(self, m: nnx.Module) -> None:
        self.m = m


def _nchw(x):  # torch channels first -> NNX channels last
    return np.moveaxis(x, 1, -1)


def _x(*shape):
    return RNG.normal(size=shape)


# name -> (torch module, NNX module factory, input, torch forward, NNX forward)
def _cases():
    x2, x4, x3 = _x(2, 3), _x(2, 4, 5, 6), _x(2, 4, 7)
    tok = RNG.integers(0, 10, size=(2, 5))
    seq, h0 = _x(2, 5, 3), _x(2, 4)

    def t(m, *a):
        return m(*[torch.from_numpy(np.asarray(v)) for v in a])

    def lstm_t(m, x, h):
        hh, cc = m(torch.from_numpy(x), (torch.from_numpy(h), torch.from_numpy(2 * h)))
        return torch.cat([hh, cc], -1)

    def lstm_j(m, x, h):
        (c, hh), _ = m((jnp.asarray(2 * h), jnp.asarray(h)), jnp.asarray(x))  # nnx carry order (c, h)
        return jnp.concatenate([hh, c], -1)

    mha_x, mha_kv = _x(2, 5, 8), _x(2, 4, 6)
    return {
        "Linear": (nn.Linear(3, 4), lambda: nnx.Linear(3, 4, **F64, rngs=nnx.Rngs(0)), (x2,), t, None),
        "Conv1d(groups=2)": (
            nn.Conv1d(4, 6, 3, padding=1, groups=2),
            lambda: nnx.Conv(4, 6, (3,), padding=1, feature_group_count=2, **F64, rngs=nnx.Rngs(0)),
            (x3,),
            t,
            "channels",
        ),
        "Conv2d(groups=2, stride=2)": (
            nn.Conv2d(4, 6, 3, stride=2, padding=1, groups=2),
            lambda: nnx.Conv(4, 6, (3, 3), strides=2, padding=1, feature_group_count=2, **F64, rngs=nnx.Rngs(0)),
            (x4,),
            t,
            "channels",
        ),
        "ConvTranspose2d": (
            nn.ConvTranspose2d(4, 6, 3, stride=2, padding=1, output_padding=1),
            lambda: nnx.ConvTranspose(4, 6, (3, 3), strides=2, padding=((1, 2), (1, 2)), **F64, rngs=nnx.Rngs(0)),
            (x4,),
            t,
            "channels",
        ),
        "ConvTranspose2d(transpose_kernel)": (
            nn.ConvTranspose2d(4, 6, 2, stride=2),
            lambda: nnx.ConvTranspose(
                4, 6, (2, 2), strides=2, padding=((1, 1), (1, 1)), transpose_kernel=True, **F64, rngs=nnx.Rngs(0)
            ),
            (x4,),
            t,
            "channels",
        ),
        "Embedding": (nn.Embedding(10, 4), lambda: nnx.Embed(10, 4, **F64, rngs=nnx.Rngs(0)), (tok,), t, None),
        "LayerNorm": (
            nn.LayerNorm(6),
            lambda: nnx.LayerNorm(6, epsilon=1e-5, **F64, rngs=nnx.Rngs(0)),
            (_x(2, 6),),
            t,
            None,
        ),
        "RMSNorm": (nn.RMSNorm(6, eps=1e-6), lambda: nnx.RMSNorm(6, **F64, rngs=nnx.Rngs(0)), (_x(2, 6),), t, None),
        "GroupNorm": (
            nn.GroupNorm(2, 4),
            lambda: nnx.GroupNorm(4, num_groups=2, epsilon=1e-5, **F64, rngs=nnx.Rngs(0)),
            (x4,),
            t,
            "channels",
        ),
        "BatchNorm1d(eval)": (
            nn.BatchNorm1d(3).eval(),
            lambda: nnx.BatchNorm(3, use_running_average=True, **F64, rngs=nnx.Rngs(0)),
            (x2,),
            t,
            None,
        ),
        "BatchNorm2d(eval)": (
            nn.BatchNorm2d(4).eval(),
            lambda: nnx.BatchNorm(4, use_running_average=True, **F64, rngs=nnx.Rngs(0)),
            (x4,),
            t,
            "channels",
        ),
        "MultiheadAttention": (
            nn.MultiheadAttention(8, 2, batch_first=True),
            lambda: nnx.MultiHeadAttention(2, 8, decode=False, attention_fn=attention, **F64, rngs=nnx.Rngs(0)),
            (mha_x,),
            lambda m, x: t(m, x, x, x)[0],
            None,
        ),
        "MultiheadAttention(kdim=vdim=6)": (
            nn.MultiheadAttention(8, 2, batch_first=True, kdim=6, vdim=6),
            lambda: nnx.MultiHeadAttention(
                2, 8, in_kv_features=6, decode=False, attention_fn=attention, **F64, rngs=nnx.Rngs(0)
            ),
            (mha_x, mha_kv),
            lambda m, q, kv: t(m, q, kv, kv)[0],
            "kv",
        ),
        "GRUCell -> TorchGRUCell": (
            nn.GRUCell(3, 4),
            lambda: TorchGRUCell(3, 4, rngs=nnx.Rngs(0)),
            (seq[:, 0], h0),
            t,
            "cell",
        ),
        "RNNCell -> nnx.SimpleCell": (
            nn.RNNCell(3, 4),
            lambda: nnx.SimpleCell(3, 4, **F64, rngs=nnx.Rngs(0)),
            (seq[:, 0], h0),
            t,
            "cell",
        ),
        "LSTMCell -> nnx.LSTMCell": (
            nn.LSTMCell(3, 4),
            lambda: nnx.LSTMCell(3, 4, **F64, rngs=nnx.Rngs(0)),
            (seq[:, 0], h0),
            lstm_t,
            lstm_j,
        ),
        "LSTMCell -> nnx.OptimizedLSTMCell": (
            nn.LSTMCell(3, 4),
            lambda: nnx.OptimizedLSTMCell(3, 4, **F64, rngs=nnx.Rngs(0)),
            (seq[:, 0], h0),
            lstm_t,
            lstm_j,
        ),
        "GRU -> nnx.RNN(TorchGRUCell)": (
            nn.GRU(3, 4, batch_first=True),
            lambda: nnx.RNN(TorchGRUCell(3, 4, rngs=nnx.Rngs(0))),
            (seq,),
            lambda m, x: t(m, x)[0],
            None,
        ),
        "LSTM -> nnx.RNN(nnx.LSTMCell)": (
            nn.LSTM(3, 4, batch_first=True),
            lambda: nnx.RNN(nnx.LSTMCell(3, 4, **F64, rngs=nnx.Rngs(0))),
            (seq,),
            lambda m, x: t(m, x)[0],
            None,
        ),
    }


CASES = _cases()


def _torch_out(case, module) -> np.ndarray:
    _, _, inputs, fwd, _ = case
    with torch.no_grad():
        return np.asarray(fwd(module, *inputs).numpy())


def _jax_out(case, module) -> np.ndarray:
    _, _, inputs, _, how = case
    if callable(how):
        return np.asarray(how(module, *inputs))
    if how == "channels":
        return np.moveaxis(np.asarray(module(jnp.asarray(_nchw(inputs[0])))), -1, 1)
    if how == "cell":
        return np.asarray(module(jnp.asarray(inputs[1]), jnp.asarray(inputs[0]))[0])
    if how == "kv":
        return np.asarray(module(jnp.asarray(inputs[0]), jnp.asarray(inputs[1]), jnp.asarray(inputs[1])))
    return np.asarray(module(*[jnp.asarray(v) for v in inputs]))


def _nnx64(factory) -> JWrap:
    """An NNX twin in float64 throughout: nnx.BatchNorm keeps its statistics in float32 whatever param_dtype says."""
    return backend("jax").port.copy_model(JWrap(factory()), "float64")


def _randomize(module: nn.Module) -> nn.Module:
    """Non-default weights and statistics (norm weights, biases, running stats) so that no rule is tested on ones and zeros."""
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.from_numpy(RNG.normal(size=tuple(p.shape))))
        for name, b in module.named_buffers():
            if "running_var" in name:
                b.copy_(torch.from_numpy(RNG.uniform(0.5, 2.0, size=tuple(b.shape))))
            elif "running_mean" in name:
                b.copy_(torch.from_numpy(RNG.normal(size=tuple(b.shape))))
    return module


@pytest.mark.parametrize("name", list(CASES))
def test_rule_both_directions_and_round_trip(name: str) -> None:
    case = CASES[name]
    with jax.enable_x64(True):
        torch_model = TWrap(_randomize(case[0].double()))
        jax_model = _nnx64(case[1])
        # torch -> NNX: the same function
        transfer_weights(torch_model, jax_model)
        want = _torch_out(case, torch_model.m)
        np.testing.assert_allclose(_jax_out(case, jax_model.m), want, rtol=1e-12, atol=1e-12)
        # NNX -> torch: into a fresh torch twin with other random weights, the same function again
        fresh_t = TWrap(_randomize(case[0].double()))
        transfer_back(jax_model, fresh_t)
        np.testing.assert_allclose(_torch_out(case, fresh_t.m), want, rtol=1e-12, atol=1e-12)
        # round trip NNX -> torch -> NNX: exact
        again = _nnx64(case[1])
        transfer_weights(fresh_t, again)
        first, second = backend("jax").port.native(jax_model), backend("jax").port.native(again)
        assert first.keys() == second.keys()
        for key in first:
            np.testing.assert_array_equal(second[key], first[key], err_msg=key)  # exact: one model read twice


def test_round_trip_torch_nnx_torch_is_exact_where_nothing_folds() -> None:
    with jax.enable_x64(True):
        for name in (
            "Linear",
            "Conv2d(groups=2, stride=2)",
            "MultiheadAttention",
            "BatchNorm2d(eval)",
            "GRU -> nnx.RNN(TorchGRUCell)",
        ):
            case = CASES[name]
            torch_model, back = TWrap(_randomize(case[0].double())), TWrap(_randomize(case[0].double()))
            jax_model = _nnx64(case[1])
            transfer_weights(torch_model, jax_model)
            transfer_back(jax_model, back)
            want, got = torch_model.state_dict(), back.state_dict()
            for key in want:
                if key.endswith("num_batches_tracked"):
                    continue
                np.testing.assert_array_equal(
                    got[key].numpy(), want[key].numpy(), err_msg=f"{name}: {key}"
                )  # exact: a round trip copies values


def test_folded_lstm_biases_come_back_as_their_sum() -> None:
    with jax.enable_x64(True):
        case = CASES["LSTMCell -> nnx.LSTMCell"]
        torch_model, back = TWrap(_randomize(case[0].double())), TWrap(_randomize(case[0].double()))
        jax_model = JWrap(case[1]())
        transfer_weights(torch_model, jax_model)
        np.testing.assert_allclose(
            np.asarray(jax_model.m.hf.bias.get_value()),
            (torch_model.m.bias_ih + torch_model.m.bias_hh).detach().numpy()[4:8],  # gate f of i | f | g | o
            rtol=1e-15,
        )
        transfer_back(jax_model, back)
        np.testing.assert_array_equal(back.m.bias_hh.detach().numpy(), 0)  # exact: folded into b_ih
        np.testing.assert_allclose(
            back.m.bias_ih.detach().numpy(),
            (torch_model.m.bias_ih + torch_model.m.bias_hh).detach().numpy(),
            rtol=1e-15,
        )


def test_nnx_gru_cell_has_no_place_for_b_hn() -> None:
    with jax.enable_x64(True):
        torch_cell = _randomize(nn.GRUCell(3, 4).double())
        with pytest.raises(PortInputError, match=r"b_hn = hh/bias\[8:12\].*no place in nnx.GRUCell \(P08\)"):
            transfer_weights(TWrap(torch_cell), JWrap(nnx.GRUCell(3, 4, **F64, rngs=nnx.Rngs(0))))
        with torch.no_grad():
            torch_cell.bias_hh[8:].zero_()  # without b_hn, nnx.GRUCell is torch's cell
        jax_model = JWrap(nnx.GRUCell(3, 4, **F64, rngs=nnx.Rngs(0)))
        transfer_weights(TWrap(torch_cell), jax_model)
        case = CASES["GRUCell -> TorchGRUCell"]
        np.testing.assert_allclose(_jax_out(case, jax_model.m), _torch_out(case, torch_cell), rtol=1e-12, atol=1e-12)


class _TNet(nn.Module):
    def __init__(self, extra: bool = False) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2))
        self.scale = nn.Parameter(torch.ones(2))
        if extra:
            self.extra = nn.Linear(2, 2)


class _JNet(nnx.Module):
    def __init__(self, extra: bool = False, name: str = "body", wide: bool = False) -> None:
        r = nnx.Rngs(0)
        setattr(self, name, nnx.Sequential(nnx.Linear(3, 4, rngs=r), jnp.tanh, nnx.Linear(4, 3 if wide else 2, rngs=r)))
        self.scale = nnx.Param(jnp.ones(2))
        if extra:
            self.extra = nnx.Linear(2, 2, rngs=r)


def test_sequential_layers_and_bare_parameters_match_by_structure() -> None:
    t, j = _TNet(), _JNet()
    transfer_weights(t, j)
    np.testing.assert_array_equal(
        np.asarray(j.body.layers[2].kernel.get_value()), t.body[2].weight.detach().numpy().T
    )  # exact: a copy
    np.testing.assert_array_equal(np.asarray(j.scale.get_value()), t.scale.detach().numpy())  # exact: a copy


def test_unmatched_names_and_shapes_are_errors_that_list_them() -> None:
    with pytest.raises(
        PortInputError, match=r"torch extra \(Linear: kernel \(2, 2\), bias \(2,\)\) -> no NNX module at 'extra'"
    ):
        transfer_weights(_TNet(extra=True), _JNet())
    with pytest.raises(
        PortInputError, match=r"NNX leaves no torch parameter reaches: \['extra/bias', 'extra/kernel'\]"
    ):
        transfer_weights(_TNet(), _JNet(extra=True))
    with pytest.raises(
        PortInputError, match=r"'body/layers/2/kernel' has shape \(4, 3\), the torch weights give \(4, 2\)"
    ):
        transfer_weights(_TNet(), _JNet(wide=True))
    with pytest.raises(PortInputError, match=r"no NNX module at 'body/0'"):
        transfer_weights(_TNet(), _JNet(name="trunk"))
    transfer_weights(_TNet(), _JNet(name="trunk"), mapping={"body": "trunk"})  # an explicit mapping pairs them
    with pytest.raises(PortInputError, match="mapping: expected a dict"):
        transfer_weights(_TNet(), _JNet(), mapping={"body": 3})


def test_a_configuration_no_rule_explains_is_named() -> None:
    class Bi(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.rnn = nn.LSTM(3, 4, bidirectional=True)

    with pytest.raises(
        PortInputError, match=r"nn.LSTM: expected bidirectional=False, proj_size=0.*got bidirectional=True"
    ):
        transfer_weights(Bi(), JWrap(nnx.RNN(nnx.LSTMCell(3, 4, rngs=nnx.Rngs(0)))))
    with pytest.raises(ValueError, match="groups expected 1"):
        backend("torch").port.structure(TWrap(nn.ConvTranspose2d(4, 4, 3, groups=2)))
