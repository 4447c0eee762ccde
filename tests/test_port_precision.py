"""Precision, honestly: bugs the float32 islands used to hide are differences in the float64 pass, and a port
that computes in bfloat16 what the reference keeps in float32 differs in the bfloat16 pass.

The float64 pass runs HF's float32 islands in float64 on both sides (test_port_islands.py), so a bug below
float32's rounding is a difference there: on transformers' Llama and Qwen2, an RMSNorm epsilon 1e-5 for the
config's 1e-6 at activations of RMS about 1, hidden states scaled by 1.0001, and optax.adam for torch's
AdamW(weight_decay=0.01). The bfloat16 pass judges each side's error against the float64 truth, and names
where the reference keeps float32 (a softmax, an RMSNorm's statistics, the loss's log-softmax) that the port
does not; the correct ports of GPT-2, Llama, BERT, ViT and Qwen2 match in it.
"""

from __future__ import annotations

import optax
import pytest
import torch
from conftest import worked_report
from detach_parity import check_port
from detach_parity.shared.apps.check import TOLERANCE, PortInputError
from detach_parity.shared.apps.check.ports import case, check_worked
from detach_parity.shared.apps.check.precision import FACTOR

ALL = ("float64", "float32", "bfloat16")
pytestmark = pytest.mark.xdist_group("port_real")  # with test_port_hf.py: one check of each correct port


def _check(name: str, variant: str = "correct", steps: int = 0, dtypes=("float64",), torch_model=None, **kwargs):
    args = case(name, variant)
    model_t = torch_model(args.pop("torch_model")) if torch_model else args.pop("torch_model")
    args.update(kwargs)
    return check_port(model_t, args.pop("jax_model"), args.pop("batch"), steps=steps, dtypes=dtypes, **args)


def _activated(model):
    """The embedding table at RMS about 1 (a trained model's scale; HF's init gives 0.02)."""
    with torch.no_grad():
        model.get_input_embeddings().weight.mul_(50.0)
    return model


@pytest.mark.parametrize("name", ["llama", "qwen2"])
def test_an_rmsnorm_epsilon_ten_times_off_at_a_trained_scale_differs_and_is_named(name: str) -> None:
    args = case(name)
    port = args["jax_model"]
    norms = [layer.input_layernorm for layer in port.model.layers] + [layer.post_attention_layernorm for layer in
                                                                       port.model.layers] + [port.model.norm]  # fmt: skip
    for norm in norms:
        norm.epsilon = 1e-5  # the config says 1e-6
    report = check_port(_activated(args.pop("torch_model")), args.pop("jax_model"), args.pop("batch"), steps=0,
                        dtypes=("float64",), **args)  # fmt: skip
    assert report.verdict() == "differs" and "P05" in report.named(), report.table()
    first = report.first_parting("float64")
    assert first.section == "outputs" and first.torch == "model.layers.0.input_layernorm"
    # below the float32 bound the float64 pass used to judge from the first island on: it passed as explained
    assert first.max_rel < TOLERANCE["float32"].rtol


@pytest.mark.parametrize("name", ["llama", "qwen2"])
@pytest.mark.parametrize("scale", [1.0001, 1.00001])
def test_hidden_states_scaled_by_a_hair_differ_and_are_located_before_the_head(name: str, scale: float) -> None:
    args = case(name)
    port = args["jax_model"]
    model_call = type(port.model).__call__
    port.model.__class__ = type("Scaled", (type(port.model),), {"__call__": lambda s, ids: model_call(s, ids) * scale})
    report = check_port(args.pop("torch_model"), args.pop("jax_model"), args.pop("batch"), steps=0,
                        dtypes=("float64",), **args)  # fmt: skip
    assert report.verdict() == "differs", report.table()
    first = report.first_parting("float64")
    assert (first.section, first.torch) == ("outputs", "model") and first.max_rel < TOLERANCE["float32"].rtol
    assert report.interval()[0] == "model.norm"  # the forward parts after the final norm: the scaling is there
    assert "P05" not in report.named()  # not a norm's epsilon: unexplained, or named by what it is


@pytest.mark.parametrize("name", ["llama", "qwen2"])
def test_adam_for_torchs_adamw_differs_in_the_steps_and_is_named_p19(name: str) -> None:
    report = _check(name, steps=2, jax_optimizer=optax.adam(1e-3))
    assert report.verdict() == "differs" and "P19" in report.named(), report.table()
    first = report.first_parting("float64")
    assert first.section == "steps" and first.step == 1 and first.max_rel < TOLERANCE["float32"].rtol


@pytest.mark.parametrize("name", ["gpt2", "llama", "bert", "vit", "qwen2"])
def test_the_correct_real_ports_match_in_every_pass_bfloat16_included(name: str) -> None:
    report = worked_report(name, "correct", 1, ALL)
    assert report.ok and report.verdict() == "match", report.table()
    assert not report.explained  # every float64 row at the float64 bound: HF's islands widened, none tolerated
    bf16 = [r for r in report.rows if r.dtype == "bfloat16"]
    assert {r.section for r in bf16} == {"outputs", "loss", "grads", "steps", "precision"}
    # each side judged against the float64 truth: the port's error within FACTOR of torch's (or of half an ulp)
    numeric = [r for r in bf16 if r.section in ("outputs", "grads")]
    assert all(r.ok and r.max_abs <= r.bound for r in numeric)
    assert sum(r.reference > 0 for r in numeric) > len(numeric) / 2  # a real error on the reference's side
    assert [r for r in bf16 if r.section == "precision"], "the reference keeps float32 somewhere: a softmax, the loss"
    assert report.factor == FACTOR and report.settings["precision"] == {"torch": "bfloat16", "jax": "bfloat16"}


@pytest.mark.parametrize(
    ("variant", "module", "kinds"),
    [
        ("softmax_bfloat16", "model.layers.0.self_attn", {"exp"}),
        ("rmsnorm_bfloat16", "model.layers.0.input_layernorm", {"rsqrt"}),
        ("log_softmax_bfloat16", "(loss)", {"exp", "log"}),
    ],
)
def test_a_bfloat16_only_bug_differs_in_bfloat16_alone_and_is_located_and_named(variant, module, kinds) -> None:
    report = check_worked("llama", variant, steps=1, dtypes=ALL)
    assert report.verdict() == "differs", report.table()
    assert not report.failed("float64") and not report.failed("float32")  # both wide passes match
    first = report.first_parting("bfloat16")
    assert (first.section, first.torch) == ("precision", module), first
    failed = {r.key.split(": ")[1] for r in report.failed("bfloat16") if r.torch == module}
    assert failed == kinds
    assert "the port computes it in bfloat16" in first.problem and "torch computes" in first.problem
    hint = next(h for h in report.hints if h.pitfall == "precision")
    assert module in hint.where and "error against float64 truth" in hint.evidence or module == "(loss)"


def test_the_bfloat16_pass_judges_a_mixed_policy_on_each_side() -> None:
    """torch.autocast on the reference, the port's own module dtypes (bfloat16 compute, float32 parameters)."""
    args = case("llama")
    for attr, value in vars(args["jax_model"].model.layers[0].self_attn.q_proj).items():
        assert attr != "dtype" or value is None  # built to compute in its parameters' dtype
    report = check_port(args.pop("torch_model"), args.pop("jax_model"), args.pop("batch"), steps=1,
                        dtypes=("float64", "bfloat16"), torch_precision="mixed", jax_precision="mixed", **args)  # fmt: skip
    assert report.ok, report.table()
    assert report.settings["precision"] == {"torch": "mixed", "jax": "mixed"}
    # the port computed in float32 (its modules' dtype): its errors, all told, are well below torch's autocast's
    outputs = [r for r in report.rows if r.dtype == "bfloat16" and r.section == "outputs"]
    assert sum(r.max_abs for r in outputs) < 0.1 * sum(r.reference for r in outputs)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"dtypes": ("bfloat16",)}, "dtypes: expected 'float64' first"),
        ({"dtypes": ("float32", "bfloat16")}, "dtypes: expected 'float64' first"),
        ({"dtypes": ("float64", "bfloat16"), "torch_precision": "fp8"}, "torch_precision: expected one of"),
        ({"dtypes": ("float64", "bfloat16"), "jax_precision": None}, "jax_precision: expected one of"),
    ],
)
def test_bad_precision_input_is_refused_by_name(kwargs, message) -> None:
    with pytest.raises(PortInputError, match=message):
        _check("cnn", **kwargs)


def test_a_torch_op_without_a_bfloat16_kernel_is_refused_naming_it() -> None:
    args = case("cnn")

    def loss(model, batch):  # torch.cdist has no bfloat16 kernel on a CPU
        out = model(batch["image"])
        return args["torch_loss"](model, batch) + 0 * torch.cdist(out, out).sum()

    with pytest.raises(PortInputError, match=r"bfloat16 pass \(torch_precision='bfloat16'.*cdist.*BFloat16"):
        check_port(args.pop("torch_model"), args.pop("jax_model"), args.pop("batch"), steps=0,
                   dtypes=("float64", "bfloat16"), torch_loss=loss, jax_loss=args["jax_loss"])  # fmt: skip


def test_the_cli_runs_the_bfloat16_pass_with_the_files_policies(tmp_path, capsys) -> None:
    from detach_parity.shared.apps.cli import main

    port = tmp_path / "port.py"
    port.write_text(
        "from detach_parity.shared.apps.check.ports import case\n"
        "globals().update(case('cnn'))\n"
        "torch_precision, jax_precision = 'mixed', 'bfloat16'\n"
    )
    out = tmp_path / "r.json"
    code = main(["check", str(port), "--bf16", "--steps", "1", "--json", str(out)])
    text = capsys.readouterr().out
    import json

    report = json.loads(out.read_text())
    assert report["settings"]["dtypes"] == list(ALL) and report["factor"] == FACTOR
    assert report["settings"]["precision"] == {"torch": "mixed", "jax": "bfloat16"}
    assert "bfloat16: each side against the float64 truth (torch mixed, the port bfloat16)" in text
    assert code == (0 if report["ok"] else 1) and {s["dtype"] for s in report["summary"]} == set(ALL)
    port.write_text(port.read_text().replace("'mixed'", "'float16'"))
    assert main(["check", str(port), "--bf16", "--steps", "0"]) == 2
    assert "torch_precision: expected one of ['bfloat16', 'mixed'], got 'float16'" in capsys.readouterr().err
