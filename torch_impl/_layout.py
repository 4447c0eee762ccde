"""The one place where canonical (Flax) parameter layouts become torch layouts and back.

Canonical outputs and fixtures hold dense kernels as `[in, out]` (y = x @ W + b,
the Flax `kernel`); `nn.Linear.weight` is `[out, in]`. A rule table maps each
canonical leaf of a torch module type to its attribute and conversion. Paths are
the module's attribute path with "/" (`backbone/l1/kernel`), so torch modules
and their NNX twins must use the same attribute names.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np
import torch
from torch import nn

__all__ = ["RULES", "load_params", "params_of", "grads_of"]

_T: Callable[[np.ndarray], np.ndarray] = lambda a: a.T  # noqa: E731  [in, out] <-> [out, in]
_ID: Callable[[np.ndarray], np.ndarray] = lambda a: a  # noqa: E731

# nn.RNNCell / nn.GRUCell: weight_ih [gates*H, in] <-> ih/kernel [in, gates*H], GRU gate blocks r | z | n
_RNN_CELL = (
    ("ih/kernel", "weight_ih", _T, _T),
    ("ih/bias", "bias_ih", _ID, _ID),
    ("hh/kernel", "weight_hh", _T, _T),
    ("hh/bias", "bias_hh", _ID, _ID),
)

# module type -> (canonical leaf, torch attribute, canonical->torch, torch->canonical)
RULES: dict[type, tuple[tuple[str, str, Callable, Callable], ...]] = {
    nn.Linear: (("kernel", "weight", _T, _T), ("bias", "bias", _ID, _ID)),
    nn.RNNCell: _RNN_CELL,
    nn.GRUCell: _RNN_CELL,
    nn.LSTMCell: _RNN_CELL,  # gate blocks i | f | g | o in the 4H columns; two biases, as torch has them
    # normalisation layers: only the name changes (torch weight <-> Flax scale); running stats are buffers
    nn.LayerNorm: (("scale", "weight", _ID, _ID), ("bias", "bias", _ID, _ID)),
    nn.BatchNorm1d: (("scale", "weight", _ID, _ID), ("bias", "bias", _ID, _ID)),
}


def _leaves(module: nn.Module):
    for path, sub in module.named_modules():
        rules = RULES.get(type(sub))
        if rules is None:
            continue
        prefix = path.replace(".", "/")
        for leaf, attr, to_torch, to_canon in rules:
            param = getattr(sub, attr)
            if param is None:  # e.g. nn.Linear(bias=False)
                continue
            yield (f"{prefix}/{leaf}" if prefix else leaf), param, to_torch, to_canon


def load_params(module: nn.Module, params: Mapping[str, np.ndarray]) -> nn.Module:
    """Copy canonical arrays into a module's parameters (in place, no autograd record).

    Raises:
      KeyError: a parameter of the module has no canonical array.
      ValueError: a shape disagrees after the layout conversion, or `params` holds
        keys the module does not have.
    """
    seen = set()
    with torch.no_grad():  # loading weights is not part of any graph
        for key, param, to_torch, _ in _leaves(module):
            if key not in params:
                raise KeyError(f"load_params: no array for parameter {key!r}; given {sorted(params)}")
            value = to_torch(np.asarray(params[key]))
            if tuple(value.shape) != tuple(param.shape):
                raise ValueError(
                    f"load_params: {key!r} expected canonical shape {tuple(to_torch(np.empty(param.shape)).shape)}, "
                    f"got {np.asarray(params[key]).shape}"
                )
            param.copy_(torch.from_numpy(np.array(value, copy=True)).to(param.dtype))
            seen.add(key)
    extra = sorted(set(params) - seen)
    if extra:
        raise ValueError(f"load_params: arrays {extra} match no parameter of {type(module).__name__}")
    return module


def params_of(module: nn.Module, tensors: Mapping[str, torch.Tensor] | None = None) -> dict[str, np.ndarray]:
    """Parameters in canonical layout (`l1/kernel` [in, out]), as numpy copies.

    With `tensors` (keyed by torch parameter name, `l1.weight`, as `named_parameters()` and
    `torch.func.functional_call` use), those tensors instead of the module's own: for
    parameter dicts that live outside the module, e.g. MAML's adapted parameters.
    Raises:
      KeyError: a parameter of the module has no tensor.  ValueError: a shape differs, or extra tensors.
    """
    if tensors is None:
        return {key: to_canon(param.detach().cpu().numpy()).copy() for key, param, _, to_canon in _leaves(module)}
    out, seen = {}, set()
    for path, sub in module.named_modules():
        for leaf, attr, _, to_canon in RULES.get(type(sub), ()):
            if getattr(sub, attr) is None:
                continue
            name = f"{path}.{attr}" if path else attr
            if name not in tensors:
                raise KeyError(f"params_of: no tensor for parameter {name!r}; given {sorted(tensors)}")
            value = tensors[name]
            if tuple(value.shape) != tuple(getattr(sub, attr).shape):
                raise ValueError(
                    f"params_of: {name!r} expected shape {tuple(getattr(sub, attr).shape)}, got {tuple(value.shape)}"
                )
            key = f"{path.replace('.', '/')}/{leaf}" if path else leaf
            out[key] = to_canon(value.numpy(force=True)).copy()
            seen.add(name)
    extra = sorted(set(tensors) - seen)
    if extra:
        raise ValueError(f"params_of: tensors {extra} match no parameter of {type(module).__name__}")
    return out


def grads_of(module: nn.Module) -> dict[str, np.ndarray]:
    """`.grad` of every parameter in canonical layout; a None grad becomes explicit zeros (pitfall P11)."""
    out = {}
    for key, param, _, to_canon in _leaves(module):
        g = torch.zeros_like(param) if param.grad is None else param.grad
        out[key] = to_canon(g.detach().cpu().numpy()).copy()
    return out
