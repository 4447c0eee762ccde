"""A check that cannot fit in memory is refused up front with its estimate (issue 25 item 6), never killed
by the OOM killer half-way; one that fits runs as before."""

from __future__ import annotations

import json

import numpy as np
import pytest
from detach_parity import check_port
from detach_parity.jax_impl.backend.ports import cnn as jax_cnn
from detach_parity.shared.apps.check import budget
from detach_parity.shared.apps.check.match import PortInputError
from detach_parity.torch_impl.backend.ports import cnn as torch_cnn


def test_the_estimate_is_the_widest_pass_and_does_not_grow_with_the_steps() -> None:
    one = budget.estimate(1_000_000, 5, ("float64",))
    assert one == 1_000_000 * 8 * 16 + (1 << 29)
    # compared as it goes: float32 runs after float64 has gone, one step of each side alive at a time
    assert budget.estimate(1_000_000, 5, ("float64", "float32")) == one
    assert budget.estimate(1_000_000, 50, ("float64",)) == one
    assert budget.estimate(2_000_000, 5, ("float64",)) - (1 << 29) == 2 * (one - (1 << 29))
    assert budget.estimate(1_000_000, 0, ("float64",)) < one
    # GPT-2 small (124 M) at float64 + float32 and 5 steps: under 16 GB
    assert 14 << 30 < budget.estimate(124_000_000, 5, ("float64", "float32")) < 16 << 30


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
    assert budget.room(1) and (budget.available() is None or not budget.room(1 << 60))  # a byte fits, an exabyte not


def test_the_bench_times_and_weighs_one_check_of_a_worked_port(tmp_path, capsys) -> None:
    """`bench --port-check gpt2:small` runs the same measurement the stored GPT-2 small run (gpt2:base) made."""
    from detach_parity.shared.apps import cli

    out = tmp_path / "pc.json"
    assert cli.main(["bench", "--port-check", "gpt2:small", "--quiet", "--json", str(out)]) == 0
    m = json.loads(out.read_text())["port_check"]
    assert (m["port"], m["size"], m["ok"], m["steps"], m["dtypes"]) == (
        "gpt2",
        "small",
        True,
        5,
        ["float64", "float32"],
    )
    # wte 97·32 + wpe 16·32 + one block 12,704 (c_attn, c_proj, the MLP, two LayerNorms) + ln_f 64; lm_head tied
    assert m["parameters"] == 97 * 32 + 16 * 32 + 12_704 + 64
    assert m["wall_s"] > 0 and m["cpu_s"] > 0 and m["seconds"]["float64"] > 0
    assert m["peak_gb"] is None or (m["peak_gb"] >= 0 and m["bytes_per_parameter"] >= 0)
    assert m["batch"] == {"input_ids": [2, 6], "labels": [2, 6]}
    assert "port check gpt2:small: 16,384 parameters, 5 steps, float64 + float32: match" in capsys.readouterr().out


@pytest.mark.parametrize("text", ["nope", "gpt2:huge"])
def test_the_port_check_bench_refuses_an_unknown_port_or_size(text: str, capsys) -> None:
    from detach_parity.shared.apps import cli

    assert cli.main(["bench", "--port-check", text, "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "--port-check" in err and ("NAME[:SIZE]" in err or "size expected one of ['small', 'base']" in err)


@pytest.mark.parametrize("side", ["torch", "jax"])
def test_each_side_trains_one_step_per_request_and_holds_none_it_yielded(side: str) -> None:
    """Compare as you go: `steps` is a generator (the model advances one step per next()), and
    `train` is the same steps gathered; the checker asks for the next step only after judging one."""
    import gc

    from detach_parity.shared.apps.backends import backend

    port, run = backend(side).port, backend(side).port_run
    build = (lambda: torch_cnn.build()) if side == "torch" else (lambda: jax_cnn.build(**torch_cnn.SIZES["small"]))
    batch = {k: v.astype("float64") if v.dtype.kind == "f" else v for k, v in torch_cnn.batch().items()}
    loss = torch_cnn.loss if side == "torch" else jax_cnn.loss
    opt = torch_cnn.optimizer if side == "torch" else jax_cnn.optimizer()
    gathered = run.train(port.copy_model(build(), "float64"), batch, loss, "float64", opt, k=3)
    model = port.copy_model(build(), "float64")
    steps = run.steps(model, batch, loss, "float64", opt, k=3)
    assert "run" in (first := next(steps)) and "run" not in gathered[1]
    flat = lambda values: {
        f"{u}/{k}": v for u, d in values.items() for k, v in (d.items() if isinstance(d, dict) else [(None, d)])
    }  # noqa: E731
    assert flat(first["values"]).keys() == flat(gathered[0]["values"]).keys()
    for s, later in enumerate(steps, start=2):  # step s of the generator is step s of the list, to rounding
        for key, value in flat(later["values"]).items():
            np.testing.assert_allclose(
                value, flat(gathered[s - 1]["values"])[key], rtol=1e-12, atol=1e-14, err_msg=f"step {s} {key}"
            )
        del later
        gc.collect()
    assert s == 3
