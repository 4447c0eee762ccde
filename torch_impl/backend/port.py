"""Port checker, torch half, layouts: a user's nn.Module read and written in canonical layout, by units.

What it does: the torch side of `detach-parity check` (shared/apps/check). The module's
parameters and buffers are read and written in canonical layout through the one rule table
(torch_impl/_layout.py), grouped in units: a ruled module (nn.Linear, nn.MultiheadAttention,
nn.GRU ...) or the bare nn.Parameters of a module. torch_impl/backend/port_run.py runs the module;
port_input.py refuses what cannot be compared and reads through torch.compile (`check_model`, `view`).
Gradient flow: none here; copying weights in is not part of any graph (torch.no_grad), and
every array handed out is cut from the graph.
Port note: every unit is keyed by the torch module path with "/" (`blocks/0/attn`), the
path its NNX twin has; jax_impl/backend/port.py maps canonical leaves onto the NNX leaves.
Shapes: canonical per leaf (torch_impl/_layout.py).
Reference: PyTorch docs, nn.Module.named_modules, state_dict and buffers.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping

import numpy as np
import torch
from torch import nn

from .._common import numpy
from .._layout import EPS_NAMES, Leaf, load_params, norm_like, params_of
from . import transformer_knobs
from .layout import activation_of, named_leaves, owned, register, rule_for
from .port_input import check_model, clone, view
from .precision import STORAGE, rebuild_buffers

__all__ = [
    "worked_port",
    "check_model",
    "view",
    "copy_model",
    "structure",
    "to_native",
    "read",
    "native",
    "load",
    "register",
]


def worked_port(name: str):
    """The worked port `torch_impl.ports.<name>` (the torch model, loss, batch and optimizer).

    Raises ValueError for a name that is not a module of torch_impl/ports, or one whose library
    (transformers, for the models of that library) is not installed.
    """
    if not isinstance(name, str) or not name.isidentifier():
        raise ValueError(f"worked_port: name expected a module name, got {name!r}")
    try:
        return importlib.import_module(f".ports.{name}", __package__)
    except ModuleNotFoundError as exc:
        if exc.name and not exc.name.startswith(__package__.rpartition(".backend")[0]):  # a library it needs
            raise ValueError(
                f"worked_port {name}: needs {exc.name}, not installed (pip install 'detach-parity[test]')"
            ) from None
        raise ValueError(f"worked_port: no module torch_impl.ports.{name}") from None


def _key(path: str) -> str:
    return path.replace(".", "/")


def copy_model(model: nn.Module, dtype: str) -> nn.Module:
    """A deep copy of `model` in `dtype` (its parameters in STORAGE[dtype]), with no .grad (the caller's module
    untouched). In float64, the values the model derived in float32 before the pass (HF's rotary inv_freq) are
    built again in float64 where their module can be (precision.rebuild_buffers).

    Raises ValueError for a dtype not in STORAGE.
    """
    if dtype not in STORAGE:
        raise ValueError(f"copy_model: dtype expected one of {list(STORAGE)}, got {dtype!r}")
    twin = clone(model).to(STORAGE[dtype])
    for param in twin.parameters():
        param.grad = None
    if dtype == "float64":
        rebuild_buffers(model, twin)
    return twin


_NORMS = (nn.LayerNorm, nn.GroupNorm, nn.RMSNorm, nn.modules.batchnorm._BatchNorm)


def _config(m: nn.Module) -> dict:
    names = ("eps", "momentum", "num_heads", "num_groups", "padding_idx", "approximate", "batch_first")
    cfg = {n: getattr(m, n) for n in names if isinstance(getattr(m, n, None), int | float | str | tuple)}
    eps = next((getattr(m, n) for n in EPS_NAMES if isinstance(getattr(m, n, None), float)), None)
    if eps is not None:  # a norm's epsilon by any of its names (HF's variance_epsilon)
        cfg["eps"] = eps
    if isinstance(m, _NORMS) or norm_like(m):
        cfg["kind"] = "norm"
    if transformer_knobs.kind_of(m):  # "attention", "rotary", "gated_mlp": what the transformer knobs change
        cfg["kind"] = transformer_knobs.kind_of(m)
    if activation_of(m):  # what it computes: "gelu_tanh" for nn.GELU(approximate="tanh") and HF's gelu_new
        cfg["kind"] = activation_of(m)
    if isinstance(m, nn.modules.conv._ConvNd):
        cfg.update(stride=m.stride, padding=m.padding, dilation=m.dilation, groups=m.groups)
    cfg["training"] = m.training
    return cfg


_BARE = Leaf("value", "", lambda a: a, lambda a: a)  # a bare parameter: its canonical layout is its own


def _tie(first, leaf, shape: tuple) -> dict:
    """A leaf that is the same tensor as an earlier one (GPT-2's lm_head.weight is wte.weight): which one,
    and whether its canonical layout is the transpose of that one's (a Linear's kernel of an Embedding)."""
    key, first_leaf = first
    probe = np.arange(float(np.prod(shape))).reshape(shape)  # this leaf's canonical layout, as numbers
    in_first = first_leaf.to_canon(leaf.to_torch(probe))
    return {
        "tied_to": key,
        "tie_transposed": bool(in_first.shape == probe.T.shape and np.array_equal(in_first, probe.T)),
    }


def _units(model: nn.Module, buffers: bool = True) -> dict[str, dict]:
    units: dict[str, dict] = {}
    seen: dict[int, tuple[str, object]] = {}  # id of a tensor -> (canonical key, leaf) where it came first
    for _, path, sub, leaf in named_leaves(model, buffers=buffers):
        unit = units.setdefault(
            _key(path), {"path": _key(path), "name": path, "type": type(sub).__name__, "bare": False, "leaves": {}}
        )
        target = sub.get_parameter(leaf.attr) if not leaf.buffer else sub.get_buffer(leaf.attr)
        piece = target[leaf.rows[0] : leaf.rows[1]] if leaf.rows else target
        shape = tuple(leaf.to_canon(np.empty(tuple(piece.shape))).shape)
        owner = path.removesuffix(f".{leaf.unit}") if leaf.unit else path  # layer k's unit is its nn.LSTM's
        unit["leaves"][leaf.name] = {
            "shape": shape,
            "source": f"{owner}.{leaf.source}" if owner else leaf.source,
            "buffer": leaf.buffer,
            "trainable": bool(target.requires_grad),
        }
        if not leaf.rows and id(target) in seen:  # one tensor, two modules: tied
            unit["leaves"][leaf.name].update(_tie(seen[id(target)], leaf, shape))
        elif not leaf.rows:
            seen[id(target)] = (f"{_key(path)}/{leaf.name}".lstrip("/"), leaf)
        unit["config"] = _config(sub)
    ruled = {u["name"] for u in units.values()}
    for path, sub in model.named_modules():
        if rule_for(sub) is not None or owned(path, ruled):
            continue
        bare = {n: (t, False) for n, t in sub.named_parameters(recurse=False)}
        if buffers:
            bare.update(
                {n: (t, True) for n, t in sub.named_buffers(recurse=False) if n not in sub._non_persistent_buffers_set}
            )
        if bare:
            leaves = {}
            for n, (t, b) in bare.items():
                leaves[n] = {"shape": tuple(t.shape), "source": f"{path}.{n}" if path else n, "buffer": b}
                leaves[n]["trainable"] = t.requires_grad
                if id(t) in seen:  # BERT's cls.predictions.bias is its decoder's bias
                    leaves[n].update(_tie(seen[id(t)], _BARE, tuple(t.shape)))
                else:
                    seen[id(t)] = (f"{_key(path)}/{n}".lstrip("/"), _BARE)
            units[_key(path)] = {
                "path": _key(path),
                "name": path,
                "type": type(sub).__name__,
                "bare": True,
                "config": _config(sub),
                "leaves": leaves,
            }
    return units


def structure(model: nn.Module) -> dict:
    """The units (ruled modules and owners of bare parameters) and every module's type and config.

    Returns {"units": [{"path", "name", "type", "bare", "config", "leaves": {leaf: {"shape",
    "source", "buffer", "trainable"[, "tied_to", "tie_transposed"]}}}], "modules": [{"path", "type",
    "config"}]}; paths '/'-joined. A leaf that is the same tensor as an earlier one (tied weights)
    names that one's canonical key in `tied_to`, and whether its layout is that one's transpose.
    Raises ValueError for a module configuration no rule explains (the rule says which).
    """
    mods = [{"path": _key(p), "type": type(m).__name__, "config": _config(m)} for p, m in model.named_modules()]
    return {"units": list(_units(model).values()), "modules": mods}


def _bare(model: nn.Module, unit: dict, leaf: str) -> torch.Tensor:
    name = f"{unit['name']}.{leaf}" if unit["name"] else leaf
    return model.get_buffer(name) if unit["leaves"][leaf]["buffer"] else model.get_parameter(name)


def to_native(model: nn.Module, canonical: Mapping[str, Mapping[str, np.ndarray]], grad: bool = False) -> tuple:
    """Canonical leaves per unit path -> torch tensors' layouts, without writing.

    Returns (arrays {torch name: array}, sources {torch name: [unit/leaf]}, dropped {}): the torch
    layout holds every canonical leaf (packed in_proj rows reassembled). `grad` changes nothing here.
    Raises ValueError as load.
    """
    twin = clone(model)
    load(twin, canonical)
    arrays = native(twin)
    sources: dict[str, list[str]] = {}
    for unit in _units(model).values():
        for leaf, facts in unit["leaves"].items():
            sources.setdefault(facts["source"].split("[")[0], []).append(f"{unit['path']}/{leaf}".lstrip("/"))
    return arrays, sources, {}


def read(model: nn.Module, units: list[str] | None = None) -> dict[str, dict[str, np.ndarray]]:
    """Every unit's parameters and buffers in canonical layout: {unit path: {leaf: array}} (numpy copies)."""
    table = _units(model)
    flat = params_of(model, buffers=True)
    out = {}
    for path, unit in table.items():
        if units is not None and path not in units:
            continue
        if unit["bare"]:
            out[path] = {leaf: numpy(_bare(model, unit, leaf)).copy() for leaf in unit["leaves"]}
        else:
            out[path] = {leaf: flat[f"{path}/{leaf}" if path else leaf] for leaf in unit["leaves"]}
    return out


def native(model: nn.Module) -> dict[str, np.ndarray]:
    """Every parameter and persistent buffer by its torch name (`blocks.0.attn.in_proj_weight`), numpy copies."""
    out = {n: numpy(p).copy() for n, p in model.named_parameters()}
    for name, buf in model.named_buffers():
        owner, _, attr = name.rpartition(".")
        if attr not in model.get_submodule(owner)._non_persistent_buffers_set and buf.is_floating_point():
            out[name] = numpy(buf).copy()  # a buffer is state, not in any graph
    return out


def load(model: nn.Module, canonical: Mapping[str, Mapping[str, np.ndarray]], strict: bool = True) -> dict[str, str]:
    """Write canonical leaves (per unit path) into the module's parameters and buffers, in place.

    Returns {} (torch has a place for every canonical leaf). Raises ValueError naming the unit and
    leaf: a missing or extra leaf, an unknown unit, or a shape the rule does not give.
    """
    table = _units(model)
    unknown = sorted(set(canonical) - set(table))
    if unknown:
        raise ValueError(f"torch_model: no unit at {unknown}; units: {sorted(table)}")
    ruled = {}
    for path, leaves in canonical.items():
        unit = table[path]
        if set(leaves) != set(unit["leaves"]):
            raise ValueError(
                f"torch_model: unit {path or '(model)'!r} ({unit['type']}) has leaves {sorted(unit['leaves'])}, "
                f"got {sorted(leaves)}"
            )
        for leaf, value in leaves.items():
            if tuple(np.shape(value)) != unit["leaves"][leaf]["shape"]:
                raise ValueError(
                    f"torch_model: {unit['leaves'][leaf]['source']} expected canonical shape "
                    f"{unit['leaves'][leaf]['shape']} for {path}/{leaf}, got {tuple(np.shape(value))}"
                )
            if unit["bare"]:
                with torch.no_grad():  # loading weights is not part of any graph
                    target = _bare(model, unit, leaf)
                    target.copy_(torch.from_numpy(np.array(value, copy=True)).to(target.dtype))
            else:
                ruled[f"{path}/{leaf}" if path else leaf] = value
    if ruled:
        current = params_of(model, buffers=True)
        load_params(model, {**current, **ruled}, buffers=True)
    return {}
