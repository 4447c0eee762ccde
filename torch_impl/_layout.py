"""The one place where canonical (Flax) parameter layouts become torch layouts and back.

Canonical arrays hold the Flax layouts: dense kernels `[in, out]` (y = x @ W + b, the Flax
`kernel`; `nn.Linear.weight` is `[out, in]`), conv kernels `[*window, in/groups, out]`
(channels last), attention projections `[E, heads, head_dim]` (nnx.MultiHeadAttention),
`scale` for a norm's `weight`, `mean` / `var` for BatchNorm's running statistics. A rule
table maps each torch module type to its canonical leaves: the torch attribute (and the
rows of it, for attention's packed `in_proj`), the conversion each way, and whether it is
a buffer. Paths are the module's attribute path with "/" (`backbone/l1/kernel`), so torch
modules and their NNX twins use the same attribute names; jax_impl/backend/port.py maps these
leaves onto NNX modules whose own structure differs (nnx.GRUCell, nnx.LSTMCell).
A module with a rule owns its subtree (MultiheadAttention's `out_proj` is not a Linear
of its own). Buffers (running statistics) travel only when asked (`buffers=True`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from ._common import numpy
from ._weight_norm import reparametrized

__all__ = ["Leaf", "RULES", "EPS_NAMES", "norm_like", "rule_for", "owned", "named_leaves", "load_params", "params_of",
           "grads_of"]  # fmt: skip


@dataclass(frozen=True)
class Leaf:
    """One canonical leaf of a torch module: `name` <- `attr`[rows] through `to_canon` (and back)."""

    name: str  # canonical, relative to the module: "kernel", "query/kernel", "mean"
    attr: str  # torch attribute, dotted below the module: "weight", "in_proj_weight", "out_proj.weight"
    to_canon: Callable[[np.ndarray], np.ndarray]
    to_torch: Callable[[np.ndarray], np.ndarray]
    rows: tuple[int, int] | None = None  # a block of rows of `attr` (packed q | k | v)
    buffer: bool = False  # running statistics: state, not a parameter
    unit: str = ""  # a unit below the module: "1" for layer 1 of a multi-layer nn.LSTM (the port's lstm/1)

    @property
    def source(self) -> str:
        """The torch name it comes from, relative to the module: `in_proj_weight[0:8]`."""
        return f"{self.attr}[{self.rows[0]}:{self.rows[1]}]" if self.rows else self.attr


_T: Callable[[np.ndarray], np.ndarray] = lambda a: a.T  # noqa: E731  [in, out] <-> [out, in]
_ID: Callable[[np.ndarray], np.ndarray] = lambda a: a  # noqa: E731


def _linear(m: nn.Linear) -> tuple[Leaf, ...]:
    return (Leaf("kernel", "weight", _T, _T), Leaf("bias", "bias", _ID, _ID))


def _conv(m: nn.Conv1d | nn.Conv2d) -> tuple[Leaf, ...]:
    # weight [out, in/groups, *window] <-> kernel [*window, in/groups, out]
    n = m.weight.dim()
    to_canon = lambda a: np.transpose(a, (*range(2, n), 1, 0))  # noqa: E731
    to_torch = lambda a: np.transpose(a, (n - 1, n - 2, *range(n - 2)))  # noqa: E731
    return (Leaf("kernel", "weight", to_canon, to_torch), Leaf("bias", "bias", _ID, _ID))


def _conv_transpose(m: nn.ConvTranspose2d) -> tuple[Leaf, ...]:
    # weight [in, out, kh, kw] <-> kernel [kh, kw, in, out] flipped in space: nnx.ConvTranspose
    # (transpose_kernel=False) is a dilated correlation, torch's is the gradient of a convolution
    if m.groups != 1:
        raise ValueError(
            f"nn.ConvTranspose2d: groups expected 1 (nnx.ConvTranspose has no feature groups), got {m.groups}"
        )
    to_canon = lambda a: np.transpose(a, (2, 3, 0, 1))[::-1, ::-1]  # noqa: E731
    to_torch = lambda a: np.transpose(a[::-1, ::-1], (2, 3, 0, 1))  # noqa: E731
    return (Leaf("kernel", "weight", to_canon, to_torch), Leaf("bias", "bias", _ID, _ID))


def _norm(m: nn.Module) -> tuple[Leaf, ...]:
    # normalisation layers: only the name changes (torch weight <-> Flax scale)
    return (Leaf("scale", "weight", _ID, _ID), Leaf("bias", "bias", _ID, _ID))


def _batch_norm(m: nn.modules.batchnorm._BatchNorm) -> tuple[Leaf, ...]:
    stats = (Leaf("mean", "running_mean", _ID, _ID, buffer=True), Leaf("var", "running_var", _ID, _ID, buffer=True))
    return _norm(m) + stats


def _attention(m: nn.MultiheadAttention) -> tuple[Leaf, ...]:
    # in_proj_weight [3E, E] rows q | k | v <-> query/key/value kernel [E_in, H, E/H]; out_proj [E, E] <-> [H, E/H, E]
    if m.bias_k is not None or m.add_zero_attn:
        raise ValueError("nn.MultiheadAttention: add_bias_kv / add_zero_attn expected False (nnx has no counterpart)")
    e, h = m.embed_dim, m.num_heads
    d = e // h
    out = []
    for i, (name, dim) in enumerate((("query", e), ("key", m.kdim), ("value", m.vdim))):
        to_canon = lambda a, dim=dim: a.T.reshape(dim, h, d)  # noqa: E731
        to_torch = lambda a, dim=dim: a.reshape(dim, e).T  # noqa: E731
        if m._qkv_same_embed_dim:
            out.append(Leaf(f"{name}/kernel", "in_proj_weight", to_canon, to_torch, rows=(i * e, (i + 1) * e)))
        else:
            out.append(Leaf(f"{name}/kernel", f"{name[0]}_proj_weight", to_canon, to_torch))
        bias = lambda a: a.reshape(h, d)  # noqa: E731
        out.append(Leaf(f"{name}/bias", "in_proj_bias", bias, lambda a: a.reshape(e), rows=(i * e, (i + 1) * e)))
    out.append(Leaf("out/kernel", "out_proj.weight", lambda a: a.T.reshape(h, d, e), lambda a: a.reshape(e, e).T))
    out.append(Leaf("out/bias", "out_proj.bias", _ID, _ID))
    return tuple(out)


# nn.RNNCell / nn.GRUCell / nn.LSTMCell: weight_ih [gates*H, in] <-> ih/kernel [in, gates*H]; GRU gate
# blocks r | z | n, LSTM i | f | g | o in the columns; two biases, as torch has them
def _cell(m: nn.RNNCellBase) -> tuple[Leaf, ...]:
    return (
        Leaf("ih/kernel", "weight_ih", _T, _T),
        Leaf("ih/bias", "bias_ih", _ID, _ID),
        Leaf("hh/kernel", "weight_hh", _T, _T),
        Leaf("hh/bias", "bias_hh", _ID, _ID),
    )


def _recurrent(m: nn.RNNBase) -> tuple[Leaf, ...]:
    # nn.GRU / nn.LSTM / nn.RNN: one direction, the cell's leaves (weight_ih_l0 ...); with several layers, layer k
    # is the unit k below the module (the port's lstm/0, lstm/1: a list of cells or nnx.RNNs)
    if m.bidirectional or getattr(m, "proj_size", 0):
        raise ValueError(
            f"nn.{type(m).__name__}: expected bidirectional=False, proj_size=0 (one nnx.RNN per layer and direction), "
            f"got bidirectional={m.bidirectional}, proj_size={getattr(m, 'proj_size', 0)}"
        )
    unit = (lambda k: str(k)) if m.num_layers > 1 else (lambda k: "")  # noqa: E731
    return tuple(
        Leaf(leaf.name, f"{leaf.attr}_l{k}", leaf.to_canon, leaf.to_torch, unit=unit(k))
        for k in range(m.num_layers)
        for leaf in _cell(m)
    )


# module type -> its canonical leaves (a function of the module: shapes and heads vary); another library's class
# by qualified name: the library stays optional (transformers takes seconds to import; only a model built with it has one)
RULES: dict[type | str, Callable[[nn.Module], tuple[Leaf, ...]]] = {
    nn.Linear: _linear,
    nn.Conv1d: _conv,
    nn.Conv2d: _conv,
    nn.ConvTranspose2d: _conv_transpose,
    nn.Embedding: lambda m: (Leaf("embedding", "weight", _ID, _ID),),
    nn.LayerNorm: _norm,
    nn.RMSNorm: lambda m: (Leaf("scale", "weight", _ID, _ID),),
    nn.GroupNorm: _norm,
    nn.BatchNorm1d: _batch_norm,
    nn.BatchNorm2d: _batch_norm,
    nn.MultiheadAttention: _attention,
    nn.RNNCell: _cell,
    nn.GRUCell: _cell,
    nn.LSTMCell: _cell,
    nn.RNN: _recurrent,
    nn.GRU: _recurrent,
    nn.LSTM: _recurrent,
    # HF GPT-2's Conv1D: y = x @ weight + bias, weight [in, out] already a dense kernel, untransposed
    "transformers.pytorch_utils.Conv1D": lambda m: (Leaf("kernel", "weight", _ID, _ID), Leaf("bias", "bias", _ID, _ID)),
}


EPS_NAMES = ("eps", "variance_epsilon", "epsilon")  # what libraries call a norm's epsilon (HF: variance_epsilon)


def norm_like(module: nn.Module) -> bool:
    """A normalisation layer recognised by what it is, whatever its class (HF's LlamaRMSNorm, T5LayerNorm):
    no submodules, a 1-D `weight` (and maybe a `bias`) as its only parameters, and a numeric epsilon."""
    params = dict(module.named_parameters(recurse=False))
    return (
        not any(True for _ in module.children())
        and "weight" in params
        and params["weight"].dim() == 1
        and set(params) <= {"weight", "bias"}
        and any(isinstance(getattr(module, n, None), float) for n in EPS_NAMES)
    )


def rule_for(module: nn.Module) -> tuple[Leaf, ...] | None:
    """The canonical leaves of a module by its type or class name (a subclass inherits its base's rule), else None.

    A module of another library whose class no rule names may still be recognised by what it is
    (`norm_like`: a norm's scale and bias). A weight-normed weight's leaf is its g and v (_weight_norm.py).
    Raises ValueError for a configuration no rule explains (e.g. a bidirectional nn.LSTM).
    """
    for cls in type(module).__mro__:
        rule = RULES.get(cls) or RULES.get(f"{cls.__module__}.{cls.__qualname__}")
        if rule is not None:
            return reparametrized(module, rule(module))
    if norm_like(module):
        return _norm(module)
    return None


def _attr(module: nn.Module, dotted: str) -> torch.Tensor | None:
    for part in dotted.split("."):
        module = getattr(module, part, None)
    return module


def owned(path: str, owners: set[str]) -> bool:
    """Whether a module path lies below one of `owners` (ruled module paths; "" is the root).

    Looks up the path's ancestors, not every owner: the walk of a model stays linear in its size.
    """
    parts = path.split(".") if path else []
    return any(".".join(parts[:i]) in owners for i in range(len(parts)))


def named_leaves(module: nn.Module, *, buffers: bool = False) -> Iterator[tuple[str, str, nn.Module, Leaf]]:
    """(canonical key, module path, submodule, leaf) of every ruled submodule; a ruled module owns its subtree.

    A leaf whose attribute is None (nn.Linear(bias=False), affine=False) is skipped.
    """
    owners: set[str] = set()
    for path, sub in module.named_modules():
        if owned(path, owners):
            continue
        rules = rule_for(sub)
        if rules is None:
            continue
        owners.add(path)
        for leaf in rules:
            if (leaf.buffer and not buffers) or _attr(sub, leaf.attr) is None:
                continue
            at = ".".join(p for p in (path, leaf.unit) if p)  # a unit below the module: layer k of an nn.LSTM
            prefix = at.replace(".", "/")
            yield (f"{prefix}/{leaf.name}" if prefix else leaf.name), at, sub, leaf


def _piece(tensor: torch.Tensor, leaf: Leaf) -> torch.Tensor:
    return tensor[leaf.rows[0] : leaf.rows[1]] if leaf.rows else tensor


def load_params(module: nn.Module, params: Mapping[str, np.ndarray], *, buffers: bool = False) -> nn.Module:
    """Copy canonical arrays into a module's parameters (and running statistics with `buffers`), in place.

    Raises:
      KeyError: a parameter of the module has no canonical array.
      ValueError: a shape disagrees after the layout conversion, or `params` holds
        keys the module does not have.
    """
    seen = set()
    with torch.no_grad():  # loading weights is not part of any graph
        for key, _, sub, leaf in named_leaves(module, buffers=buffers):
            if key not in params:
                raise KeyError(f"load_params: no array for parameter {key!r}; given {sorted(params)}")
            target = _piece(_attr(sub, leaf.attr), leaf)
            value = leaf.to_torch(np.asarray(params[key]))
            if tuple(value.shape) != tuple(target.shape):
                expected = leaf.to_canon(np.empty(tuple(target.shape))).shape
                raise ValueError(
                    f"load_params: {key!r} expected canonical shape {tuple(expected)}, got {np.asarray(params[key]).shape}"
                )
            target.copy_(torch.from_numpy(np.array(value, copy=True)).to(target.dtype))
            seen.add(key)
    extra = sorted(set(params) - seen)
    if extra:
        raise ValueError(f"load_params: arrays {extra} match no parameter of {type(module).__name__}")
    return module


def params_of(
    module: nn.Module, tensors: Mapping[str, torch.Tensor] | None = None, *, buffers: bool = False
) -> dict[str, np.ndarray]:
    """Parameters (and running statistics with `buffers`) in canonical layout (`l1/kernel` [in, out]), numpy copies.

    With `tensors` (keyed by torch parameter name, `l1.weight`, as `named_parameters()` and
    `torch.func.functional_call` use), those tensors instead of the module's own: for
    parameter dicts that live outside the module, e.g. MAML's adapted parameters.
    Raises:
      KeyError: a parameter of the module has no tensor.  ValueError: a shape differs, or extra tensors.
    """
    out, seen = {}, set()
    for key, path, sub, leaf in named_leaves(module, buffers=buffers):
        own = _attr(sub, leaf.attr)
        if tensors is None:
            value = own
        else:
            name = f"{path}.{leaf.attr}" if path else leaf.attr
            if name not in tensors:
                raise KeyError(f"params_of: no tensor for parameter {name!r}; given {sorted(tensors)}")
            value = tensors[name]
            if tuple(value.shape) != tuple(own.shape):
                raise ValueError(f"params_of: {name!r} expected shape {tuple(own.shape)}, got {tuple(value.shape)}")
            seen.add(name)
        out[key] = np.array(leaf.to_canon(numpy(_piece(value, leaf))), copy=True)
    extra = sorted(set(tensors or ()) - seen)
    if extra:
        raise ValueError(f"params_of: tensors {extra} match no parameter of {type(module).__name__}")
    return out


def grads_of(module: nn.Module) -> dict[str, np.ndarray]:
    """`.grad` of every parameter in canonical layout; a None grad becomes explicit zeros (pitfall P11)."""
    out = {}
    for key, _, sub, leaf in named_leaves(module):
        param = _attr(sub, leaf.attr)
        g = torch.zeros_like(param) if param.grad is None else param.grad
        out[key] = np.array(leaf.to_canon(numpy(_piece(g, leaf))), copy=True)
    return out
