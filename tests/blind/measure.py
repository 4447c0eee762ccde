"""Measure the port checker on the blind cases (../shared/BLIND-CASES.md): a dev tool, not part of `make test`.

    python tests/blind/measure.py [ROUND_DIR] [--json OUT] [--only PREFIX ...]

Each case file (NN_<arch>_<kind>.py, EXPECTED / WHERE in its docstring, proven in KEY.json by its writer)
runs through `detach-parity check FILE --json` in a fresh process. A correct port must exit 0; a buggy
one must exit 1 (detected), and is *named* when a hint names its kind's pitfall (KINDS below: the
catalogue's name for each kind; a kind absent there has no name yet, and the right answer is an
unexplained difference, so any named hint on it is *misleading*). Prints per-kind lines and the rates.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
# kind -> what a right hint names: a catalogue id (a pitfall, or the lesson a flow or tie hint names)
KINDS = {
    "gelu_tanh": "P04", "gelu_exact": "P04", "std_correction": "P01", "adam_weight_decay": "P10",
    "frozen_weight_decay": "frozen_backbone", "td_loss_broadcast": "P14", "linear_layout": "P07", "flatten_order": "P07",
    "batchnorm_momentum": "P06", "batchnorm_biased_var": "P06", "gru_bias": "P08", "lstm_layout": "P09",
    "lstm_gate_order": "P09", "lstm_bias_folded": "P09", "layernorm_eps": "P05", "rmsnorm_eps": "P05",
    "mask_polarity": "P12", "stop_gradient": "basics", "untied_lm_head": "tied_weights",
    "untied_head": "tied_weights", "bn_batch_stats": "P06",
    "attention_scale": "attention_scale", "softmax_scale": "attention_scale", "causal_mask_diagonal": "causal_diagonal",
    "causal_diagonal": "causal_diagonal", "rotary_layout": "rotary_layout", "rotary_theta": "rotary_theta",
    "gqa_heads_tiled": "gqa_heads", "gqa_tiled": "gqa_heads", "swiglu_swapped": "gated_mlp_order",
    "embedding_scaled": "embedding_scale", "token_type_dropped": "token_type",
    "conv_padding": "conv_padding", "ignore_index_mean": "ignore_index",  # named since round 3 measured them
    "weight_decay_dropped": "P19", "clip_formula": "grad_clipping",
    # bfloat16 only (round 6): the port computes in bfloat16 what the reference keeps in float32
    "softmax_bf16": "precision", "rmsnorm_bf16": "precision", "log_softmax_bf16": "precision",
    "rotary_bf16": "precision", "router_bf16": "precision",
    # round 7: a norm's epsilon under the writer's own kind name; a user's rule with a wrong permutation
    "eps_wrong": "P05", "rule_permutation_wrong": "P07",
    # rounds 8 and 9: the writers' names for kinds the catalogue has ("activation_swapped" stays unmapped: it is
    # silu, relu6 or quick_gelu elsewhere, so round 9's gelu_new-for-exact P04 counts as misleading)
    "attention_scale_d": "attention_scale", "attention_not_scaled": "attention_scale",
    "weight_decay_default": "P19", "batchnorm_mode": "P06", "conv_padding_side": "conv_padding",
    "l2_vs_decoupled_decay": "P10",  # round 10: torch's L2 decay against optax's decoupled one
}  # fmt: skip
BF16_KINDS = {k for k, v in KINDS.items() if v == "precision"}  # located by the bfloat16 pass's first parting


def located(row: dict) -> bool | None:
    """Whether the float64 first parting lies where the bug is: in the torch submodule WHERE names (round 2
    names a dotted path), at a step for an optimizer bug; None where WHERE is not a place (round 1's
    "module", a correct port's "none")."""
    where, first = row["where"], row.get("first_parting", "")
    if row["kind"] in BF16_KINDS:  # the bfloat16 pass's first parting: "(torch <module>)", the loss as "(loss)"
        line = row.get("bf16_parting", "")
        module = line.split("(torch ", 1)[1].split("): ", 1)[0] if "(torch " in line else ""
        return module == "(loss)" if where == "loss" else bool(module) and (module + ".").startswith(where + ".")
    if where == "optimizer":
        return " at steps " in first
    if where == "loss":
        return " at loss " in first
    if where in ("module", "loader", "none", "") or row["kind"] == "correct":
        return None
    names = []  # the torch modules of the forward's first parting, and of the backward's (forward or backward)
    for line in (first, row.get("backward_parting", "")):
        names += line.split("(torch ", 1)[1].split(")", 1)[0].split(" + ") if "(torch " in line else []
    span = row.get("interval") or {}  # the forward parts between two compared modules: the uncompared ones between
    names += [span["after"], *span["unpaired"]] if span else []
    return any(name == where or name.startswith(where + ".") for name in names)


# why a case is not named (or names something else), as far as it is understood; kept with the measurement
REASONS = {
    "24_tfm_softmax_scale.py": "attention_scale in a hand-written torch attention (q @ kᵀ, masked_fill, softmax in "
    "the user's own module): the attention replays go through transformers' AttentionInterface, and nothing "
    "reaches a core written by hand",
    "25_tfm_mask_polarity.py": "P12 in a hand-written torch attention (masked_fill with -inf in torch, an additive "
    "-1e9 in the port): the polarity replays cover nn.MultiheadAttention's masks and transformers' attention "
    "functions only",
    "15_cnn_flatten_order.py": "named P07 (confirmed by its replay); a P06 hint beside it is the BatchNorm "
    "running statistics downstream of the wrong head, a second name that is not the bug",
    "02_siamese_stop_gradient.py": "named; not counted as located, as the scorer wants the loss in the forward "
    "parting, and a stop in the loss leaves the forward equal: the backward parting is at the model's second output "
    "((model)[1], its output matches and the gradient arriving at it differs), which places the stop after the model",
    "08_qwen2_attention_bias_dropped.py": "refused (exit 2) by the weight copy, naming the bug's place: the port's "
    "k_proj Linear has no leaf 'bias' for torch's k_proj.bias; a torch parameter with no NNX twin is not compared",
    "10_gru2_gru_bias.py": "detected, unexplained: b_hn outside the reset gate in the second layer only, and the "
    "gru_bhn_outside replay changes the whole nn.GRU (both layers) at once, so no replay makes every difference vanish",
    "16_llama_weight_decay_dropped.py": "missed: the port's own jax_step computes its loss in float32 (HF's upcast, "
    "written as astype(jnp.float32)), and a user's own step is run as written, so its float32 casts are not widened "
    "and its steps are judged at float32's bound (said in the report, with the way out: give jax_optimizer); "
    "AdamW's 1e-5 shrink per step is below it. The same bug through jax_optimizer (03) is named P19",
    "22_gemma_norm_offset_dropped.py": "detected, not located: the port applies √hidden after embed_tokens (a "
    "boundary drawn elsewhere, a constant factor), and the bug sits in the first module fed by it, so that "
    "boundary cannot be told from a difference; the report's first parting is embed_tokens, the second the norm",
    "30_qwen2_attention_bias_on_output.py": "refused (exit 2), naming the bug's place: the port's o_proj holds a "
    "bias no torch parameter reaches",
}


def _named(hint: dict) -> str:
    return hint.get("pitfall") or hint.get("kind") or ""


def measure(folder: Path, only: list[str], bf16: bool = False) -> list[dict]:
    key = {}
    for path in sorted(folder.glob("KEY*.json")):  # one key per writer (round 6: KEY.json and KEY_B.json)
        key.update(json.loads(path.read_text()))
    out = []
    for name in sorted(key):
        if only and not any(name.startswith(p) for p in only):
            continue
        truth = key[name]
        with tempfile.TemporaryDirectory() as tmp:
            report = Path(tmp) / "r.json"
            start = time.time()
            proc = subprocess.run([sys.executable, "-m", "detach_parity.shared.apps.cli", "check", str(folder / name),
                                   "--json", str(report), *(["--bf16", "--steps", "3"] if bf16 else [])],
                                  capture_output=True, text=True, timeout=900)  # fmt: skip
            payload = json.loads(report.read_text()) if report.exists() else {}
        hints = [h for h in payload.get("hints", []) if _named(h) and _named(h) != "unexplained"]
        names = sorted({_named(h) for h in hints})
        row = {"case": name, "kind": truth["expected"], "where": truth["where"], "exit": proc.returncode,
               "named": names, "seconds": round(time.time() - start, 1),
               "error": proc.stderr.strip().splitlines()[-1] if proc.returncode in (2, 3) and proc.stderr.strip() else ""}  # fmt: skip
        row["outcome"] = outcome(row)
        first = [line for line in proc.stdout.splitlines() if line.startswith("float64: first parting")]
        row["first_parting"] = first[0][:200] if first else ""
        back = [line for line in proc.stdout.splitlines() if line.startswith("float64: backward parting")]
        row["backward_parting"] = back[0][:200] if back else ""
        row["interval"] = payload.get("interval") or {}
        bf = [line for line in proc.stdout.splitlines() if line.startswith("bfloat16: first parting")]
        row["bf16_parting"] = bf[0][:240] if bf else ""
        row["located"] = located(row)
        line = payload.get("line") or {}
        row["line"] = [Path(line["port"][0]).name, line["port"][1]] if line.get("port") and line["port"][1] else None
        row["relation"] = line.get("relation")
        row["line_right"], row["relation_right"] = line_right(row, truth), relation_right(row, truth)
        print(f"{name:40} {row['kind']:22} exit {row['exit']} {row['outcome']:12} {','.join(names)} {row['error'][:120]}",
              flush=True)  # fmt: skip
        out.append(row)
    return out


def line_right(row: dict, truth: dict) -> bool | None:
    """Whether the reported port line is the bug's (KEY "lines": [first, last] of the case file); None where the
    KEY gives no lines or the port is correct."""
    lines = truth.get("lines")
    if row["kind"] == "correct" or not lines:
        return None
    return bool(row["line"]) and row["line"][0] == row["case"] and lines[0] <= row["line"][1] <= lines[-1]


def relation_right(row: dict, truth: dict) -> bool | None:
    """Whether the relation said is the KEY's (round 8: "factor C", "offset C", "flip / shift / permutation axis K",
    "mask"; the axis is not compared: the report numbers torch's axes); None where the KEY says none."""
    want = (truth.get("relation") or "none").strip().lower()
    if row["kind"] == "correct" or want in ("none", ""):
        return None
    said = (row.get("relation") or "").lower()
    kind, _, value = want.partition(" ")
    if kind == "factor":
        c = float(value.split()[0])
        if abs(c + 1) < 1e-9 and "its sign" in said:
            return True
        if "a factor " not in said:
            return False
        got = float(said.split("a factor ", 1)[1].split()[0])
        return abs(got - c) <= 1e-3 * max(abs(c), 1e-12)
    words = {"offset": "an offset", "flip": "flipped along", "shift": "shifted by one", "permutation": "permuted along"}
    if kind in words:
        return words[kind] in said
    return kind == "mask" and any(w in said for w in ("masked", "unmasked", "zeroed"))


def outcome(row: dict) -> str:
    """match / false alarm / refused for a correct port; named / detected / misleading / missed / refused
    for a buggy one (named: a hint names its kind's catalogue id; misleading: only other names)."""
    if row["kind"] == "correct":
        return {0: "match", 1: "false alarm"}.get(row["exit"], "refused")
    if row["exit"] != 1:
        return "missed" if row["exit"] == 0 else "refused"
    want, names = KINDS.get(row["kind"]), row["named"]
    if want and want in names:
        return "named"
    return "misleading" if names else "detected"


def summary(rows: list[dict]) -> dict:
    correct = [r for r in rows if r["kind"] == "correct"]
    buggy = [r for r in rows if r["kind"] != "correct"]
    known = [r for r in buggy if r["kind"] in KINDS]
    count = lambda rs, o: sum(r["outcome"] == o for r in rs)  # noqa: E731
    return {
        "correct": len(correct), "matched": count(correct, "match"), "false_alarms": count(correct, "false alarm"),
        "refused": count(rows, "refused"), "buggy": len(buggy),
        "detected": sum(r["outcome"] in ("named", "detected", "misleading") for r in buggy),
        "catalogue_kinds": len(known), "named": count(known, "named"),
        "misleading": count(buggy, "misleading"), "missed": count(buggy, "missed"),
        "placed": sum(r.get("located") is not None for r in buggy), "located": sum(r.get("located") is True for r in buggy),
    } | ({  # a run from before the port line was reported (rounds 1–7 as first stored) has no line to score
        "lines_keyed": sum(r.get("line_right") is not None for r in buggy),
        "lines_right": sum(r.get("line_right") is True for r in buggy),
        "relations_keyed": sum(r.get("relation_right") is not None for r in buggy),
        "relations_right": sum(r.get("relation_right") is True for r in buggy),
    } if any("line_right" in r for r in rows) else {})  # fmt: skip


def markdown(rows: list[dict], result: dict, source: str, folder: str = "round1") -> str:
    """The run as a page: the rates, then one line per case (kind, outcome, what was named, the first parting)."""
    sm = result["summary"]
    lines = [
        f"# Blind cases, {folder}: the checker on ports it was not tuned on",
        "",
        f"`tests/blind/{folder}`: {len(rows)} ports written from the README and the pitfall pages alone by a "
        "writer who had not read the checker (BRIEF.md beside them), each proven in float64 by the writer's own "
        f"loader (KEY.json). Measured by `python tests/blind/measure.py --json {source}`; "
        "`pytest -m slow tests/test_port_blind.py` holds these rates as floors. Every round: "
        "[round 1](blind.md), [round 2](blind-round2.md), [round 3](blind-round3.md) (written blind by two writers "
        "while the transformer replays and the backward localisation were built), [round 4](blind-round4.md) (16 "
        "ports written after round 3's misses were fixed, new architectures and the new records' kinds), [round 5]"
        "(blind-round5.md) (16 ports where one module runs twice, BatchNorm statistics move, tied weights, Qwen2, "
        "GPT-NeoX, a 2-layer GRU, gradient clipping), [round 6](blind-round6.md) (27 ports of HF's island families, "
        "Mistral, Gemma, Llama, Qwen2, Mixtral, checked with --bf16: bugs the float32 islands hid, bfloat16-only "
        "bugs, and kinds the catalogue has no record for), [round 7](blind-round7.md) (14 ports in the shapes the "
        "adversarial pass found refused or misjudged: a LoRA subclass, weight norm, torch.compile, left padding, a "
        "Mixtral router, hand-written norms under HF's names, a user's own rule), round 8 (`tests/blind/round8`: 49 "
        "ports of T5, Whisper, Mistral, Gemma2, Mixtral, GPT-NeoX, BERT, CLIP, wav2vec2, ConvNeXt, MobileNetV2, a "
        "GroupNorm CNN and an LSTM, kinds outside the catalogue, each keyed with its bug's line and relation: the "
        "port-line naming was built against them, so they are a development set, not a measure), [round 9]"
        "(blind-round9.md) (41 ports of Qwen3, Phi, RoBERTa, ViT, a temporal CNN, an MLP-Mixer and a "
        "ResNet block, keyed the same way and measured on the line naming before and after its fixes), [round 10]"
        "(blind-round10.md) (the latest: 32 ports of OPT, DistilBERT, a GRU and a U-Net, written after round 9's "
        "misses were fixed: the held-out measure of the line naming).",
        "",
        f"- correct ports: {sm['matched']} of {sm['correct']} match; {sm['false_alarms']} false alarm(s); "
        f"{sum(r['outcome'] == 'refused' for r in rows if r['kind'] == 'correct')} refused",
        f"- buggy ports: {sm['detected']} of {sm['buggy']} detected (exit 1), {sm['missed']} missed, "
        f"{sum(r['outcome'] == 'refused' for r in rows if r['kind'] != 'correct')} refused",
        f"- named: {sm['named']} of the {sm['catalogue_kinds']} whose kind the catalogue knows; "
        f"{sm['misleading']} hint(s) naming something else (a kind without a catalogue id counts any name as misleading)",
        f"- located: {sm['located']} of the {sm['placed']} buggy ports whose WHERE names a place (a torch submodule, "
        "the loss or the optimizer): the float64 first parting, forward or backward, lies there",
        *(
            [
                f"- line: {sm['lines_right']} of the {sm['lines_keyed']} buggy ports whose KEY gives the bug's lines: the "
                "port line the report names is one of them; relation: "
                f"{sm['relations_right']} of the {sm['relations_keyed']} whose KEY says a simple one"
            ]
            if sm.get("lines_keyed")
            else []
        ),
        "",
        "Per kind (named: a hint names the kind's catalogue id; `—`: the catalogue has no id for it, and the right "
        "answer is a detected, unexplained difference):",
        "",
        "| kind | cases | named | located | misleading | false alarms |",
        "|---|---|---|---|---|---|",
    ]
    for kind in dict.fromkeys(r["kind"] for r in rows):
        rs = [r for r in rows if r["kind"] == kind]
        named = f"{sum(r['outcome'] == 'named' for r in rs)}" if kind in KINDS else "—"
        placed = [r for r in rs if r.get("located") is not None]
        located = f"{sum(r['located'] is True for r in placed)} of {len(placed)}" if placed else "—"
        alarms = sum(r["outcome"] == "false alarm" for r in rs)
        misleading = sum(r["outcome"] == "misleading" for r in rs)
        lines.append(
            f"| {kind} | {len(rs)} | {named if kind != 'correct' else '—'} | {located} | {misleading} | {alarms} |"
        )
    lined = sm.get("lines_keyed")
    head = "| case | kind | exit | outcome | named | first parting (float64) |" + (
        " line | relation |" if lined else ""
    )
    lines += ["", head, "|---|---|---|---|---|---|" + ("---|---|" if lined else "")]
    for r in rows:
        first = r.get("first_parting", "").removeprefix("float64: first parting at ").split(":")[0]
        back = r.get("backward_parting", "").removeprefix("float64: backward parting at ").split(":")[0]
        first += f"; backward at {back}" if back else ""
        said = ""
        if lined:
            at = f"{r['line'][1]}" if r.get("line") else "—"
            mark = {True: " ✓", False: " ✗"}.get(r.get("line_right"), "")
            said = f" {at}{mark} | {r.get('relation') or '—'}{ {True: ' ✓', False: ' ✗'}.get(r.get('relation_right'), '') } |"
        lines.append(
            f"| {r['case']} | {r['kind']} | {r['exit']} | {r['outcome']} | {', '.join(r['named'])} | {first} |{said}"
        )
    notes = [f"- `{case}`: {why}" for case, why in REASONS.items() if any(r["case"] == case for r in rows)]
    if notes:
        lines += ["", "Not named, or named beside the bug, and why:", "", *notes]
    unknown = sorted({r["kind"] for r in rows if r["kind"] != "correct" and r["kind"] not in KINDS})
    if unknown:
        lines += ["", f"Kinds the catalogue has no id for ({', '.join(unknown)}): detected and left unexplained, the "
                  "right answer; any name there counts as misleading."]  # fmt: skip
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("folder", nargs="?", default=str(HERE / "round1"))
    parser.add_argument("--json")
    parser.add_argument("--only", nargs="*", default=[])
    parser.add_argument("--bf16", action="store_true", help="check with --bf16 --steps 3 (round 6 and later)")
    parser.add_argument("--markdown", metavar="PATH", help="also write the run as a page (docs/blind.md)")
    parser.add_argument("--rescore", metavar="JSON", help="score a stored run again (KINDS changed), running nothing")
    args = parser.parse_args()
    if args.rescore:
        rows = json.loads(Path(args.rescore).read_text())["cases"]
        for row in rows:
            row["outcome"], row["located"] = outcome(row), located(row)
    else:
        rows = measure(Path(args.folder), args.only, args.bf16)
    result = {"summary": summary(rows), "cases": rows}
    print(json.dumps(result["summary"], indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1) + "\n")
    if args.markdown:
        source = args.rescore or args.json or "OUT.json"
        Path(args.markdown).write_text(markdown(rows, result, source, Path(args.folder).name))
    return 0


if __name__ == "__main__":
    sys.exit(main())
