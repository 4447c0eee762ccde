"""claims, recurrence: truncation through time and gradient clipping, run in PyTorch.

What it teaches: detaching an RNN hidden state every k steps truncates backpropagation through
time (C10); it saves memory only with a backward per chunk, not with one loss summed over all
steps (C11); and it is no gradient clipping: clip_grad_norm_ bounds the norm and keeps the
direction, detaching every step does neither (C18).
Gradient flow: h_t = tanh(h_{t-1} w + x_t u); h.detach() at a chunk boundary stops the
gradient from reaching earlier steps; the forward values are unchanged.
Port note: jax_impl/backend/claims/recurrence.py writes the same recurrences with jax.lax.scan and a
jnp.where(cut, stop_gradient(h), h) per step; its memory is jax.grad's residuals, and
optax.clip_by_global_norm is torch's clip_grad_norm_.
Shapes: T time steps, D inputs, H hidden units (toy "rnn": T 40, D 3, H 4; toy "explode": T 20, D 2, H 3).
Reference: Williams & Peng 1990 (truncated BPTT, doi:10.1162/neco.1990.2.4.490); Pascanu et al. 2013,
arXiv:1211.5063 (exploding gradients, clipping); torch.nn.utils.clip_grad_norm_.
"""

from __future__ import annotations

import torch
from torch import nn

from ....shared.core.toys import toy
from .evidence import array, evidence, saved

__all__ = ["check_c10", "check_c11", "check_c18"]

F64 = torch.float64


def _rnn_loss(d: dict, x: torch.Tensor, every: int | None, all_steps: bool) -> torch.Tensor:
    w, u = array(d["w"], True), array(d["u"], True)
    h = torch.zeros(4, dtype=F64)
    total = torch.zeros((), dtype=F64)
    for t in range(x.shape[0]):
        if every and t > 0 and t % every == 0:
            h = h.detach()  # GRAD-FLOW: C10 truncate backprop through time
        h = torch.tanh(h @ w + x[t] @ u)
        total = total + h.sum()
    return total if all_steps else h.sum()


def _reached(g: torch.Tensor) -> list[int]:
    return [t for t in range(g.shape[0]) if bool(g[t].abs().sum() > 0)]


@evidence
def check_c10() -> dict:
    """C10: detaching the hidden state every k steps: which inputs x_t the last output reaches.

    Returns: {"none" | "every_10" | "every_1": [steps with a nonzero gradient]}, T = 40.
    """
    d = toy("rnn")
    out = {}
    for name, every in (("none", None), ("every_10", 10), ("every_1", 1)):
        x = array(d["x"], True)
        _rnn_loss(d, x, every, all_steps=False).backward()
        out[name] = _reached(x.grad)
    return out


@evidence
def check_c11() -> dict:
    """C11: detaching every 10 steps with a loss summed over all steps saves no memory.

    Returns: saved bytes over T = 40 steps without / with detach every 10, max |dx| difference
    between the two (the truncation), and the largest graph held at one backward call when
    each 10-step chunk is backpropagated on its own.
    """
    d = toy("rnn")
    out, grads = {}, []
    for name, every in (("none", None), ("every_10", 10)):
        x = array(d["x"], True)
        tally, loss = saved(lambda x=x, every=every: _rnn_loss(d, x, every, all_steps=True))
        loss.backward()
        out[f"saved_bytes_{name}"] = tally["bytes"]
        grads.append(x.grad)
    out["grad_max_abs_diff"] = float((grads[0] - grads[1]).abs().max())
    w, u, x = array(d["w"], True), array(d["u"], True), array(d["x"], True)
    h, chunk_bytes = torch.zeros(4, dtype=F64), []
    for start in range(0, 40, 10):
        h = h.detach()  # GRAD-FLOW: C11 chunk boundary: the previous graph can be freed

        def chunk(h=h, start=start) -> tuple[torch.Tensor, torch.Tensor]:
            total = torch.zeros((), dtype=F64)
            for t in range(start, start + 10):
                h = torch.tanh(h @ w + x[t] @ u)
                total = total + h.sum()
            return total, h

        tally, (loss, h) = saved(chunk)
        loss.backward()
        chunk_bytes.append(tally["bytes"])
    out["max_saved_bytes_per_chunk_backward"] = max(chunk_bytes)
    return out


def _explode_grads(d: dict, every: int | None) -> list[torch.Tensor]:
    w, u = array(d["w"], True), array(d["u"], True)
    h = torch.zeros(3, dtype=F64)
    for t in range(d["x"].shape[0]):
        if every and t > 0 and t % every == 0:
            h = h.detach()  # GRAD-FLOW: C18 truncation, not clipping
        h = h @ w + array(d["x"][t]) @ u
    return list(torch.autograd.grad(h.sum(), [w, u]))


def _cos(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a * b).sum() / (a.norm() * b.norm()))


def _global(grads: list[torch.Tensor]) -> torch.Tensor:
    return torch.cat([g.reshape(-1) for g in grads])


@evidence
def check_c18() -> dict:
    """C18: clip_grad_norm_ bounds the norm and keeps the direction; detaching every step does neither.

    Returns: the full gradient norm, the norm returned by and after clip_grad_norm_(max 1.0),
    the cosine of the clipped with the full gradient, the detach-every-step gradient norm and its cosine.
    """
    d = toy("explode")
    full = _explode_grads(d, None)
    params = [nn.Parameter(torch.zeros_like(g)) for g in full]
    for p, g in zip(params, full, strict=True):
        p.grad = g.clone()
    reported = float(torch.nn.utils.clip_grad_norm_(params, max_norm=1.0))
    clipped = _global([p.grad for p in params])
    trunc = _global(_explode_grads(d, 1))
    full = _global(full)
    return {
        "full_norm": float(full.norm()),
        "clip_reported_norm": reported,
        "clipped_norm": float(clipped.norm()),
        "clipped_cosine": _cos(clipped, full),
        "detach_every_step_norm": float(trunc.norm()),
        "detach_every_step_cosine": _cos(trunc, full),
    }
