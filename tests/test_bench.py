"""bench: the JSON of a quick run (structure and memory facts, never speed), the timing loop, bad input.

Speed is measured by `detach-parity bench`, not asserted: these tests check what the bench
reports and the facts that do not depend on the machine (which memory grows with T).
"""

from __future__ import annotations

import contextlib
import json
import os
import weakref
from pathlib import Path

import numpy as np
import pytest

from shared.apps import bench, cli, site
from shared.apps.common import write_json
from shared.core import fixtures
from shared.scenarios.frozen_backbone import PARAMS as FB_PARAMS
from shared.scenarios.frozen_backbone import cross_entropy, forward
from shared.scenarios.tbptt import oracle as tbptt_oracle

QUICK = bench.SIZES["quick"]
pytestmark = pytest.mark.xdist_group("bench")  # one worker runs the quick bench once for every test here


@pytest.fixture(scope="module")
def quick_json(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("bench") / "bench.json"
    argv = ["bench", "basics", "frozen_backbone", "tbptt", "--quick", "--repeats", "2", "--threads", "1"]
    assert cli.main([*argv, "--quiet", "--json", str(path)]) == 0
    return path


@pytest.fixture(scope="module")
def quick(quick_json: Path) -> dict:
    return json.loads(quick_json.read_text(encoding="utf-8"))


def test_quick_run_reports_machine_settings_and_every_scenario(quick: dict) -> None:
    m = quick["machine"]
    assert m["threads"] == 1 and len(m["cpus_used"]) == 1 and m["cpus_available"] >= 1
    assert m["devices"]["torch"]["threads"] == m["devices"]["jax"]["threads"] == 1
    assert "no CUDA device" in m["note"] and m["jax_backend"] == "cpu"
    assert quick["settings"] == {
        "repeats": 2,
        "tbptt_repeats": 2,
        "mode": "quick",
        "dtype": "float32",
        "target_block_s": 0.0,
        "noisy_above": bench.NOISY,
    }
    assert len(m["load_average_before"]) == len(m["load_average_after"]) == 3
    assert quick["glossary"] == bench.GLOSSARY and "jax_over_torch" in quick["glossary"]
    assert list(quick["scenarios"]) == ["basics", "frozen_backbone", "tbptt"]
    for name, r in quick["scenarios"].items():
        assert r["variant"] == {"basics": "z_stopped", "frozen_backbone": "freeze_params", "tbptt": "k=1"}[name]
        for fw in ("torch", "jax"):
            s = r[fw]
            assert s["n"] == 2 and s["inner"] == 1 and s["first_call_s"] > 0
            assert 0 < s["min_s"] <= s["p25_s"] <= s["median_s"] <= s["p75_s"]
            assert s["spread"] == pytest.approx((s["p75_s"] - s["p25_s"]) / s["median_s"])
            assert s["noisy"] == (s["spread"] > bench.NOISY)
        assert r["jax_over_torch"] == pytest.approx(r["jax"]["median_s"] / r["torch"]["median_s"])
    assert quick["versions"]["torch"].startswith("2.13")
    assert set(quick["overhead"]) == {"eager_op", "jit_call", "nnx_jit_call", "nnx_cached_partial_call"}
    assert all(r["median_s"] > 0 and r["n"] == 2 for r in quick["overhead"].values())


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
        r["n"] == 3 and r["inner"] == 1 and r["first_call_s"] > 0 for r in out.values()
    )
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
    with pytest.raises(ValueError, match="repeats expected an integer >= 1, got 1.5"):
        bench.run(["basics"], repeats=1.5)
    with pytest.raises(ValueError, match="threads expected 1..[0-9]+ .*got True"):
        bench.run(["basics"], threads=True)


def test_sigterm_to_bench_also_ends_its_worker() -> None:
    """A killed bench leaves no measuring process behind (it would hold the CPUs, at 100 %, forever)."""
    import os
    import signal
    import subprocess
    import sys
    import time

    root = Path(__file__).resolve().parent.parent
    argv = [sys.executable, "-m", "shared.apps.cli", "bench", "basics", "--quick", "--repeats", "100000000", "--quiet"]
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


def test_bad_repeats_exit_2(capsys) -> None:
    with pytest.raises(SystemExit) as exc:  # refused by argparse, before any measurement
        cli.main(["bench", "--repeats", "0"])
    assert exc.value.code == 2
    assert "argument --repeats: expected an integer >= 1, got 0" in capsys.readouterr().err


def test_detach_frees_the_backbone_graph_before_backward() -> None:
    """detach_features builds the backbone's graph but frees it before backward, as freeze_params never builds it.

    Counted: saved tensors still alive when backward unpacks one. full_finetune keeps them all.
    """
    import torch

    from torch_impl import bench as torch_bench

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

    steps = torch_bench.freezing_steps(bench._fixture("frozen_backbone", QUICK["freezing"]))
    names = (*bench.FREEZING_VARIANTS, "no_grad_backbone", "head_step")
    for name in names:
        steps[name]()  # a first step: a second one must not backward through a freed graph
    counts = {name: live_at_backward(steps[name]) for name in names}
    head_only = {counts[n] for n in ("detach_features", "freeze_params", "no_grad_backbone", "head_step")}
    assert len(head_only) == 1 and head_only.pop() < counts["full_finetune"], counts


def test_torch_grad_modes_record_a_graph_only_with_grad_enabled() -> None:
    import torch

    from torch_impl import bench as torch_bench

    steps = torch_bench.freezing_steps(bench._fixture("frozen_backbone", QUICK["freezing"]))
    out = {name: steps[name]() for name in ("forward_grad", "forward_no_grad", "forward_inference_mode")}
    assert out["forward_grad"].requires_grad and out["forward_grad"].grad_fn is not None
    assert not out["forward_no_grad"].requires_grad and not torch.is_inference(out["forward_no_grad"])
    assert torch.is_inference(out["forward_inference_mode"])
    assert not steps["backbone_forward"]().requires_grad  # the ideal's forward part records nothing
    np.testing.assert_allclose(out["forward_no_grad"].item(), out["forward_grad"].item(), rtol=1e-6)


def test_freezing_steps_start_from_the_oracle_loss_in_both_frameworks() -> None:
    from jax_impl import bench as jax_bench
    from torch_impl import bench as torch_bench

    fx = bench._fixture("frozen_backbone", QUICK["freezing"])
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
    from jax_impl import bench as jax_bench
    from torch_impl import bench as torch_bench

    fx = bench._fixture("tbptt", {**{k: QUICK["tbptt"][k] for k in "BIHO"}, "T": 8})
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
    fx = bench._fixture("tbptt", {**{k: QUICK["tbptt"][k] for k in "BIHO"}, "T": 8})
    assert fx.dtype == "float32" and fx.dims["T"] == 8 and fx.dims["G"] == 3 * QUICK["tbptt"]["H"]
    assert np.all(fx["h0"] == 0) and fx.case == "bench"


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
    assert f"{quick['overhead']['nnx_jit_call']['median_s'] * 1e6:.1f} µs" in html
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
    class Failed:
        def __init__(self, cmd, **kw) -> None:
            pass

        def wait(self) -> int:
            return 3

        def poll(self) -> int:
            return 3

    previous = tmp_path / "bench.json"
    previous.write_text('{"kept": true}\n', encoding="utf-8")
    monkeypatch.setattr(bench.subprocess, "Popen", Failed)
    assert cli.main(["bench", "basics", "--quiet", "--json", str(previous)]) == 1
    err = " ".join(capsys.readouterr().err.split())
    assert "the measuring process failed with exit code 3" in err and "was left as it was" in err
    assert json.loads(previous.read_text(encoding="utf-8")) == {"kept": True}


def test_json_is_written_atomically(tmp_path) -> None:
    path = tmp_path / "bench.json"
    path.write_text("old", encoding="utf-8")
    with pytest.raises(TypeError):
        write_json(path, {"not serialisable": object()})
    assert path.read_text(encoding="utf-8") == "old" and [p.name for p in tmp_path.iterdir()] == ["bench.json"]
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

    code = "import time, shared.apps.bench as b; b._exit_with_parent(-1); time.sleep(30)"  # -1: never our parent
    root = Path(__file__).resolve().parent.parent
    assert subprocess.run([sys.executable, "-c", code], cwd=root, timeout=20, check=False).returncode == 1
