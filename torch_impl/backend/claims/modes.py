"""claims, modes: computing without a gradient, run in PyTorch.

What it teaches: what inference_mode, autocast and detached statistics really do: an
inference tensor cannot be saved for backward later (a no_grad one can, C09); mixed precision
involves no detach, and detaching the loss breaks backward (C15); statistics of detached
features run, torch .std() is unbiased, and no_grad saves what detach does not (C19).
Gradient flow: under no_grad or inference_mode nothing is recorded; a detached loss has no
graph at all.
Port note: jax_impl/backend/claims/modes.py: JAX has no grad mode and no inference tensors (check_c09
says so), bfloat16 compute is an explicit cast, a stopped loss gives zero gradients silently,
and jnp.std has ddof=0 (torch's .std() is ddof=1).
Shapes: B samples, D inputs, H hidden units (toy "mlp": B 8, D 4, H 6).
Reference: PyTorch docs, "Autograd mechanics" (inference mode) and "Automatic Mixed Precision"
(torch.autocast); Micikevicius et al. 2018, arXiv:1710.03740 (mixed precision training).
"""

from __future__ import annotations

import torch

from ....shared.core.toys import toy
from .evidence import array, error, evidence, saved

__all__ = ["check_c09", "check_c15", "check_c19"]

F64 = torch.float64


@evidence
def check_c09() -> dict:
    """C09: an inference_mode tensor cannot be saved for backward later; a no_grad one can.

    Returns: is_inference / requires_grad of h computed under inference_mode, the error of
    using h in a tracked product, and whether the same under no_grad backpropagates.
    """
    x, w = torch.ones(3, dtype=F64), torch.ones(3, dtype=F64, requires_grad=True)
    with torch.inference_mode():  # GRAD-FLOW: C09 no autograd at all, inference tensors
        h = x * 2
    inference_error = error(lambda: (h * w).sum().backward())
    with torch.no_grad():  # GRAD-FLOW: C09 no graph, normal tensors
        g = w * 2  # a constant 2·w: the product below is linear in w
    (g * w).sum().backward()
    return {
        "is_inference": torch.is_inference(h),
        "requires_grad": h.requires_grad,
        "error": inference_error,
        "no_grad_tensor_requires_grad": g.requires_grad,
        "no_grad_tensor_grad": w.grad.tolist(),
        "speed": "see `detach-parity bench frozen_backbone`: torch forward_grad / forward_inference_mode and forward_no_grad / forward_inference_mode",
    }


@evidence
def check_c15() -> dict:
    """C15: mixed precision involves no detach; detaching the loss breaks backward.

    Returns: the autocast (CPU, bfloat16) output dtype, the float32 parameter's gradient
    dtype and whether it is nonzero, the error of backward on loss.detach().
    """
    d = toy("mlp")
    x, w = torch.tensor(d["x"], dtype=torch.float32), torch.tensor(d["w1"], dtype=torch.float32, requires_grad=True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = x @ w  # [B, H] bfloat16
    loss = out.float().pow(2).mean()
    detached_error = error(lambda: loss.detach().backward())  # GRAD-FLOW: C15 a detached loss has no graph
    loss.backward()
    return {
        "autocast_dtype": str(out.dtype),
        "grad_dtype": str(w.grad.dtype),
        "grad_nonzero": bool(w.grad.abs().sum() > 0),
        "detached_loss_backward": detached_error,
    }


@evidence
def check_c19() -> dict:
    """C19: feature statistics: torch .std() is unbiased (ddof 1); no_grad saves nothing.

    Returns: std over B = 8 samples of detached features, the biased std, the ratio against
    sqrt(B / (B - 1)), and saved bytes computing the features with grad vs under no_grad.
    """
    d = toy("mlp")
    x, w = array(d["x"]), array(d["w1"], True)
    saved_grad, f = saved(lambda: torch.tanh(x @ w))
    with torch.no_grad():  # GRAD-FLOW: C19 statistics need no graph
        saved_no_grad, _ = saved(lambda: torch.tanh(x @ w))
    feats = f.detach()  # GRAD-FLOW: C19 statistics of fixed features
    return {
        "std": feats.std(dim=0).tolist(),
        "std_requires_grad": feats.std(dim=0).requires_grad,
        "std_biased": feats.std(dim=0, correction=0).tolist(),
        "n": feats.shape[0],
        "saved_bytes_grad": saved_grad["bytes"],
        "saved_bytes_no_grad": saved_no_grad["bytes"],
    }
