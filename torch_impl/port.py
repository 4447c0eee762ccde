"""Port checker, torch half: a user's nn.Module read in canonical layout, run on a batch, trained K steps.

What it does: the torch side of `detach-parity check` (shared/apps/check). The module's
parameters and buffers are read and written in canonical layout through the one rule table
(torch_impl/_layout.py), grouped in units: a ruled module (nn.Linear, nn.MultiheadAttention,
nn.GRU ...) or the bare nn.Parameters of a module. Outputs of every submodule come from
forward hooks; gradients are `.grad` after one backward; K steps use the user's optimizer
factory or training step. `knobs` are counterfactuals (the GELU approximation, norm
epsilons, BatchNorm conventions, mask polarity, Adam's decay, first order) that let the
checker test a hypothesis: if torch with the knob matches JAX, the knob names the bug.
Gradient flow: a parameter with requires_grad False keeps .grad None (absent, frozen: no
optimizer moment, no weight decay); one the loss does not reach keeps None too (P11).
Port note: every unit is keyed by the torch module path with "/" (`blocks/0/attn`), the
path its NNX twin has; jax_impl/port.py maps canonical leaves onto the NNX leaves.
Shapes: canonical per leaf (torch_impl/_layout.py); B batch rows.
Reference: PyTorch docs, nn.Module.register_forward_hook, torch.optim.Adam(decoupled_weight_decay).
"""

from __future__ import annotations

import contextlib
import copy
import importlib
from collections.abc import Callable, Iterator, Mapping

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from torch_impl._common import numerics
from torch_impl._layout import load_params, named_leaves, params_of, rule_for

__all__ = [
    "knobs",
    "worked_port",
    "check_model",
    "copy_model",
    "structure",
    "to_native",
    "read",
    "native",
    "load",
    "run_loss",
    "train",
]

_NNX_EPS = 1e-6  # nnx.LayerNorm / nnx.GroupNorm / nnx.RMSNorm default epsilon
_KNOBS = {
    "gelu_tanh": "every GELU uses the tanh approximation (jax.nn.gelu's default, P04)",
    "norm_eps": f"LayerNorm / GroupNorm / RMSNorm eps = {_NNX_EPS} (the nnx default, P05)",
    "bn_momentum": "BatchNorm momentum m -> 1 - m (nnx's momentum weighs the old value, P06)",
    "bn_biased_var": "BatchNorm running_var updated with the biased batch variance (nnx's rule, P06)",
    "mask_inverted": "boolean attention masks inverted (torch True = masked, Flax True = attend, P12)",
    "lstm_carry_swapped": "LSTM state returned as (c, h) instead of (h, c) (nnx's carry order, P09)",
    "adam_swapped": "Adam's weight decay coupled <-> decoupled (torch Adam vs optax.adamw, P10)",
    "first_order": "torch.autograd.grad never builds a graph (create_graph=False: first order, maml)",
}


def knobs() -> dict[str, str]:
    """The counterfactuals `run_loss` / `train` can apply on this side: name -> what changes."""
    return dict(_KNOBS)


def worked_port(name: str):
    """The worked port `torch_impl.ports.<name>` (the torch model, loss, batch and optimizer).

    Raises ValueError for a name that is not a module of torch_impl/ports.
    """
    if not isinstance(name, str) or not name.isidentifier():
        raise ValueError(f"worked_port: name expected a module name, got {name!r}")
    try:
        return importlib.import_module(f"torch_impl.ports.{name}")
    except ModuleNotFoundError:
        raise ValueError(f"worked_port: no module torch_impl.ports.{name}") from None


def _key(path: str) -> str:
    return path.replace(".", "/")


def check_model(model) -> None:
    """Raise ValueError unless `model` is an nn.Module whose forward is deterministic (no live dropout)."""
    if not isinstance(model, nn.Module):
        raise ValueError(f"torch_model: expected a torch.nn.Module, got {type(model).__name__}")
    for path, sub in model.named_modules():
        p = getattr(sub, "p", 0.0) if isinstance(sub, nn.modules.dropout._DropoutNd) else 0.0
        if isinstance(sub, nn.MultiheadAttention) or (isinstance(sub, nn.RNNBase) and sub.num_layers > 1):
            p = sub.dropout
        if p and sub.training:
            raise ValueError(
                f"torch_model: {type(sub).__name__} at {path or '(model)'} has dropout p={p} in train mode: "
                "compare in eval mode (model.eval()) or pass the same masks to both models"
            )


def copy_model(model: nn.Module, dtype: str) -> nn.Module:
    """A deep copy of `model` in `dtype`, with no .grad (the caller's module untouched)."""
    twin = copy.deepcopy(model).to(getattr(torch, dtype))
    for param in twin.parameters():
        param.grad = None
    return twin


def _config(m: nn.Module) -> dict:
    names = ("eps", "momentum", "num_heads", "num_groups", "padding_idx", "approximate", "batch_first")
    cfg = {n: getattr(m, n) for n in names if isinstance(getattr(m, n, None), int | float | str | tuple)}
    if isinstance(m, nn.modules.conv._ConvNd):
        cfg.update(stride=m.stride, padding=m.padding, dilation=m.dilation, groups=m.groups)
    cfg["training"] = m.training
    return cfg


def _units(model: nn.Module, buffers: bool = True) -> dict[str, dict]:
    units: dict[str, dict] = {}
    for _, path, sub, leaf in named_leaves(model, buffers=buffers):
        unit = units.setdefault(
            _key(path), {"path": _key(path), "name": path, "type": type(sub).__name__, "bare": False, "leaves": {}}
        )
        target = sub.get_parameter(leaf.attr) if not leaf.buffer else sub.get_buffer(leaf.attr)
        piece = target[leaf.rows[0] : leaf.rows[1]] if leaf.rows else target
        unit["leaves"][leaf.name] = {
            "shape": tuple(leaf.to_canon(np.empty(tuple(piece.shape))).shape),
            "source": f"{path}.{leaf.source}" if path else leaf.source,
            "buffer": leaf.buffer,
            "trainable": bool(target.requires_grad),
        }
        unit["config"] = _config(sub)
    ruled = [u["name"] for u in units.values()]
    for path, sub in model.named_modules():
        if rule_for(sub) is not None or any(path.startswith(f"{r}.") or not r for r in ruled):
            continue
        bare = {n: (t, False) for n, t in sub.named_parameters(recurse=False)}
        if buffers:
            bare.update(
                {n: (t, True) for n, t in sub.named_buffers(recurse=False) if n not in sub._non_persistent_buffers_set}
            )
        if bare:
            units[_key(path)] = {
                "path": _key(path),
                "name": path,
                "type": type(sub).__name__,
                "bare": True,
                "config": _config(sub),
                "leaves": {
                    n: {
                        "shape": tuple(t.shape),
                        "source": f"{path}.{n}" if path else n,
                        "buffer": b,
                        "trainable": t.requires_grad,
                    }
                    for n, (t, b) in bare.items()
                },
            }
    return units


def structure(model: nn.Module) -> dict:
    """The units (ruled modules and owners of bare parameters) and every module's type and config.

    Returns {"units": [{"path", "name", "type", "bare", "config", "leaves": {leaf: {"shape",
    "source", "buffer", "trainable"}}}], "modules": [{"path", "type", "config"}]}; paths '/'-joined.
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
    twin = copy.deepcopy(model)
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
            out[path] = {leaf: _bare(model, unit, leaf).detach().cpu().numpy().copy() for leaf in unit["leaves"]}
        else:
            out[path] = {leaf: flat[f"{path}/{leaf}" if path else leaf] for leaf in unit["leaves"]}
    return out


def native(model: nn.Module) -> dict[str, np.ndarray]:
    """Every parameter and persistent buffer by its torch name (`blocks.0.attn.in_proj_weight`), numpy copies."""
    out = {n: p.detach().cpu().numpy().copy() for n, p in model.named_parameters()}
    for name, buf in model.named_buffers():
        owner, _, attr = name.rpartition(".")
        if attr not in model.get_submodule(owner)._non_persistent_buffers_set and buf.is_floating_point():
            out[name] = buf.detach().cpu().numpy().copy()
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


@contextlib.contextmanager
def _knob(model: nn.Module, name: str | None) -> Iterator[None]:
    names = () if name is None else tuple(name.split("+"))  # "a+b": both at once
    if any(n not in _KNOBS for n in names):
        raise ValueError(f"knob expected one of {sorted(_KNOBS)} (or several joined by '+') or None, got {name!r}")
    saved, undo = [], []
    norms = (nn.LayerNorm, nn.GroupNorm, nn.RMSNorm)
    for sub in model.modules():
        if "norm_eps" in names and isinstance(sub, norms):
            saved.append((sub, "eps", sub.eps))
            sub.eps = _NNX_EPS
        if "bn_momentum" in names and isinstance(sub, nn.modules.batchnorm._BatchNorm) and sub.momentum is not None:
            saved.append((sub, "momentum", sub.momentum))
            sub.momentum = 1 - sub.momentum
        if "bn_biased_var" in names and isinstance(sub, nn.modules.batchnorm._BatchNorm):
            undo += [sub.register_forward_pre_hook(_keep_var), sub.register_forward_hook(_biased_var)]
    patched = {
        "gelu_tanh": (F, "gelu", lambda f: lambda x, approximate="none": f(x, approximate="tanh")),
        "mask_inverted": (nn.MultiheadAttention, "forward", _inverted_masks),
        "lstm_carry_swapped": (nn.LSTM, "forward", _swapped_carry),
        "first_order": (torch.autograd, "grad", lambda f: lambda *a, **kw: f(*a, **{**kw, "create_graph": False})),
    }.get(names[0] if len(names) == 1 else None)
    if patched:
        owner, attr, make = patched
        original = getattr(owner, attr)
        setattr(owner, attr, make(original))
    try:
        yield
    finally:
        if patched:
            setattr(owner, attr, original)
        for sub, attr, value in saved:
            setattr(sub, attr, value)
        for handle in undo:
            handle.remove()


def _keep_var(bn, args) -> None:
    # torch updates (and saves for backward) the buffer it is handed: hand it a throwaway copy, keep the real one
    bn._kept_var = bn.running_var
    if bn.running_var is not None:
        bn.running_var = bn.running_var.clone()


def _biased_var(bn, args, out) -> None:
    kept, bn.running_var = bn._kept_var, bn._kept_var
    if bn.training and kept is not None and bn.momentum is not None:
        x = args[0]
        dims = [d for d in range(x.dim()) if d != 1]
        with torch.no_grad():  # the running statistics are buffers, outside the graph
            var = x.var(dim=dims, correction=0)  # biased: nnx's running variance
            kept.copy_((1 - bn.momentum) * kept + bn.momentum * var)


def _inverted_masks(forward: Callable) -> Callable:
    def inverted(self, *args, **kwargs):
        for name in ("key_padding_mask", "attn_mask"):
            mask = kwargs.get(name)
            if mask is not None and mask.dtype == torch.bool:
                kwargs[name] = ~mask
        return forward(self, *args, **kwargs)

    return inverted


def _swapped_carry(forward: Callable) -> Callable:
    def swapped(self, *args, **kwargs):
        out, (h, c) = forward(self, *args, **kwargs)
        return out, (c, h)

    return swapped


def _arrays(out) -> list[np.ndarray]:
    if isinstance(out, torch.Tensor):
        return [out.detach().cpu().numpy().copy()]
    if isinstance(out, tuple | list):
        return [a for o in out for a in _arrays(o)]
    if isinstance(out, Mapping):
        return [a for o in out.values() for a in _arrays(o)]
    return []


def _batch(batch: Mapping[str, np.ndarray]) -> dict[str, torch.Tensor]:
    return {k: torch.from_numpy(np.array(v, copy=True)) for k, v in batch.items()}


def _scalar(loss, name: str) -> torch.Tensor:
    if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
        shape = tuple(loss.shape) if isinstance(loss, torch.Tensor) else np.shape(loss)
        raise ValueError(f"{name}: expected a scalar torch.Tensor, got {type(loss).__name__} of shape {shape}")
    if not loss.is_floating_point():
        raise ValueError(f"{name}: expected a floating scalar, got dtype {loss.dtype}")
    return loss.reshape(())


def _call(fn: Callable, model, batch, name: str):
    try:
        return fn(model, batch)
    except Exception as exc:
        shapes = {k: (tuple(v.shape), str(v.dtype).removeprefix("torch.")) for k, v in batch.items()}
        raise ValueError(f"{name}(model, batch) raised {type(exc).__name__}: {exc} (batch: {shapes})") from exc


def _grads(model: nn.Module) -> tuple[dict, dict]:
    grads, trainable = {}, {}
    for path, unit in _units(model, buffers=False).items():
        for leaf, facts in unit["leaves"].items():
            trainable.setdefault(path, {})[leaf] = facts["trainable"]
    for _, path, sub, leaf in named_leaves(model):
        g = sub.get_parameter(leaf.attr).grad
        piece = None if g is None else (g[leaf.rows[0] : leaf.rows[1]] if leaf.rows else g)
        grads.setdefault(_key(path), {})[leaf.name] = (
            None if piece is None else leaf.to_canon(piece.cpu().numpy()).copy()
        )
    for path, unit in _units(model, buffers=False).items():
        if unit["bare"]:
            for leaf in unit["leaves"]:
                g = _bare(model, unit, leaf).grad
                grads.setdefault(path, {})[leaf] = None if g is None else g.cpu().numpy().copy()
    return grads, trainable


def run_loss(model, batch: Mapping[str, np.ndarray], loss_fn: Callable, dtype: str, wrt=None, knob=None) -> dict:
    """One forward with every submodule's output recorded (forward hooks), then loss.backward().

    Args:
      batch: numpy arrays, already in `dtype`; loss_fn(model, batch) -> scalar tensor.
      wrt: unused (requires_grad says what trains); the JAX twin takes the optimizer's filter.
    Returns:
      {"loss": 0-d array, "outputs": {module path: [[arrays] per call]}, "grads": {unit: {leaf:
       canonical array, or None where .grad is None}}, "trainable": {unit: {leaf: requires_grad}}}.
    Raises:
      ValueError: the loss raised or is not a scalar.
    """
    with numerics(dtype), _knob(model, knob):
        return _run(model, _batch(batch), loss_fn)


@contextlib.contextmanager
def _hooks(model: nn.Module, outputs: dict[str, list]) -> Iterator[None]:
    def hook(name: str):
        return lambda module, args, out: outputs.setdefault(name, []).append(_arrays(out))

    handles = [sub.register_forward_hook(hook(_key(p))) for p, sub in model.named_modules()]
    try:
        yield
    finally:
        for h in handles:
            h.remove()


def _run(model: nn.Module, b: dict, loss_fn: Callable, after_backward: Callable | None = None) -> dict:
    outputs: dict[str, list] = {}
    with _hooks(model, outputs):
        loss = _scalar(_call(loss_fn, model, b, "torch_loss"), "torch_loss")
    if loss.requires_grad:  # a loss computed from stopped values only has no graph: every .grad stays None
        loss.backward()
    grads, trainable = _grads(model)
    if after_backward:
        after_backward()
    return {"loss": loss.detach().numpy().copy(), "outputs": outputs, "grads": grads, "trainable": trainable}


def train(
    model, batch: Mapping[str, np.ndarray], loss_fn: Callable, dtype: str, optimizer=None, step=None, k=5, knob=None
) -> list[dict]:
    """K training steps on one batch; per step the loss (before the update) and every unit after it.

    Args:
      optimizer: a factory params -> torch.optim.Optimizer, called once with model.parameters().
      step: instead, the user's step(model, batch) -> loss (several optimizers, a target update).
    Returns:
      [{"loss": 0-d array, "values": {unit: {leaf: canonical array}}}] * k; with an optimizer, the
      first step also holds "run": what run_loss returns for the starting model (the same forward
      and backward the first update uses).
    """
    with numerics(dtype), _knob(model, knob):
        b = _batch(batch)
        name = "torch_step" if step is not None else "torch_loss"
        if step is None:
            # GRAD-FLOW: frozen leaves stay out of the optimizer: no moment, no weight decay
            opt = optimizer(model.parameters())  # torch.optim skips a parameter whose .grad is None
            if not isinstance(opt, torch.optim.Optimizer):
                raise ValueError(
                    f"torch_optimizer: expected a factory of torch.optim.Optimizer, got {type(opt).__name__}"
                )
            if knob and "adam_swapped" in knob.split("+"):
                if any("decoupled_weight_decay" not in g for g in opt.param_groups):
                    raise ValueError(f"knob adam_swapped: expected torch.optim.Adam / AdamW, got {type(opt).__name__}")
                for group in opt.param_groups:
                    group["decoupled_weight_decay"] = not group["decoupled_weight_decay"]

            def step(m, batch):
                opt.zero_grad(set_to_none=True)
                if not runs:  # the first step, recorded: outputs and .grad before the update
                    runs.append(_run(m, batch, loss_fn, after_backward=opt.step))
                    return torch.from_numpy(runs[0]["loss"])
                loss = _scalar(loss_fn(m, batch), "torch_loss")
                # GRAD-FLOW: only the trainable leaves are differentiated: a frozen one gets no gradient
                loss.backward()
                opt.step()
                return loss

        runs: list[dict] = []
        out = []
        for _ in range(k):
            loss = _scalar(_call(step, model, b, name), name)
            out.append({"loss": loss.detach().numpy().copy(), "values": read(model)})
        if out and runs:
            out[0]["run"] = runs[0]
        return out
