"""Every module of torch_impl/ has its twin in jax_impl/: the same public names in the same order,
the same GRAD-FLOW tags, docstrings on every public name. The exceptions are listed once, here,
each with its reason; an exception that no longer applies fails too, so the list cannot rot.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from detach_parity.shared.core.registry import SCENARIOS
from detach_parity.shared.core.runner import source_path

ROOT = Path(__file__).resolve().parents[1]
TAG = re.compile(r"#\s*GRAD-FLOW:\s*(.+)$")

# modules with no twin: path -> reason
ONE_SIDED = {
    "torch_impl/_layout.py": "Flax kernels are the canonical layout [in, out]: only torch converts (the one rule table)",
    "torch_impl/backend/transformer_knobs.py": "replays change the torch reference only: a port is never run with "
    "another attention, rotary or gated-MLP convention (jax_impl's knobs change precision)",
    "torch_impl/backend/recurrent_knobs.py": "replays change the torch reference only: a port is never run with "
    "another GRU bias or LSTM gate convention",
    "torch_impl/backend/layer_knobs.py": "replays change the torch reference only: a port is never run with "
    "another convolution padding or cross-entropy mean",
    "torch_impl/backend/layout_knobs.py": "replays change the torch reference only: a port is never run with "
    "another arrangement of a rule's leaf",
    "jax_impl/backend/norm_rule.py": "torch knows a norm by what it is in its one rule table (torch_impl/_layout.py, "
    "norm_like); an NNX norm's leaves are renamed by a rule of their own",
    "torch_impl/_weight_norm.py": "torch reparametrises a weight in the module (weight norm's g and v); an NNX port "
    "holds g and v as its own leaves, in the canonical layout",
    "jax_impl/backend/programs.py": "torch runs a check eagerly, operation by operation: only JAX compiles programs, "
    "which a second check of the same model reuses",
    "torch_impl/backend/port_input.py": "torch models arrive compiled (torch.compile's wrapper), parametrised or "
    "with a subclass's own leaves; an NNX module is read as it is (jax_impl/backend/port.py checks it)",
}
# public names one side has and the other does not: (module, framework, name) -> reason
ONE_SIDED_NAMES = {
    (
        "_common",
        "torch",
        "grads_or_zeros",
    ): "torch.autograd.grad reports no path as None or raises; jax.grad gives zeros",
    ("_common", "jax", "flat"): "nested dicts and nnx.State need flattening; torch modules name their leaves flat",
    ("_common", "jax", "nested"): "models written as plain functions take a nested pytree; torch modules hold theirs",
    ("_common", "jax", "load_params"): "torch's twin is in torch_impl/_layout.py, next to the layout rule table",
    ("_common", "jax", "params_of"): "torch's twin is in torch_impl/_layout.py, next to the layout rule table",
    ("_common", "jax", "grads_of"): "torch's twin is in torch_impl/_layout.py, next to the layout rule table",
    (
        "backend.layout",
        "torch",
        "named_leaves",
    ): "a torch model is walked by the table; NNX modules by nnx.iter_modules",
    ("backend.layout", "torch", "owned"): "a torch module with a rule owns its subtree; NNX modules go by type",
    (
        "backend.layout",
        "torch",
        "activation_of",
    ): "torch activations are modules with a variant (nn.GELU(approximate=), HF's gelu_new); NNX ports call functions",
    (
        "_common",
        "jax",
        "transformation",
    ): "nnx.jit keys its compile cache on an optax transformation; a torch optimizer is built from its parameters",
    ("backend.precision", "torch", "rebuild_buffers"): "a torch model holds tables it derived when built (HF's rotary "
    "inv_freq, in float32); a JAX port computes them in its forward, which widening covers",
    (
        "backend.precision",
        "torch",
        "narrow_buffers",
    ): "the tables rebuild_buffers could not rebuild (torch only, as it)",
}
# the submodules of a transformers model: the torch side imports the model's class, not its parts
_HF = "a submodule of the transformers model the torch side imports whole (its class is the library's)"
# a worked port is two halves of one example, not twins: the torch reference (its sizes, its batch)
# and its NNX port, whose porting bugs are variants of the port and need their own helpers
for _port, _own in (
    (
        "cnn",
        {
            "TorchBatchNorm": "torch's BatchNorm statistics, written in NNX for a variant",
            "load_torch": "the loader of the variant whose layout differs",
        },
    ),
    ("gru", {"TorchGRUCell": "torch's GRU cell (b_hn inside r ⊙ ·) in NNX: what a correct port needs"}),
    ("transformer", {"attention": "the port's attention core, shared by its variants"}),
    (
        "llama",
        {
            "rotary": "HF's rotary embedding is a module of the model; the port computes it where it is used",
            "BareRMSNorm": "the rmsnorm_bfloat16 variant's norm, its statistics in the input's dtype",
            **{c: _HF for c in ("LlamaAttention", "LlamaMLP", "LlamaDecoderLayer", "LlamaModel")},
        },
    ),
    ("bert", {c: _HF for c in ("BertEmbeddings", "BertSelfAttention", "BertLayer", "BertModel")}),
    ("vit", {c: _HF for c in ("ViTEmbeddings", "ViTAttention", "ViTLayer", "ViTModel")}),
    ("gpt2", {c: _HF for c in ("GPT2Attention", "GPT2MLP", "GPT2Block", "GPT2Model")}),
    ("qwen2", {}),  # Llama's port with biases: its modules are jax_impl/backend/ports/llama.py's
):
    ONE_SIDED_NAMES[(f"backend.ports.{_port}", "torch", "SIZES")] = "the reference's sizes: the port is built from them"
    ONE_SIDED_NAMES[(f"backend.ports.{_port}", "torch", "batch")] = (
        "the batch is the reference's: both models run on it"
    )
    ONE_SIDED_NAMES[(f"backend.ports.{_port}", "jax", "VARIANTS")] = "the porting bugs are variants of the port"
    for _name, _why in _own.items():
        ONE_SIDED_NAMES[(f"backend.ports.{_port}", "jax", _name)] = _why

# pairs whose GRAD-FLOW tags may differ: module -> reason (scenario pairs never: their tags are the lesson)
TAGS_DIFFER = {
    "backend.ports.gru": "the port's variant embed_stop_gradient is the bug: a stop_gradient where torch freezes the table",
    "backend.bench": "torch's grad modes (no_grad, inference_mode) are measured on the torch side only",
    "backend.claims.aliasing": "torch's in-place aliases, clone and grad mode (C01, C20, C21) have no JAX counterpart; JAX's .at[].set copy (C21) none in torch",
    "backend.claims.freezing": "torch's requires_grad_(False), detach_() and no_grad (C05, C06, C07, C16) have no JAX flag or mode; JAX freezes C07 by a zero gradient",
    "backend.claims.losses": "torch's no_grad / detach for acting (C17) has no JAX counterpart (nothing is recorded outside jax.grad)",
    "backend.claims.modes": "torch's inference_mode and no_grad (C09, C19) have no JAX counterpart (no grad mode)",
    "backend.claims.recurrence": "torch's backward per chunk (C11) has no JAX counterpart (one jax.grad over the scan)",
}


def _facts(path: Path) -> dict:
    src = path.read_text(encoding="utf-8")
    tree = ast.parse(src)
    all_names: list[str] = []
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "__all__" for t in node.targets):
            all_names = [e.value for e in node.value.elts]  # type: ignore[attr-defined]
    defs = [n for n in tree.body if isinstance(n, ast.FunctionDef | ast.ClassDef)]
    return {
        "all": all_names,
        "defined": [n.name for n in defs],
        "docs": {n.name: ast.get_docstring(n) for n in defs},
        "tags": sorted(m.group(1).strip() for line in src.splitlines() if (m := TAG.search(line))),
        "doc": ast.get_docstring(tree) or "",
    }


def _modules(framework: str) -> set[str]:
    """Every module of a framework's folder, lessons and backend alike, dotted ("dqn_target", "backend.port")."""
    base = ROOT / f"{framework}_impl"
    return {
        ".".join(p.relative_to(base).with_suffix("").parts)
        for p in base.rglob("*.py")
        if "__pycache__" not in p.parts and p.name != "__init__.py"
    }


def _file(framework: str, module: str) -> str:
    return f"{framework}_impl/{module.replace('.', '/')}.py"


def _pairs() -> list[str]:
    return sorted(_modules("torch") & _modules("jax"))


def test_every_module_has_its_twin_or_a_stated_reason() -> None:
    unpaired = {
        _file(fw, m) for fw, other in (("torch", "jax"), ("jax", "torch")) for m in _modules(fw) - _modules(other)
    }
    assert unpaired == set(ONE_SIDED), (
        f"modules without a twin: {sorted(unpaired - set(ONE_SIDED))}; listed but paired: {sorted(set(ONE_SIDED) - unpaired)}"
    )
    assert set(SCENARIOS) <= set(_pairs()), f"scenarios without a pair: {sorted(set(SCENARIOS) - set(_pairs()))}"


def test_one_sided_names_are_still_one_sided() -> None:
    for (module, framework, name), reason in ONE_SIDED_NAMES.items():
        other = "jax" if framework == "torch" else "torch"
        facts = {fw: _facts(ROOT / _file(fw, module)) for fw in ("torch", "jax")}
        assert name in facts[framework]["all"] and name not in facts[other]["all"], f"{module}.{name}: {reason}"


@pytest.mark.parametrize("module", _pairs())
def test_pair_mirrors(module: str) -> None:
    t, j = (_facts(source_path(fw, module)) for fw in ("torch", "jax"))
    allowed = {fw: {n for (m, f, n) in ONE_SIDED_NAMES if m == module and f == fw} for fw in ("torch", "jax")}
    t_all = [n for n in t["all"] if n not in allowed["torch"]]
    j_all = [n for n in j["all"] if n not in allowed["jax"]]
    assert t["all"] and t_all == j_all, f"{module}: __all__ differs: torch {t['all']} vs jax {j['all']}"
    for side, facts in (("torch", t), ("jax", j)):
        order = [d for d in facts["defined"] if d in facts["all"]]  # functions and classes (constants are not defs)
        assert order == [n for n in facts["all"] if n in facts["defined"]], (
            f"{_file(side, module)}: public names must be defined in __all__ order"
        )
        missing = [n for n in facts["all"] if n in facts["defined"] and not facts["docs"].get(n)]
        assert not missing, f"{_file(side, module)}: docstring missing on {missing}"
        assert facts["doc"], f"{_file(side, module)}: module docstring missing"
    # same tags with the same reasons on both sides (order may differ where an idiom moves a line)
    if module in TAGS_DIFFER:
        assert module not in SCENARIOS and t["tags"] != j["tags"], f"{module}: {TAGS_DIFFER[module]} (no longer true?)"
    else:
        assert t["tags"] == j["tags"], f"{module}: GRAD-FLOW tags differ:\ntorch {t['tags']}\njax   {j['tags']}"


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_scenario_pair_has_run_port_note_tags_and_its_step(name: str) -> None:
    spec = SCENARIOS[name]
    for fw in ("torch", "jax"):
        facts = _facts(source_path(fw, name))
        assert "run" in facts["all"], f"{fw}_impl/{name}.py: no run"
        assert "Port note" in facts["doc"], f"{fw}_impl/{name}.py: the module docstring needs a Port note"
        assert facts["tags"], f"{fw}_impl/{name}.py: no GRAD-FLOW tag"
        assert ("make_step" in facts["all"]) == spec.has_step, (
            f"{fw}_impl/{name}.py: make_step {'missing' if spec.has_step else 'present'}, "
            f"but the record's step_loss is {'set' if spec.has_step else 'None'}"
        )
        # a step's calls are public (the bench tunes them), or the lesson says why it has none
        surface = {"step_calls", "NO_STEP_CALLS"} & set(facts["all"])
        assert len(surface) == spec.has_step, (
            f"{fw}_impl/{name}.py: expected one of step_calls / NO_STEP_CALLS with a step, neither without, got {sorted(surface)}"
        )
