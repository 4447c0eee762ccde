"""Port checker, torch half, inside a module: every value it computes, function by function, with the line of
Python that computed it; the mirror of jax_impl/backend/inside.py.

What it does: where a check's float64 outputs part at a module, the checker asks what that module computed.
`inside` runs the loss once more, in float64 with the reference's float32 islands widened (as the pass ran
it), and while the module runs (forward pre- and post-hooks mark its calls; "(loss)" is the loss's own code,
outside every module of the model) records every tensor a torch function or Tensor method returns (a
TorchFunctionMode: the functions the module's Python calls, as written, `q @ k.transpose(2, 3)` one value),
with the innermost stack frame in the module's own file (its source line), the ids of the tensors it took,
and its value. The module's inputs and parameters are recorded as the values the first call starts from.
With `backward`, the gradient of the loss arriving at each recorded value too (a hook on each).
Gradient flow: none changed; the recorded values are detached copies.
Port note: a TorchFunctionMode sits above autograd, where a tensor still has its gradient; torch's own
functions called inside a recorded one are not recorded again (a mode is off inside its own handler).
Shapes: as the module's tensors.
Reference: PyTorch docs, torch.overrides.TorchFunctionMode; nn.Module.register_forward_pre_hook.
"""

from __future__ import annotations

import inspect
import linecache
import sys
from collections.abc import Callable, Mapping
from pathlib import Path

import numpy as np
import torch
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.overrides import TorchFunctionMode

from .._common import numpy
from .precision import _Eager, settings, widening
from .precision import batch as _batch

__all__ = ["inside"]

_TORCH = str(Path(torch.__file__).parent)


def _tensors(tree) -> list[torch.Tensor]:
    if isinstance(tree, torch.Tensor):
        return [tree]
    if isinstance(tree, tuple | list):
        return [t for x in tree for t in _tensors(x)]
    if isinstance(tree, Mapping):
        return [t for x in tree.values() for t in _tensors(x)]
    return []


def _line(file: str) -> tuple[str, int, str]:
    """The innermost frame of the caller's stack in `file` (else the innermost outside torch): (file, line, text)."""
    frame, fallback = sys._getframe(2), None
    while frame is not None:
        name = frame.f_code.co_filename
        if name == file:
            break
        if fallback is None and not name.startswith(_TORCH) and name != __file__:
            fallback = frame
        frame = frame.f_back
    frame = frame or fallback
    if frame is None:
        return ("?", 0, "")
    name, number = frame.f_code.co_filename, frame.f_lineno
    return (name, number, linecache.getline(name, number).strip())


def _file_of(fn) -> str:
    """The source file of a function, under any decorator's (HF wraps forward in deprecation helpers)."""
    fn = inspect.unwrap(fn)
    code = getattr(fn, "__code__", None)
    return code.co_filename if code is not None else "?"


class _Values:
    """The values recorded while `active` (see the module docstring); `mode()` is the mode that records them."""

    def __init__(self, file: str, backward: bool) -> None:
        self.file, self.backward = file, backward
        self.active = False
        self.values: list[dict] = []
        self.ids: dict[int, int] = {}  # id(tensor) -> index in values (the tensors are kept alive in `kept`)
        self.kept: list[torch.Tensor] = []

    def known(self, t: torch.Tensor, kind: str, name: str = "") -> int:
        """The index of `t` among the recorded values, recording it (an input, a parameter) where it is new."""
        if id(t) not in self.ids:
            self._add(t, {"kind": kind, "op": name, "line": ["", 0, ""], "inputs": []})
        return self.ids[id(t)]

    def _add(self, t: torch.Tensor, entry: dict) -> None:
        entry["value"] = numpy(t.detach()).copy()
        entry["grad"] = None
        self.ids[id(t)] = len(self.values)
        self.values.append(entry)
        self.kept.append(t)
        if self.backward and t.requires_grad:
            t.register_hook(lambda g, e=entry: e.__setitem__("grad", numpy(g).copy()))

    def made(self, name: str, args, kwargs, out, in_place: bool = False) -> None:
        """Record what one operation made (its new tensors of numbers; an in-place one's tensor again, as the value
        it now holds) with its line and its inputs."""
        made = [t for t in _tensors(out) if in_place or id(t) not in self.ids]
        if not (self.active and made):
            return
        inputs = [self.ids[id(t)] for t in _tensors((args, kwargs)) if id(t) in self.ids]
        line = list(_line(self.file))
        for t in made:
            if t.is_floating_point() or t.dtype in (torch.bool, torch.int64, torch.int32):
                self._add(t, {"kind": "op", "op": name, "line": line, "inputs": inputs})

    def mode(self):
        """A TorchDispatchMode recording every aten operation (a fused one's parts: the math attention's q·kᵀ);
        with `backward`, a TorchFunctionMode recording every torch function (above autograd: its outputs still
        have their gradient)."""
        return _Functions(self) if self.backward else _Aten(self)


class _Aten(_Eager):
    def __init__(self, values: _Values) -> None:
        super().__init__()
        self.record = values

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        self.record.made(str(func.overloadpacket), args, kwargs, out, func._schema.is_mutable)
        return out


class _Functions(TorchFunctionMode):
    def __init__(self, values: _Values) -> None:
        super().__init__()
        self.record = values

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        name = getattr(func, "__qualname__", None) or getattr(func, "__name__", str(func))
        in_place = name.endswith("_") or name.split(".")[-1].startswith("__i")  # x.add_(y), x /= y
        self.record.made(name, args, kwargs, out, in_place)
        return out


def inside(model: nn.Module, batch: Mapping[str, np.ndarray], loss_fn: Callable, path: str, dtype: str = "float64",
           backward: bool = False) -> dict:  # fmt: skip
    """What the module at `path` computes in one loss, value by value (see the module docstring).

    Args:
      model: the pass's model (a float64 copy holding the weights compared); it runs one more forward.
      path: the module's dotted path ("" the model itself), or "(loss)": the loss's code outside the model.
      backward: also each value's incoming gradient (the loss's backward).
    Returns:
      {"file": the module's source file, "values": [{"kind": "input" | "param" | "op", "op": function name,
       "line": [file, line number, text], "inputs": [indices of earlier values], "value": array, "grad": array
       or None}] in the order computed, "output": [indices of the first call's output tensors]}.
    Raises:
      ValueError: no module at `path`, or the loss raised (named as the check names it).
    """
    modules = dict(model.named_modules())
    if path != "(loss)" and path not in modules:
        raise ValueError(f"inside: no torch module at {path!r} (its modules: {sorted(modules)[:8]} ...)")
    target = None if path == "(loss)" else modules[path]
    recorder = _Values(_file_of(loss_fn if target is None else type(target).forward), backward)
    depth, output = [0], []

    def pre(module, args, kwargs):
        depth[0] += 1
        if target is None:
            recorder.active = False
        elif module is target and not output:
            for t in _tensors((args, kwargs)):
                recorder.known(t, "input")
            for name, p in [*target.named_parameters(), *target.named_buffers()]:
                recorder.known(p, "param", name)
            recorder.active = True

    def post(module, args, kwargs, out):
        depth[0] -= 1
        if module is target and not output:
            output.extend(recorder.known(t, "op") for t in _tensors(out))
            recorder.active = False
        elif target is None and depth[0] == 0:
            output[:] = [recorder.known(t, "input") for t in _tensors(out)]  # the model's output: the loss's input
            recorder.active = True

    hooks = [m.register_forward_pre_hook(pre, with_kwargs=True) for m in modules.values()]
    hooks += [m.register_forward_hook(post, with_kwargs=True) for m in modules.values()]
    try:
        with settings(dtype), torch.random.fork_rng(devices=[]):
            b = _batch(batch, dtype)
            # the math attention: torch's scaled_dot_product_attention as its parts (q·kᵀ, the mask, the softmax)
            with widening([], [], {}), sdpa_kernel(SDPBackend.MATH), recorder.mode():
                recorder.active = target is None
                loss = loss_fn(model, b)
            if target is None and isinstance(loss, torch.Tensor):
                output[:] = [recorder.known(loss, "op")]
            if backward and isinstance(loss, torch.Tensor) and loss.requires_grad:
                loss.backward()
    except Exception as exc:
        raise ValueError(f"torch_loss(model, batch) raised {type(exc).__name__}: {exc}") from exc
    finally:
        for h in hooks:
            h.remove()
    return {"file": recorder.file, "values": recorder.values, "output": output}
