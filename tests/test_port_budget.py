"""A check that cannot fit in memory is refused up front with its estimate (issue 25 item 6), never killed
by the OOM killer half-way; one that fits runs as before."""

from __future__ import annotations

import pytest
from detach_parity import check_port
from detach_parity.jax_impl.backend.ports import cnn as jax_cnn
from detach_parity.shared.apps.check import budget
from detach_parity.shared.apps.check.match import PortInputError
from detach_parity.torch_impl.backend.ports import cnn as torch_cnn


def test_the_estimate_grows_with_parameters_steps_and_passes() -> None:
    one = budget.estimate(1_000_000, 5, ("float64",))
    assert one == 1_000_000 * 8 * 32
    assert budget.estimate(1_000_000, 5, ("float64", "float32")) == one * 3 // 2
    assert budget.estimate(2_000_000, 5, ("float64",)) == 2 * one
    assert budget.estimate(1_000_000, 0, ("float64",)) < one
    # GPT-2 small (124 M) at float64 + float32 and 5 steps: about 45 GB today, above a 24 GB machine
    assert 40 << 30 < budget.estimate(124_000_000, 5, ("float64", "float32")) < 50 << 30


def test_a_check_above_the_memory_available_is_refused_with_the_numbers(monkeypatch) -> None:
    monkeypatch.setattr(budget, "available", lambda: 1 << 10)  # a machine with 1 KiB left
    torch_model = torch_cnn.build()
    with pytest.raises(
        PortInputError,
        match=r"torch_model: [\d,]+ parameters with 5 step\(s\) in float64 \+ float32 "
        r"need about [\d.]+ GB \(~\d+ bytes per parameter\), 0.0 GB are available",
    ):
        check_port(
            torch_model,
            jax_cnn.build(**torch_cnn.SIZES["small"]),
            torch_cnn.batch(),
            torch_loss=torch_cnn.loss,
            jax_loss=jax_cnn.loss,
            torch_optimizer=torch_cnn.optimizer,
            jax_optimizer=jax_cnn.optimizer(),
        )
    assert all(p.grad is None for p in torch_model.parameters())  # refused before anything ran


def test_require_passes_when_it_fits_or_cannot_measure() -> None:
    assert budget.require(1000, 5, ("float64",), free=1 << 30) == budget.estimate(1000, 5, ("float64",))
    with pytest.raises(PortInputError, match="1,000 parameters with 5 step"):
        budget.require(1000, 5, ("float64",), free=1000)
    assert budget.available() is None or budget.available() > 0
