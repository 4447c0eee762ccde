"""Real models as worked ports: transformers' classes, unmodified, from tiny configs with random init, checked
as they are against hand-written Flax NNX ports (torch_impl/backend/ports/, jax_impl/backend/ports/).

Each correct port matches through check_port to the float64 bound (Llama too: HF computes its RMSNorm,
rotary table and labels= loss in float32 inside the float64 model, and the port mirrors those casts; the
float64 pass runs both in float64 and says so; checked through the CLI, float64 and float32); each buggy port, a bug of a real port (Llama's rotary pairs, its grouped
key / value heads, its SwiGLU gate; BERT's token types; ViT's patch order and pooling; GPT-2's
GELU and causal mask), is reported as differing. transformers is a pinned test
dependency: nothing here is skipped without it. The models are tiny (one or two layers, width 32):
each check's cost is mostly compiling.
"""

from __future__ import annotations

import json
import sys

import pytest
from conftest import worked_report
from detach_parity.shared.apps.backends import backend
from detach_parity.shared.apps.check.ports import REAL, case, check_worked, variants
from detach_parity.shared.apps.cli import main

pytestmark = pytest.mark.xdist_group("port_real")  # with test_port_precision.py: one check of each correct port

# bugs of every pass; the bfloat16-only ones (pitfall "precision") are tests/test_port_precision.py's
BUGGY = [(n, v, pid) for n in REAL for v, pid in variants(n).items() if pid is not None and pid != "precision"]


def test_every_real_model_has_buggy_ports() -> None:
    assert REAL == ("llama", "bert", "vit", "gpt2", "qwen2")
    for name in REAL:
        assert variants(name)["correct"] is None and len(variants(name)) >= 3, name


# outputs compared (every submodule the two models share) and gradients (every parameter, a tied one once)
COUNTS = {"bert": (25, 26), "vit": (17, 24), "gpt2": (13, 16)}
TIED = {  # the tied weights each model has: the torch names, noted and compared once, at their NNX place
    "bert": ["cls.predictions.decoder.weight is tied to bert/embeddings/word_embeddings/embedding",
             "cls.predictions.decoder.bias is tied to cls/predictions/decoder/bias"],
    "vit": [],
    "gpt2": ["lm_head.weight is tied to transformer/wte/embedding"],
}  # fmt: skip


@pytest.mark.parametrize("name", ["bert", "vit", "gpt2"])
def test_the_correct_port_matches_as_is_in_float64(name: str) -> None:
    report = worked_report(name, "correct", 1, ("float64", "float32", "bfloat16"))  # the float64 pass's rows here
    assert report.ok and report.verdict() == "match", report.table()
    wide = [r for r in report.rows if r.dtype == "float64"]
    rows = {s: [r for r in wide if r.section == s] for s in ("weights", "outputs", "grads", "steps")}
    assert all(r.max_abs == 0 for r in rows["weights"])  # copied as-is, by HF's own names
    assert (len(rows["outputs"]), len(rows["grads"])) == COUNTS[name]
    assert all(r.used <= 1 for r in wide) and {r.step for r in rows["steps"]} == {1}
    assert not report.hints and not report.mismatches and not report.explained  # no float32 island here
    tied = [n.removeprefix("torch ").split(":")[0] for n in report.notes if " is tied to " in n]
    assert tied == TIED[name]


def test_llama_matches_through_the_cli_at_the_float64_bound_with_its_float32_islands_stated(tmp_path, capsys) -> None:
    out = tmp_path / "llama.json"
    assert main(["check", "llama", "--steps", "1", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "verdict: the port matches" in text
    report = json.loads(out.read_text())
    assert report["ok"] and report["verdict"] == "match" and not report["hints"] and not report["explained"]
    facts = [n for n in report["notes"] if n.startswith("float64 pass:")]
    assert facts == [
        "float64 pass: the reference computes `model.rotary_emb`, `model.layers.*.input_layernorm`, "
        "`model.layers.*.post_attention_layernorm`, `model.norm`, the loss in float32: widened to float64 on both "
        "sides (every row judged at the float64 bound; the float32 pass runs them as written)",
        "float64 pass: the port computes `model.layers.*.self_attn`, the loss in float32: widened to float64 on "
        "both sides (every row judged at the float64 bound; the float32 pass runs them as written)",
    ]
    summary = {(s["dtype"], s["section"]): s for s in report["summary"]}
    assert set(summary) == {
        (d, s) for d in ("float64", "float32") for s in ("weights", "outputs", "loss", "grads", "steps")
    }
    assert summary[("float64", "weights")]["max_abs"] == 0  # copied as-is, by HF's own names
    assert summary[("float64", "grads")]["compared"] == 12  # embed, q k v o, gate up down, 2 norms, final norm, head
    assert summary[("float64", "outputs")]["compared"] >= 10  # every projection, norm, layer, the model
    # float64 rounding, not float32's: the islands ran in float64 on both sides
    assert all(summary[("float64", s)]["max_abs"] < 1e-12 for s in ("outputs", "loss", "grads", "steps"))


@pytest.mark.parametrize(("name", "variant", "pitfall"), BUGGY, ids=[f"{n}:{v}" for n, v, _ in BUGGY])
def test_each_buggy_port_differs(name: str, variant: str, pitfall: str) -> None:
    report = check_worked(name, variant, steps=0, dtypes=("float64",))
    assert not report.ok and report.verdict() == "differs", report.table()
    if pitfall:  # a catalogue bug: named as well
        assert pitfall in report.named(), report.table()
    assert any(not r.ok and r.section == "outputs" for r in report.rows)  # the forward already parts
    assert all(r.ok for r in report.rows if r.section == "weights")  # the weights came across: the port's bug


def test_without_transformers_the_real_models_say_what_they_need(monkeypatch) -> None:
    """The package imports without transformers (import-linter: only torch_impl/backend/ports imports it)."""
    monkeypatch.setitem(sys.modules, "transformers", None)  # import transformers -> ModuleNotFoundError
    monkeypatch.delitem(sys.modules, "detach_parity.torch_impl.backend.ports.llama", raising=False)
    with pytest.raises(ValueError, match=r"worked_port llama: needs transformers, not installed \(pip install"):
        backend("torch").port.worked_port("llama")
    assert case("cnn")["torch_model"] is not None  # the other worked ports do not need it


def test_llamas_own_labels_loss_in_float32_is_widened_and_matches_at_the_float64_bound() -> None:
    """HF's labels= loss casts the logits to float32: the float64 pass runs it in float64 (it was a dtype
    mismatch, DIFFERS, then a match at float32's bound), and says so as a fact."""
    kwargs = case("llama", "correct")
    kwargs["torch_loss"] = lambda model, batch: model(input_ids=batch["input_ids"], labels=batch["labels"]).loss
    from detach_parity import check_port

    report = check_port(kwargs.pop("torch_model"), kwargs.pop("jax_model"), kwargs.pop("batch"), steps=0,
                        dtypes=("float64",), torch_loss=kwargs["torch_loss"], jax_loss=kwargs["jax_loss"])  # fmt: skip
    loss = [r for r in report.rows if r.section == "loss"]
    assert report.ok and report.verdict() == "match", report.table()
    assert len(loss) == 1 and not loss[0].explained and loss[0].max_abs < 1e-13 and loss[0].bound < 1e-9
    facts = [n for n in report.notes if n.startswith("float64 pass: the reference computes")]
    assert len(facts) == 1 and "`model.norm`, `(model)` in float32: widened to float64 on both sides" in facts[0], (
        report.notes
    )
