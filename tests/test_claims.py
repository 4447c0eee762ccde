"""Claims C01–C22: each check reproduces its stated verdict with real values; CLI exit codes, JSON; the claims and bench pairs mirror."""

from __future__ import annotations

import ast
import functools
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from shared.apps import claims, cli
from shared.apps.claims import CLAIMS, INPLACE, NO_GRAD_FN
from shared.core.registry import SCENARIOS

ROOT = Path(__file__).resolve().parents[1]
IDS = [f"C{i:02d}" for i in range(1, 23)]


@functools.cache
def outcome(claim_id: str) -> dict:
    """One claim checked (torch + JAX + verify), once per process, as its JSON record.

    Cached per claim rather than one fixture for all 22: pytest-xdist spreads the parametrized
    tests over workers (its loadgroup grouping is a no-op under pytest 9), so each worker
    computes only the claims it runs.
    """
    return json.loads(json.dumps(claims.evaluate(claims.get(claim_id)).to_json()))


def _c01(t, j):
    assert t["y_before"] == [2.0, 4.0, 6.0] and t["y_after_alias_write"] == [100.0, 4.0, 6.0]
    assert t["backward_after_alias_write"]["type"] == "RuntimeError"
    assert INPLACE in t["backward_after_alias_write"]["message"]
    assert t["y_after_clone_write"] == [2.0, 4.0, 6.0]
    assert t["requires_grad"] == {"alias": False, "out_of_place": False, "snapshot": False}
    assert t["grad_fn_after_alias_write"] == "MulBackward0"
    assert j["item_assignment"]["type"] == "TypeError" and j["y_after_at_set"] == [2.0, 4.0, 6.0]


def _c02(t, j):
    assert (t["z_requires_grad"], t["y_requires_grad"]) == (False, True)
    assert j["z_grad"] == [0.0, 0.0] and j["y_grad"] == [2.0, 2.0]


def _c03(t, j):
    for ev in (t, j):
        assert [ev[k] for k in ("y", "loss", "w_grad", "x_grad", "b_grad")] == [7.0, 4.0, 8.0, 12.0, 4.0]


def _c04(t, j):
    assert t["error"] == {"type": "RuntimeError", "message": NO_GRAD_FN}
    assert j["grad"] == [0.0, 0.0] and j["error"]["type"] is None


def _c05(t, j):
    assert all(t["as_written"]["printout"].values()) and t["as_written"]["output_has_grad_fn"] is False
    assert t["as_written"]["backward"]["message"] == NO_GRAD_FN
    assert t["fix_detach"] == {"layer1": "none", "layer2": "none", "layer3": "nonzero"}
    assert j["as_written"] == {"layer1": "zero", "layer2": "zero", "layer3": "zero"}


def _c06(t, j):
    assert t["saved_elements_detach_train"] > t["saved_elements_eval_no_grad"] == t["saved_elements_head_only"]
    assert t["bn_moved_detach_train"] and not t["bn_moved_eval_no_grad"]
    assert j["residuals_stop"]["count"] < j["residuals_none"]["count"] and j["bn_moved_train"]


def _c07(t, j):
    assert t["requires_grad_after"] is False and t["grad_kept"] == [0.1, 0.2, 0.3]
    assert t["view_error"]["message"].startswith("Can't detach views in-place")
    assert "(2x1000 and 512x10)" in t["head_shape_error"]["message"]
    assert t["frozen_after_adamw"] == [1.0, -2.0, 3.0]
    assert j["frozen_after_adamw"] == pytest.approx([0.99, -1.98, 2.97], rel=1e-12)
    assert j["frozen_after_partition"] == j["frozen_after_partition_live_grad"] == [1.0, -2.0, 3.0]


def _c08(t, j):
    assert t["name_error"] == {"type": "NameError", "message": "name 'next_state_value' is not defined"}
    assert t["target_grad_is_none"] and j["target_grad_zero"] and t["stale_max_abs"] > 0.1


def _c09(t, j):
    assert t["is_inference"] and t["error"]["message"].startswith("Inference tensors cannot be saved for backward")
    assert j["applies"] is False and j["why"]
    assert t["no_grad_tensor_grad"] == [2.0, 2.0, 2.0] and t["no_grad_tensor_requires_grad"] is False


def _c10(t, j):
    for ev in (t, j):
        assert ev["none"] == list(range(40)) and ev["every_10"] == list(range(30, 40)) and ev["every_1"] == [39]


def _c11(t, j):
    assert t["saved_bytes_none"] == t["saved_bytes_every_10"] > t["max_saved_bytes_per_chunk_backward"]
    assert t["grad_max_abs_diff"] > 0
    assert j["residuals_none"]["bytes"] == j["residuals_every_10"]["bytes"]


def _c12(t, j):
    assert t["isolated_vs_task1_max_abs"] == 0.0 and j["isolated_vs_task1_max_abs"] == 0.0
    assert t["joint_vs_task1_max_abs"] > 0.1
    assert t["non_scalar_backward"]["message"] == "grad can be implicitly created only for scalar outputs"
    assert j["non_scalar_grad"]["type"] == "TypeError"


def _c13(t, j):
    assert 0.05 < t["relative_difference"] == pytest.approx(j["relative_difference"], rel=1e-9)
    assert t["second_order_vs_closed_form"] < 1e-12 and j["second_order_vs_closed_form"] < 1e-12
    assert t["first_order"] == pytest.approx(j["first_order"], rel=1e-12)


def _c14(t, j):
    assert t["wq_wk_grad_none_detached"] and j["wq_wk_grad_zero_stopped"]
    assert t["wv_grad_max_abs_diff"] == 0.0 == j["wv_grad_max_abs_diff"]


def _c15(t, j):
    assert t["autocast_dtype"] == "torch.bfloat16" and t["grad_dtype"] == "torch.float32"
    assert t["detached_loss_backward"]["message"] == NO_GRAD_FN
    assert j["stopped_loss_grad_state"] == "zero" and j["grad_state"] == "nonzero"


def _c16(t, j):
    assert t["none"]["backward_nodes"] > t["detach"]["backward_nodes"] == t["requires_grad_false"]["backward_nodes"]
    assert t["detach"]["saved_bytes"] > t["no_grad"]["saved_bytes"] == t["requires_grad_false"]["saved_bytes"]
    assert j["head_only"]["grad_eqns"] <= j["stop"]["grad_eqns"] < j["none"]["grad_eqns"]


def _c17(t, j):
    assert t["saved_bytes_select"] == t["saved_bytes_select_detach"] > 0 == t["saved_bytes_select_no_grad"]
    assert t["pg_loss_on_detached_logits"]["message"] == NO_GRAD_FN
    assert j["stopped_logits_grad_state"] == "zero" and t["detached_scores_requires_grad"] is False


def _c18(t, j):
    assert t["full_norm"] > 1e8 and t["clipped_norm"] == pytest.approx(1.0, rel=1e-12)
    assert t["clipped_cosine"] == pytest.approx(1.0, rel=1e-12) and t["detach_every_step_cosine"] < 0.9
    assert t["detach_every_step_norm"] > 1e6
    assert j["full_norm"] == pytest.approx(t["full_norm"], rel=1e-12) and j["clipped_norm"] == pytest.approx(1.0)


def _c19(t, j):
    n = t["n"]
    assert [a / b for a, b in zip(t["std"], j["std"], strict=True)] == pytest.approx([math.sqrt(n / (n - 1))] * 6)
    assert j["std_ddof1"] == pytest.approx(t["std"], rel=1e-12)
    assert t["saved_bytes_no_grad"] == 0 < t["saved_bytes_grad"] and t["std_requires_grad"] is False


def _c20(t, j):
    assert (t["saved_count_detach"], t["saved_count_no_grad"]) == (1, 0)
    assert t["new_tensor_under_no_grad_requires_grad"] is True
    assert (
        t["leaf_inplace_outside_no_grad"]["message"]
        == "a leaf Variable that requires grad is being used in an in-place operation."
    )
    assert t["no_grad_view_inplace_in_grad_mode"]["message"].startswith("A view was created in no_grad mode")
    assert j["applies"] is False


def _c21(t, j):
    sig = [1 / (1 + math.exp(-x)) for x in (1.0, 2.0, 3.0)]
    assert t["data_zero_grad"] == [0.0, 0.0, 0.0]
    assert t["right_grad"] == pytest.approx([s * (1 - s) for s in sig], rel=1e-12)
    assert INPLACE in t["detach_zero_backward"]["message"] and t["grad_fn_after_detach_zero"] == "SigmoidBackward0"
    assert j["grad"] == pytest.approx(t["right_grad"], rel=1e-12)


def _c22(t, j):
    assert t["input_requires_grad"] == [False, False] and t["grad_max_abs_diff"] == 0.0 and t["detach_is_new_tensor"]
    assert t["saved_bytes"][0] == t["saved_bytes"][1] and t["backbone_grad_none_features_detached"]
    assert j["backbone_grad_state_features_stopped"] == "zero"


SPECIFIC = {f"C{i:02d}": globals()[f"_c{i:02d}"] for i in range(1, 23)}


@pytest.mark.xdist_group("claims")  # one worker computes the shared run
@pytest.mark.parametrize("claim_id", IDS)
def test_claim_reproduces_its_verdict(claim_id: str) -> None:
    entry = outcome(claim_id)
    assert entry["reproduced"], f"{claim_id} ({entry['verdict']}): {entry['evidence_text']}"
    assert "✗" not in entry["evidence_text"] and entry["error"] is None
    SPECIFIC[claim_id](entry["torch"], entry["jax"])


@pytest.mark.xdist_group("claims")
def test_claims_cli_all_reproduced_exit_0(monkeypatch, tmp_path, capsys) -> None:
    parts = {claim_id: _outcome_parts(claim_id) for claim_id in IDS}  # before the patch: outcome() calls evaluate
    cached = lambda claim: claims.Outcome(claim, **parts[claim.id])
    monkeypatch.setattr(claims, "evaluate", cached)  # the checks themselves run once per process
    path = tmp_path / "claims.json"
    assert cli.main(["claims", "--quiet", "--json", str(path)]) == 0
    assert "22/22 claims reproduced" in capsys.readouterr().out
    data = json.loads(path.read_text(encoding="utf-8"))
    assert data["ok"] is True and [c["id"] for c in data["claims"]] == IDS
    first = data["claims"][0]
    assert set(first) >= {
        "id",
        "article",
        "article_title",
        "section",
        "claim",
        "verdict",
        "right",
        "scenario",
        "check",
        "reproduced",
        "evidence_text",
        "torch",
        "jax",
    }
    assert first["article_title"] == claims.ARTICLES["A1"] and first["check"] == "check_c01"
    assert first["torch"]["y_after_alias_write"] == [100.0, 4.0, 6.0]
    assert data["versions"]["torch"].startswith("2.")


def _outcome_parts(claim_id: str) -> dict:
    e = outcome(claim_id)
    return {
        "reproduced": e["reproduced"],
        "text": e["evidence_text"],
        "torch": e["torch"],
        "jax": e["jax"],
        "error": e["error"],
    }


def test_claims_cli_table(capsys) -> None:
    assert cli.main(["claims", "C03", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "C03" in out and "A3 §1.2" in out and "✓" in out and "1/1 claims reproduced" in out


def test_claims_cli_exit_1_when_a_fact_changes(monkeypatch, capsys) -> None:
    from torch_impl import claims as torch_claims

    real = torch_claims.check_c03
    monkeypatch.setattr(torch_claims, "check_c03", lambda: {**real(), "x_grad": 11.0})
    assert cli.main(["claims", "C03", "C02", "--quiet"]) == 1
    out = capsys.readouterr().out
    assert "C03 no longer reproduces 'correct'" in out and "1/2 claims reproduced" in out


def test_claims_cli_exit_1_when_a_check_raises(monkeypatch, tmp_path) -> None:
    from jax_impl import claims as jax_claims

    def broken() -> dict:
        raise RuntimeError("boom")

    monkeypatch.setattr(jax_claims, "check_c04", broken)
    path = tmp_path / "c.json"
    assert cli.main(["claims", "C04", "--quiet", "--json", str(path)]) == 1
    entry = json.loads(path.read_text(encoding="utf-8"))["claims"][0]
    assert entry["reproduced"] is False and entry["error"] == "RuntimeError: boom"


def test_claims_cli_unknown_id_exit_2(capsys) -> None:
    assert cli.main(["claims", "C99"]) == 2
    assert "claim expected one of ['C01'," in capsys.readouterr().err.replace("\n", "")


def test_verify_rejects_doctored_and_unreadable_evidence() -> None:
    c04 = claims.get("C04")
    good_t = {"error": {"type": "RuntimeError", "message": NO_GRAD_FN}}
    good_j = {"grad": [0.0, 0.0], "error": {"type": None, "message": ""}}
    assert claims.verify(c04, good_t, good_j)[0] is True
    ok, text = claims.verify(
        c04, {"error": {"type": "RuntimeError", "message": "detached Tensor doesn't have any grad_fn"}}, good_j
    )
    assert ok is False and "✗" in text
    assert claims.verify(c04, good_t, {**good_j, "grad": [0.0, 1.0]})[0] is False
    ok, text = claims.verify(c04, {}, good_j)
    assert ok is False and text.startswith("✗ evidence unreadable: KeyError")


def test_records() -> None:
    assert list(CLAIMS) == IDS
    from jax_impl import claims as jax_claims
    from torch_impl import claims as torch_claims

    for c in CLAIMS.values():
        assert c.verdict in claims.VERDICTS and c.claim and c.right and c.section
        assert callable(getattr(torch_claims, c.check)) and callable(getattr(jax_claims, c.check))
        assert c.scenario in SCENARIOS, f"{c.id}: related scenario {c.scenario!r} is not registered"
    with pytest.raises(ValueError, match="verdict expected one of"):
        claims.Claim("C99", "A1", "§1", "x", "maybe", "y", None, lambda t, j: (True, ""))


def test_registry_claim_ids_exist() -> None:
    for name, spec in SCENARIOS.items():
        assert set(spec.claims) <= set(CLAIMS), f"{name}: unknown claim ids {set(spec.claims) - set(CLAIMS)}"


def test_markdown_table() -> None:
    md = claims.markdown_table()
    rows = [line for line in md.splitlines() if line.startswith("| C")]
    assert len(rows) == 22 and rows[3].startswith("| C04 | A3 §2.1 |") and "**wrong**" in rows[3]
    assert md.splitlines()[0] == "| id | source | claim | verdict | right statement |"
    assert all(title in md for title in claims.ARTICLES.values())


def test_shared_modules_import_no_framework() -> None:
    code = "import sys, shared.apps.claims, shared.apps.claims.cli, shared.apps.bench; print(sorted({'torch', 'jax'} & set(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def _facts(path: Path) -> tuple[list[str], list[str], dict[str, str | None], str | None]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    all_names = next(
        [e.value for e in n.value.elts]
        for n in tree.body
        if isinstance(n, ast.Assign) and any(getattr(t, "id", None) == "__all__" for t in n.targets)
    )
    defs = [n for n in tree.body if isinstance(n, ast.FunctionDef | ast.ClassDef) and n.name in all_names]
    return all_names, [d.name for d in defs], {d.name: ast.get_docstring(d) for d in defs}, ast.get_docstring(tree)


@pytest.mark.parametrize("name", ["claims", "bench"])
def test_pair_mirrors(name: str) -> None:
    t_all, t_order, t_docs, t_doc = _facts(ROOT / "torch_impl" / f"{name}.py")
    j_all, j_order, j_docs, j_doc = _facts(ROOT / "jax_impl" / f"{name}.py")
    assert t_all == j_all == t_order == j_order, f"{name}: same public names in __all__ order on both sides"
    assert "Port note" in t_doc and "Port note" in j_doc
    assert all(t_docs.values()) and all(j_docs.values())
    if name == "claims":
        assert t_all == [f"check_c{i:02d}" for i in range(1, 23)]
