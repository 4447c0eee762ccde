"""Port checker, JAX half, layouts: a user's Flax NNX module read and written in canonical layout, by units.

What it does: the NNX side of `detach-parity check` (shared/apps/check). Canonical leaves
(torch_impl/_layout.py's rule table, keyed by the torch module's path) become the NNX
module's own leaves by a second, smaller table keyed by NNX type: most NNX modules already
hold the canonical layout (nnx.Linear, nnx.Conv, nnx.MultiHeadAttention, nnx.BatchNorm);
the recurrent cells split or fold gates (nnx.GRUCell, nnx.LSTMCell, nnx.OptimizedLSTMCell,
nnx.SimpleCell, inside nnx.RNN). Everything compared is keyed by the NNX leaf paths.
jax_impl/backend/port_run.py runs the module.
Gradient flow: none here; nnx.Param and nnx.BatchStat leaves are read and written as values.
Port note: nnx.GRUCell has no slot for torch's b_hn (P08): it is reported as dropped, never
silently lost. nnx.LSTMCell keeps one bias per gate where torch keeps b_ih and b_hh: the
sum carries over (the forward matches), but torch trains both, so a step moves the sum
twice as far (P09). nnx.Sequential keeps its children under `layers/`: paths are also
given without it (the alias), as torch's nn.Sequential names them. nnx.BatchNorm keeps its
statistics in float32 whatever its param_dtype: `copy_model` casts them too.
Shapes: canonical per leaf (see torch_impl/_layout.py).
Reference: Flax NNX docs (nnx.state, nnx.clone, nnx.iter_modules, flax.nnx.nn.recurrent).
"""

from __future__ import annotations

import bisect
import importlib
import weakref
from collections.abc import Callable, Mapping

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from .._common import numerics, numpy
from .layout import register, rule_for
from .norm_rule import EPS_NAMES, suggestion
from .precision import STORAGE

__all__ = ["worked_port", "check_model", "view", "copy_model", "structure", "to_native", "read", "native", "load",
           "register"]  # fmt: skip

_STATE_TYPES = (nnx.Param, nnx.BatchStat)  # what a check compares and trains
_STATE = nnx.Any(*_STATE_TYPES)


def worked_port(name: str):
    """The worked port `jax_impl.ports.<name>` (correct NNX port and its buggy variants).

    Raises ValueError for a name that is not a module of jax_impl/ports, or one whose library
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
        raise ValueError(f"worked_port: no module jax_impl.ports.{name}") from None


def _key(path) -> str:
    return "/".join(map(str, path))


def check_model(model) -> None:
    """Raise ValueError unless `model` is an nnx.Module whose forward is deterministic (no live dropout) and
    whose leaves are real values (not complex)."""
    if not isinstance(model, nnx.Module):
        raise ValueError(f"jax_model: expected a flax.nnx.Module, got {type(model).__name__}")
    for path, var in nnx.to_flat_state(nnx.state(model)):
        if jnp.iscomplexobj(var.get_value()):  # casting to float64 would drop the imaginary part silently
            raise ValueError(
                f"jax_model: {_key(path)} is {var.get_value().dtype}: the checker compares real "
                "parameters (float64 / float32)"
            )
    for path, sub in nnx.iter_modules(model):
        rate = getattr(sub, "dropout_rate", getattr(sub, "rate", 0.0)) if isinstance(sub, nnx.Dropout) else 0.0
        if isinstance(sub, nnx.MultiHeadAttention):
            rate = sub.dropout_rate
        if rate and not getattr(sub, "deterministic", False):
            raise ValueError(
                f"jax_model: {type(sub).__name__} at {_key(path) or '(model)'} has dropout rate {rate} and is not "
                "deterministic: compare in eval mode (model.eval()) or pass the same masks to both models"
            )


def view(model) -> tuple:
    """The model as the checker reads and runs it, and the notes that say how: an NNX module as it is, no notes
    (torch's reads through torch.compile's wrapper; nnx.jit wraps functions, never a module)."""
    return model, []


def copy_model(model, dtype: str):
    """An nnx.clone of `model` in `dtype`, every array its own (the caller's untouched, never donated).

    Every floating nnx.Param / nnx.BatchStat is cast to STORAGE[dtype], and so are the modules' `param_dtype`
    and a floating `dtype` (nnx.GRUCell makes its carry in param_dtype; a computation dtype of float32 would
    otherwise make the float64 pass a float32 one); "mixed_bfloat16" keeps each module's `dtype` as built.
    Raises ValueError for a dtype not in STORAGE.
    """
    if dtype not in STORAGE:
        raise ValueError(f"copy_model: dtype expected one of {list(STORAGE)}, got {dtype!r}")
    with numerics("float64" if dtype == "float64" else "float32"):
        twin = nnx.clone(model)
        for _, sub in nnx.iter_modules(twin):
            for attr in ("param_dtype",) if dtype == "mixed_bfloat16" else ("param_dtype", "dtype"):
                value = getattr(sub, attr, None)
                if value is not None and jnp.issubdtype(value, jnp.floating):
                    setattr(sub, attr, STORAGE[dtype])
        state = nnx.state(twin)  # every Variable: an nnx.Rngs' key and count too, which a jitted step donates
        for _, var in nnx.to_flat_state(state):
            value = var.get_value()
            if isinstance(var, _STATE_TYPES) and jnp.issubdtype(value.dtype, jnp.floating):
                var.set_value(jnp.asarray(np.asarray(value, dtype=STORAGE[dtype])))  # in numpy: no compile per shape
            elif isinstance(value, jax.Array):  # its own buffer, not the caller's: a jitted step may donate it
                var.set_value(jnp.array(value, copy=True))
        nnx.update(twin, state)
    return twin


def _sequential_alias(modules: dict[tuple, nnx.Module]) -> Callable[[tuple], tuple]:
    seqs = {p for p, m in modules.items() if isinstance(m, nnx.Sequential)}

    def alias(path: tuple) -> tuple:
        out = []
        for i, part in enumerate(path):
            if part == "layers" and tuple(path[:i]) in seqs:
                continue  # nnx.Sequential keeps its children in `layers`; torch's nn.Sequential names them directly
            out.append(part)
        return tuple(out)

    return alias


def _config(m: nnx.Module) -> dict:
    names = ("epsilon", "momentum", "num_heads", "num_groups", "strides", "padding", "kernel_dilation")
    cfg = {n: getattr(m, n) for n in names if isinstance(getattr(m, n, None), int | float | str | tuple)}
    eps = next((getattr(m, n) for n in EPS_NAMES if isinstance(getattr(m, n, None), float)), None)
    if eps is not None:  # a hand-written norm's epsilon by the names torch's side reads too (`eps`, HF's own)
        cfg["epsilon"] = eps
    if isinstance(m, nnx.Conv):
        cfg["feature_group_count"] = m.feature_group_count
    if isinstance(m, nnx.BatchNorm | nnx.Dropout):
        cfg["use_running_average"] = getattr(m, "use_running_average", None)
    return cfg


def structure(model) -> dict:
    """The module tree and its state leaves.

    Returns {"modules": [{"path", "alias", "type", "config"}], "variables": {path: {"alias", "shape", "kind"}}},
    paths '/'-joined (root ""), `alias` without nnx.Sequential's `layers/`, kind "param" | "batch_stat".
    """
    modules = dict(nnx.iter_modules(model))
    alias = _sequential_alias(modules)
    seqs = {p for p, m in modules.items() if isinstance(m, nnx.Sequential)}
    mods = [
        {"path": _key(p), "alias": _key(alias(p)), "type": type(m).__name__, "config": _config(m)}
        for p, m in modules.items()
        if not (p and p[-1] == "layers" and p[:-1] in seqs)  # nnx.Sequential's own list: no torch twin
    ]
    variables = {
        _key(p): {
            "alias": _key(alias(p)),
            "shape": tuple(v.get_value().shape),
            "kind": "batch_stat" if isinstance(v, nnx.BatchStat) else "param",
        }
        for p, v in nnx.to_flat_state(nnx.state(model, _STATE))
    }
    return {"modules": mods, "variables": variables}


def _module_at(model, path: str):
    node = model
    for part in path.split("/") if path else ():
        node = node[int(part)] if isinstance(node, nnx.List | list | tuple) and part.isdigit() else getattr(node, part)
    return node


def to_native(model, canonical: Mapping[str, Mapping[str, np.ndarray]], grad: bool = False) -> tuple[dict, dict, dict]:
    """Canonical leaves per NNX unit path -> NNX leaves, without writing.

    Args:
      canonical: {NNX module path (real, '/'): {canonical leaf: array}}, the torch units matched there.
      grad: map gradients (a folded bias takes one of torch's two equal bias gradients) instead of values.
    Returns:
      (leaves {NNX path: array}, sources {NNX path: [unit/leaf canonical keys]}, dropped {unit/leaf: why}).
    Raises:
      ValueError: a unit path is not a module, a leaf is missing, or a shape differs (names both shapes).
    """
    state = _shapes(model)
    leaves, sources, dropped = {}, {}, {}
    for unit, canon in canonical.items():
        try:
            module = _module_at(model, unit)
        except (AttributeError, IndexError, KeyError, TypeError):
            raise ValueError(f"jax_model: no module at {unit!r}") from None
        prefix, to, _, cell = rule_for(module)
        out, src, drop = to(cell, {k: np.asarray(v) for k, v in canon.items()}, grad)
        head = f"{unit}/{prefix}" if unit else prefix
        for rel, value in out.items():
            path = f"{head}{rel}"
            if path not in state:
                own = sorted(k.removeprefix(f"{unit}/") for k in state if k.startswith(head))
                # a class of the user's holding a standard layer's leaves under its own names: say the rule it takes
                # (a norm's filled in with its own leaf names: norm_rule.suggestion)
                blank = ", ".join(f"{k!r}: <its leaf>" for k in canon)
                rule = suggestion(cell, canon) or f"register_rule({type(cell).__name__}, {{{blank}}})"
                fix = "" if type(cell).__module__.startswith("flax") else (
                    f": a class of your own holding them under other names takes a rule, {rule} (README, Check "
                    "your own port)")  # fmt: skip
                raise ValueError(
                    f"jax_model: {type(cell).__name__} at {unit or '(model)'!r} has no leaf {prefix}{rel!r} "
                    f"for canonical {src[rel]} (its leaves: {own}){fix}"
                )
            if _keepdims_g(src[rel], np.shape(value), state[path]):
                value = np.reshape(value, state[path])
            if tuple(np.shape(value)) != state[path]:
                raise ValueError(
                    f"jax_model: {path!r} has shape {state[path]}, the torch weights give "
                    f"{tuple(np.shape(value))} (canonical {src[rel]}): no layout rule explains it"
                )
            leaves[path] = np.asarray(value)
            sources[path] = [f"{unit}/{s}" if unit else s for s in src[rel]]
        dropped.update({f"{unit}/{k}" if unit else k: why for k, why in drop.items()})
    return leaves, sources, dropped


_SHAPES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # model object -> {leaf path: shape}


def _shapes(model) -> dict[str, tuple]:
    """The shapes of `model`'s Params and BatchStats by path, read once per model object: a check maps every
    step of both sides onto its copies, whose leaves keep their shapes (a model reshaped in place is not one)."""
    if model not in _SHAPES:
        _SHAPES[model] = {_key(p): tuple(v.get_value().shape) for p, v in nnx.to_flat_state(nnx.state(model, _STATE))}
    return _SHAPES[model]


def _keepdims_g(sources: list[str], canonical: tuple, port: tuple) -> bool:
    """Whether a weight norm's g (canonical `<leaf>_g`, [n]) is held by the port with the kernel's rank, its
    other axes of size 1 ([1, 1, n] for a conv kernel, as torch keeps it [n, 1, 1]): the same g, reshaped."""
    squeezed = tuple(d for d in port if d != 1)
    return (
        len(sources) == 1
        and sources[0].endswith("_g")
        and tuple(canonical) != tuple(port)
        and squeezed == tuple(d for d in canonical if d != 1)
    )


def read(model, units: list[str]) -> dict[str, dict[str, np.ndarray]]:
    """The NNX leaves under each unit path in canonical layout (the reverse direction, NNX -> torch).

    A folded bias comes back whole in `ih/bias` (and zeros in `hh/bias`): the same function in torch.
    """
    state = native(model)
    keys = sorted(state)  # the leaves under a unit are one run of the sorted keys: found by bisection
    out = {}
    for unit in units:
        prefix, _, back, cell = rule_for(_module_at(model, unit))
        head = f"{unit}/{prefix}" if unit else prefix
        i, leaves = bisect.bisect_left(keys, head), {}
        while i < len(keys) and keys[i].startswith(head):
            leaves[keys[i][len(head) :]] = state[keys[i]]
            i += 1
        out[unit] = back(cell, leaves)
    return out


def native(model) -> dict[str, np.ndarray]:
    """Every nnx.Param and nnx.BatchStat of `model` as numpy, keyed by its '/'-joined path."""
    return {_key(p): numpy(v.get_value()) for p, v in nnx.to_flat_state(nnx.state(model, _STATE))}


def load(model, canonical: Mapping[str, Mapping[str, np.ndarray]], strict: bool = True) -> dict[str, str]:
    """Write canonical leaves (per unit path) into `model`'s own leaves, in place, in the leaves' dtypes.

    Returns the dropped quantities (unit/leaf -> why): empty, or with strict=False what has no place
    (b_hn in an nnx.GRUCell). Raises ValueError as to_native, or for a dropped quantity when strict.
    """
    leaves, _, dropped = to_native(model, canonical)
    if strict and dropped:
        raise ValueError(f"jax_model: torch weights with no place in the NNX model: {dropped}")
    state = nnx.state(model, _STATE)
    wide = any(v.get_value().dtype == jnp.float64 for _, v in nnx.to_flat_state(state))
    with numerics("float64" if wide else "float32"):  # a float64 model keeps its float64 leaves
        for path, var in nnx.to_flat_state(state):
            key = _key(path)
            if key in leaves:
                var.set_value(jnp.asarray(np.asarray(leaves[key], dtype=var.get_value().dtype)))
        nnx.update(model, state)
    return dropped
