"""claims, freezing: freezing part of a model, run in PyTorch.

What it teaches: which stop really freezes what: no_grad around the layer meant to train cuts
that layer off; features = backbone(x).detach() trains only the head but still builds the
backbone graph and moves BatchNorm statistics; param.detach_() freezes a leaf Parameter (AdamW
then skips it) and raises on a view; whichever way the backbone is frozen, the saving is its
skipped backward; detaching an input batch is a no-op.
Gradient flow: backbone -> features -> head; a stop between features and head leaves the
backbone's gradient None (torch) and the head's gradient as it was.
Port note: jax_impl/backend/claims/freezing.py: the JAX port of a cut gives zero gradients, silently,
never None, and optax.adamw still decays a zero-gradient leaf: keep frozen leaves out of the
optimizer (optax.partition + optax.set_to_zero). Saved-tensor bytes here, residuals there.
Shapes: B samples, D inputs, H hidden units (features), C outputs (toy "mlp": B 8, D 4, H 6, C 2).
Reference: PyTorch docs, "Autograd mechanics" (excluding subgraphs from backward); torch.optim.AdamW.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from ....shared.core.toys import toy
from .evidence import array, error, evidence, grad_state, rel_diff, saved

__all__ = ["check_c05", "check_c06", "check_c07", "check_c16", "check_c22"]

F64 = torch.float64


def _three_layers() -> nn.ModuleDict:
    with torch.random.fork_rng():  # a fixed init without touching the global generator
        torch.manual_seed(0)
        return nn.ModuleDict({f"layer{i}": nn.Linear(4, 4, dtype=F64) for i in (1, 2, 3)})


def _printout(m: nn.ModuleDict) -> dict[str, bool]:
    return {f"{k}.{n}": p.requires_grad for k in ("layer1", "layer2") for n, p in m[k].named_parameters()}


def _grad_states(m: nn.ModuleDict) -> dict[str, str]:
    """Per layer: "none" (no .grad), "zero" or "nonzero"."""
    return {k: grad_state(p.grad for p in layer.parameters()) for k, layer in m.items()}


@evidence
def check_c05() -> dict:
    """C05: layer3 wrapped in no_grad to "freeze layer1 and layer2" cuts off layer3 instead.

    Returns: the requires_grad printout of layer1/2, whether the output has a grad_fn, the
    backward error; the two fixes (detach layer2's output; requires_grad_(False) on layer1/2)
    with per-layer gradient states and their printouts.
    """
    x = array(toy("mlp")["x"])
    m = _three_layers()
    with torch.no_grad():  # GRAD-FLOW: C05 as written: layer3 under no_grad
        out = m["layer3"](m["layer2"](torch.relu(m["layer1"](x))))
    written = {"printout": _printout(m), "output_has_grad_fn": out.grad_fn is not None}
    written["backward"] = error(lambda: out.sum().backward())
    m = _three_layers()
    h = m["layer2"](torch.relu(m["layer1"](x))).detach()  # GRAD-FLOW: C05 fix: cut below layer3
    m["layer3"](h).sum().backward()
    fix_detach = _grad_states(m)
    m = _three_layers()
    for k in ("layer1", "layer2"):
        m[k].requires_grad_(False)  # GRAD-FLOW: C05 fix: freeze layer1 and layer2
    m["layer3"](m["layer2"](torch.relu(m["layer1"](x)))).sum().backward()
    return {
        "as_written": written,
        "fix_detach": fix_detach,
        "fix_requires_grad": _grad_states(m),
        "fix_printout": _printout(m),
    }


@evidence
def check_c06() -> dict:
    """C06: backbone(x).detach() trains only the head, but the backbone graph is built and BN moves.

    Returns: saved elements (detach in train mode; eval() + no_grad; the head alone), whether
    BatchNorm running_mean moved (detach/train, no_grad/train, eval + no_grad), gradient states.
    """
    d = toy("mlp")
    x, y = array(d["x"]), array(d["y"])
    with torch.random.fork_rng():  # a fixed init without touching the global generator
        torch.manual_seed(0)
        backbone = nn.Sequential(nn.Linear(4, 6, dtype=F64), nn.BatchNorm1d(6, dtype=F64), nn.Tanh())
        head = nn.Linear(6, 2, dtype=F64)

    def moved(fn: Callable[[], Any]) -> tuple[bool, dict[str, int], Any]:
        before = backbone[1].running_mean.clone()
        tally, out = saved(fn)
        return bool((backbone[1].running_mean != before).any()), tally, out

    def detached() -> torch.Tensor:
        features = backbone(x).detach()  # GRAD-FLOW: C06 the head trains on fixed features
        return F.mse_loss(head(features), y)

    def no_grad_features() -> torch.Tensor:
        with torch.no_grad():  # GRAD-FLOW: C06 no graph for the backbone
            features = backbone(x)
        return F.mse_loss(head(features), y)

    backbone.train()
    moved_detach, saved_detach, loss = moved(detached)
    loss.backward()
    grads = {
        "backbone": [p.grad is None for p in backbone.parameters()],
        "head_nonzero": all(bool(p.grad.abs().sum() > 0) for p in head.parameters()),
    }
    moved_no_grad_train, _, _ = moved(no_grad_features)
    backbone.eval()
    moved_eval, saved_eval, _ = moved(no_grad_features)
    with torch.no_grad():
        features = backbone(x)
    saved_head, _ = saved(lambda: F.mse_loss(head(features), y))
    return {
        "saved_elements_detach_train": saved_detach["elements"],
        "saved_elements_eval_no_grad": saved_eval["elements"],
        "saved_elements_head_only": saved_head["elements"],
        "bn_moved_detach_train": moved_detach,
        "bn_moved_no_grad_train": moved_no_grad_train,
        "bn_moved_eval_no_grad": moved_eval,
        "backbone_grad_is_none": all(grads["backbone"]),
        "head_grad_nonzero": grads["head_nonzero"],
    }


@evidence
def check_c07() -> dict:
    """C07: param.detach_() freezes a leaf Parameter (grad kept), raises on a view; AdamW skips it.

    Returns: requires_grad / is_leaf / .grad after detach_(), the view error, the head-shape error
    (a 512-input head on 1000 outputs), the frozen parameter before/after an AdamW step
    (lr 0.1, weight_decay 0.1).
    """
    p = nn.Parameter(torch.tensor([1.0, 2.0, 3.0], dtype=F64))
    p.grad = torch.tensor([0.1, 0.2, 0.3], dtype=F64)
    p.detach_()  # GRAD-FLOW: C07 in-place detach of a leaf
    view = nn.Parameter(torch.ones(3, dtype=F64))[:2]
    view_error = error(view.detach_)
    shape_error = error(lambda: nn.Linear(512, 10)(torch.zeros(2, 1000)))
    w = nn.Parameter(torch.tensor([1.0, -2.0, 3.0], dtype=F64))
    head = nn.Parameter(torch.tensor([0.5, 0.5, 0.5], dtype=F64))
    w.detach_()  # GRAD-FLOW: C07 in-place detach of a leaf
    opt = torch.optim.AdamW([w, head], lr=0.1, weight_decay=0.1)
    (head * w).sum().backward()
    opt.step()
    return {
        "requires_grad_after": p.requires_grad,
        "is_leaf_after": p.is_leaf,
        "grad_kept": p.grad.tolist(),
        "view_error": view_error,
        "head_shape_error": shape_error,
        "frozen_after_adamw": w.tolist(),
        "frozen_before": [1.0, -2.0, 3.0],
        "head_moved": bool((head != 0.5).all()),
    }


def _graph_nodes(t: torch.Tensor) -> int:
    """Number of autograd nodes backward would visit from t."""
    seen, stack = set(), [t.grad_fn]
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        stack.extend(n for n, _ in node.next_functions)
    return len(seen)


def _frozen_graph(d: dict, how: str) -> dict:
    p = {k: array(d[k], True) for k in ("w1", "b1", "w2", "b2", "head_w", "head_b")}
    if how == "requires_grad_false":
        for k in ("w1", "b1", "w2", "b2"):
            p[k].requires_grad_(False)  # GRAD-FLOW: C16 proper freezing

    def loss_fn() -> torch.Tensor:
        x = array(d["x"])
        backbone = lambda: torch.tanh(torch.tanh(x @ p["w1"] + p["b1"]) @ p["w2"] + p["b2"])
        if how == "no_grad":
            with torch.no_grad():  # GRAD-FLOW: C16 no graph for the backbone
                f = backbone()
        else:
            f = backbone()
        if how == "detach":
            f = f.detach()  # GRAD-FLOW: C16 the backbone graph is built, then cut
        return F.mse_loss(f @ p["head_w"] + p["head_b"], array(d["y"]))

    tally, loss = saved(loss_fn)
    return {"saved_bytes": tally["bytes"], "backward_nodes": _graph_nodes(loss)}


@evidence
def check_c16() -> dict:
    """C16: the saving is the skipped backward of the frozen part, whichever way it is frozen.

    Returns: per freezing mode (none, detach, requires_grad_false, no_grad), the saved bytes of
    the forward and the number of autograd nodes backward visits; timings in the bench.
    """
    d = toy("mlp")
    out = {how: _frozen_graph(d, how) for how in ("none", "detach", "requires_grad_false", "no_grad")}
    out["speed"] = (
        "see `detach-parity bench frozen_backbone`: full_finetune / detach_features / freeze_params / no_grad_backbone against the ideal"
    )
    return out


@evidence
def check_c22() -> dict:
    """C22: detaching an input batch is a no-op; detaching features the loss needs stops training.

    Returns: requires_grad of the input and its detach, shared storage, max |param grad
    difference| with vs without the input detach, saved bytes both ways, and whether the
    backbone gets a gradient once the features are detached.
    """
    d = toy("mlp")
    x = array(d["x"])
    xd = x.detach()  # GRAD-FLOW: C22 an input never required grad

    def grads(inp: torch.Tensor, stop_features: bool) -> tuple[dict[str, int], list[torch.Tensor | None]]:
        w1, w2 = array(d["w1"], True), array(d["head_w"], True)
        tally, f = saved(lambda: torch.tanh(inp @ w1))
        if stop_features:
            f = f.detach()  # GRAD-FLOW: C22 features cut from the loss
        F.mse_loss(f @ w2, array(d["y"])).backward()
        return tally, [w1.grad, w2.grad]

    (s_plain, g_plain), (s_det, g_det) = grads(x, False), grads(xd, False)
    _, g_stop = grads(x, True)
    return {
        "input_requires_grad": [x.requires_grad, xd.requires_grad],
        "shares_storage": x.data_ptr() == xd.data_ptr(),
        "detach_is_new_tensor": xd is not x,
        "grad_max_rel_diff": max(rel_diff(a, b) for a, b in zip(g_plain, g_det, strict=True)),
        "saved_bytes": [s_plain["bytes"], s_det["bytes"]],
        "backbone_grad_none_features_detached": g_stop[0] is None,
    }
