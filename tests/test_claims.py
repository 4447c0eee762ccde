"""The tutorial claims: each verdict reproduced once, by its verifier; the records validate themselves.

Besides: what the verifiers cannot say about themselves. A changed or missing fact fails them,
the records refuse bad fields, the CLI's exit codes and JSON (written first, atomically; an
output error is exit 2, never 1), the evidence is plain JSON data, checks leave the frameworks'
global settings as they were, importing the claims app imports no framework. The ids and their
count are read from the records, never written here.
"""

from __future__ import annotations

import argparse
import functools
import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from detach_parity.shared.apps import claims, cli
from detach_parity.shared.apps.backends import backend
from detach_parity.shared.apps.claims import CLAIMS, THEMES, Theme
from detach_parity.shared.apps.claims import cli as claims_cli
from detach_parity.shared.core.toys import check_evidence
from rich.console import Console

ROOT = Path(__file__).resolve().parents[1]
IDS = list(CLAIMS)
FIRST = IDS[0]
# The pairs by name: `detach-parity selfcheck` finds the tests that cover an implementation
# module by its name in a test file (shared/apps/selfcheck.py, covering_tests); a test keeps this current.
PAIRS = ("aliasing", "evidence", "freezing", "losses", "modes", "recurrence")  # backend/claims/<pair>.py
claims_group = pytest.mark.xdist_group("claims")  # one worker runs every check once (the cache below)


@functools.cache
def outcome(claim_id: str) -> claims.Outcome:
    """One claim checked (torch + JAX + verifier), once per process."""
    return claims.evaluate(claims.get(claim_id))


@claims_group
@pytest.mark.parametrize("claim_id", IDS)
def test_claim_reproduces_its_verdict(claim_id: str) -> None:
    o = outcome(claim_id)
    assert o.reproduced and o.error is None, f"{claim_id} ({o.claim.verdict}): {o.text}"


def _changed(value):
    """A well-formed value of the same kind that differs from `value`."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, int | float):
        return -value - 1
    if isinstance(value, str):
        return value + " (changed)"
    if isinstance(value, list):
        return [_changed(v) for v in value] or [0]
    if isinstance(value, dict):
        return {k: _changed(v) for k, v in value.items()}
    return "changed"


def _failing_keys(claim: claims.Claim, t: dict, j: dict, side: str) -> list[str]:
    ev = t if side == "torch" else j
    out = []
    for key in ev:
        doctored = {**ev, key: _changed(ev[key])}
        args = (doctored, j) if side == "torch" else (t, doctored)
        if not claims.verify(claim, *args)[0]:
            out.append(key)
    return out


@claims_group
@pytest.mark.parametrize("claim_id", IDS)
def test_a_changed_fact_of_either_framework_fails_the_verifier(claim_id: str) -> None:
    o = outcome(claim_id)
    for side in ("torch", "jax"):
        assert _failing_keys(o.claim, o.torch, o.jax, side), f"{claim_id}: no {side} fact is read by its verifier"
    for t, j in (({}, o.jax), (o.torch, {})):  # a check that returns nothing
        ok, text = claims.verify(o.claim, t, j)
        assert not ok and "✗" in text, text
    ok, text = claims.verify(o.claim, {k: None for k in o.torch}, o.jax)  # the keys, without their values
    assert not ok and "✗" in text, text


def test_unreadable_evidence_and_a_verifier_without_facts_reproduce_nothing() -> None:
    theme = Theme(module="aliasing", title="probe")
    fields = {"article": "A1", "section": "§1", "claim": "c", "verdict": "wrong", "right": "r", "scenario": None}
    theme.claim(id="C97", **fields)(lambda t, j, f: f.need(t["x"] + j["y"] > 0, "x + y > 0"))
    theme.claim(id="C98", **fields)(lambda t, j, f: None)
    reads, silent = theme.claims
    assert reads.verify({"x": 1}, {"y": 1}) == (True, "x + y > 0")
    assert reads.verify({"x": 1}, {"y": -2}) == (False, "✗ x + y > 0")
    assert reads.verify({}, {"y": 1}) == (False, "✗ evidence unreadable: KeyError: 'x'")
    assert reads.verify({"x": "1"}, {"y": 1})[1].startswith("✗ evidence unreadable: TypeError")
    assert silent.verify({}, {}) == (False, "✗ the verifier stated no fact")


def test_records_validate_and_name_their_pairs() -> None:
    assert claims.validate() == []
    assert IDS == sorted(IDS) and len(set(IDS)) == len(IDS)
    assert [c.id for t in THEMES for c in t.claims] and {c.id for t in THEMES for c in t.claims} == set(IDS)
    on_disk = {
        p.stem for fw in ("torch", "jax") for p in (ROOT / f"{fw}_impl" / "backend" / "claims").glob("[a-z]*.py")
    }
    assert on_disk == set(PAIRS) == {t.module for t in THEMES} | {"evidence"}


def test_validate_reports_each_kind_of_problem() -> None:
    fields = {"article": "A1", "section": "§1", "claim": "c", "verdict": "wrong", "right": "r"}
    stray = Theme(module="modes", title="a theme whose pair lacks its checks")
    stray.claim(id=FIRST, scenario="no_such_scenario", **fields)(lambda t, j, f: None)
    nowhere = Theme(module="nowhere", title="a theme without a pair")
    nowhere.claim(id="C98", scenario=None, **fields)(lambda t, j, f: None)
    problems = claims.validate([*THEMES, stray, nowhere])
    expected = [
        f"claim id {FIRST} is recorded twice",
        f"{FIRST}: scenario expected a registered scenario, got 'no_such_scenario'",
        "nowhere: torch_impl.backend.claims.nowhere: module not found",
        "jax_impl/backend/claims/modes.py: __all__ expected [",
    ]
    for text in expected:
        assert any(text in p for p in problems), f"{text!r} not in {problems}"
    missing = claims.validate(THEMES[1:])
    assert any("have no record" in p for p in missing), missing


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("id", "C1", "claim id expected 'C' and two digits"),
        ("verdict", "maybe", "verdict expected one of"),
        ("article", "A9", "article expected one of"),
        ("claim", " ", "claim expected a non-empty text"),
        ("module", "_aliasing", "module expected a theme's module name"),
        ("verifier", None, "verifier expected a callable"),
    ],
)
def test_claim_record_rejects_bad_fields(field: str, value, message: str) -> None:
    good = {"id": "C98", "article": "A1", "section": "§1", "claim": "c", "verdict": "wrong", "right": "r"}
    good |= {"scenario": None, "module": "aliasing", "verifier": lambda t, j, f: None}
    with pytest.raises(ValueError, match=message):
        claims.Claim(**{**good, field: value})


def test_evidence_must_be_plain_json_data() -> None:
    assert check_evidence("check_x", {"a": [1, 2.5, None, "s", True], "b": {"c": []}}) == {
        "a": [1, 2.5, None, "s", True],
        "b": {"c": []},
    }
    bad = [
        ([1], "evidence expected a dict, got list"),
        ({"a": (1, 2)}, "evidence['a'] is a builtins.tuple"),
        ({"a": {"b": np.bool_(True)}}, "evidence['a']['b'] is a numpy.bool"),
        ({"a": [1.0, float("nan")]}, "evidence['a'][1] = nan (not finite)"),
        ({1: 2}, "evidence has the key 1 (int, not str)"),
    ]
    for evidence, message in bad:
        with pytest.raises(TypeError, match=r"check_x: .*" + re.escape(message)):
            check_evidence("check_x", evidence)
    leaky = backend("torch").claims.evidence.evidence(lambda: {"grad": backend("torch").claims.evidence.array([1.0])})
    with pytest.raises(TypeError, match=r"evidence\['grad'\] is a torch.Tensor"):
        leaky()


def test_checks_leave_the_frameworks_global_settings_as_they_were() -> None:
    import jax
    import torch

    freezing = backend("torch").claims.THEMES["freezing"]
    with torch.random.fork_rng():  # the test itself leaves the generator as it was
        before = torch.random.get_rng_state()
        freezing.check_c07.__wrapped__()  # undecorated, this check's nn.Linear draws from the global generator
        moved = not torch.equal(before, torch.random.get_rng_state())
    assert moved
    before = torch.random.get_rng_state()
    freezing.check_c07()
    assert torch.equal(before, torch.random.get_rng_state())
    probe = backend("jax").claims.evidence.evidence(lambda: {"x64": bool(jax.config.read("jax_enable_x64"))})
    assert jax.config.read("jax_enable_x64") is False
    assert probe() == {"x64": True} and jax.config.read("jax_enable_x64") is False


@claims_group
def test_cli_all_reproduced_exit_0_and_json(monkeypatch, tmp_path, capsys) -> None:
    cached = {i: outcome(i) for i in IDS}  # before the patch: outcome() calls evaluate
    monkeypatch.setattr(claims, "evaluate", lambda claim: cached[claim.id])
    path = tmp_path / "claims.json"
    assert cli.main(["claims", "--quiet", "--json", str(path)]) == 0
    assert f"{len(IDS)}/{len(IDS)} claims reproduced" in capsys.readouterr().out
    data = json.loads(path.read_text(encoding="utf-8"))
    assert data["ok"] is True and [c["id"] for c in data["claims"]] == IDS
    assert data["versions"]["torch"].startswith("2.") and data["seconds"] >= 0
    for entry in data["claims"]:
        c, o = CLAIMS[entry["id"]], cached[entry["id"]]
        assert (entry["module"], entry["check"], entry["verdict"]) == (c.module, c.check, c.verdict)
        assert entry["article_title"] == claims.ARTICLES[c.article] and entry["reproduced"] is True
        assert (entry["torch"], entry["jax"], entry["evidence_text"]) == (o.torch, o.jax, o.text)  # what was verified


def _args(*argv: str) -> argparse.Namespace:
    return cli.build_parser().parse_args(["claims", "--quiet", *argv])


def test_cli_exit_1_when_a_fact_changes_with_a_real_mark(monkeypatch, tmp_path, capsys) -> None:
    c = CLAIMS[FIRST]
    checks = backend("torch").claims.CHECKS
    real = checks[c.check]()
    key = _failing_keys(c, real, backend("jax").claims.CHECKS[c.check](), "torch")[0]
    monkeypatch.setitem(checks, c.check, lambda: {**real, key: _changed(real[key])})
    path = tmp_path / "c.json"
    assert cli.main(["claims", FIRST, "--quiet", "--json", str(path)]) == 1
    out = capsys.readouterr().out
    assert f"✗ {FIRST} no longer reproduces '{c.verdict}'" in out and "0/1 claims reproduced" in out
    assert "[red]" not in out and "[/]" not in out and "✓" not in out
    data = json.loads(path.read_text(encoding="utf-8"))
    assert data["ok"] is False and data["claims"][0]["reproduced"] is False


def test_cli_exit_1_when_a_check_raises(monkeypatch, tmp_path) -> None:
    c = CLAIMS[FIRST]

    def broken() -> dict:
        raise RuntimeError("boom")

    monkeypatch.setitem(backend("jax").claims.CHECKS, c.check, broken)
    path = tmp_path / "c.json"
    assert cli.main(["claims", FIRST.lower(), FIRST, "--quiet", "--json", str(path)]) == 1
    entries = json.loads(path.read_text(encoding="utf-8"))["claims"]
    assert len(entries) == 1 and entries[0]["reproduced"] is False and entries[0]["error"] == "RuntimeError: boom"


def test_cli_unknown_id_exit_2_and_help_from_the_records(capsys) -> None:
    assert cli.main(["claims", "C99"]) == 2
    assert f"claim expected one of {IDS}, got 'C99'" in " ".join(capsys.readouterr().err.split())
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    assert claims.id_range() == f"{IDS[0]}–{IDS[-1]}"
    assert f"({claims.id_range()})" in " ".join(capsys.readouterr().out.split())


class _ClosedStdout:
    def write(self, text: str) -> int:
        raise BrokenPipeError(32, "Broken pipe")

    def flush(self) -> None:
        raise BrokenPipeError(32, "Broken pipe")


def test_cli_closed_stdout_exit_2_with_the_json_already_written(tmp_path, capsys) -> None:
    path = tmp_path / "c.json"
    console = Console(file=_ClosedStdout(), width=120)
    assert claims_cli.cmd_claims(_args(FIRST, "--json", str(path)), console) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "detach-parity claims: error: could not print the table" in err and "(1/1 claims reproduced)" in err
    data = json.loads(path.read_text(encoding="utf-8"))
    assert data["ok"] is True and [c["id"] for c in data["claims"]] == [FIRST]


def test_cli_unwritable_json_exit_2_and_the_old_file_kept(monkeypatch, tmp_path, capsys) -> None:
    path = tmp_path / "c.json"
    mine = '{"mine": true, "versions": {"jax": "0.10.2"}}\n'  # an earlier report: --json may replace it
    path.write_text(mine, encoding="utf-8")
    args = _args(FIRST, "--json", str(path))

    def full(*_a, **_k) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(claims_cli, "write_json", full)
    assert claims_cli.cmd_claims(args, Console(file=sys.stdout, width=120)) == 2
    captured = capsys.readouterr()
    err = " ".join(captured.err.split())
    assert f"could not write {path}" in err and "No space left on device" in err and "left as it was" in err
    assert "1/1 claims reproduced" in captured.out and path.read_text(encoding="utf-8") == mine
    monkeypatch.undo()
    gone = tmp_path / "gone"
    gone.mkdir()
    args = _args(FIRST, "--json", str(gone / "c.json"))  # valid when parsed, its folder removed before the write
    gone.rmdir()
    assert claims_cli.cmd_claims(args, Console(file=sys.stdout, width=120)) == 2
    assert f"could not write {gone / 'c.json'}" in " ".join(capsys.readouterr().err.split())


def test_markdown_table_has_a_row_per_record() -> None:
    md = claims.markdown_table()
    rows = [line for line in md.splitlines() if line.startswith("| C")]
    assert [r.split(" | ")[0].removeprefix("| ") for r in rows] == IDS
    for row, c in zip(rows, CLAIMS.values(), strict=True):
        assert row.startswith(f"| {c.id} | {c.source} |") and f"**{c.verdict}**" in row
    assert md.splitlines()[0] == "| id | source | claim | verdict | right statement |"
    assert all(title in md for title in claims.ARTICLES.values())


def test_the_claims_app_imports_no_framework() -> None:
    code = (
        "import sys, detach_parity.shared.apps.claims, detach_parity.shared.apps.claims.cli; "
        "print(sorted({'torch', 'jax', 'flax', 'optax'} & set(sys.modules)))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
