"""The one torch <-> canonical layout conversion: round trip, transposition, shape errors; and the other
torch helper a lesson's step relies on (_common.step_of): selfcheck runs this file for the private helpers."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from detach_parity.torch_impl._layout import grads_of, load_params, params_of
from torch import nn


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.l1 = nn.Linear(3, 3, dtype=torch.float64)
        self.l2 = nn.Linear(3, 2, dtype=torch.float64)


def params(rng: np.random.Generator) -> dict[str, np.ndarray]:
    return {
        "l1/kernel": rng.normal(size=(3, 3)),
        "l1/bias": rng.normal(size=3),
        "l2/kernel": rng.normal(size=(3, 2)),
        "l2/bias": rng.normal(size=2),
    }


def test_round_trip_and_square_transpose() -> None:
    p = params(np.random.default_rng(0))
    net = load_params(Net(), p)
    back = params_of(net)
    for k in p:
        np.testing.assert_array_equal(back[k], p[k])  # exact: a layout round trip copies values
    # a square kernel loads without error either way: only the transpose gives x @ W + b
    x = np.random.default_rng(1).normal(size=(4, 3))
    y = net.l1(torch.from_numpy(x)).detach().numpy()
    np.testing.assert_allclose(y, x @ p["l1/kernel"] + p["l1/bias"], rtol=1e-12)
    assert not np.allclose(y, x @ p["l1/kernel"].T + p["l1/bias"])


def test_grads_in_canonical_layout_and_none_as_zero() -> None:
    p = params(np.random.default_rng(0))
    net = load_params(Net(), p)
    x = torch.from_numpy(np.random.default_rng(2).normal(size=(4, 3)))
    net.l1(x).sum().backward()
    g = grads_of(net)
    np.testing.assert_allclose(g["l1/kernel"], x.numpy().T @ np.ones((4, 3)), rtol=1e-12)
    assert np.all(g["l2/kernel"] == 0)  # l2 never used: .grad is None, mapped to zeros (P11)


def test_load_errors() -> None:
    p = params(np.random.default_rng(0))
    with pytest.raises(ValueError, match=r"'l2/kernel' expected canonical shape \(3, 2\), got \(2, 3\)"):
        load_params(Net(), {**p, "l2/kernel": p["l2/kernel"].T})
    with pytest.raises(KeyError, match="no array for parameter 'l1/bias'"):
        load_params(Net(), {k: v for k, v in p.items() if k != "l1/bias"})
    with pytest.raises(ValueError, match=r"arrays \['l3/kernel'\] match no parameter"):
        load_params(Net(), {**p, "l3/kernel": np.zeros((2, 2))})


@pytest.mark.filterwarnings("ignore:Using backward\\(\\) with create_graph=True")
def test_grads_after_create_graph_are_plain_arrays() -> None:
    # with create_graph=True, .grad itself requires grad: grads_of must cut it from the graph
    net = load_params(Net(), params(np.random.default_rng(0)))
    x = torch.from_numpy(np.random.default_rng(3).normal(size=(2, 3)))
    (net.l1(x) ** 2).sum().backward(create_graph=True)
    assert net.l1.weight.grad.requires_grad
    g = grads_of(net)
    assert isinstance(g["l1/kernel"], np.ndarray) and g["l1/kernel"].shape == (3, 3)


def test_step_of_returns_the_summed_loss_without_a_graph() -> None:
    """make_step's contract, kept by _common.step_of: every call runs, the losses add up, no graph outlives a step."""
    from detach_parity.torch_impl._common import StepCall, step_of

    w = torch.tensor([1.5, -2.0], dtype=torch.float64, requires_grad=True)
    calls = [
        StepCall(lambda w, k: ((k * w).sum(), "aux"), (w,), (2.0,)),
        StepCall(lambda w: (w**2).sum(), (w,), loss=()),
    ]
    loss = step_of(calls)()
    assert float(loss) == 2.0 * (1.5 - 2.0) + (1.5**2 + 2.0**2)
    assert not loss.requires_grad and loss.grad_fn is None  # detached: the step's graph is gone with it
    with pytest.raises(ValueError, match="step_of: calls expected at least one StepCall, got none"):
        step_of([])
