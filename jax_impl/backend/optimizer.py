"""Port checker, JAX half, the optimizer stage by stage: the port's optax chain, and torch's optimizer written as
one; the mirror of torch_impl/backend/optimizer.py (which reads torch's optimizer's settings).

What it does: where a check's first step parts while the gradients match, the optimizer is where the port
differs. `facts` takes the port's transformation apart: optax.chain's parts in order, recursively (optax.adamw
is scale_by_adam, add_decayed_weights, scale), each named by the optax function that built it. `stages` feeds
the same gradients (torch's own, in the port's layout) through those parts one at a time, and through torch's
optimizer written in optax from its settings (SGD: L2 decay into the gradient, momentum, -lr; Adam: L2 decay,
scale_by_adam, -lr; AdamW: scale_by_adam, decoupled decay, -lr), so that the checker can say which part of the
port's chain first computes what torch's optimizer never does.
Gradient flow: none; updates are computed from given gradients.
Port note: a transformation optax builds by composing others (inject_hyperparams, masked, multi_transform) is
one stage; a part that raises on a plain dict of arrays ends the port's stages there.
Shapes: as the parameters.
Reference: optax docs (optax.chain, scale_by_adam, add_decayed_weights, trace); PyTorch docs, torch.optim.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping

import jax.numpy as jnp
import numpy as np
import optax

from .._common import numpy as as_numpy
from .precision import settings

__all__ = ["facts", "stages"]


def _parts(tx, path: tuple = ()) -> list[tuple[str, tuple, optax.GradientTransformation]]:
    """(name, index path in the chain, transformation) of each part of `tx`, in the order updates pass them."""
    update = tx.update
    name = getattr(update, "__qualname__", "")
    closure = inspect.getclosurevars(update).nonlocals if hasattr(update, "__code__") else {}
    if name.startswith("chain.") and "update_fns" in closure:
        inits = inspect.getclosurevars(tx.init).nonlocals["init_fns"]
        parts = zip(inits, closure["update_fns"], strict=True)
        return [p for i, (ini, up) in enumerate(parts) for p in _parts(optax.GradientTransformationExtraArgs(ini, up),
                                                                        (*path, i))]  # fmt: skip
    if name.startswith("with_extra_args_support.") and "tx" in closure:
        return _parts(closure["tx"], path)
    return [(name.split(".<locals>")[0] or type(tx).__name__, path, tx)]


def _transformation(optimizer):
    pair = isinstance(optimizer, tuple) and not isinstance(optimizer, optax.GradientTransformation)
    return optimizer[0] if pair else optimizer


def facts(model, optimizer) -> dict:
    """What the port's optimizer is made of: {"parts": [{"name": optax function, "path": [indices in the chain]}]}
    (`model` unused: torch's twin builds its optimizer on the model's parameters)."""
    tx = _transformation(optimizer)
    if not isinstance(tx, optax.GradientTransformation):
        raise ValueError(f"jax_optimizer: expected an optax.GradientTransformation, got {type(tx).__name__}")
    return {"parts": [{"name": n, "path": list(p)} for n, p, _ in _parts(tx)]}


def _reference(torch: Mapping) -> list[tuple[str, optax.GradientTransformation]] | None:
    """torch's optimizer as optax parts, from its settings (torch_impl/backend/optimizer.py); None where it is
    not one written here (another type, maximize, amsgrad, dampening, several parameter groups)."""
    kind, lr, wd = torch.get("type"), float(torch.get("lr", 0.0)), float(torch.get("weight_decay", 0.0) or 0.0)
    if torch.get("groups", 1) != 1 or torch.get("maximize") or torch.get("amsgrad") or torch.get("dampening"):
        return None
    l2 = [("L2 weight decay added to the gradient (torch's weight_decay)", optax.add_decayed_weights(wd))] if wd else []
    rate = [(f"the learning rate (-{lr:g})", optax.scale(-lr))]
    if kind == "SGD":
        m = float(torch.get("momentum", 0.0) or 0.0)
        moment = [(f"momentum {m:g}{' (Nesterov)' if torch.get('nesterov') else ''}",
                   optax.trace(decay=m, nesterov=bool(torch.get("nesterov"))))] if m else []  # fmt: skip
        return l2 + moment + rate
    if kind in ("Adam", "AdamW"):
        b1, b2 = torch.get("betas", (0.9, 0.999))
        eps = float(torch.get("eps", 1e-8))
        adam = [(f"Adam's moments and bias correction (betas {b1:g}, {b2:g}, eps {eps:g} outside the square root)",
                 optax.scale_by_adam(b1=b1, b2=b2, eps=eps))]  # fmt: skip
        if kind == "Adam":
            return l2 + adam + rate
        decay = [(f"decoupled weight decay {wd:g} (AdamW)", optax.add_decayed_weights(wd))] if wd else []
        return adam + decay + rate
    if kind == "RMSprop":  # torch: g / (sqrt(v) + eps), v centred by the mean gradient's square where `centered`
        alpha, eps, m = float(torch.get("alpha", 0.99)), float(torch.get("eps", 1e-8)), float(torch.get("momentum", 0))
        centered = bool(torch.get("centered"))
        scale = optax.scale_by_stddev if centered else optax.scale_by_rms
        rms = [(f"RMSprop's {'centred ' if centered else ''}running average (alpha {alpha:g}, eps {eps:g} outside "
                "the square root)", scale(decay=alpha, eps=eps, eps_in_sqrt=False))]  # fmt: skip
        moment = [(f"momentum {m:g}", optax.trace(decay=m))] if m else []
        return l2 + rms + moment + rate
    return None


def _run(parts, params: dict, grads: dict) -> list[dict]:
    # two steps, the second from -0.5 x the gradients: what a part does with its state (Adam's b2, momentum, a
    # schedule) shows there (from the same gradients twice, Adam's bias-corrected moments would not move)
    updates = {k: jnp.asarray(v) for k, v in grads.items()}
    second = {k: -0.5 * v for k, v in updates.items()}
    p = {k: jnp.asarray(v) for k, v in params.items()}
    out = [{"name": "the gradients", "path": [], "updates": {k: np.asarray(v) for k, v in grads.items()},
            "updates2": {k: as_numpy(v) for k, v in second.items()}}]  # fmt: skip
    for name, path, tx in parts:
        try:
            updates, state = tx.update(updates, tx.init(p), p)
            second, _ = tx.update(second, state, p)
        except Exception as exc:  # a part made for another tree (a mask of an nnx.State): the stages end here
            out.append({"name": name, "path": list(path), "error": f"{type(exc).__name__}: {exc}"[:200]})
            break
        out.append({"name": name, "path": list(path), "updates": {k: as_numpy(v) for k, v in updates.items()},
                    "updates2": {k: as_numpy(v) for k, v in second.items()}})  # fmt: skip
    return out


def stages(optimizer, params: Mapping[str, np.ndarray], grads: Mapping[str, np.ndarray], torch: Mapping) -> dict:
    """The first two steps' updates after each part of the port's optimizer and of torch's written in optax, from the
    same gradients and parameters (float64, keyed by the port's leaf paths), each part from its own fresh state.

    Returns {"port": [{"name", "path", "updates", "updates2": {leaf: array}} per stage, the gradients first],
    "reference":
    the same for torch's optimizer, or None where torch's is not one `stages` can write (see _reference)}.
    """
    tx = _transformation(optimizer)
    with settings("float64"):
        port = _run(_parts(tx), params, grads)
        ref = _reference(torch)
        reference = None if ref is None else _run([(n, (i,), t) for i, (n, t) in enumerate(ref)], params, grads)
    return {"port": port, "reference": reference}
