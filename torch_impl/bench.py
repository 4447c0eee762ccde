"""bench: step time and saved-tensor bytes in PyTorch, detach vs not / no_grad / inference_mode / freezing.

What it teaches: what detach() buys at run time. The backbone is the first depth − 1 layers,
the head the last one; a "train" step is forward + gradient of the trainable parameters, a
"forward" step the forward pass alone.
Gradient flow: train_full all layers; train_detach / train_frozen / train_no_grad the head only
(features detached, backbone requires_grad_(False), backbone under no_grad).
Port note: the JAX twin (jax_impl/bench.py) jits each step; stop_gradient or differentiating
the head alone are its freezing forms, and there is no inference mode.
Shapes: B samples, W width (every layer W -> W).
Reference: PyTorch docs, "Autograd mechanics" (saved tensors hooks) and torch.inference_mode.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import numpy as np
import torch

__all__ = ["build", "measure"]


def _model(data: dict[str, np.ndarray]) -> tuple[dict[str, Callable[[], object]], list[torch.Tensor]]:
    """The step functions and the argument tensors (input, weights) they close over."""
    depth = sum(k.startswith("w") for k in data)
    x = torch.tensor(data["x"])
    ws = [torch.tensor(data[f"w{i}"], requires_grad=True) for i in range(depth)]
    bs = [torch.tensor(data[f"b{i}"], requires_grad=True) for i in range(depth)]
    frozen = [(w.detach(), b.detach()) for w, b in zip(ws[:-1], bs[:-1], strict=True)]  # requires_grad False
    head = [ws[-1], bs[-1]]

    def backbone(layers) -> torch.Tensor:
        h = x
        for w, b in layers:
            h = torch.relu(h @ w + b)  # [B, W]
        return h

    trunk = list(zip(ws[:-1], bs[:-1], strict=True))
    loss = lambda f: ((f @ ws[-1] + bs[-1]) ** 2).mean()

    def train_no_grad():
        with torch.no_grad():  # GRAD-FLOW: bench no graph for the backbone
            f = backbone(trunk)
        return torch.autograd.grad(loss(f), head)

    def forward_no_grad():
        with torch.no_grad():  # GRAD-FLOW: bench no graph at all
            return loss(backbone(trunk))

    def forward_inference_mode():
        with torch.inference_mode():  # GRAD-FLOW: bench no autograd at all
            return loss(backbone(trunk))

    steps = {
        "train_full": lambda: torch.autograd.grad(loss(backbone(trunk)), ws + bs),
        "train_detach": lambda: torch.autograd.grad(
            loss(backbone(trunk).detach()), head
        ),  # GRAD-FLOW: bench features cut
        "train_frozen": lambda: torch.autograd.grad(loss(backbone(frozen)), head),
        "train_no_grad": train_no_grad,
        "forward_grad": lambda: loss(backbone(trunk)),
        "forward_no_grad": forward_no_grad,
        "forward_inference_mode": forward_inference_mode,
    }
    return steps, [x, *ws, *bs]


def build(data: dict[str, np.ndarray]) -> dict[str, Callable[[], object]]:
    """One step function per variant, on float32 weights w{i} [W, W], b{i} [W] and x [B, W].

    Returns: {variant: step()}; train steps return the gradients, forward steps the output.
    """
    return _model(data)[0]


def _saved_bytes(step: Callable[[], object], arguments: set[int]) -> int:
    storages: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        s = t.untyped_storage()
        if s.data_ptr() not in arguments:  # weights and inputs are alive anyway
            storages[s.data_ptr()] = s.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        step()
    return sum(storages.values())


def measure(data: dict[str, np.ndarray], repeats: int, inner: int) -> dict[str, dict[str, float]]:
    """Median seconds per step over `repeats` timings of `inner` steps, and saved-tensor bytes.

    Returns: {variant: {"median_s": float, "saved_bytes": int}} (bytes of the distinct storages
    autograd saves for backward during one step, weights and inputs excluded, via
    torch.autograd.graph.saved_tensors_hooks).
    Raises: ValueError if repeats or inner < 1.
    """
    if repeats < 1 or inner < 1:
        raise ValueError(f"repeats and inner expected >= 1, got {repeats} and {inner}")
    (steps, tensors), out = _model(data), {}
    arguments = {t.untyped_storage().data_ptr() for t in tensors}
    for name, step in steps.items():
        step()  # warm-up
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            for _ in range(inner):
                step()
            times.append((time.perf_counter() - start) / inner)
        out[name] = {"median_s": statistics.median(times), "saved_bytes": _saved_bytes(step, arguments)}
    return out
