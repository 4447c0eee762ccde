"""Port checker, torch half, precision: what each dtype of a check computes in; the mirror of
jax_impl/backend/precision.py.

What it does: `settings(dtype)` holds a run's numerics (full-precision float32 matmuls; for "mixed_bfloat16",
torch.autocast to bfloat16 over float32 parameters) and `batch` casts its inputs. `recording_precision` notes,
per module, which kinds of precision-critical computation (exp, log, rsqrt, sin / cos) a bfloat16 run does in
float32 and which in bfloat16: an explicit island (HF's `.float()`), autocast's float32 list, or a kernel that
keeps its normaliser in float32 (softmax, log-softmax, layer norm, scaled-dot-product attention). Hugging Face models compute in float32 inside a float64 model (Llama's RMSNorm casts to float32
and back, the rotary cos / sin come from `.float()` positions, the labels= loss upcasts the logits). In the
checker's float64 pass those islands would hide a bug below float32's rounding. `widening` is a
TorchDispatchMode under the forward: each aten op that takes or asks for a narrower float (a float32 tensor,
`dtype=torch.float32`, a factory of the default dtype) runs in float64 instead, and is recorded, charged to the
innermost module running, as a fact for the report. An op with no float64 kernel runs as written and is
recorded as not widened, with the reason. `rebuild_buffers` does the same for values the model built in
float32 before the pass: a non-persistent buffer (the rotary `inv_freq`) is rebuilt in float64 from its
module's config where it has one (HF's rotary classes take it), else named.
Gradient flow: unchanged; the backward follows the widened forward (each node records the float64 tensor it
produced), so gradients are float64 end to end.
Port note: nothing of the user's or the library's code is edited: the mode sees every op below autograd;
it ends with the with.
Shapes: as the model's tensors.
Reference: PyTorch docs, torch.utils._python_dispatch.TorchDispatchMode; transformers, LlamaRotaryEmbedding.
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Iterator, Mapping

import numpy as np
import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves, tree_map

from .._common import numerics

__all__ = [
    "NARROW",
    "STORAGE",
    "settings",
    "batch",
    "widening",
    "rebuild_buffers",
    "narrow_buffers",
    "recording_precision",
]

NARROW = (torch.float32, torch.float16, torch.bfloat16)  # float dtypes below float64's precision

# where each dtype of a check keeps the parameters: "mixed_bfloat16" trains float32 ones under autocast
STORAGE = {"float64": torch.float64, "float32": torch.float32, "bfloat16": torch.bfloat16,
           "mixed_bfloat16": torch.float32}  # fmt: skip
_KEEP = {torch.ops.aten.view.dtype, torch.ops.aten._local_scalar_dense.default}  # a bitcast, a Python number
_BUILT_NARROW: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # model copy -> {buffer: why not rebuilt}


@contextlib.contextmanager
def settings(dtype: str) -> Iterator[None]:
    """A run of the check in `dtype`: full-precision float32 matmuls (numerics), and for "mixed_bfloat16"
    (float32 parameters, bfloat16 compute) torch.autocast("cpu", torch.bfloat16) over the body."""
    mixed = torch.autocast("cpu", dtype=torch.bfloat16) if dtype == "mixed_bfloat16" else contextlib.nullcontext()
    with numerics("float64" if dtype == "float64" else "float32"), mixed:
        yield


def batch(arrays: Mapping[str, np.ndarray], dtype: str) -> dict[str, torch.Tensor]:
    """The batch as tensors of their own: floating arrays in bfloat16 for a pure bfloat16 run (the checker hands
    them in float32, numpy having no bfloat16), everything else as given."""
    out = {k: torch.from_numpy(np.array(v, copy=True)) for k, v in arrays.items()}
    if dtype == "bfloat16":
        out = {k: v.to(torch.bfloat16) if v.is_floating_point() else v for k, v in out.items()}
    return out


def _name(t) -> str:
    return str(t).removeprefix("torch.")


def _narrowest(args, kwargs) -> torch.dtype | None:
    """The narrow float an op takes or asks for (a float32 tensor, dtype=torch.float32), or None."""
    for x in tree_leaves((args, kwargs)):
        if isinstance(x, torch.Tensor) and x.dtype in NARROW:
            return x.dtype
        if isinstance(x, torch.dtype) and x in NARROW:
            return x
    return None


def _wide(x):
    if isinstance(x, torch.Tensor) and x.dtype in NARROW:
        return x.to(torch.float64)
    if isinstance(x, torch.dtype) and x in NARROW:
        return torch.float64
    return x


def _narrow_out(out) -> torch.dtype | None:
    return next((t.dtype for t in tree_leaves(out) if isinstance(t, torch.Tensor) and t.dtype in NARROW), None)


class _Eager(TorchDispatchMode):
    """A dispatch mode of the checker's eager runs (the model is read through torch.compile's `_orig_mod`)."""

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        # torch wraps a mode's __torch_dispatch__ in torch._disable_dynamo unless told not to: its first call then
        # imports torch._dynamo, about 1 s of a check in a new process, for a compiler these runs never start
        return False


class _Widening(_Eager):
    """Each op of a float64 forward that would compute narrower computes in float64 (see the module docstring);
    `islands` gets {where: {"dtype", "at", "ops", "widened", "why"}} (`at`: the modules finished before it)."""

    def __init__(self, stack: list[str], finished: list[str], islands: dict) -> None:
        super().__init__()
        self.stack, self.finished, self.islands = stack, finished, islands

    def _note(self, func, dtype, widened: bool, why: str = "") -> None:
        where = self.stack[-1] if self.stack else "(loss)"
        entry = self.islands.setdefault(
            where, {"dtype": _name(dtype), "at": len(self.finished), "ops": [], "widened": True, "why": ""}
        )
        op = str(func.overloadpacket)  # aten.mul, or a library's own op (a torch.library custom op)
        if op not in entry["ops"]:
            entry["ops"].append(op)
        if not widened:
            entry["widened"], entry["why"] = False, entry["why"] or why

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        narrow = _narrowest(args, kwargs)
        mutates = func._schema.is_mutable  # an in-place write into a narrow tensor must stay in it
        if narrow is None or func in _KEEP or mutates:
            try:
                out = func(*args, **kwargs)
            except (RuntimeError, NotImplementedError) as exc:  # float64 inputs it has no kernel for: widened ones
                return self._narrow_run(func, args, kwargs, exc)
            made = _narrow_out(out)
            if made is None or func in _KEEP:
                return out
            if narrow is None and "dtype" in {a.name for a in func._schema.arguments} and not mutates:
                self._note(func, made, True)  # a factory of the default dtype (torch.zeros(n)): ask for float64
                return func(*args, **{**kwargs, "dtype": torch.float64})
            self._note(func, made, False, f"{func.overloadpacket} writes into a {_name(made)} tensor")
            return out
        wide_args, wide_kwargs = tree_map(_wide, (args, kwargs))
        try:
            out = func(*wide_args, **wide_kwargs)
        except (RuntimeError, NotImplementedError) as exc:  # no float64 kernel (Mixtral's grouped_mm on a CPU)
            return self._narrow_run(func, args, kwargs, exc)
        self._note(func, narrow, True)
        return out

    def _narrow_run(self, func, args, kwargs, exc: Exception):
        """An op that raised on float64 inputs (widened upstream, or widened here), run in float32 as the model
        would have run it, and noted as not widened; the op's own error where float32 fails too."""
        down = lambda x: x.to(torch.float32) if isinstance(x, torch.Tensor) and x.dtype == torch.float64 else x  # noqa: E731
        try:
            out = func(*tree_map(down, (args, kwargs))[0], **tree_map(down, (args, kwargs))[1])
        except (RuntimeError, NotImplementedError):
            raise exc from None
        first = str(exc).strip().splitlines()[0][:120] if str(exc).strip() else type(exc).__name__
        self._note(func, torch.float32, False, f"{func.overloadpacket} has no float64 kernel ({first})")
        return out


@contextlib.contextmanager
def widening(stack: list[str], finished: list[str], islands: dict) -> Iterator[None]:
    """Run the body (a float64 forward) with every narrower computation widened to float64, recording each in
    `islands` {module path or "(loss)": {"dtype": "float32", "at": modules finished before it, "ops": [aten
    op names], "widened": bool, "why": the reason it was not}}; `stack` is the modules running (innermost
    last), `finished` those that ended, as the recorder's hooks keep them."""
    with _Widening(stack, finished, islands):
        yield


def rebuild_buffers(original: nn.Module, twin: nn.Module) -> None:
    """In `twin` (the float64 copy of `original`), rebuild in float64 each non-persistent floating buffer that
    `original` holds in a narrower dtype: values the model derived in float32 before the pass (HF's rotary
    `inv_freq`, Gemma's `embed_scale`), whose float32 rounding the port, computing them itself, does not share.
    A module with a `config` is built again from it under `widening` and its buffers of the same name and shape
    taken; a scalar buffer whose module keeps the Python number it was made of takes that number; anything else
    keeps its values and is named by `narrow_buffers`."""
    built = {}
    subs = dict(original.named_modules())
    for path, sub in twin.named_modules():
        narrow = [
            n
            for n, b in subs[path].named_buffers(recurse=False)
            if n in subs[path]._non_persistent_buffers_set and b.is_floating_point() and b.dtype in NARROW
        ]
        if not narrow:
            continue
        fresh = _rebuilt(sub)
        for n in narrow:
            new = None if fresh is None else getattr(fresh, n, None)
            if new is None and sub.get_buffer(n).numel() == 1:  # a scalar kept as a Python number too (Gemma's
                new = _from_number(sub, subs[path].get_buffer(n))  # embed_scale beside scalar_embed_scale)
            name = f"{path}.{n}" if path else n
            if isinstance(new, torch.Tensor) and new.shape == sub.get_buffer(n).shape:
                sub._buffers[n] = new.to(torch.float64)
            else:
                dtype = _name(subs[path].get_buffer(n).dtype)
                built[name] = (
                    path,
                    f"{name} was built in {dtype} before the pass and {type(sub).__name__} cannot be built again "
                    "in float64 (no config it takes)",
                )
    if built:
        _BUILT_NARROW[twin] = built


def _from_number(sub: nn.Module, narrow: torch.Tensor) -> torch.Tensor | None:
    """The float64 tensor of a Python number the module keeps whose rounding is the narrow scalar buffer, if one."""
    for value in vars(sub).values():
        if isinstance(value, float) and torch.tensor(value, dtype=narrow.dtype).item() == narrow.item():
            return torch.tensor(value, dtype=torch.float64).reshape(narrow.shape)
    return None


def _rebuilt(sub: nn.Module) -> nn.Module | None:
    config = getattr(sub, "config", None)
    if config is None:
        return None
    islands: dict = {}
    try:
        with torch.random.fork_rng(devices=[]), widening([], [], islands):
            return type(sub)(config)
    except Exception:  # a constructor that takes more than its config: the buffer keeps its values, named
        return None


def narrow_buffers(model: nn.Module) -> dict[str, tuple[str, str]]:
    """{buffer name: (its module's path, why)} of the float32-built buffers `rebuild_buffers` could not rebuild."""
    return dict(_BUILT_NARROW.get(model, {}))


# the precision-critical kinds of computation a bfloat16 check compares, by the aten ops that do them; a
# kernel that keeps its normaliser in float32 on bfloat16 tensors counts as float32 (its own island)
_KINDS = {"exp": "exp", "log": "log", "rsqrt": "rsqrt", "sqrt": "rsqrt", "sin": "sin / cos", "cos": "sin / cos"}
_FLOAT32_KERNELS = {
    "_softmax": ("exp",), "_log_softmax": ("exp", "log"), "logsumexp": ("exp", "log"),
    "native_layer_norm": ("rsqrt",), "native_group_norm": ("rsqrt",), "_fused_rms_norm": ("rsqrt",),
    "_native_batch_norm_legit": ("rsqrt",), "_native_batch_norm_legit_no_training": ("rsqrt",),
    "_scaled_dot_product_flash_attention_for_cpu": ("exp",),
}  # fmt: skip


class _Precision(_Eager):
    """Notes what each module of a bfloat16 run computes in: {where: {kind: {dtype: [ops]}}}."""

    def __init__(self, stack: list[str], record: dict) -> None:
        super().__init__()
        self.stack, self.record = stack, record

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        name = func.overloadpacket.__name__
        made = next((t.dtype for t in tree_leaves(out) if isinstance(t, torch.Tensor) and t.is_floating_point()), None)
        kinds = (_KINDS[name],) if name in _KINDS else _FLOAT32_KERNELS.get(name, ())
        if made is not None and kinds:
            dtype = "float32" if made == torch.float32 or name in _FLOAT32_KERNELS else _name(made)
            where = self.stack[-1] if self.stack else "(loss)"
            for kind in kinds:
                ops = self.record.setdefault(where, {}).setdefault(kind, {}).setdefault(dtype, [])
                if str(func.overloadpacket) not in ops:
                    ops.append(str(func.overloadpacket))
        return out


@contextlib.contextmanager
def recording_precision(stack: list[str], record: dict) -> Iterator[None]:
    """Note in `record` {module path or "(loss)": {kind: {"float32" | "bfloat16": [aten ops]}}} what the body (a
    bfloat16 forward) computes each precision-critical kind in (exp, log, rsqrt, sin / cos), charged to the
    innermost module running (`stack`, as the recorder's hooks keep it)."""
    with _Precision(stack, record):
        yield
