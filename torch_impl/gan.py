"""gan: one discriminator step and one generator step of a tiny GAN.

Gradient flow: D step: L_D -> D's parameters, and -/-> G through fake.detach()
(without the detach, backward also writes G's .grad); G step: L_G -> D(fake) ->
through D (D's .grad is written but only g_opt steps) -> G.
Port note: a detach is needed here only because backward() walks the whole graph;
jax.grad differentiates what argnums names, so the JAX stop_gradient matters only
when the D-step gradient is taken with respect to the generator too. Adam betas
(0.5, 0.999) and eps 1e-8 are the same in torch.optim.Adam and optax.adam.
Shapes: B samples, Z noise, X data, H hidden units, O = 1 logit.
Reference: Goodfellow et al. 2014, arXiv:1406.2661.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from ..shared.core.checks import check_same_shape, check_values, check_variant
from ._common import StepCall, field, numpy, scenario_run, scenario_step, step_of
from ._layout import grads_of, load_params, params_of

__all__ = [
    "MLP",
    "GAN",
    "build_model",
    "make_optimizers",
    "bce_with_logits",
    "discriminator_loss",
    "generator_loss",
    "discriminator_step",
    "generator_step",
    "step_calls",
    "make_step",
    "run",
]


class MLP(nn.Module):
    """y [B, out] = l2(tanh(l1(x [B, in])))."""

    def __init__(self, d_in: int, h: int, d_out: int, dtype: torch.dtype) -> None:
        super().__init__()
        self.l1 = nn.Linear(d_in, h, dtype=dtype)
        self.l2 = nn.Linear(h, d_out, dtype=dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.l2(torch.tanh(self.l1(x)))


class GAN(nn.Module):
    """gen: z [B, Z] -> sample [B, X]; disc: x [B, X] -> logit [B, O]."""

    def __init__(self, z: int, x: int, h: int, o: int, dtype: torch.dtype) -> None:
        super().__init__()
        self.gen = MLP(z, h, x, dtype)
        self.disc = MLP(x, h, o, dtype)


def build_model(fx) -> GAN:
    """A GAN loaded with the fixture's canonical parameters."""
    params = fx.under("params")
    dims = fx.dims
    return load_params(GAN(dims["Z"], dims["X"], dims["H"], dims["O"], getattr(torch, fx.dtype)), params)


def make_optimizers(model: GAN, fx) -> tuple[torch.optim.Adam, torch.optim.Adam]:
    """(d_opt, g_opt): Adam(lr, betas=(b1, b2), eps) over the discriminator and over the generator."""
    kwargs = {"lr": fx.scalar("lr"), "betas": (fx.scalar("b1"), fx.scalar("b2")), "eps": fx.scalar("eps")}
    d_opt = torch.optim.Adam(model.disc.parameters(), **kwargs)  # GRAD-FLOW: the discriminator step updates only D
    g_opt = torch.optim.Adam(model.gen.parameters(), **kwargs)  # GRAD-FLOW: the generator step updates only G
    return d_opt, g_opt


def bce_with_logits(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Mean binary cross-entropy of logits [B, O] against labels [B, O] in [0, 1].

    Raises ValueError on a shape mismatch or a label outside [0, 1].
    """
    check_same_shape("bce_with_logits", logits=logits.shape, labels=labels.shape)
    check_values("bce_with_logits", "labels", labels, low=0.0, high=1.0)
    return F.binary_cross_entropy_with_logits(logits, labels)


def discriminator_loss(gen: MLP, disc: MLP, real: torch.Tensor, z: torch.Tensor, variant: str) -> torch.Tensor:
    """L_D = bce(D(real [B, X]), 1) + bce(D(G(z [B, Z])), 0); the generated batch is detached in "fake_stopped"."""
    check_variant("gan", variant)
    fake = gen(z)  # [B, X]
    if variant == "fake_stopped":
        fake = fake.detach()  # GRAD-FLOW: the discriminator step treats generated samples as data
    real_logits, fake_logits = disc(real), disc(fake)  # [B, O] each
    return bce_with_logits(real_logits, torch.ones_like(real_logits)) + bce_with_logits(
        fake_logits, torch.zeros_like(fake_logits)
    )


def generator_loss(gen: MLP, disc: MLP, z: torch.Tensor) -> torch.Tensor:
    """Non-saturating L_G = bce(D(G(z)), 1) = mean(-log σ(D(G(z)))); the gradient flows through D into G."""
    fake_logits = disc(gen(z))  # [B, O]
    return bce_with_logits(fake_logits, torch.ones_like(fake_logits))


def discriminator_step(model: GAN, d_opt: torch.optim.Adam, real: torch.Tensor, z: torch.Tensor, variant: str):
    """One Adam step on D; returns (L_D before the step, canonical .grad of every parameter, None as zeros)."""
    check_variant("gan", variant)
    model.zero_grad(set_to_none=True)  # fresh gradients, as jax.grad returns
    loss = discriminator_loss(model.gen, model.disc, real, z, variant)
    loss.backward()
    grads = grads_of(model)
    d_opt.step()
    return loss, grads


def generator_step(model: GAN, g_opt: torch.optim.Adam, z: torch.Tensor):
    """One Adam step on G; returns (L_G before the step, canonical .grad of every parameter)."""
    model.zero_grad(set_to_none=True)  # without this, a leaked D-step gradient would join G's update
    loss = generator_loss(model.gen, model.disc, z)
    loss.backward()
    grads = grads_of(model)
    g_opt.step()
    return loss, grads


def step_calls(fx, variant: str) -> list[StepCall]:
    """make_step's calls: one discriminator_step, then one generator_step, of a model built from the fixture."""
    model = build_model(fx)
    d_opt, g_opt = make_optimizers(model, fx)
    real, z = field(fx, "real"), field(fx, "z")
    return [
        StepCall(discriminator_step, (model, d_opt), (real, z), {"variant": variant}),
        StepCall(generator_step, (model, g_opt), (z,)),
    ]


@scenario_step("gan")
def make_step(fx, variant: str) -> Callable[[], torch.Tensor]:
    """One discriminator_step then one generator_step (Adam each); returns L_D + L_G, each before its update."""
    return step_of(step_calls(fx, variant))


@scenario_run("gan")
def run(fx, variant: str) -> dict[str, np.ndarray]:
    """Outputs per step s in {d_step, g_step}: s/loss [], s/grads/<param>, s/params/<param> after the step,
    s/moved/<param> = after - before."""
    model = build_model(fx)
    d_opt, g_opt = make_optimizers(model, fx)
    real, z = field(fx, "real"), field(fx, "z")
    start = params_of(model)
    d_loss, d_grads = discriminator_step(model, d_opt, real, z, variant)
    mid = params_of(model)
    g_loss, g_grads = generator_step(model, g_opt, z)
    end = params_of(model)
    return {**_outputs("d_step", d_loss, d_grads, start, mid), **_outputs("g_step", g_loss, g_grads, mid, end)}


def _outputs(step, loss, grads, before, after):
    out = {f"{step}/loss": numpy(loss)}
    out.update({f"{step}/grads/{k}": g for k, g in grads.items()})
    out.update({f"{step}/params/{k}": v for k, v in after.items()})
    out.update({f"{step}/moved/{k}": after[k] - before[k] for k in after})
    return out
