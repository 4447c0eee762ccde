"""CLI: exit codes 0 / 1 / 2, the table, JSON output."""

from __future__ import annotations

import json

import pytest
from detach_parity.shared.apps import cli


def test_run_one_scenario_json(tmp_path, capsys) -> None:
    path = tmp_path / "out.json"
    # a name given twice runs once
    assert cli.main(["run", "basics", "basics", "--dtype", "float64", "--quiet", "--json", str(path)]) == 0
    out = capsys.readouterr().out
    assert "basics" in out and "PASS" in out and "4 cases: 4 PASS, 0 DIFFERS" in out and "0 failed" in out
    data = json.loads(path.read_text())
    assert data["ok"] is True and len(data["results"]) == 4
    assert {r["variant"] for r in data["results"]} == {"z_stopped", "none"}
    assert all(r["parity"]["ok"] for r in data["results"])


@pytest.mark.parametrize(
    "argv, message",
    [
        (["run", "nope"], "scenario expected one of ['basics',"),
        (
            ["run", "basics", "--variant", "zz"],
            "scenario 'basics' has no variant 'zz'; its variants: ['z_stopped', 'none']",
        ),
        (["run", "--variant", "zz"], "variant expected one of ["),
    ],
)
def test_bad_names_exit_2(argv, message, capsys) -> None:
    assert cli.main(argv) == 2
    assert message in capsys.readouterr().err.replace("\n", "")


def test_bad_dtype_exit_2() -> None:
    with pytest.raises(SystemExit) as exc:
        cli.main(["run", "--dtype", "float16"])
    assert exc.value.code == 2


def test_mismatch_exits_1(monkeypatch, capsys) -> None:
    from detach_parity.torch_impl import basics

    real = basics.run
    monkeypatch.setattr(basics, "run", lambda fx, v: {**real(fx, v), "z": real(fx, v)["z"] + 1e-3})
    assert cli.main(["run", "basics", "--variant", "none", "--dtype", "float64", "--quiet"]) == 1
    out = capsys.readouterr().out
    assert "max|jax-torch|" in out
    # the failure lines carry a plain ✗ (coloured on a terminal), never the markup's source text
    assert "\n✗ basics[none]" in out and "[red]" not in out and "[/]" not in out


def test_impl_error_exits_1(monkeypatch, capsys) -> None:
    from detach_parity.jax_impl import basics

    def broken(fx, v):
        raise RuntimeError("boom")

    monkeypatch.setattr(basics, "run", broken)
    assert cli.main(["run", "basics", "--variant", "none", "--dtype", "float32", "--quiet"]) == 1
    assert "RuntimeError: boom" in capsys.readouterr().out


def test_list(capsys) -> None:
    assert cli.main(["list"]) == 0
    assert "frozen_backbone" in capsys.readouterr().out


def test_table_shows_nan_and_declared_differences(capsys) -> None:
    # a naive port that yields NaN must say so in the table, not show 0
    assert cli.main(["run", "p02_norm_at_zero", "--variant", "naive", "--dtype", "float64", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "NaN" in out and "DIFFERS (expected)" in out and "2 DIFFERS" in out


def test_named_scenario_without_the_variant_exit_2(capsys) -> None:
    assert cli.main(["run", "basics", "dqn_target", "--variant", "double_dqn"]) == 2
    assert "'basics' has no variant 'double_dqn'" in capsys.readouterr().err.replace("\n", "")


def test_list_keeps_brackets(capsys) -> None:
    assert cli.main(["list", "--family", "pitfalls"]) == 0
    assert "[out, in]" in capsys.readouterr().out
