"""The worked ports: realistic torch models (torch_impl/backend/ports/) and their NNX ports (jax_impl/backend/ports/).

Each of WORKED has a correct port, which must match to 1e-10 relative in float64, and buggy ports
with one catalogue bug each (the JAX module's VARIANTS: variant -> pitfall id), whose report must
name that bug. Each of REAL is a model of the transformers library, unmodified, from a tiny config
with random init (transformers is a test dependency, imported only when one of them is used): its
correct port matches in every pass, bfloat16 included (Llama and Qwen2 keep HF's float32 casts, which
the float64 pass widens on both sides); its buggy ports are bugs of real ports, "" in VARIANTS where no
catalogue pitfall names them, "precision" where only the bfloat16 pass sees them, and must be reported
as differing. `case` turns one into check_port's arguments;
`check_worked` runs it.
"""

from __future__ import annotations

from ..backends import backend
from . import catalogue
from .checker import check_port
from .match import PortInputError
from .report import PortReport

__all__ = ["WORKED", "REAL", "variants", "steps_for", "case", "check_worked", "parse"]

WORKED = ("cnn", "gru", "transformer")
# transformers' models: LlamaForCausalLM (grouped-query attention), BertForMaskedLM, ViTForImageClassification,
# GPT2LMHeadModel (HF's Conv1D), Qwen2ForCausalLM (an island family: q / k / v biases)
REAL = ("llama", "bert", "vit", "gpt2", "qwen2")


def _known(name: str) -> None:
    if name not in WORKED + REAL:
        raise PortInputError(f"worked port: expected one of {list(WORKED + REAL)}, got {name!r}")


def _modules(name: str):
    _known(name)
    return backend("torch").port.worked_port(name), backend("jax").port.worked_port(name)


def variants(name: str) -> dict[str, str | None]:
    """The JAX ports of a worked model: variant -> the pitfall id its bug is (None: the correct port; "": a bug
    no catalogue pitfall names). Reads the JAX side only: listing a real model's ports (pytest collects them)
    does not import transformers, which only its torch side needs."""
    _known(name)
    return dict(backend("jax").port.worked_port(name).VARIANTS)


def steps_for(name: str, variant: str) -> int:
    """Optimizer steps a worked port's check needs: 2 where its pitfall's bug shows only in the steps
    (the catalogue record's in_steps: running statistics, weight decay on a frozen leaf), else 0."""
    pitfall = variants(name)[variant]
    return 2 if pitfall and catalogue.get(pitfall).in_steps else 0


def parse(text: str) -> tuple[str, str]:
    """`cnn` or `cnn:bn_momentum` -> (name, variant); PortInputError naming the valid ones."""
    name, colon, variant = text.partition(":")
    known = variants(name)
    if colon and not variant:
        raise PortInputError(f"worked port {name}: variant expected one of {list(known)} after ':', got nothing")
    variant = variant or "correct"
    if variant not in known:
        raise PortInputError(f"worked port {name}: variant expected one of {list(known)}, got {variant!r}")
    return name, variant


def case(name: str, variant: str = "correct", size: str = "small", seed: int = 0) -> dict:
    """check_port's arguments for a worked port: models, batch, losses, optimizers (or steps), transfer.

    A variant whose bug is in the user's own loader (the JAX module's `load_torch`) is checked
    with transfer=False after that loader ran.
    """
    T, J = _modules(name)
    if size not in T.SIZES:
        raise PortInputError(f"worked port {name}: size expected one of {list(T.SIZES)}, got {size!r}")
    if variant not in J.VARIANTS:
        raise PortInputError(f"worked port {name}: variant expected one of {list(J.VARIANTS)}, got {variant!r}")
    torch_model, sizes = T.build(size, seed), T.SIZES[size]
    jax_model = J.build(variant, **sizes)
    transfer = not variant.endswith("_layout")
    if not transfer:
        J.load_torch(jax_model, backend("torch").port.native(torch_model), variant)
    return {
        "torch_model": torch_model,
        "jax_model": jax_model,
        "batch": T.batch(size, seed),
        "torch_loss": T.loss,
        "jax_loss": J.loss,
        "torch_optimizer": T.optimizer,
        "jax_optimizer": J.optimizer(variant),
        "transfer": transfer,
    }


def check_worked(
    name: str,
    variant: str = "correct",
    size: str = "small",
    steps: int = 5,
    progress=None,
    dtypes=("float64", "float32"),
) -> PortReport:
    """check_port on a worked port (see case)."""
    args = case(name, variant, size)
    model_t, model_j, batch = args.pop("torch_model"), args.pop("jax_model"), args.pop("batch")
    return check_port(model_t, model_j, batch, steps=steps, progress=progress, dtypes=dtypes, **args)
