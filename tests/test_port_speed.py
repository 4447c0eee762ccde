"""A check in seconds: where its time goes (profile), one compile per program per process, the CLI's compiled
programs kept in the user's cache folder between processes, and the diagnosis stopping at its first confirmed
replay. Speeds themselves are the bench's (`detach-parity bench --port-check`): nothing here is timed against
a number; the counts are what make the speed, and they are exact."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from detach_parity import check_port
from detach_parity.jax_impl.backend import programs
from detach_parity.shared.apps.check import replays
from detach_parity.shared.apps.check.cli import NO_CACHE, cache_folder
from detach_parity.shared.apps.check.ports import case
from detach_parity.shared.apps.check.stages import ORDER, Stages, outside
from detach_parity.shared.core import children
from flax import nnx


def _check(name: str, variant: str = "correct", **kwargs):
    args = case(name, variant)
    args.update(kwargs)
    return check_port(args.pop("torch_model"), args.pop("jax_model"), args.pop("batch"), **args)


def test_a_second_check_of_the_same_model_compiles_nothing_and_gives_the_same_report() -> None:
    first = _check("cnn", profile=True)
    second = _check("cnn", profile=True)  # new models, new closures: the same programs
    counts = second.profile["counts"]
    assert counts["programs_compiled"] == 0 and counts["programs_reused"] >= 4, counts  # 2 passes: init, update
    assert first.verdict() == second.verdict() == "match"
    assert [(r.dtype, r.section, r.key) for r in first.rows] == [(r.dtype, r.section, r.key) for r in second.rows]
    for a, b in zip(first.rows, second.rows, strict=True):  # the same compiled program on the same inputs
        assert a.max_abs == pytest.approx(b.max_abs, rel=1e-9, abs=1e-300), (a.where, a.max_abs, b.max_abs)


def test_the_profile_gives_every_second_of_the_check_a_stage() -> None:
    report = _check("cnn", "bn_momentum", profile=True)
    prof = report.profile
    assert prof["counted"] and report.verdict() == "differs"
    stages = prof["stages"]
    assert set(stages) <= set(ORDER) and list(stages) == [s for s in ORDER if s in stages]
    assert {"torch", "jax", "comparison", "replays", "diagnosis", "determinism", "memory estimate"} <= set(stages)
    assert sum(row["s"] for row in stages.values()) == pytest.approx(prof["total_s"], abs=1e-3)
    assert all(row["s"] >= 0 for row in stages.values())
    assert stages["jax"]["jax_traces"] >= 2 and stages["jax"]["jax_trace_s"] > 0  # a pass's update is traced
    assert "jax_traces" not in stages["torch"]  # torch runs eagerly: no pipeline counted there
    plain = _check("cnn")
    assert not plain.profile["counted"] and plain.profile["stages"]["jax"]["s"] > 0  # seconds, always


def test_stages_count_each_second_once_in_the_innermost_and_sticky_stages_keep_theirs() -> None:
    now = [0.0]
    stages = Stages(clock=lambda: now[0])
    with stages("diagnosis"):
        now[0] += 1
        with stages("replays"):
            now[0] += 2
            with stages("torch"):  # a replay's torch run is the replay's
                now[0] += 4
        with stages("torch"):
            now[0] += 8
    assert dict(stages.seconds) == {"diagnosis": 1, "replays": 6, "torch": 8}
    prof = stages.profile(total_s=20.0)
    assert prof["stages"]["other"]["s"] == 5.0 and list(prof["stages"]) == ["torch", "replays", "diagnosis", "other"]
    with pytest.raises(ValueError, match="stages: expected one of"):
        with stages("compile"):
            pass
    cli = outside(prof, {"your file": 2.0, "imports": 1.0})
    assert list(cli["stages"])[:2] == ["imports", "your file"] and cli["total_s"] == 23.0


def test_one_program_is_compiled_once_whatever_function_object_traces_it() -> None:
    before = programs.counts()

    def make():
        return programs.jitted(lambda x, y: jnp.sin(x) * y + 0.125)

    x = jnp.arange(3.0)
    a, b = make()(x, x), make()(x, x)  # two closures, one program
    after = programs.counts()
    assert after["compiled"] - before["compiled"] <= 1 and after["reused"] - before["reused"] >= 1
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-7)
    # an argument the program never reads is left out of its text: its dtype still tells two programs apart
    unused = [programs.jitted(lambda p, q: q * 2.0)(p, jnp.ones(2)) for p in (jnp.ones(3), jnp.ones(3, jnp.int32))]
    np.testing.assert_allclose(np.asarray(unused[1]), np.asarray(unused[0]), rtol=0)  # one program's values


def test_a_check_leaves_the_callers_random_state_usable() -> None:
    """The checker's copies own every array, an nnx.Rngs' key and count too: a step that donates its state to
    XLA deletes the copy's, never the caller's."""
    args = case("gru")
    model = args["jax_model"]
    report = check_port(args.pop("torch_model"), args.pop("jax_model"), args.pop("batch"), **args)
    assert report.ok, report.table()
    leaves = jax.tree.leaves(nnx.state(model))
    assert any(isinstance(x, jax.Array) and x.dtype == jnp.uint32 for x in leaves)  # the Rngs' count is there
    assert not [x for x in leaves if x.is_deleted()]


def test_the_diagnosis_tries_the_parting_modules_replays_first_and_stops_at_a_confirmation(monkeypatch) -> None:
    tried = []
    replayed = replays._replayed

    def spy(p, plan, transfer, side, knob, failing):
        tried.append(knob)
        return replayed(p, plan, transfer, side, knob, failing)

    monkeypatch.setattr(replays, "_replayed", spy)
    report = _check("transformer", "layernorm_eps", steps=2)
    assert report.named() == ["P05"], report.table()
    assert tried == ["norm_eps"], tried  # the first parting is a LayerNorm: its epsilon's replay, and no other


def _cli(tmp_path: Path, target: str, *extra: str, env: dict) -> tuple[subprocess.CompletedProcess, dict]:
    out = tmp_path / f"report{len(list(tmp_path.iterdir()))}.json"
    argv = children.python("-m", "detach_parity.shared.apps.cli", "check", target, "--steps", "1", "--profile",
                           "--json", str(out), *extra)  # fmt: skip
    done = subprocess.run(argv, env=children.child_env(env), capture_output=True, text=True, check=False)
    return done, (json.loads(out.read_text()) if out.exists() else {})


def _without_suite_cache(monkeypatch) -> None:  # `make test`'s own cache folder is not the user's
    monkeypatch.delenv("JAX_COMPILATION_CACHE_DIR", raising=False)
    monkeypatch.delenv(NO_CACHE, raising=False)


def test_the_cli_keeps_its_compiled_programs_in_the_users_cache_folder(tmp_path, monkeypatch) -> None:
    _without_suite_cache(monkeypatch)
    home = tmp_path / "xdg"
    env = {"XDG_CACHE_HOME": str(home)}
    done, first = _cli(tmp_path, "cnn", env=env)
    assert done.returncode == 0 and first["verdict"] == "match", done.stderr
    monkeypatch.setenv("XDG_CACHE_HOME", str(home))
    folder = cache_folder()
    assert folder.is_relative_to(home) and any(folder.iterdir())  # the user's cache folder, not the project's
    assert "kept in" in done.stdout and str(folder) in done.stdout
    done, second = _cli(tmp_path, "cnn", env=env)
    assert done.returncode == 0 and second["verdict"] == "match", done.stderr
    counts = second["profile"]["counts"]
    assert counts["jax_compiles"] > 0 and counts["jax_cache_hits"] == counts["jax_compiles"], counts
    assert {"imports", "your file", "torch", "jax"} <= set(second["profile"]["stages"])  # the CLI's, and the check's


def test_the_cli_keeps_nothing_when_told_not_to_and_a_differing_port_still_exits_1(tmp_path, monkeypatch) -> None:
    _without_suite_cache(monkeypatch)
    home = tmp_path / "xdg"
    done, report = _cli(tmp_path, "cnn:bn_momentum", env={"XDG_CACHE_HOME": str(home), NO_CACHE: "1"})
    assert done.returncode == 1 and report["verdict"] == "differs" and "P06" in report["named"], done.stderr
    assert not home.exists()  # nothing written
    assert f"not kept between checks ({NO_CACHE} is set)" in done.stdout
    assert done.stdout.rstrip().endswith(")") and "verdict: the port DIFFERS" in done.stdout  # all of it printed


def test_a_cache_the_user_set_is_theirs(tmp_path, monkeypatch) -> None:
    _without_suite_cache(monkeypatch)
    theirs = tmp_path / "theirs"
    done, _ = _cli(
        tmp_path, "cnn", env={"XDG_CACHE_HOME": str(tmp_path / "xdg"), "JAX_COMPILATION_CACHE_DIR": str(theirs)}
    )
    assert done.returncode == 0, done.stderr
    assert f"kept in your own JAX cache, {theirs}" in done.stdout
    assert any(theirs.iterdir()) and not (tmp_path / "xdg").exists()
