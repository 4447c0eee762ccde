"""bench: the JSON of a quick run (structure and memory facts, never speed), the columns, the time cap, bad input.

Speed is measured by `detach-parity bench`, not asserted: these tests check what the bench
reports (five columns per step, at two sizes; a compile that fails is a reason, not a crash;
a time budget cuts rounds, never the payload) and the facts that do not depend on the machine
(which memory grows with T).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import weakref
from pathlib import Path

import numpy as np
import pytest
from detach_parity.shared.apps import bench, cli, site
from detach_parity.shared.apps.bench import steps as bench_steps
from detach_parity.shared.apps.bench import worker as bench_worker
from detach_parity.shared.apps.common import write_json
from detach_parity.shared.core import fixtures
from detach_parity.shared.scenarios.frozen_backbone import PARAMS as FB_PARAMS
from detach_parity.shared.scenarios.frozen_backbone import cross_entropy, forward
from detach_parity.shared.scenarios.tbptt import oracle as tbptt_oracle
from rich.console import Console

QUICK = bench.SIZES["quick"]
pytestmark = pytest.mark.xdist_group("bench")  # one worker runs the quick bench once for every test here
QUICK_ARGV = ["bench", "basics", "frozen_backbone", "tbptt", "--quick", "--repeats", "2", "--threads", "1"]


@pytest.fixture(scope="module")
def quick_json(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("bench") / "bench.json"
    assert cli.main([*QUICK_ARGV, "--quiet", "--json", str(path)]) == 0
    return path


@pytest.fixture(scope="module")
def quick(quick_json: Path) -> dict:
    return json.loads(quick_json.read_text(encoding="utf-8"))


def test_quick_run_reports_machine_settings_and_every_scenario(quick: dict) -> None:
    m = quick["machine"]
    assert m["threads"] == 1 and len(m["cpus_used"]) == 1 and m["cpus_available"] >= 1
    assert m["threads_chosen"].startswith("--threads 1 of")
    assert m["devices"]["torch"]["threads"] == m["devices"]["jax"]["threads"] == 1
    assert "no CUDA device" in m["note"] and m["jax_backend"] == "cpu" and m["accelerator"] == "cpu"
    s = quick["settings"]
    assert {k: s[k] for k in ("repeats", "tbptt_repeats", "mode", "dtype", "target_block_s", "noisy_above")} == {
        "repeats": 2,
        "tbptt_repeats": 2,
        "mode": "quick",
        "dtype": "float32",
        "target_block_s": 0.0,
        "noisy_above": bench.NOISY,
    }
    assert (
        s["budget_s"] == bench.SIZES["quick"]["budget_s"] and s["capped"] == 0 and s["min_rounds"] == bench.MIN_ROUNDS
    )
    assert s["torch_compile"] == bench_worker.TORCH_COMPILE[False] and "aot_eager" in s["torch_compile"]
    assert 0 < s["measuring_s"] < quick["seconds"]
    assert len(m["load_average_before"]) == len(m["load_average_after"]) == 3
    assert quick["glossary"] == bench.GLOSSARY and "jax_over_torch" in quick["glossary"]
    assert list(quick["scenarios"]) == ["basics", "frozen_backbone", "tbptt"] and "errors" not in quick
    for name, r in quick["scenarios"].items():
        assert r["variant"] == {"basics": "z_stopped", "frozen_backbone": "freeze_params", "tbptt": "k=1"}[name]
        assert set(r) >= {"torch", "jax"} and set(bench.TUNED) <= set(r) | set(r["unavailable"]), name
        for col in [c for c in bench.COLUMNS if c in r]:
            st = r[col]
            assert st["n"] == 2 and not st["capped"] and st["inner"] == 1 and st["first_call_s"] > 0
            assert 0 < st["min_s"] <= st["p25_s"] <= st["median_s"] <= st["p75_s"]
            assert st["spread"] == pytest.approx((st["p75_s"] - st["p25_s"]) / st["median_s"])
            assert st["noisy"] == (st["spread"] > bench.NOISY)
            if col != "torch":
                assert r["ratios"][col] == pytest.approx(st["median_s"] / r["torch"]["median_s"])
        assert r["jax_over_torch"] == pytest.approx(r["jax"]["median_s"] / r["torch"]["median_s"])
        best = {fw: min((c for c in r if c in bench.COLUMNS and c.startswith(fw)), key=lambda c: r[c]["median_s"])
                for fw in ("torch", "jax")}  # fmt: skip
        assert {k: r["best"][k] for k in ("torch", "jax")} == best
        assert r["best"]["jax_over_torch"] == pytest.approx(r[best["jax"]]["median_s"] / r[best["torch"]]["median_s"])
    assert quick["versions"]["torch"].startswith("2.13")
    assert set(quick["overhead"]) == {"eager_op", "jit_call", "nnx_jit_call", "nnx_cached_partial_call"}
    assert all(r["median_s"] > 0 and r["n"] == 2 for r in quick["overhead"].values())
    bench.check_payload(quick)


def test_the_columns_a_user_would_pick(quick: dict) -> None:
    """torch.compile where the step compiles; cached_partial and jit(split) for nnx.jit steps; reasons elsewhere."""
    basics, fb, tb = (quick["scenarios"][n] for n in ("basics", "frozen_backbone", "tbptt"))
    for row in (basics, fb):  # compiled, and its first loss was the eager step's (else it would be unavailable)
        assert row["torch_compile"]["graphs"] >= 1 and row["torch_compile"]["graph_breaks"] >= 1  # backward() splits
        assert row["torch_compile"]["backend"] == "aot_eager"  # quick mode builds no kernels, row by row
    assert set(fb) >= set(bench.COLUMNS) and not fb["unavailable"]  # frozen_backbone's JAX step is an nnx.jit
    assert fb["jax_cached"]["state_leaves"] == fb["jax_split"]["state_leaves"] == 12  # 6 params + AdamW's moments
    for row in (basics, tb):  # already a jax.jit of arrays: nothing to tune, and the row says so
        assert "jax_cached" not in row and "already a jax.jit" in row["unavailable"]["jax_cached"]
        assert "jax_split" not in row and "already a jax.jit" in row["unavailable"]["jax_split"]
    compiled = tb.get("torch_compile")  # torch 2.13: a backward per window over one compiled forward fails
    assert compiled or tb["unavailable"]["torch_compile"].startswith("RuntimeError on the first call, after ")


def test_large_sizes_run_the_same_steps_and_report_both_ratios(quick: dict) -> None:
    large = quick["large"]
    assert list(large) == ["frozen_backbone"]  # the named scenarios that have a large size in quick mode
    row, dims = large["frozen_backbone"], bench.SIZES["quick"]["large"]["frozen_backbone"]
    assert row["dims"] == dims and row["fields"]["x"] == [dims["B"], dims["D"]] and row["case"] == "bench"
    assert row["fields"]["params/backbone/l2/kernel"] == [dims["H"], dims["H"]]
    assert set(row) >= set(bench.COLUMNS) - {"jax_cached"} and row["variant"] == "freeze_params"
    assert row["torch_compile"]["backend"] == "aot_eager"  # the large rows of quick mode build no kernels either
    assert row["unavailable"] == {"jax_cached": bench_worker.LARGE_LEAVE_OUT["jax_cached"]}  # overhead: fixture size
    md = bench.markdown(quick)
    assert "### JAX / torch at both sizes" in md
    small = quick["scenarios"]["frozen_backbone"]
    both = f"| `frozen_backbone` | {small['jax_over_torch']:.2f}× | {row['jax_over_torch']:.2f}× |"
    assert both in md


def test_freezing_section_compares_with_the_ideal_and_names_c16(quick: dict) -> None:
    f = quick["freezing"]
    assert f["config"] == {**QUICK["freezing"], "backbone_params": 8 * 8 + 8 + 8 * 8 + 8, "head_params": 8 * 3 + 3}
    assert set(f["torch"]) == {
        *bench.FREEZING_VARIANTS,
        "no_grad_backbone",
        "backbone_forward",
        "head_step",
        "forward_grad",
        "forward_no_grad",
        "forward_inference_mode",
    }
    assert set(f["jax"]) == {*bench.FREEZING_VARIANTS, "backbone_forward", "head_step", "forward"}
    for fw in ("torch", "jax"):
        s, t = f["summary"][fw], f[fw]
        assert s["ideal_s"] == pytest.approx(t["backbone_forward"]["median_s"] + t["head_step"]["median_s"])
        assert s["saving"]["detach_features"] == pytest.approx(
            1 - t["detach_features"]["median_s"] / t["full_finetune"]["median_s"]
        )
        assert s["over_ideal"]["freeze_params"] == pytest.approx(t["freeze_params"]["median_s"] / s["ideal_s"])
    assert f["claim"] == {"id": "C16", "claim": "detach speeds training up by 15–20 %", "saving": [0.15, 0.2]}


def test_tbptt_memory_is_flat_per_window_and_linear_otherwise(quick: dict) -> None:
    """The machine-independent result: backward per window keeps peak memory flat in T, one backward does not."""
    tb = quick["tbptt_memory"]
    ts, k = QUICK["tbptt"]["T"], QUICK["tbptt"]["k"]
    assert len(tb["rows"]) == len(ts) * 3 * 2 and all(r["peak_bytes"] > 0 for r in tb["rows"])
    g = tb["growth"]
    assert g[f"torch windows k={k}"]["peak_ratio"] == 1.0 and g[f"torch windows k={k}"]["bytes_per_step"] == 0
    assert g[f"jax windows k={k}"]["peak_ratio"] < 1.2  # flat up to a copy of the inputs' layout
    for key in (f"torch one_backward k={k}", "torch windows k=T", f"jax one_backward k={k}", "jax windows k=T"):
        assert g[key]["peak_ratio"] > 2.5 and g[key]["bytes_per_step"] > 100, key  # T grew ×4
    peaks = {(r["framework"], r["form"], r["k"], r["T"]): r["peak_bytes"] for r in tb["rows"]}
    # with a fixed k, detaching every k steps saves nothing once one backward keeps every window alive
    for fw in ("torch", "jax"):
        assert peaks[fw, "one_backward", f"k={k}", ts[-1]] > 0.8 * peaks[fw, "windows", "k=T", ts[-1]]


def test_interleaves_rounds_and_times_the_first_call_apart() -> None:
    calls: list[str] = []
    steps = {"a": lambda: calls.append("a"), "b": lambda: calls.append("b")}
    out = bench.interleaved(steps, repeats=3, target_s=0.0)
    assert calls == ["a", "a", "b", "b"] + ["a", "b"] * 3  # first call + calibration each, then A B A B A B
    assert set(out) == {"a", "b"} and all(
        r["n"] == 3 and r["inner"] == 1 and r["first_call_s"] > 0 and not r["capped"] for r in out.values()
    )
    calls.clear()  # a first call the caller already made (a probe) is not made again
    out = bench.interleaved(steps, repeats=1, target_s=0.0, first_call_s={"a": 2.5})
    assert calls == ["a", "b", "b", "a", "b"] and out["a"]["first_call_s"] == 2.5
    with pytest.raises(ValueError, match="repeats expected an integer >= 1, got 0"):
        bench.interleaved(steps, repeats=0, target_s=0.0)
    with pytest.raises(ValueError, match="steps expected at least one step to time, got none"):
        bench.interleaved({}, repeats=1, target_s=0.0)
    for bad in (float("nan"), float("inf"), -1.0):
        with pytest.raises(ValueError, match=f"target_s expected a finite number of seconds >= 0, got {bad}"):
            bench.interleaved(steps, repeats=1, target_s=bad)
    with pytest.raises(ValueError, match="repeats expected an integer >= 1, got 1.5"):
        bench.interleaved(steps, repeats=1.5, target_s=0.0)
    with pytest.raises(ValueError, match="steps expected a mapping of label to callable, got list"):
        bench.interleaved([steps["a"]], repeats=1, target_s=0.0)


def test_a_passed_deadline_keeps_min_rounds_and_says_capped() -> None:
    import time

    calls: list[str] = []
    steps = {"a": lambda: calls.append("a"), "b": lambda: calls.append("b")}
    out = bench.interleaved(steps, repeats=50, target_s=0.0, deadline=time.monotonic() - 1)
    assert all(r["n"] == bench.MIN_ROUNDS and r["capped"] for r in out.values())
    assert len(calls) == 2 * (2 + bench.MIN_ROUNDS)
    out = bench.interleaved(steps, repeats=2, target_s=0.0, deadline=time.monotonic() - 1)  # fewer asked: all kept
    assert all(r["n"] == 2 and not r["capped"] for r in out.values())
    out = bench.interleaved(steps, repeats=4, target_s=0.0, deadline=time.monotonic() + 60)
    assert all(r["n"] == 4 and not r["capped"] for r in out.values())


def test_budget_shares_what_is_left_between_phases_and_items() -> None:
    import time

    b = bench.Budget(100.0, {"one": 1.0, "two": 3.0})
    end = b.phase("one")
    assert end - time.monotonic() == pytest.approx(25.0, abs=0.5)  # a quarter of what is left
    assert b.item(5) - time.monotonic() == pytest.approx(5.0, abs=0.5)  # a fifth of the phase per item
    assert b.phase("two") - time.monotonic() == pytest.approx(100.0, abs=0.5)  # the last phase gets the rest
    assert 0 < b.left() <= 100 and b.elapsed() >= 0 and not b.over()
    assert not bench.Budget(0.01, {}).over()  # spent at once, but overrun only past its grace of 5 s
    for bad in (0, -1.0, float("inf"), True):
        with pytest.raises(ValueError, match="budget: total_s expected a finite number of seconds > 0"):
            bench.Budget(bad, {})


def test_slope_is_least_squares_and_refuses_one_point() -> None:
    assert bench.slope([64, 128, 256], [10 + 3 * t for t in (64, 128, 256)]) == pytest.approx(3.0)
    assert bench.slope([1, 2, 3], [5, 5, 5]) == 0
    with pytest.raises(ValueError, match="expected >= 2 distinct x values"):
        bench.slope([4, 4], [1, 2])
    with pytest.raises(ValueError, match="slope: expected finite values"):
        bench.slope([1, 2], [1, float("nan")])


def test_run_refuses_bad_python_arguments_before_starting_a_worker() -> None:
    with pytest.raises(ValueError, match="scenarios expected a list of names, got the string 'basics'"):
        bench.run("basics")
    with pytest.raises(ValueError, match=r"repeats expected an integer in \[1, 1000\], got 1.5"):
        bench.run(["basics"], repeats=1.5)
    with pytest.raises(ValueError, match=r"repeats expected an integer in \[1, 1000\], got 1001"):
        bench.run(["basics"], repeats=1001)
    with pytest.raises(ValueError, match=r"budget expected seconds in \[1, 3600\], got 0.5"):
        bench.run(["basics"], budget_s=0.5)
    with pytest.raises(ValueError, match="threads expected 1..[0-9]+ .*got True"):
        bench.run(["basics"], threads=True)


def test_threads_default_to_the_cpus_no_other_process_keeps_busy(monkeypatch) -> None:
    from detach_parity.shared.apps.bench import cli as bench_cli

    cpus = len(bench.available_cpus())
    busy = bench_cli._busy_cpus(0.05)  # what the bench reads: a share of the machine's CPUs
    assert busy is None or 0 <= busy <= (os.cpu_count() or 1) + 1e-9
    monkeypatch.setattr(bench_cli, "_busy_cpus", lambda: 1.2)  # one other process spinning, and a little more
    chosen = max(1, cpus - 1)
    assert bench.choose_threads(None) == (
        chosen,
        f"auto: {chosen} of {cpus} CPUs, 1.2 CPU(s) busy with other work before the run",
    )
    monkeypatch.setattr(bench_cli, "_busy_cpus", lambda: 99.0)
    assert bench.choose_threads(None)[0] == 1  # never none
    monkeypatch.setattr(bench_cli, "_busy_cpus", lambda: None)
    assert bench.choose_threads(None) == (
        cpus,
        f"all {cpus} CPUs (/proc/stat unreadable: the load of other processes unknown)",
    )
    assert bench.choose_threads(1) == (1, f"--threads 1 of {cpus} CPUs")


def test_sigterm_to_bench_also_ends_its_worker() -> None:
    """A killed bench leaves no measuring process behind (it would hold the CPUs, at 100 %, forever)."""
    import os
    import signal
    import subprocess
    import sys
    import time

    root = Path(__file__).resolve().parent.parent
    argv = [
        sys.executable,
        "-m",
        "detach_parity.shared.apps.cli",
        "bench",
        "basics",
        "--quick",
        "--repeats",
        "1000",
        "--budget",
        "3600",
        "--quiet",
    ]
    parent = subprocess.Popen(argv, cwd=root, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def children() -> list[int]:
        out = []
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            except OSError:
                continue
            if int(stat[1]) == parent.pid and b"--worker" in cmdline:
                out.append(int(pid))
        return out

    deadline = time.monotonic() + 60
    while not (workers := children()) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert workers, "the bench did not start its measuring process"
    try:
        parent.send_signal(signal.SIGTERM)
        assert parent.wait(timeout=30) == 128 + signal.SIGTERM
        deadline = time.monotonic() + 15
        while Path(f"/proc/{workers[0]}").exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not Path(f"/proc/{workers[0]}").exists(), "the measuring process outlived the bench"
    finally:  # never leave a spinning worker behind, even when the test fails
        for pid in workers:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if parent.poll() is None:
            parent.kill()


@pytest.mark.parametrize(
    "argv, message",
    [
        (["bench", "nope"], "detach-parity bench: error: scenario expected one of ['basics', 'linear_regression'"),
        (["bench", "p01_std_convention"], "got ['p01_std_convention']"),
        (["bench", "--threads", "999"], "detach-parity bench: error: threads expected 1.."),
        (["bench", "[/red]"], "got ['[/red]']"),  # printed as text, not read as markup
    ],
)
def test_bad_scenario_or_threads_exit_2_before_measuring(argv: list[str], message: str, capsys) -> None:
    assert cli.main([*argv, "--quiet"]) == 2
    assert message in " ".join(capsys.readouterr().err.split())  # on stderr, as every subcommand's errors


@pytest.mark.parametrize(
    "argv, message",
    [
        (
            ["--repeats", "0"],
            "argument --repeats: expected an integer in [1, 1000] (more rounds change no median), got 0",
        ),
        (
            ["--repeats", "1001"],
            "argument --repeats: expected an integer in [1, 1000] (more rounds change no median), got 1001",
        ),
        (["--budget", "0"], "argument --budget: expected an integer in [1, 3600] (seconds), got 0"),
    ],
)
def test_bad_repeats_or_budget_exit_2(argv: list[str], message: str, capsys) -> None:
    with pytest.raises(SystemExit) as exc:  # refused by argparse, before any measurement
        cli.main(["bench", *argv])
    assert exc.value.code == 2
    assert message in " ".join(capsys.readouterr().err.split())


def test_detach_frees_the_backbone_graph_before_backward() -> None:
    """detach_features builds the backbone's graph but frees it before backward, as freeze_params never builds it.

    Counted: saved tensors still alive when backward unpacks one. full_finetune keeps them all.
    """
    import torch
    from detach_parity.torch_impl.backend import bench as torch_bench

    class Box:
        __slots__ = ("t", "__weakref__")

    def live_at_backward(step) -> int:
        live, peak = weakref.WeakSet(), [0]

        def pack(t):
            box = Box()
            box.t = t.detach()  # a saved output would otherwise hold its own node: a cycle
            live.add(box)
            return box

        def unpack(box):
            peak[0] = max(peak[0], len(live))
            return box.t

        with torch.autograd.graph.saved_tensors_hooks(pack, unpack):
            step()
        return peak[0]

    steps = torch_bench.freezing_steps(bench.fixture("frozen_backbone", QUICK["freezing"]))
    names = (*bench.FREEZING_VARIANTS, "no_grad_backbone", "head_step")
    for name in names:
        steps[name]()  # a first step: a second one must not backward through a freed graph
    counts = {name: live_at_backward(steps[name]) for name in names}
    head_only = {counts[n] for n in ("detach_features", "freeze_params", "no_grad_backbone", "head_step")}
    assert len(head_only) == 1 and head_only.pop() < counts["full_finetune"], counts


def test_torch_grad_modes_record_a_graph_only_with_grad_enabled() -> None:
    import torch
    from detach_parity.torch_impl.backend import bench as torch_bench

    steps = torch_bench.freezing_steps(bench.fixture("frozen_backbone", QUICK["freezing"]))
    out = {name: steps[name]() for name in ("forward_grad", "forward_no_grad", "forward_inference_mode")}
    assert out["forward_grad"].requires_grad and out["forward_grad"].grad_fn is not None
    assert not out["forward_no_grad"].requires_grad and not torch.is_inference(out["forward_no_grad"])
    assert torch.is_inference(out["forward_inference_mode"])
    assert not steps["backbone_forward"]().requires_grad  # the ideal's forward part records nothing
    np.testing.assert_allclose(out["forward_no_grad"].item(), out["forward_grad"].item(), rtol=1e-6)


def test_freezing_steps_start_from_the_oracle_loss_in_both_frameworks() -> None:
    from detach_parity.jax_impl.backend import bench as jax_bench
    from detach_parity.torch_impl.backend import bench as torch_bench

    fx = bench.fixture("frozen_backbone", QUICK["freezing"])
    a = fx.float64()
    expect = cross_entropy(forward({k: a[f"params/{k}"] for k in FB_PARAMS}, a["x"]), a["labels"])
    for steps in (torch_bench.freezing_steps(fx), jax_bench.freezing_steps(fx)):
        for name in bench.FREEZING_VARIANTS:  # the loss before each variant's first update
            loss = steps[name]()
            assert not getattr(loss, "requires_grad", False), f"{name}: the loss keeps its step's graph"
            np.testing.assert_allclose(float(loss), expect, rtol=1e-5, err_msg=name)
    for name in ("no_grad_backbone", "head_step"):
        assert not torch_bench.freezing_steps(fx)[name]().requires_grad, name


@pytest.mark.parametrize("form", ["windows", "one_backward"])
def test_tbptt_steps_return_the_same_loss_without_a_graph(form: str) -> None:
    from detach_parity.jax_impl.backend import bench as jax_bench
    from detach_parity.torch_impl.backend import bench as torch_bench

    fx = bench.fixture("tbptt", {**{k: QUICK["tbptt"][k] for k in "BIHO"}, "T": 8, "G": 3 * QUICK["tbptt"]["H"]})
    t_step, t_peak = torch_bench.tbptt_step(fx, form, 4)
    j_step, j_peak = jax_bench.tbptt_step(fx, form, 4)
    t_loss = t_step()
    assert not t_loss.requires_grad and t_loss.grad_fn is None  # no graph outlives a step
    expect = tbptt_oracle(fx, "k=T")["gru/loss"]  # the summed loss does not depend on k
    np.testing.assert_allclose(t_loss.item(), expect, rtol=1e-5)
    np.testing.assert_allclose(float(j_step()), expect, rtol=1e-5)
    assert t_peak() > 0 and j_peak() > 0
    for step in (torch_bench.tbptt_step, jax_bench.tbptt_step):
        with pytest.raises(ValueError, match="tbptt_step: form expected one of .*got 'bogus'"):
            step(fx, "bogus", 4)
        with pytest.raises(ValueError, match="tbptt_step: k expected to divide T = 8, got k = 3"):
            step(fx, "windows", 3)
        for bad in (0, -4, 16):  # one backward needs no division, but k still lies in [1, T]
            with pytest.raises(ValueError, match=rf"tbptt_step: k expected an integer in \[1, T = 8\], got {bad}"):
                step(fx, "one_backward", bad)
        with pytest.raises(ValueError, match="tbptt_step: fx expected a float32 Fixture of 'tbptt', got a float64"):
            step(fixtures.make("tbptt", "float64"), "windows", 4)


def test_bench_fixtures_are_validated_float32() -> None:
    fx = bench.fixture("tbptt", {**{k: QUICK["tbptt"][k] for k in "BIHO"}, "T": 8, "G": 3 * QUICK["tbptt"]["H"]})
    assert fx.dtype == "float32" and fx.dims["T"] == 8 and fx.dims["G"] == 3 * QUICK["tbptt"]["H"]
    assert np.all(fx["h0"] == 0) and fx.case == "bench"
    base = fixtures.make("maml", "float32")
    fx = bench.fixture("maml", {"T": 3, "S": 5, "H": 6})
    assert fx["support_x"].shape == (3, 5, 1) and fx["query_x"].shape == (3, base.dims["Q"], 1)  # Q kept
    assert fx["inner_steps"] == base["inner_steps"] and fx["alpha"] == base["alpha"]  # scalars are the scenario's
    assert np.all(fx["params/l1/bias"] == 0) and np.std(fx["params/l2/kernel"]) > 0
    mask = bench.fixture("attention_detach", {"N": 6})["mask"]
    assert np.array_equal(mask, np.tril(np.ones((6, 6), dtype=bool)))  # causal: no fully masked row
    labels = bench.fixture("frozen_backbone", {"B": 64, "C": 3})["labels"]
    assert labels.dtype == np.int64 and set(labels.tolist()) == {0, 1, 2}
    with pytest.raises(ValueError, match=r"bench fixture 'maml': dims expected letters of .*got \['Z'\]"):
        bench.fixture("maml", {"Z": 2})


def test_site_shows_the_bench_tables_and_plots(quick_json: Path, quick: dict, tmp_path: Path) -> None:
    site.build(tmp_path, ["basics"], bench=quick_json)
    html = (tmp_path / "bench.html").read_text(encoding="utf-8")
    assert '<a href="bench.html">bench</a>' in (tmp_path / "index.html").read_text(encoding="utf-8")
    for kind in ("ratio", "freezing", "memory"):
        svg = tmp_path / "figures" / f"bench-{kind}.svg"
        assert svg.stat().st_size > 1000 and f'src="figures/bench-{kind}.svg"' in html
    assert "detach speeds training up by 15–20 %" in html and quick["machine"]["cpu"] in html
    ratio = quick["scenarios"]["tbptt"]["jax_over_torch"]
    assert f"{ratio:.2f}×" in html
    o = quick["overhead"]
    assert f"{o['nnx_jit_call']['median_s'] / o['eager_op']['median_s']:.1f}× (it traverses" in html
    assert 'id="bench-device"' in html and "No CUDA GPU was available" in html and 'id="table-bench-large"' in html
    assert not re.search(r"\d ms\b|\d µs\b", html), "a CPU run quotes step times as ratios only"
    assert "torch.compile — <code>tbptt</code>" in html or "torch_compile" in quick["scenarios"]["tbptt"]
    growth = quick["tbptt_memory"]["growth"]["torch windows k=4"]
    assert f'<td>torch windows k=4</td><td class="num">{growth["peak_ratio"]:.2f}×</td>' in html


def _broken(payload: dict, path: str, value: object) -> dict:
    """A deep copy of payload with the dotted path set to value (DELETE: removed)."""
    out = json.loads(json.dumps(payload))
    *parents, last = path.split(".")
    node = out
    for key in parents:
        node = node[key]
    if value is DELETE:
        del node[last]
    else:
        node[last] = value
    return out


DELETE = object()


@pytest.mark.parametrize(
    "path, value, message",
    [
        ("machine", "x", "field payload.machine expected an object, got 'x'"),
        ("scenarios.basics.jax_over_torch", DELETE, "field payload.scenarios.basics.jax_over_torch expected a finite"),
        (
            "scenarios.basics.jax_over_torch",
            float("nan"),
            "payload.scenarios.basics.jax_over_torch expected a finite number, got nan",
        ),
        ("freezing.summary", DELETE, "field payload.freezing.summary expected an object, got nothing (missing)"),
        ("overhead", {}, "field payload.overhead.eager_op expected an object, got nothing (missing)"),
        ("machine.accelerator", DELETE, "field payload.machine.accelerator expected a string, got nothing (missing)"),
        ("settings.capped", "3", "field payload.settings.capped expected an integer, got '3'"),
        (
            "scenarios.frozen_backbone.torch_compile",
            DELETE,
            "field payload.scenarios.frozen_backbone.torch_compile expected timings, or a reason in "
            "unavailable.torch_compile, got neither",
        ),
        ("large.frozen_backbone.dims", {}, "field payload.large.frozen_backbone.dims expected a non-empty object"),
        ("scenarios", {}, "field payload.scenarios expected a non-empty object, got {}"),
        ("tbptt_memory.rows", [], "field payload.tbptt_memory.rows expected a non-empty list, got []"),
        ("versions", DELETE, "field payload.versions expected a non-empty object, got nothing (missing)"),
    ],
)
def test_site_refuses_a_bench_file_with_a_bad_field_before_any_page(
    quick: dict, path: str, value: object, message: str, tmp_path: Path, capsys
) -> None:
    bad = tmp_path / "bench.json"
    bad.write_text(json.dumps(_broken(quick, path, value)), encoding="utf-8")
    assert cli.main(["site", "basics", "--out", str(tmp_path / "site"), "--bench", str(bad), "--quiet"]) == 2
    err = "".join(capsys.readouterr().err.split())  # the console may wrap a long path anywhere
    assert "".join(f"bench file {str(bad)!r}".split()) in err and "".join(message.split()) in err, err
    assert not (tmp_path / "site").exists()  # refused before any page or figure was written


def test_a_failed_measuring_process_exits_1_and_keeps_the_previous_json(monkeypatch, tmp_path, capsys) -> None:
    import sys

    from detach_parity.shared.core import children

    spawn = children.spawn

    def failing(argv, name, **kw):  # a real measuring process that fails at once
        return spawn([sys.executable, "-c", "raise SystemExit(3)"], name, **kw)

    previous = tmp_path / "bench.json"
    previous.write_text('{"kept": true, "versions": {"jax": "0.10.2"}}\n', encoding="utf-8")  # an earlier report
    monkeypatch.setattr(bench.cli.children, "spawn", failing)
    assert cli.main(["bench", "basics", "--quiet", "--json", str(previous)]) == 1
    err = " ".join(capsys.readouterr().err.split())
    assert "the measuring process exited with code 3" in err and "was left as it was" in err
    assert json.loads(previous.read_text(encoding="utf-8"))["kept"] is True


def test_json_is_written_atomically(tmp_path) -> None:
    path = tmp_path / "bench.json"
    old = json.dumps({"versions": {"jax": "0.10.2"}, "old": True})  # an earlier report: write_json may replace it
    path.write_text(old, encoding="utf-8")
    with pytest.raises(TypeError):
        write_json(path, {"not serialisable": object()})
    assert path.read_text(encoding="utf-8") == old and [p.name for p in tmp_path.iterdir()] == ["bench.json"]
    write_json(path, {"a": 1})
    assert json.loads(path.read_text(encoding="utf-8")) == {"a": 1}
    umask = os.umask(0)
    os.umask(umask)
    assert path.stat().st_mode & 0o777 == 0o666 & ~umask  # not mkstemp's private 0600


def test_noisy_timings_are_flagged_in_the_tables_and_on_the_site(quick: dict, tmp_path: Path) -> None:
    from rich.console import Console

    noisy = _broken(quick, "scenarios.basics.torch.noisy", True)
    assert bench.noisy_timings(noisy)[:1] == ["basics torch"]
    console = Console(record=True, width=200)
    bench.print_tables(noisy, console)
    text = console.export_text()
    assert "⚠" in text and "spread by more than 25% of their median: basics torch" in text
    path = tmp_path / "noisy.json"
    path.write_text(json.dumps(noisy), encoding="utf-8")
    site.build(tmp_path / "site", ["basics"], bench=path)
    html = (tmp_path / "site" / "bench.html").read_text(encoding="utf-8")
    assert 'id="bench-noisy"' in html and "basics torch" in html and "not a fresh run" in html


def test_a_worker_whose_parent_is_already_gone_exits_at_once() -> None:
    """The race a SIGTERM can hit: the parent dies before the worker starts watching it."""
    import subprocess
    import sys

    code = "import time, detach_parity.shared.core.children as c; c.follow_parent(-1); time.sleep(30)"  # -1: never our parent
    root = Path(__file__).resolve().parent.parent
    assert subprocess.run([sys.executable, "-c", code], cwd=root, timeout=20, check=False).returncode == 1


def test_a_tiny_time_budget_still_gives_a_complete_payload_with_fewer_rounds(tmp_path: Path, capsys) -> None:
    """--budget 1: spent before the worker has started; every timing keeps MIN_ROUNDS, no tuned column compiles,
    what can be left out once the grace is overrun is skipped, the payload stays schema-valid, and it says so."""
    path = tmp_path / "capped.json"
    argv = ["bench", "basics", "frozen_backbone", "--quick", "--repeats", "50", "--budget", "1", "--threads", "1"]
    assert cli.main([*argv, "--quiet", "--json", str(path)]) == 0
    payload = json.loads(path.read_text(encoding="utf-8"))
    bench.check_payload(payload)  # complete and schema-valid
    skipped = payload.get("skipped", {})
    assert payload["settings"]["budget_s"] == 1.0 and payload["settings"]["skipped"] == len(skipped)
    assert list(payload["scenarios"])[0] == "basics"  # the first row is never skipped: it makes the payload
    assert set(payload["scenarios"]) | {k.split("/")[1] for k in skipped if k.startswith("scenarios/")} == {
        "basics",
        "frozen_backbone",
    }
    capped = bench.capped_timings(payload)
    assert payload["settings"]["capped"] == len(capped) > 0 and "basics torch" in capped
    for row in payload["scenarios"].values():
        assert all(row[c]["n"] == bench.MIN_ROUNDS and row[c]["capped"] for c in bench.COLUMNS if c in row)
        assert all(why.startswith("not compiled: the time budget (--budget) was spent") or "already" in why
                   for why in row["unavailable"].values())  # fmt: skip
    if "freezing" in payload:  # started within the grace: the lesson is kept, with the fewest rounds
        assert all(r["n"] == bench.MIN_ROUNDS for r in payload["freezing"]["torch"].values())
    else:
        assert skipped["freezing"] == bench_worker.OVER
    assert "large" not in payload and skipped["large/frozen_backbone"] == bench_worker.SPENT  # the large sizes go first
    out = " ".join(capsys.readouterr().out.split())
    assert f"time cap: {len(capped)} timing(s) got fewer than 50 rounds (at least {bench.MIN_ROUNDS})" in out
    assert "No CUDA GPU was available" in out and f"large/frozen_backbone: {bench_worker.SPENT}" in out
    md = bench.markdown(payload)
    assert f"{len(capped)} timing(s) got fewer rounds than 50: their share of the time budget ran out." in md
    assert all(f"- `{key}`: {why}" in md for key, why in skipped.items())


def test_past_the_grace_rows_are_skipped_but_never_the_first(monkeypatch) -> None:
    class Spent:
        def left(self) -> float:
            return 0.0

        def over(self) -> bool:
            return True

        def item(self, items_left: int) -> float:
            return 0.0

    class Quiet:
        def step(self, text: str) -> None:
            pass

    made = []
    monkeypatch.setattr(bench_worker, "step_row", lambda fx, *a: made.append(fx.scenario) or {"dims": None})
    errors, skipped = {}, {}
    names = ["basics", "linear_regression", "frozen_backbone"]
    rows = bench_worker._rows(names, "scenarios", bench.SIZES["quick"], 2, Spent(), Quiet(), errors, skipped)
    assert list(rows) == made == ["basics"] and not errors
    assert skipped == {f"scenarios/{n}": bench_worker.OVER for n in names[1:]}
    rows = bench_worker._rows(["frozen_backbone"], "large", bench.SIZES["quick"], 2, Spent(), Quiet(), errors, skipped)
    assert rows == {} and skipped["large/frozen_backbone"] == bench_worker.SPENT


class _Fake:
    """A stand-in for the pairs (torch, jax and their bench modules): steps returning fixed losses."""

    def __init__(self, losses: dict[str, float], broken: tuple[str, ...] = ()) -> None:
        self.losses, self.broken = losses, broken

    def lesson(self, framework: str, scenario: str):
        fake = self

        class Lesson:
            @staticmethod
            def make_step(fx, variant):
                return fake._step(framework)

        return Lesson

    def backend(self, framework: str):
        fake = self

        class Bench:
            @staticmethod
            def tuned_steps(fx, variant, codegen=True):
                cols = ("torch_compile",) if framework == "torch" else ("jax_cached", "jax_split")
                return {c: (fake._step(c), lambda: {"fact": 1}) for c in cols}

        class Backend:
            bench = Bench

        return Backend

    def _step(self, col: str):
        def step():
            if col in self.broken:
                raise RuntimeError("cannot compile this. And more text")
            return self.losses[col]

        return step


def test_a_tuned_step_that_fails_or_disagrees_is_a_reason_never_a_crash(monkeypatch) -> None:
    fake = _Fake(
        {"torch": 1.0, "jax": 1.0, "torch_compile": 1.0, "jax_cached": 1.5, "jax_split": 1.0}, ("torch_compile",)
    )
    monkeypatch.setattr(bench_steps, "lesson", fake.lesson)
    monkeypatch.setattr(bench_steps, "backend", fake.backend)
    fx = fixtures.make("basics", "float32")
    row = bench_steps.step_row(fx, "z_stopped", repeats=2, target_s=0.0, deadline=float("inf"))
    assert set(row["unavailable"]) == {"torch_compile", "jax_cached"}
    assert row["unavailable"]["torch_compile"].startswith("RuntimeError on the first call, after ")
    assert row["unavailable"]["torch_compile"].endswith(": cannot compile this")  # its first sentence
    assert row["unavailable"]["jax_cached"] == "its first loss 1.5 is not the plain step's 1.0"
    assert "jax_split" in row and row["jax_split"]["fact"] == 1 and set(row["ratios"]) == {"jax", "jax_split"}
    row = bench_steps.step_row(fx, "z_stopped", repeats=2, target_s=0.0, deadline=float("inf"), tune=False)
    assert set(row["unavailable"]) == set(bench.TUNED) and set(row["ratios"]) == {"jax"}
    assert all(why.startswith("not compiled: the time budget") for why in row["unavailable"].values())
    fake.broken = ("torch",)  # a plain step that fails is the scenario's bug: raised (the worker records it)
    with pytest.raises(RuntimeError, match="cannot compile this"):
        bench_steps.step_row(fx, "z_stopped", repeats=2, target_s=0.0, deadline=float("inf"))


# the lessons whose step_calls take NNX modules: the JAX bench tunes every one of them
NNX_STEPS = [
    "frozen_backbone",
    "multitask",
    "dqn_target",
    "actor_critic",
    "attention_detach",
    "gan",
    "no_grad_inference",
    "feature_stats",
    "lora",
    "checkpointing",
]


@pytest.mark.parametrize("name", NNX_STEPS)
def test_jax_tuned_steps_take_the_same_steps_as_make_step(name: str) -> None:
    """cached_partial and jit over nnx.split: the same losses, call after call (so the state advances the same way)."""
    from conftest import assert_same_to_rounding
    from detach_parity.jax_impl.backend import bench as jax_bench
    from detach_parity.shared.core.registry import get
    from detach_parity.shared.core.runner import lesson

    spec = get(name)
    fx = fixtures.make(name, "float32", case=spec.cases[0])
    plain = lesson("jax", name).make_step(fx, spec.variants[0])
    tuned = jax_bench.tuned_steps(fx, spec.variants[0])
    expect = np.array([plain() for _ in range(3)])
    for col in ("jax_cached", "jax_split"):  # one after the other: each has its own state, fresh from the fixture
        step, facts = tuned[col]
        got = np.array([step() for _ in range(3)])
        # the split form is another program (one jax.jit over the merged state): equal to rounding
        assert_same_to_rounding(got, expect, f"{name} {col}: the losses of three calls of make_step's step")
        assert facts()["state_leaves"] > 0
    if spec.step_updates:  # the state advances: the tuned steps train as make_step does, call after call
        assert expect[0] != expect[1]


def test_quick_mode_captures_the_torch_step_without_building_kernels(monkeypatch) -> None:
    """codegen False (`bench --quick`): torch.compile with aot_eager, no C++ build; the full bench: inductor."""
    import torch
    from detach_parity.torch_impl.backend import bench as torch_bench

    asked: list[dict] = []
    monkeypatch.setattr(torch, "compile", lambda step, **kwargs: asked.append(kwargs) or step)
    fx = fixtures.make("basics", "float32")
    (plain, plain_facts), (quick, quick_facts) = (
        torch_bench.tuned_steps(fx, "z_stopped", codegen)["torch_compile"] for codegen in (True, False)
    )
    assert asked == [{"mode": "default", "dynamic": False}, {"backend": "aot_eager", "dynamic": False}]
    assert float(quick()) == pytest.approx(float(plain()), rel=1e-6)  # the same step either way
    assert plain_facts()["backend"] == "inductor" and quick_facts()["backend"] == "aot_eager"
    assert bench.SIZES["full"]["codegen"] and not bench.SIZES["quick"]["codegen"]


def test_jax_tuned_steps_say_why_a_step_has_none() -> None:
    """Every lesson with a step either lists its calls or states why not; a pure jax.jit has nothing to cache."""
    from detach_parity.jax_impl.backend import bench as jax_bench
    from detach_parity.shared.core.registry import SCENARIOS
    from detach_parity.shared.core.runner import lesson

    maml = jax_bench.tuned_steps(fixtures.make("maml", "float32", case="n1"), "first_order")
    assert maml == {
        "jax_cached": "maml's step is already a jax.jit of arrays (no NNX module in its step_calls): nothing to cache",
        "jax_split": "maml's step is already a jax.jit of arrays (no NNX module in its step_calls): nothing to split",
    }
    clip = jax_bench.tuned_steps(fixtures.make("grad_clipping", "float32"), "torch_formula")
    reason = lesson("jax", "grad_clipping").NO_STEP_CALLS
    assert clip == {"jax_cached": f"grad_clipping has no step_calls: {reason}", "jax_split": clip["jax_cached"]}
    stepped = [n for n, s in SCENARIOS.items() if s.has_step]
    tuned = [
        n
        for n in stepped
        if not isinstance(
            jax_bench.tuned_steps(fixtures.make(n, "float32"), SCENARIOS[n].variants[0])["jax_split"], str
        )
    ]
    assert sorted(tuned) == sorted(NNX_STEPS), "a lesson whose step_calls take NNX modules is tuned, and only those"
    with pytest.raises(ValueError, match="tuned_steps: fx expected a float32 Fixture of 'basics', got a float64"):
        jax_bench.tuned_steps(fixtures.make("basics", "float64"), "z_stopped")
    with pytest.raises(ValueError, match=r"basics: variant expected one of \['z_stopped', 'none'\], got 'nope'"):
        jax_bench.tuned_steps(fixtures.make("basics", "float32"), "nope")
    with pytest.raises(ValueError, match="tuned_steps: fx expected a fixture of a scenario with a step, got 'ppo'"):
        jax_bench.tuned_steps(fixtures.make("ppo", "float32"), SCENARIOS["ppo"].variants[0])


def test_a_gpu_payload_is_shown_apart_with_absolute_times(quick: dict, tmp_path: Path) -> None:
    gpu = _broken(quick, "machine.accelerator", "cuda")
    gpu["machine"]["devices"]["torch"]["device"] = "cuda:0 (NVIDIA H100)"
    cpu_md, gpu_md = bench.markdown(quick), bench.markdown(gpu)
    assert cpu_md.startswith("## CPU: ") and "(ratios measured in one run)" in cpu_md
    assert not re.search(r"\d ms\b", cpu_md) and "No CUDA GPU was available" in cpu_md
    assert gpu_md.startswith("## GPU: cuda:0 (NVIDIA H100) (absolute times)") and re.search(r"\d ms \(", gpu_md)
    assert "No CUDA GPU" not in gpu_md and "Measured on cuda:0 (NVIDIA H100)." in gpu_md
    assert "the CPU only" in bench.summary(quick) and "a CUDA GPU" in bench.summary(gpu)
    (tmp_path / "figures").mkdir()
    html = site.render_bench(site.environment(), gpu, tmp_path)
    assert "<strong>GPU run</strong>" in html and "GPU: training step per scenario" in html
    assert re.search(r"\d ms", html) and "No CUDA GPU" not in html


def test_progress_shows_the_time_the_budget_has_left() -> None:
    import io

    from detach_parity.shared.apps.bench.progress import BenchProgress
    from rich.console import Console

    console = Console(file=io.StringIO(), width=200)  # not a terminal: one plain line per item
    with BenchProgress(2, bench.Budget(60.0, {}), console=console) as progress:
        progress.step("per-call overhead")
        progress.step("basics")
    lines = console.file.getvalue().splitlines()
    assert re.fullmatch(r"bench \[1/2\] per-call overhead \(≈(59|60) s left\)", lines[0]), lines
    assert lines[1].startswith("bench [2/2] basics (≈")
    quiet = Console(file=io.StringIO())
    with BenchProgress(1, bench.Budget(1.0, {}), quiet=True, console=quiet) as progress:
        progress.step("x")
    assert quiet.file.getvalue() == ""


def test_tbptt_sweep_drops_the_longest_sequences_when_keep_says_so() -> None:
    from detach_parity.shared.apps.bench.truncation import tbptt_section

    cfg = {**QUICK["tbptt"], "T": (8, 16, 32)}
    asked: list[tuple[int, int]] = []

    def keep(t_steps: int, done: int) -> bool:
        asked.append((t_steps, done))
        return done < 2

    out = tbptt_section(cfg, 1, 0.0, lambda left: float("inf"), lambda text: None, keep)
    assert asked == [(8, 0), (16, 1), (32, 2)] and out["config"]["T"] == [8, 16]
    assert len(out["rows"]) == 2 * 3 * 2 and {r["T"] for r in out["rows"]} == {8, 16}
    assert all(g["T_ratio"] == 2 for g in out["growth"].values())


def test_the_port_check_section_is_validated_and_reported(quick: dict) -> None:
    """A full run adds `port_check` (shared.apps.check.bench_one_million): its fields are checked like the
    other sections, and the tables, docs/bench.md and the README summary give its seconds and verdict."""
    section = {
        "model": "transformer",
        "parameters": 1_003_530,
        "steps": 5,
        "seconds": {"float64": 8.25, "float32": 6.5, "diagnosis": 0.01, "total": 14.75},
        "cpu_seconds": 18.5,
        "ok": True,
    }
    payload = {**json.loads(json.dumps(quick)), "port_check": section}
    bench.check_payload(payload)
    line = (
        "Port check of the 1,003,530-parameter worked transformer (float64 + float32 + 5 optimizer steps): "
        "14.8 s wall (8.2 s float64, 6.5 s float32), 18.5 s CPU; the port matches (issue target: under 30 s on 2 cores)."
    )
    assert line in bench.markdown(payload) and f"- {line}" in bench.summary(payload)
    console = Console(record=True, width=400)
    bench.print_tables(payload, console)
    assert line in console.export_text()
    with pytest.raises(ValueError, match=r"field payload\.port_check\.seconds\.float32 expected a finite number"):
        bench.check_payload(_broken(payload, "port_check.seconds.float32", float("nan")))
    assert "port_check" not in quick  # named scenarios (and --quick) leave the 20 s check out
