"""tbptt: where truncation cuts, what it keeps, full BPTT at k=T, the GRU's b_hn, the cell layout."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from conftest import assert_same_to_rounding, case_result
from detach_parity.jax_impl import tbptt as jt
from detach_parity.shared.core import fixtures
from detach_parity.shared.core.checks import truncation_length
from detach_parity.shared.core.oracle import fd_grad
from detach_parity.shared.scenarios import tbptt as sc
from detach_parity.torch_impl import tbptt as tt
from detach_parity.torch_impl._layout import grads_of, load_params, params_of
from flax import nnx
from torch import nn


def _reached(out: dict, cell: str) -> list[int]:
    """Input steps that the last step's loss reaches (non-zero gradient)."""
    return [t for t in range(24) if np.any(out[f"{cell}/grads_last/x/t{t:02d}"] != 0)]


@pytest.mark.parametrize("variant, steps", [("k=1", [23]), ("k=10", [20, 21, 22, 23]), ("k=T", list(range(24)))])
def test_last_loss_reaches_exactly_its_window(variant: str, steps: list[int]) -> None:
    r = case_result("tbptt", variant, "float64", "random")
    for fw in ("torch", "jax"):
        for cell in sc.CELLS:
            assert _reached(r.outputs[fw], cell) == steps


def test_truncation_cuts_but_does_not_change_what_it_keeps() -> None:
    full = case_result("tbptt", "k=T", "float64", "random").outputs
    for variant, start in (("k=10", 20), ("k=1", 23)):
        cut = case_result("tbptt", variant, "float64", "random").outputs
        for fw in ("torch", "jax"):
            for cell in sc.CELLS:
                assert cut[fw][f"{cell}/loss"] == full[fw][f"{cell}/loss"]  # detach changes no value
                for t in range(start, 24):  # inside the last window: the same path, the same gradient
                    key = f"{cell}/grads_last/x/t{t:02d}"
                    np.testing.assert_allclose(cut[fw][key], full[fw][key], rtol=1e-12, atol=1e-15)
                assert np.max(np.abs(cut[fw][f"{cell}/grads/x"] - full[fw][f"{cell}/grads/x"])) > 1e-3


def _full_sequence_module(cell: str, fx) -> nn.Module:
    """torch's untruncated nn.RNN / nn.GRU loaded with the cell's weights (weight_ih_l0 = weight_ih)."""
    rnn = (nn.RNN if cell == "elman" else nn.GRU)(fx.dims["I"], fx.dims["H"], dtype=torch.float64)
    with torch.no_grad():
        for name in ("ih", "hh"):
            getattr(rnn, f"weight_{name}_l0").copy_(torch.from_numpy(fx[f"params/{cell}/cell/{name}/kernel"].T.copy()))
            getattr(rnn, f"bias_{name}_l0").copy_(torch.from_numpy(fx[f"params/{cell}/cell/{name}/bias"].copy()))
    return rnn


@pytest.mark.parametrize("cell", sc.CELLS)
def test_k_equals_T_is_full_bptt(cell: str) -> None:
    fx = fixtures.make("tbptt", "float64")
    rnn = _full_sequence_module(cell, fx)
    x = torch.tensor(np.array(fx["x"]), requires_grad=True)
    hs, _ = rnn(x, torch.from_numpy(np.array(fx["h0"]))[None])  # [T, B, H]: no detach anywhere
    w, b = (torch.tensor(np.array(fx[f"params/{cell}/readout/{n}"]), requires_grad=True) for n in ("kernel", "bias"))
    resid = hs @ w + b - torch.from_numpy(np.array(fx["targets"]))
    (0.5 * (resid**2).mean(dim=(1, 2)).sum()).backward()
    out = case_result("tbptt", "k=T", "float64", "random").outputs
    for fw in ("torch", "jax"):
        np.testing.assert_allclose(out[fw][f"{cell}/grads/x"], x.grad.numpy(), rtol=1e-11, atol=1e-14)
        np.testing.assert_allclose(out[fw][f"{cell}/grads/readout/kernel"], w.grad.numpy(), rtol=1e-11)
        np.testing.assert_allclose(out[fw][f"{cell}/grads/cell/hh/kernel"], rnn.weight_hh_l0.grad.numpy().T, rtol=1e-11)


def _small_fixture(t_steps: int) -> fixtures.Fixture:
    fx = fixtures.make("tbptt", "float64")
    arrays = dict(fx.items())
    arrays.update(x=fx["x"][:t_steps], targets=fx["targets"][:t_steps])
    return fixtures.from_arrays("tbptt", arrays)


@pytest.mark.parametrize("cell", sc.CELLS)
def test_oracle_backward_matches_finite_differences(cell: str) -> None:
    """The hand-written truncated backward against central differences with the stopped carries held fixed."""
    a, k = _small_fixture(5).float64(), 2
    p0 = {leaf: a[f"params/{cell}/{leaf}"] for leaf in sc.LEAVES}
    _, hs, caches, _ = sc.forward(cell, p0, a["x"], a["h0"])
    carries = {t: (a["h0"] if t == 0 else hs[t - 1]) for t in range(0, 5, k)}  # stopped: base-point values

    def loss(q):
        h, total = None, 0.0
        for t in range(5):
            h = carries[t] if t % k == 0 else h
            h, _ = sc.cell_step(cell, q, q["x"][t], h)
            total += 0.5 * np.mean((h @ q["readout/kernel"] + q["readout/bias"] - a["targets"][t]) ** 2)
        return total

    fd = fd_grad(loss, {**p0, "x": a["x"]})
    y = hs @ p0["readout/kernel"] + p0["readout/bias"]
    grads, dx = sc.backward(cell, p0, hs, caches, (y - a["targets"]) / a["targets"][0].size, k)
    for leaf in sc.LEAVES:
        np.testing.assert_allclose(grads[leaf], fd[leaf], rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(dx, fd["x"], rtol=1e-8, atol=1e-10)


def test_gru_b_hn_is_nonzero_and_dropping_it_changes_hidden_states() -> None:
    """P08: nnx.GRUCell loaded with the merged biases it has slots for differs from nn.GRUCell by b_hn's effect."""
    fx = fixtures.make("tbptt", "float64")
    n_h = fx.dims["H"]
    b_ih, b_hh = fx["params/gru/cell/ih/bias"], fx["params/gru/cell/hh/bias"]
    assert np.min(np.abs(b_hh[2 * n_h :])) > 0.05  # the fixture's b_hn is really there
    canon = {
        "ih/kernel": fx["params/gru/cell/ih/kernel"],
        "ih/bias": b_ih,
        "hh/kernel": fx["params/gru/cell/hh/kernel"],
    }

    def torch_hidden_states(b_hn_scale: float) -> np.ndarray:
        hh_bias = np.concatenate([b_hh[: 2 * n_h], b_hn_scale * b_hh[2 * n_h :]])
        cell = load_params(nn.GRUCell(fx.dims["I"], n_h, dtype=torch.float64), {**canon, "hh/bias": hh_bias})
        h, hs = torch.from_numpy(np.array(fx["h0"])), []
        with torch.no_grad():
            for x_t in torch.from_numpy(np.array(fx["x"])):
                h = cell(x_t, h)
                hs.append(h.numpy())
        return np.stack(hs)

    with jax.enable_x64(True):
        flax_cell = nnx.eval_shape(
            lambda: nnx.GRUCell(fx.dims["I"], n_h, dtype=jnp.float64, param_dtype=jnp.float64, rngs=nnx.Rngs(0))
        )
        flax_cell.dense_i.kernel.set_value(jnp.asarray(canon["ih/kernel"]))  # [I, 3H], blocks r | z | n: as torch
        flax_cell.dense_i.bias.set_value(jnp.asarray(b_ih + np.concatenate([b_hh[: 2 * n_h], np.zeros(n_h)])))
        flax_cell.dense_h.kernel.set_value(jnp.asarray(canon["hh/kernel"]))  # dense_h has no bias: no slot for b_hn
        model, params = jt.build_model(fx, "gru")

        @jax.jit
        def hidden_states(graphdef, state, params, xs, h0):
            cell = nnx.merge(graphdef, state)
            flax_hs = jax.lax.scan(lambda h, x: cell(h, x), h0, xs)[1]
            plain_hs = jax.lax.scan(lambda h, x: (model(params, x, h)[0],) * 2, h0, xs)[1]
            return flax_hs, plain_hs

        flax_hs, plain_hs = hidden_states(*nnx.split(flax_cell), params, jnp.asarray(fx["x"]), jnp.asarray(fx["h0"]))
    torch_hs = torch_hidden_states(1.0)
    assert np.max(np.abs(torch_hs - np.asarray(flax_hs))) > 1e-2  # the naive nnx.GRUCell port drifts
    np.testing.assert_allclose(np.asarray(flax_hs), torch_hidden_states(0.0), rtol=1e-12, atol=1e-14)  # exact w/o b_hn
    # the scenario's plain-function cell keeps b_hn: it matches torch with the fixture's b_hn
    np.testing.assert_allclose(np.asarray(plain_hs), torch_hs, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("module", [nn.RNNCell, nn.GRUCell])
def test_cell_layout_round_trip_and_gate_order(module: type) -> None:
    fx = fixtures.make("tbptt", "float64")
    cell = "elman" if module is nn.RNNCell else "gru"
    canon = {k.removeprefix(f"params/{cell}/cell/"): v for k, v in fx.items() if k.startswith(f"params/{cell}/cell/")}
    torch_cell = load_params(module(fx.dims["I"], fx.dims["H"], dtype=torch.float64), canon)
    back = params_of(torch_cell)
    assert sorted(back) == ["hh/bias", "hh/kernel", "ih/bias", "ih/kernel"]
    for key, value in canon.items():  # exact: a layout round trip copies values
        np.testing.assert_array_equal(back[key], value)
    np.testing.assert_array_equal(torch_cell.weight_ih.detach().numpy(), canon["ih/kernel"].T)  # [gates*H, I]
    with torch.no_grad():
        h = torch_cell(torch.from_numpy(np.array(fx["x"][0])), torch.from_numpy(np.array(fx["h0"]))).numpy()
    expect, _ = sc.cell_step(cell, {f"cell/{k}": v for k, v in canon.items()}, fx["x"][0], fx["h0"])
    np.testing.assert_allclose(h, expect, rtol=1e-13)


def test_window_loop_equals_step_mask_in_both_frameworks() -> None:
    fx = fixtures.make("tbptt", "float64")
    model_t = tt.build_model(fx, "elman")
    x = torch.tensor(np.array(fx["x"]), requires_grad=True)
    h0 = torch.from_numpy(np.array(fx["h0"]))
    grads = [torch.autograd.grad(f(model_t, x, h0, 12)[-1].sum(), x)[0].numpy() for f in (tt.unroll, tt.unroll_windows)]
    assert_same_to_rounding(grads[0], grads[1], "a window loop and a step mask: two programs, one gradient")
    assert np.all(grads[0][:12] == 0) and np.all(grads[0][12:] != 0)
    with jax.enable_x64(True):
        model_j, params = jt.build_model(fx, "elman")
        h0_j = jnp.asarray(fx["h0"])
        g_j = jax.jit(
            lambda xs: [
                jax.grad(lambda v, f=f: f(model_j, params, v, h0_j, 12)[-1].sum())(xs)
                for f in (jt.unroll, jt.unroll_windows)
            ]
        )(jnp.asarray(fx["x"]))
    np.testing.assert_allclose(np.asarray(g_j[0]), grads[0], rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(np.asarray(g_j[1]), grads[0], rtol=1e-12, atol=1e-15)
    for unroll_windows in (
        lambda: tt.unroll_windows(model_t, x, h0, 10),
        lambda: jt.unroll_windows(model_j, params, jnp.asarray(fx["x"]), h0_j, 10),
    ):
        with pytest.raises(ValueError, match="unroll_windows: k expected to divide T = 24, got k = 10"):
            unroll_windows()


def test_detach_alone_saves_no_activation_memory_with_one_summed_loss() -> None:
    """C11: with one backward over the summed loss, k=1 keeps as many activations alive as k=T.

    Counted with saved_tensors_hooks: elements of saved tensors that are not parameters
    (detaching h only spares saving the weights for h's own gradient, which costs no memory).
    """
    fx = fixtures.make("tbptt", "float64")
    model = tt.build_model(fx, "gru")
    weights = {p.data_ptr() for p in model.parameters()}
    x = torch.from_numpy(np.array(fx["x"]))
    counts = {}
    for k in (1, 10, 24):
        saved: list[int] = []

        def pack(t: torch.Tensor, saved: list[int] = saved) -> torch.Tensor:
            if t.data_ptr() not in weights:
                saved.append(t.numel())
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            ys = tt.unroll(model, x, torch.from_numpy(np.array(fx["h0"])), k)
        counts[k] = sum(saved)
        assert all(y.requires_grad for y in ys)
    assert counts[1] == counts[10] == counts[24] > 0, counts


def test_bad_cell_and_loss_shape_raise() -> None:
    for cls in (lambda: tt.Recurrent("lstm", 2, 3, 1, torch.float64), lambda: jt.Recurrent("lstm")):
        with pytest.raises(ValueError, match=r"Recurrent: cell expected one of \('elman', 'gru'\), got 'lstm'"):
            cls()
    with pytest.raises(ValueError, match=r"step_loss: y has shape \(2, 1\) but target has shape \(2,\)"):
        tt.step_loss(torch.zeros(2, 1), torch.zeros(2))
    with pytest.raises(ValueError, match=r"step_loss: y has shape \(2, 1\) but target has shape \(2,\)"):
        jt.step_loss(jnp.zeros((2, 1)), jnp.zeros(2))


@pytest.mark.parametrize("variant", ["k=1", "k=T"])
def test_train_windows_gives_the_truncated_gradient(variant: str) -> None:
    """The per-window training loop (backward per window) == the scenario's gradient, both frameworks, float64."""
    fx = fixtures.make("tbptt", "float64")
    expect = case_result("tbptt", variant, "float64", "random").outputs
    k = truncation_length(variant, 24)
    for cell in sc.CELLS:
        model = tt.build_model(fx, cell)
        loss_t = tt.train_windows(
            model,
            torch.from_numpy(np.array(fx["x"])),
            torch.from_numpy(np.array(fx["h0"])),
            torch.from_numpy(np.array(fx["targets"])),
            k,
        )
        assert not loss_t.requires_grad  # the summed loss keeps no window's graph alive
        grads_t = grads_of(model)
        with jax.enable_x64(True):
            model_j, params = jt.build_model(fx, cell)
            loss_j, grads_j = jax.jit(lambda p, x, h, y, m=model_j: jt.train_windows(m, p, x, h, y, k))(
                params, *(jnp.asarray(fx[key]) for key in ("x", "h0", "targets"))
            )
            grads_j = {
                "/".join(str(k_.key) for k_ in path): np.asarray(g)
                for path, g in jax.tree_util.tree_leaves_with_path(grads_j)
            }
        for fw, loss, grads in (("torch", loss_t.item(), grads_t), ("jax", float(loss_j), grads_j)):
            np.testing.assert_allclose(loss, expect[fw][f"{cell}/loss"], rtol=1e-12, err_msg=fw)
            assert set(grads) == {
                key.removeprefix(f"{cell}/grads/")
                for key in expect[fw]
                if key.startswith(f"{cell}/grads/") and key != f"{cell}/grads/x"
            }
            for key, g in grads.items():
                np.testing.assert_allclose(
                    g, expect[fw][f"{cell}/grads/{key}"], rtol=1e-10, atol=1e-13, err_msg=f"{fw} {key}"
                )


def test_train_windows_memory_is_flat_in_T_where_one_grad_over_unroll_is_not() -> None:
    """C11 in JAX: stop_gradient every k steps under one jax.grad keeps all T steps' residuals; a grad per window does not.

    Compiled memory analysis (temp bytes) of the jitted gradient at T = 8 and T = 32, k = 4.
    """
    fx = fixtures.make("tbptt", "float32")
    model, params = jt.build_model(fx, "gru")
    b, i, o = fx["x"].shape[1], fx["x"].shape[2], fx["targets"].shape[2]
    h0 = jnp.asarray(fx["h0"])

    def one_grad(p, x, y):
        return jax.grad(lambda p: jax.vmap(jt.step_loss)(jt.unroll(model, p, x, h0, 4), y).sum())(p)

    def windows(p, x, y):
        return jt.train_windows(model, p, x, h0, y, 4)[1]

    temp = {}
    for name, fn in (("one_grad", one_grad), ("windows", windows)):
        for t in (8, 32):
            args = (params, jnp.zeros((t, b, i)), jnp.zeros((t, b, o)))
            temp[name, t] = jax.jit(fn).lower(*args).compile().memory_analysis().temp_size_in_bytes
    assert temp["windows", 32] < 1.1 * temp["windows", 8], temp  # flat up to a few bytes of layout
    assert temp["one_grad", 32] > 2.5 * temp["one_grad", 8] > 0, temp  # one step's residuals per step


@pytest.mark.parametrize(
    "k, targets_t, message",
    [
        (-4, 8, r"train_windows: k expected an integer in \[1, T = 8\], got -4"),  # 8 % -4 == 0: no window ran
        (0, 8, r"k expected an integer in \[1, T = 8\], got 0"),
        (True, 8, r"k expected an integer in \[1, T = 8\], got True"),
        (2.5, 8, r"k expected an integer in \[1, T = 8\], got 2.5"),
        (16, 8, r"k expected an integer in \[1, T = 8\], got 16"),
        (4, 16, "train_windows: targets expected T = 8 steps, as x, got 16"),
        (3, 8, "train_windows: k expected to divide T = 8, got k = 3"),
    ],
)
def test_train_windows_refuses_a_bad_k_or_targets_in_both_frameworks(k, targets_t: int, message: str) -> None:
    fx = fixtures.make("tbptt", "float32")
    x, h0 = np.array(fx["x"][:8]), np.array(fx["h0"])
    targets = np.zeros((targets_t, *fx["targets"].shape[1:]), np.float32)
    model_t = tt.build_model(fx, "gru")
    model_j, params = jt.build_model(fx, "gru")
    for call in (
        lambda: tt.train_windows(model_t, torch.from_numpy(x), torch.from_numpy(h0), torch.from_numpy(targets), k),
        lambda: jt.train_windows(model_j, params, jnp.asarray(x), jnp.asarray(h0), jnp.asarray(targets), k),
    ):
        with pytest.raises(ValueError, match=message):
            call()
