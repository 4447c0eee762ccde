"""Port checker, torch half, recording: every submodule's outputs per call, their named axes, and where a
float64 forward computes narrower; the mirror of jax_impl/backend/record.py.

What it does: forward pre- and post-hooks on every submodule copy each output as it comes (outputs.py
names its axes); with a float64 model, the forward runs under precision.widening: each op that would compute
in float32 or narrower (HF's Llama RMSNorm, rotary cos / sin, labels= loss) computes in float64 and is
noted, charged to the innermost module running: the reference's float32 islands, widened.
Gradient flow: none here; the outputs are detached copies.
Port note: the hooks are removed when the with ends; the user's own hooks stay and run in their order.
Shapes: as the model's outputs.
Reference: PyTorch docs, nn.Module.register_forward_hook.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping

import torch
from torch import nn

from .._common import numpy
from .outputs import output_axes
from .port import _key
from .precision import recording_precision, widening

__all__ = ["recording"]


def _tensors(out) -> list[torch.Tensor]:
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, tuple | list):
        return [a for o in out for a in _tensors(o)]
    if isinstance(out, Mapping):
        return [a for o in out.values() for a in _tensors(o)]
    return []


@contextlib.contextmanager
def recording(
    model: nn.Module, outputs: dict[str, list], islands: dict | None = None, layouts=None, feeds=None, precision=None
) -> Iterator[list[str]]:
    """Every submodule's outputs per call (and in `layouts` their named axes, outputs.py); with `islands`
    (a float64 run), every narrower computation widened to float64 and noted there (precision.widening); in
    `feeds`, {module path: [the modules whose outputs it took as inputs, args or keywords]} (Llama's
    attention takes model.rotary_emb's cos / sin); with `precision` (a bfloat16 run), what each module computes
    in (precision.recording_precision). Yields the module paths in the order their calls finished."""
    stack: list[str] = []
    finished: list[str] = []
    known: dict = {}  # id(tensor) -> (tensor, its named axes): what a module without a rule passes on
    made: dict[int, tuple[torch.Tensor, list[str]]] = {}  # id(output tensor) -> (it, the modules returning it)

    def pre(name: str):
        def hook(module, args, kwargs) -> None:
            stack.append(name)
            if feeds is not None:
                for t in _tensors((args, kwargs)):
                    if id(t) in made and made[id(t)][0] is t:
                        feeds.setdefault(name, []).extend(m for m in made[id(t)][1] if m not in feeds[name])

        return hook

    def post(name: str):
        def hook(module, args, out) -> None:
            tensors = _tensors(out)
            for t in tensors:  # an id freed and reused is a new tensor
                made[id(t)] = made[id(t)] if id(t) in made and made[id(t)][0] is t else (t, [])
                made[id(t)][1].append(name)
            outputs.setdefault(name, []).append([numpy(t).copy() for t in tensors])
            if layouts is not None:
                layouts.setdefault(name, []).append(output_axes(module, args, tensors, known))
            if stack and stack[-1] == name:
                stack.pop()
            finished.append(name)

        return hook

    # a parametrization's modules (weight norm's) make a weight inside their module's forward: not outputs of the model
    modules = [(p, sub) for p, sub in model.named_modules() if "parametrizations" not in p.split(".")]
    handles = [h for p, sub in modules for h in (
        sub.register_forward_pre_hook(pre(_key(p)), with_kwargs=True), sub.register_forward_hook(post(_key(p))))]  # fmt: skip
    mode = widening(stack, finished, islands) if islands is not None else contextlib.nullcontext()
    if precision is not None:
        mode = recording_precision(stack, precision)
    try:
        with mode:
            yield finished
    finally:
        for h in handles:
            h.remove()
