"""checkpointing: torch.utils.checkpoint around a residual block on top of a frozen embedding.

Gradient flow: loss -> head and block (the embedding is frozen: requires_grad=False); the
checkpointed block keeps only its input for backward and recomputes the rest. With
use_reentrant=True and no input requiring grad, the block's output has no graph: the block
gets no gradient (reentrant_frozen_input; torch warns once per call).
Port note: checkpoint(block, h, use_reentrant=False) becomes nnx.remat(f)(block, h) (or
jax.checkpoint of a pure function, with a policy from jax.checkpoint_policies): the same
gradients, and JAX has no reentrant mode, so the reentrant trap has no JAX twin.
Shapes: B tokens, V vocabulary, E embedding width, H hidden units.
Reference: Chen et al. 2016, arXiv:1604.06174; PyTorch docs, torch.utils.checkpoint (use_reentrant).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from ..shared.core.checks import check_same_shape, check_variant
from ._common import StepCall, field, numpy, scenario_run, scenario_step, step_of
from ._layout import grads_of, load_params

__all__ = [
    "Block",
    "Model",
    "build_model",
    "mse",
    "saved_activation_bytes",
    "loss_and_grads",
    "train_step",
    "step_calls",
    "make_step",
    "run",
]


class _Embed(nn.Module):
    """tokens [B] -> rows of embedding [V, E]: nnx.Embed's twin (leaf name `embedding`, no layout change)."""

    def __init__(self, v: int, e: int, dtype: torch.dtype) -> None:
        super().__init__()
        self.embedding = nn.Parameter(torch.zeros(v, e, dtype=dtype))

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return F.embedding(tokens, self.embedding)


class Block(nn.Module):
    """l2(tanh(l1(h [B, E]))) [B, E]."""

    def __init__(self, e: int, h: int, dtype: torch.dtype) -> None:
        super().__init__()
        self.l1 = nn.Linear(e, h, dtype=dtype)
        self.l2 = nn.Linear(h, e, dtype=dtype)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return self.l2(torch.tanh(self.l1(h)))


class Model(nn.Module):
    """pred [B] = head(h + block(h))[:, 0], h = embed(tokens [B]); the block checkpointed per variant."""

    def __init__(self, v: int, e: int, h: int, dtype: torch.dtype) -> None:
        super().__init__()
        self.embed = _Embed(v, e, dtype)
        self.block = Block(e, h, dtype)
        self.head = nn.Linear(e, 1, dtype=dtype)

    def forward(self, tokens: torch.Tensor, variant: str) -> torch.Tensor:
        check_variant("checkpointing", variant)
        h = self.embed(tokens)
        if variant == "no_checkpoint":
            return self.head(h + self.block(h)).squeeze(-1)
        reentrant = variant == "reentrant_frozen_input"
        # GRAD-FLOW: the block's activations are recomputed in backward
        out = checkpoint(self.block, h, use_reentrant=reentrant)
        return self.head(h + out).squeeze(-1)


def build_model(fx) -> Model:
    """A Model loaded with the fixture's canonical parameters, the embedding [V, E] frozen (no layout change)."""
    params = {k: v for k, v in fx.under("params").items() if not k.startswith("embed/")}
    model = load_params(Model(fx.dims["V"], fx.dims["E"], fx.dims["H"], getattr(torch, fx.dtype)), params)
    table = field(fx, "params/embed/embedding")
    # GRAD-FLOW: frozen: no input of the block requires grad
    model.embed.embedding = nn.Parameter(table, requires_grad=False)
    return model


def mse(pred: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """mean((pred − y)²) of pred [B], y [B]. Raises ValueError unless the shapes agree."""
    check_same_shape("mse", pred=pred.shape, y=y.shape)
    return torch.mean((pred - y) ** 2)


def saved_activation_bytes(fx, variant: str) -> int:
    """Bytes of the tensors the forward saves for backward (saved_tensors_hooks; parameter views included).

    What checkpointing trades for recomputation: the block's internals are not kept. For the bench.
    """
    check_variant("checkpointing", variant)
    model = build_model(fx)
    saved: list[torch.Tensor] = []

    def pack(t: torch.Tensor) -> torch.Tensor:
        saved.append(t)
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        mse(model(field(fx, "tokens"), variant), field(fx, "y"))
    return int(sum(t.numel() * t.element_size() for t in saved))


def loss_and_grads(model: Model, tokens: torch.Tensor, y: torch.Tensor, variant: str):
    """(loss [], canonical gradients: a frozen or cut-off parameter zeros) of one backward through the block."""
    model.zero_grad(set_to_none=True)
    loss = mse(model(tokens, variant), y)
    loss.backward()
    table = model.embed.embedding
    return loss, {"embed/embedding": torch.zeros_like(table) if table.grad is None else table.grad, **grads_of(model)}


def train_step(
    model: Model, optimizer: torch.optim.Optimizer, tokens: torch.Tensor, y: torch.Tensor, variant: str
) -> torch.Tensor:
    """One SGD step of head and block; returns the loss before the step."""
    optimizer.zero_grad(set_to_none=True)
    loss = mse(model(tokens, variant), y)
    loss.backward()
    optimizer.step()
    return loss


def step_calls(fx, variant: str) -> list[StepCall]:
    """make_step's calls: one SGD train_step of a model built from the fixture (the loss)."""
    model = build_model(fx)
    optimizer = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=fx.scalar("lr"))
    tokens, y = field(fx, "tokens"), field(fx, "y")
    return [StepCall(train_step, (model, optimizer), (tokens, y), {"variant": variant}, loss=())]


@scenario_step("checkpointing")
def make_step(fx, variant: str) -> Callable[[], torch.Tensor]:
    """One SGD step of head and block through the (checkpointed) block; returns the loss before the update."""
    return step_of(step_calls(fx, variant))


@scenario_run("checkpointing")
def run(fx, variant: str) -> dict[str, np.ndarray]:
    """Outputs: loss []; grads/{embed,block,head}/<param> (a frozen or cut-off parameter: zeros)."""
    model = build_model(fx)
    loss, grads = loss_and_grads(model, field(fx, "tokens"), field(fx, "y"), variant)
    out = {"loss": numpy(loss)}
    out.update({f"grads/{k}": g for k, g in grads.items()})  # .grad None -> zeros (P11)
    return out
