"""per_example_grads: per-example gradients with torch.func, and DP-SGD's per-example clipping plus noise.

Gradient flow: vmap(grad(ℓ_i)) gives g_i [B, ...] for every parameter, one per example (their
mean is the batch gradient); DP-SGD scales each g_i to norm ≤ C, sums, adds σ·C·z, divides by B.
Port note: torch.func.vmap(torch.func.grad(f), in_dims=(None, 0, 0)) with
torch.func.functional_call(model, params, (x,)) is jax.vmap(jax.grad(f), in_axes=(None, 0, 0))
over nnx.split's state; the clipped sum is optax.per_example_global_norm_clip. torch.func.grad of
a function that ignores its params returns zeros, as jax.grad does. torch's clip_grad_norm_
divides by ‖g‖ + 1e-6 (optax by ‖g‖): clip_after_sum clips by hand on both sides.
Shapes: B examples, D input features, H hidden units.
Reference: Abadi et al. 2016, arXiv:1607.00133 (Algorithm 1); PyTorch tutorial "Per-sample-gradients"
(torch.func); Opacus (Yousefpour et al. 2021, arXiv:2109.12298).
"""

from __future__ import annotations

import copy
import functools

import numpy as np
import torch

from ..shared.core.checks import check_same_shape, check_variant
from ._common import MLP, field, numpy, scenario_run
from ._layout import grads_of, load_params, params_of

__all__ = ["build_model", "example_loss", "per_example_grads", "clip_per_example", "dp_gradient", "dp_step", "run"]


def build_model(fx) -> MLP:
    """An MLP loaded with the fixture's canonical parameters (dtype of the fixture)."""
    params = fx.under("params")
    return load_params(MLP(fx.dims["D"], fx.dims["H"], 1, getattr(torch, fx.dtype)), params)


def example_loss(model: MLP, params: dict, x_i: torch.Tensor, y_i: torch.Tensor) -> torch.Tensor:
    """ℓ_i = 0.5·(pred(x_i) − y_i)² of one example x_i [D], y_i [], the model run with `params` (functional_call)."""
    pred = torch.func.functional_call(model, params, (x_i[None],))  # [1, 1]
    return 0.5 * (pred[0, 0] - y_i) ** 2


def per_example_grads(model: MLP, x: torch.Tensor, y: torch.Tensor) -> dict[str, torch.Tensor]:
    """{torch parameter name: g [B, *shape]}: the gradient of each example's loss ℓ_i, for x [B, D], y [B] (no graph).

    Raises ValueError unless x and y agree on B.
    """
    check_same_shape("per_example_grads", x_batch=x.shape[:1], y=y.shape)
    # the torch.func idiom: the parameters as plain tensors, so the per-example gradients carry no graph
    params = {k: v.detach() for k, v in model.named_parameters()}
    grad_one = torch.func.grad(functools.partial(example_loss, model))
    return torch.func.vmap(grad_one, in_dims=(None, 0, 0))(
        params, x, y
    )  # GRAD-FLOW: one gradient per example, not the batch sum


def clip_per_example(per_example: dict[str, torch.Tensor], l2_norm_clip: float) -> tuple[dict, torch.Tensor]:
    """(Σ_i g_i·min(1, C/‖g_i‖) per parameter, number of examples clipped): optax.per_example_global_norm_clip.

    ‖g_i‖ is the global norm of example i over every parameter.
    """
    norms = torch.sqrt(sum(g.flatten(1).pow(2).sum(1) for g in per_example.values()))  # [B]
    factors = torch.clamp(l2_norm_clip / norms, max=1.0)  # [B]
    return {k: torch.tensordot(factors, g, dims=1) for k, g in per_example.items()}, (factors < 1.0).sum()


def dp_gradient(
    per_example: dict[str, torch.Tensor], noise: dict[str, torch.Tensor], hyper: dict, variant: str
) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    """((clipped sum + σ·C·z) / B per parameter, number clipped); clip_after_sum clips the summed gradient.

    hyper: l2_norm_clip C, noise_multiplier σ (floats); noise: z per torch parameter name.
    Reference: Abadi et al. 2016, Algorithm 1.
    """
    check_variant("per_example_grads", variant)
    c, b = hyper["l2_norm_clip"], next(iter(per_example.values())).shape[0]
    if variant == "dp_sgd":
        clipped, num_clipped = clip_per_example(per_example, l2_norm_clip=c)
    else:  # the wrong order: the batch gradient clipped as a whole
        summed = {k: g.sum(0) for k, g in per_example.items()}
        norm = torch.sqrt(sum(g.pow(2).sum() for g in summed.values()))
        clipped, num_clipped = {k: g * torch.clamp(c / norm, max=1.0) for k, g in summed.items()}, (norm > c).sum()
    return {k: (g + hyper["noise_multiplier"] * c * noise[k]) / b for k, g in clipped.items()}, num_clipped


def dp_step(model: MLP, noise_model: MLP, x: torch.Tensor, y: torch.Tensor, hyper: dict, variant: str):
    """The gradients of one DP-SGD step on x [B, D], y [B]: (loss [], canonical batch gradient of the mean
    loss, per-example gradients, DP gradient, number clipped, per-example norms [B]); noise_model holds z."""
    per_example = per_example_grads(model, x, y)
    noise = {k: torch.from_numpy(p.numpy(force=True)) for k, p in noise_model.named_parameters()}  # data, no graph
    dp, num_clipped = dp_gradient(per_example, noise, hyper, variant)
    norms = torch.sqrt(sum(g.flatten(1).pow(2).sum(1) for g in per_example.values()))
    model.zero_grad(set_to_none=True)
    loss = 0.5 * torch.mean((model(x).squeeze(-1) - y) ** 2)
    loss.backward()  # the batch gradient, the usual way
    return loss, grads_of(model), per_example, dp, num_clipped, norms


@scenario_run("per_example_grads")
def run(fx, variant: str) -> dict[str, np.ndarray]:
    """Outputs: loss []; norms [B]; num_clipped [] int64; grads/<param> (batch gradient of the mean loss);
    per_example/<param> [B, ...]; dp_grads/<param>; params/<param> after one DP-SGD step."""
    model = build_model(fx)
    x, y = field(fx, "x"), field(fx, "y")
    noise_model = load_params(copy.deepcopy(model), fx.under("noise"))
    hyper = {k: fx.scalar(k) for k in ("l2_norm_clip", "noise_multiplier")}
    loss, grads, per_example, dp, num_clipped, norms = dp_step(model, noise_model, x, y, hyper, variant)
    out = {"loss": numpy(loss), "num_clipped": numpy(num_clipped).astype(np.int64)}
    out["norms"] = numpy(norms)
    out.update({f"grads/{k}": v for k, v in grads.items()})
    rows = [params_of(model, {k: g[i] for k, g in per_example.items()}) for i in range(x.shape[0])]
    out.update({f"per_example/{k}": np.stack([r[k] for r in rows]) for k in rows[0]})
    out.update({f"dp_grads/{k}": v for k, v in params_of(model, dp).items()})
    optimizer = torch.optim.SGD(model.parameters(), lr=fx.scalar("lr"))
    for name, p in model.named_parameters():
        p.grad = dp[name]
    optimizer.step()
    out.update({f"params/{k}": v for k, v in params_of(model).items()})
    return out
