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
        r"need about [\d.]+ [MG]B \(~\d+ bytes per parameter, the recorded forward on the batch ~[\d.]+ MB of it\), "
        r"0.0 GB are available",
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


def _fake_cgroups(tmp_path, own: str, files: dict[str, str]):
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc" / "cgroup").write_text(own)
    for rel, text in files.items():
        (tmp_path / "cg" / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "cg" / rel).write_text(text)
    return tmp_path / "cg", tmp_path / "proc" / "cgroup"


GIB = 1 << 30


@pytest.mark.parametrize(
    "own, files, left",
    [
        # cgroup v1, the host's hierarchy mounted: the limit sits on the process's own folder
        (
            "9:pids:/\n4:memory:/jobs/j1\n0::/\n",
            {"memory/jobs/j1/memory.limit_in_bytes": str(4 * GIB), "memory/jobs/j1/memory.usage_in_bytes": str(GIB)},
            3 * GIB,
        ),
        # cgroup v1 in a container: the mount is the process's cgroup, its path is not below it
        (
            "4:memory:/jobs/j1\n",
            {"memory/memory.limit_in_bytes": str(4 * GIB), "memory/memory.usage_in_bytes": str(GIB // 2)},
            4 * GIB - GIB // 2,
        ),
        # cgroup v1 without a limit (2^63 rounded to pages): none
        (
            "4:memory:/\n",
            {"memory/memory.limit_in_bytes": "9223372036854771712", "memory/memory.usage_in_bytes": str(GIB)},
            None,
        ),
        # cgroup v2, nested: the parent's limit is the tighter one
        (
            "0::/user.slice/job\n",
            {
                "user.slice/memory.max": str(2 * GIB),
                "user.slice/memory.current": str(GIB),
                "user.slice/job/memory.max": "max",
                "user.slice/job/memory.current": str(GIB // 4),
            },
            GIB,
        ),
        # hybrid: v1's memory controller limits, v2's unified hierarchy has none
        (
            "4:memory:/a\n0::/\n",
            {"memory/a/memory.limit_in_bytes": str(GIB), "memory/a/memory.usage_in_bytes": "0"},
            GIB,
        ),
    ],
    ids=["v1-host-view", "v1-container-view", "v1-unlimited", "v2-nested", "hybrid"],
)
def test_the_memory_left_reads_cgroup_v1_and_v2_up_the_hierarchy(tmp_path, monkeypatch, own, files, left) -> None:
    root, proc = _fake_cgroups(tmp_path, own, files)
    assert budget._cgroup_left(root, proc) == left
    monkeypatch.setattr(budget, "CGROUP_ROOT", root)
    monkeypatch.setattr(budget, "PROC_CGROUP", proc)
    free = budget.available()
    assert free is not None and (left is None or free <= left)


def test_a_real_cgroup_v1_limit_is_seen_by_a_process_inside_it() -> None:
    """Where this machine lets us make a memory cgroup (v1, under our own), a child moved into a 4 GiB one
    sees at most 4 GiB left, whatever the machine's MemAvailable."""
    import os
    import subprocess
    import sys
    import uuid
    from pathlib import Path

    line = next((ln for ln in Path("/proc/self/cgroup").read_text().splitlines() if ":memory:" in ln), None)
    own = Path("/sys/fs/cgroup/memory") / line.split(":", 2)[2].strip("/") if line else None
    group = own / f"detach-parity-test-{uuid.uuid4().hex[:8]}" if own else None
    try:
        group.mkdir()  # type: ignore[union-attr]
        (group / "memory.limit_in_bytes").write_text(str(4 * GIB))
    except (OSError, AttributeError) as exc:
        pytest.skip(f"no writable cgroup v1 memory hierarchy here: {exc}")
    try:
        code = (
            "import os, sys; from pathlib import Path; "
            f"Path({str(group / 'cgroup.procs')!r}).write_text(str(os.getpid())); "
            "from detach_parity.shared.apps.check import budget; print(budget.available())"
        )
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
        assert 0 < int(out.stdout.split()[-1]) <= 4 * GIB, out.stdout
    finally:
        os.rmdir(group)  # empty again: its one process has exited


def test_a_wide_batch_is_refused_by_its_recorded_forward_before_anything_runs(monkeypatch) -> None:
    """0.2 M parameters on 100 k × 256 rows (the adversarial case: killed in 4 GiB, 2.6 GiB at 50 k rows
    against a parameters-only 0.52 GB): the forward measured on 2 rows is scaled to all of them."""
    import optax
    import torch
    import torch.nn.functional as F
    from flax import nnx
    from torch import nn

    torch.manual_seed(0)
    tm = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 128), nn.ReLU(), nn.Linear(128, 10))
    r = nnx.Rngs(0)
    jm = nnx.Sequential(
        nnx.Linear(256, 512, rngs=r), nnx.relu, nnx.Linear(512, 128, rngs=r), nnx.relu, nnx.Linear(128, 10, rngs=r)
    )
    rng = np.random.default_rng(0)
    batch = {"x": rng.normal(size=(100_000, 256)).astype(np.float32), "y": rng.integers(0, 10, 100_000)}
    n = sum(p.numel() for p in tm.parameters())
    assert budget.estimate(n, 5, ("float64", "float32")) * 1.1 < 4 * GIB / 4  # parameters alone: far below
    monkeypatch.setattr(budget, "available", lambda: 4 * GIB)
    with pytest.raises(PortInputError, match=r"the recorded forward on the batch ~[4-9]\.\d GB of it\), 4.0 GB are"):
        check_port(
            tm,
            jm,
            batch,
            torch_loss=lambda m, b: F.cross_entropy(m(b["x"]), b["y"]),
            jax_loss=lambda m, b: optax.softmax_cross_entropy_with_integer_labels(m(b["x"]), b["y"]).mean(),
            torch_optimizer=lambda p: torch.optim.SGD(p, 0.1),
            jax_optimizer=optax.sgd(0.1),
        )
    assert all(p.grad is None for p in tm.parameters())  # refused before anything ran


def test_the_recorded_forward_is_measured_on_the_first_rows_and_scaled() -> None:
    batch = {"x": np.ones((1000, 3)), "y": np.zeros(1000, np.int64)}
    seen = []

    def record(sub):
        seen.append({k: v.shape for k, v in sub.items()})
        return {"layer": [[np.zeros((len(sub["x"]), 7))]]}

    # 2 rows: 7 float64 outputs + 3 float64 inputs + one int64 label per row
    assert budget.activations(record, batch) == (7 * 8 + 3 * 8 + 8) * 1000
    assert seen == [{"x": (2, 3), "y": (2,)}]
    assert budget.activations(record, {"x": np.ones((4, 3)), "mask": np.ones((5, 5))}) is None  # no common axis
    assert budget.activations(lambda sub: 1 / 0, batch) is None  # the loss refused 2 rows: not measured
