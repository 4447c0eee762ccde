"""checkpointing: activation checkpointing changes memory, not gradients, except torch's reentrant form.

Shapes: B tokens, V vocabulary, E embedding width, H hidden units of the block.
  h0 = E[tokens] [B, E]   (a frozen embedding: nothing below the block requires grad)
  h1 = h0 + l2(tanh(l1(h0)))   (the block; checkpointed: its activations are recomputed in backward)
  pred = head(h1)[:, 0] [B], loss = mean((pred − y)²); one SGD step is the pair's make_step.
checkpoint (torch use_reentrant=False ↔ nnx.remat) and no_checkpoint give the same gradients.
reentrant_frozen_input: torch's use_reentrant=True checkpoint returns an output that requires grad
only if one of its *inputs* does; h0 comes from a frozen embedding, so the block's parameters get
no gradient at all (torch warns "None of the inputs have requires_grad=True"). JAX has no such
mode: nnx.remat still gives the true gradient. For this variant the oracle is what torch computes
(zeros for the block) and the naive oracle what JAX computes (the true gradient): the two
frameworks differ there by design of torch's reentrant autograd.Function.
"""

from __future__ import annotations

import numpy as np

from ..core.oracle import fd_grad
from ..core.records import Porting, Scenario
from ..core.schema import Field

PARAMS = {
    "embed/embedding": ("V", "E"),
    "block/l1/kernel": ("E", "H"),
    "block/l1/bias": ("H",),
    "block/l2/kernel": ("H", "E"),
    "block/l2/bias": ("E",),
    "head/kernel": ("E", 1),
    "head/bias": (1,),
}
TRAINABLE = tuple(k for k in PARAMS if not k.startswith("embed/"))

SCHEMA = {
    "tokens": Field(("B",), kind="int", low=0, high="V", doc="token ids, in [0, V)"),
    "y": Field(("B",), doc="regression targets"),
    **{
        f"params/{k}": Field(shape, doc="parameter, canonical layout (the embedding is frozen)")
        for k, shape in PARAMS.items()
    },
    "lr": Field((), low=0.0, low_open=True, doc="SGD learning rate of make_step"),
}


def forward(p: dict[str, np.ndarray], tokens: np.ndarray) -> np.ndarray:
    """pred [B]."""
    h = p["embed/embedding"][tokens]
    h = h + np.tanh(h @ p["block/l1/kernel"] + p["block/l1/bias"]) @ p["block/l2/kernel"] + p["block/l2/bias"]
    return (h @ p["head/kernel"] + p["head/bias"])[:, 0]


def build(rng: np.random.Generator, case: str) -> dict[str, np.ndarray]:
    sizes = {"B": int(rng.integers(3, 6)), "V": int(rng.integers(3, 6)), "E": int(rng.integers(2, 4))}
    sizes["H"] = int(rng.integers(3, 6))
    out = {
        "tokens": rng.integers(0, sizes["V"], size=sizes["B"]),
        "y": rng.normal(size=sizes["B"]),
        "lr": np.array(0.1),
    }
    for key, shape in PARAMS.items():
        out[f"params/{key}"] = 0.7 * rng.normal(size=tuple(sizes.get(d, d) for d in shape))
    return out


def _outputs(fx, block_trained: bool) -> dict[str, np.ndarray]:
    a = fx.float64()
    p = {k: a[f"params/{k}"] for k in PARAMS}

    def loss(q):
        return float(np.mean((forward(q, a["tokens"]) - a["y"]) ** 2))

    wrt = [k for k in TRAINABLE if block_trained or not k.startswith("block/")]
    grads = fd_grad(loss, p, wrt=wrt)
    out = {"loss": np.array(loss(p))}
    out.update({f"grads/{k}": grads.get(k, np.zeros_like(v)) for k, v in p.items()})  # frozen / cut: no gradient
    return out


def oracle(fx, variant: str) -> dict[str, np.ndarray]:
    return _outputs(fx, block_trained=variant != "reentrant_frozen_input")


def naive_oracle(fx, variant: str) -> dict[str, np.ndarray]:
    """What JAX computes for the reentrant variant: nnx.remat's true gradient (JAX has no reentrant mode)."""
    return _outputs(fx, block_trained=True)


def _pattern(block: str | None) -> tuple[tuple[str, str], ...]:
    rules = [("grads/embed/*", "zero"), ("grads/head/*", "nonzero")]  # frozen below, trained above
    return tuple(rules + ([("grads/block/*", block)] if block else []))


SPEC = Scenario(
    name="checkpointing",
    title="Activation checkpointing: torch.utils.checkpoint (reentrant or not) ↔ nnx.remat / jax.checkpoint",
    family="advanced",
    order=16,
    step_loss=lambda o, a: o["loss"],
    step_updates=True,
    claims=(),
    source="Chen et al. 2016, arXiv:1604.06174; PyTorch docs torch.utils.checkpoint; JAX docs jax.checkpoint",
    lesson=(
        "Checkpointing recomputes a block's activations in backward: less memory, the same gradients, in both "
        "frameworks. torch's reentrant checkpoint (use_reentrant=True) is the exception: when no input of the "
        "block requires grad (a frozen embedding below it) the block's parameters get no gradient at all. "
        "use_reentrant=False, nnx.remat and jax.checkpoint have no such trap."
    ),
    variants=("checkpoint", "no_checkpoint", "reentrant_frozen_input"),
    schema=SCHEMA,
    build=build,
    oracle=oracle,
    naive_oracle=naive_oracle,
    pattern={
        "checkpoint": _pattern("nonzero"),
        "no_checkpoint": _pattern("nonzero"),
        "reentrant_frozen_input": _pattern(None),  # torch: zeros; JAX: the true gradient (diverges)
    },
    diverges={"reentrant_frozen_input": ("grads/block/*",)},
    porting=Porting(
        torch="`torch.utils.checkpoint.checkpoint(block, h, use_reentrant=False)`",
        jax="`nnx.remat(lambda block, h: block(h))(self.block, h)` (or `jax.checkpoint` of a pure function)",
        trap=(
            "`use_reentrant=True` (the old default) gives the block no gradient when no input requires grad: a "
            "frozen embedding below it silently freezes the block too (one warning). JAX has no reentrant mode, "
            "so a port fixes a bug it cannot reproduce. Checkpointing never changes the values in either."
        ),
    ),
)
