"""claims: the tutorial claims C01–C22 about detach(), run in PyTorch to see what really happens.

What it teaches: what detach(), no_grad, inference_mode, requires_grad_ and .data really do
when the tutorials' snippets are run: the real exception types and messages, the real
gradients, the real printouts, saved-tensor bytes instead of timings.
Gradient flow: each check builds the smallest graph that shows its claim (records and
verdicts in shared/claims.py).
Port note: jax_impl/claims.py shows where JAX differs: errors become silent zeros,
arrays are immutable, jnp.std has ddof=0; where JAX has nothing to show, its check
says so ({"applies": False, "why": ...}).
Shapes: T time steps, B samples, D inputs, H hidden units, C outputs.
Reference: PyTorch docs, "Autograd mechanics" (in-place correctness checks, saved tensors).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from shared.core.toys import toy

__all__ = [
    "check_c01",
    "check_c02",
    "check_c03",
    "check_c04",
    "check_c05",
    "check_c06",
    "check_c07",
    "check_c08",
    "check_c09",
    "check_c10",
    "check_c11",
    "check_c12",
    "check_c13",
    "check_c14",
    "check_c15",
    "check_c16",
    "check_c17",
    "check_c18",
    "check_c19",
    "check_c20",
    "check_c21",
    "check_c22",
]

F64 = torch.float64


def _t(a: np.ndarray, requires_grad: bool = False) -> torch.Tensor:
    return torch.tensor(np.array(a), requires_grad=requires_grad)


def _error(fn: Callable[[], Any]) -> dict[str, str | None]:
    """The exception fn() raises, as {"type", "message"} (first line); type None if it returns."""
    try:
        fn()
    except Exception as exc:  # the check reports whatever the framework raises
        return {"type": type(exc).__name__, "message": str(exc).split("\n")[0]}
    return {"type": None, "message": ""}


def _saved(fn: Callable[[], Any]) -> tuple[dict[str, int], Any]:
    """What autograd saves for backward while fn() runs, and fn()'s result.

    {"count": tensors packed, "bytes": distinct storages they hold, "elements": the same in
    elements}. A parameter saved at every step or a view of the input counts once: this is the
    memory the saved graph keeps alive, not the number of references to it.
    """
    count, storages = [0], {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        count[0] += 1
        storage = t.untyped_storage()
        storages[storage.data_ptr()] = (storage.nbytes(), t.element_size())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = fn()
    tally = {
        "count": count[0],
        "bytes": sum(n for n, _ in storages.values()),
        "elements": sum(n // size for n, size in storages.values()),
    }
    return tally, out


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


def _cos(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a * b).sum() / (a.norm() * b.norm()))


def _global(grads: list[torch.Tensor]) -> torch.Tensor:
    return torch.cat([g.reshape(-1) for g in grads])


def check_c01() -> dict:
    """C01: detach() aliases storage and version counter; detach().clone() is the snapshot.

    Returns: y before/after writing z[0] = 100 through z = y.detach() (y = 2 * [1, 2, 3]),
    whether they share memory and the version counter, the backward error when y was saved,
    y after writing into the result of an out-of-place op and into a clone.
    """
    x = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
    y = x * 2
    before, version = y.tolist(), y._version
    z = y.detach()  # GRAD-FLOW: C01 a detached alias of y
    shares, alias_flag = z.data_ptr() == y.data_ptr(), z.requires_grad
    z[0] = 100.0
    after, bumped = y.tolist(), y._version > version
    y2 = x * 2
    loss = (y2**2).sum()  # pow saves y2 for backward
    y2.detach()[0] = 100.0  # GRAD-FLOW: C01 a detached alias of y
    saved_error = _error(loss.backward)
    alias_write_node = type(y2.grad_fn).__name__  # the write through the alias is not recorded
    y3 = x * 2
    w = y3.detach() + 1  # GRAD-FLOW: C01 out-of-place: a new tensor
    w[0] = 100.0
    after_out_of_place = y3.tolist()
    snap = y3.detach().clone()  # GRAD-FLOW: C01 the snapshot
    snap[0] = 100.0
    return {
        "requires_grad": {"alias": alias_flag, "out_of_place": w.requires_grad, "snapshot": snap.requires_grad},
        "grad_fn_after_alias_write": alias_write_node,
        "y_before": before,
        "y_after_alias_write": after,
        "shares_storage": shares,
        "version_bumped": bumped,
        "backward_after_alias_write": saved_error,
        "y_after_out_of_place": after_out_of_place,
        "y_after_clone_write": y3.tolist(),
    }


def check_c02() -> dict:
    """C02: z = (x * 2).detach() does not require grad; y = x * 2 does.

    Returns: z.requires_grad, y.requires_grad, z.grad_fn is None.
    """
    x = torch.tensor([1.0, 2.0], requires_grad=True)
    y = x * 2
    z = (x * 2).detach()  # GRAD-FLOW: C02 z is cut from x
    return {"z_requires_grad": z.requires_grad, "y_requires_grad": y.requires_grad, "z_grad_fn_none": z.grad_fn is None}


def check_c03() -> dict:
    """C03: y = w x + b with w = 3, x = 2, b = 1, loss (y - 5)^2.

    Returns: y, loss, w.grad, x.grad, b.grad as floats (expected 7, 4, 8, 12, 4).
    """
    w, x, b = (torch.tensor(v, dtype=F64, requires_grad=True) for v in (3.0, 2.0, 1.0))
    y = w * x + b
    loss = (y - 5) ** 2
    loss.backward()
    return {
        "y": y.item(),
        "loss": loss.item(),
        "w_grad": w.grad.item(),
        "x_grad": x.grad.item(),
        "b_grad": b.grad.item(),
    }


def check_c04() -> dict:
    """C04: backward through a detached tensor: the real error type and message.

    Returns: {"error": {"type", "message"}} of z.sum().backward() with z = (x * 2).detach().
    """
    x = torch.tensor([1.0, 2.0], requires_grad=True)
    z = (x * 2).detach()  # GRAD-FLOW: C04 nothing to differentiate
    return {"error": _error(lambda: z.sum().backward())}


def _three_layers() -> nn.ModuleDict:
    with torch.random.fork_rng():  # a fixed init without touching the global generator
        torch.manual_seed(0)
        return nn.ModuleDict({f"layer{i}": nn.Linear(4, 4, dtype=F64) for i in (1, 2, 3)})


def _printout(m: nn.ModuleDict) -> dict[str, bool]:
    return {f"{k}.{n}": p.requires_grad for k in ("layer1", "layer2") for n, p in m[k].named_parameters()}


def _grad_state(m: nn.ModuleDict) -> dict[str, str]:
    """Per layer: "none" (no .grad), "zero" or "nonzero"."""
    out = {}
    for k, layer in m.items():
        grads = [p.grad for p in layer.parameters()]
        out[k] = (
            "none"
            if all(g is None for g in grads)
            else ("nonzero" if any(g.abs().sum() > 0 for g in grads if g is not None) else "zero")
        )
    return out


def check_c05() -> dict:
    """C05: layer3 wrapped in no_grad to "freeze layer1 and layer2" cuts off layer3 instead.

    Returns: the requires_grad printout of layer1/2, whether the output has a grad_fn, the
    backward error; the two fixes (detach layer2's output; requires_grad_(False) on layer1/2)
    with per-layer gradient states and their printouts.
    """
    x = _t(toy("mlp")["x"])
    m = _three_layers()
    with torch.no_grad():  # GRAD-FLOW: C05 as written: layer3 under no_grad
        out = m["layer3"](m["layer2"](torch.relu(m["layer1"](x))))
    written = {"printout": _printout(m), "output_has_grad_fn": out.grad_fn is not None}
    written["backward"] = _error(lambda: out.sum().backward())
    m = _three_layers()
    h = m["layer2"](torch.relu(m["layer1"](x))).detach()  # GRAD-FLOW: C05 fix: cut below layer3
    m["layer3"](h).sum().backward()
    fix_detach = _grad_state(m)
    m = _three_layers()
    for k in ("layer1", "layer2"):
        m[k].requires_grad_(False)  # GRAD-FLOW: C05 fix: freeze layer1 and layer2
    m["layer3"](m["layer2"](torch.relu(m["layer1"](x)))).sum().backward()
    return {
        "as_written": written,
        "fix_detach": fix_detach,
        "fix_requires_grad": _grad_state(m),
        "fix_printout": _printout(m),
    }


def check_c06() -> dict:
    """C06: backbone(x).detach() trains only the head, but the backbone graph is built and BN moves.

    Returns: saved elements (detach in train mode; eval() + no_grad; the head alone), whether
    BatchNorm running_mean moved (detach/train, no_grad/train, eval + no_grad), gradient states.
    """
    d = toy("mlp")
    x, y = _t(d["x"]), _t(d["y"])
    with torch.random.fork_rng():  # a fixed init without touching the global generator
        torch.manual_seed(0)
        backbone = nn.Sequential(nn.Linear(4, 6, dtype=F64), nn.BatchNorm1d(6, dtype=F64), nn.Tanh())
        head = nn.Linear(6, 2, dtype=F64)

    def moved(fn: Callable[[], Any]) -> tuple[bool, dict[str, int], Any]:
        before = backbone[1].running_mean.clone()
        tally, out = _saved(fn)
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
    saved_head, _ = _saved(lambda: F.mse_loss(head(features), y))
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
    view_error = _error(view.detach_)
    shape_error = _error(lambda: nn.Linear(512, 10)(torch.zeros(2, 1000)))
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


def _td_target(d: dict, target_w: torch.Tensor) -> torch.Tensor:
    """y [B] = r + gamma (1 - done) max_a s2 @ target_w, stopped."""
    q_next = (_t(d["s2"]) @ target_w).max(dim=1).values
    y = _t(d["r"]) + float(d["gamma"]) * (1 - _t(d["done"])) * q_next
    return y.detach()  # GRAD-FLOW: C08 TD target is a constant for the online net


def check_c08() -> dict:
    """C08: the replay snippet's misspelt name; a stored target goes stale; the right TD target.

    Returns: the NameError of a snippet reading a misspelt name, max |stored - fresh| target
    after one online step and a target sync, the online / target gradient states.
    """
    d = toy("dqn")
    namespace = {"q_next": torch.ones(2, 3), "reward": torch.zeros(2), "gamma": 0.9}
    snippet = "next_state_values = q_next.max(1).values.detach()\ntarget = reward + gamma * next_state_value"
    name_error = _error(lambda: exec(snippet, namespace))  # noqa: S102 - the typo is the finding
    online, target = _t(d["online"], True), _t(d["target"], True)
    stored = _td_target(d, target)  # computed at collection time and kept in the buffer

    def td_loss() -> torch.Tensor:
        q = (_t(d["s"]) @ online).gather(1, torch.as_tensor(d["a"])[:, None])[:, 0]
        return 0.5 * ((_td_target(d, target) - q) ** 2).mean()

    loss = td_loss()
    loss.backward()
    grads = {"online_nonzero": bool(online.grad.abs().sum() > 0), "target_grad_is_none": target.grad is None}
    with torch.no_grad():
        online -= 0.5 * online.grad
        target.copy_(online)  # target sync
    return {"name_error": name_error, "stale_max_abs": float((stored - _td_target(d, target)).abs().max()), **grads}


def check_c09() -> dict:
    """C09: an inference_mode tensor cannot be saved for backward later; a no_grad one can.

    Returns: is_inference / requires_grad of h computed under inference_mode, the error of
    using h in a tracked product, and whether the same under no_grad backpropagates.
    """
    x, w = torch.ones(3, dtype=F64), torch.ones(3, dtype=F64, requires_grad=True)
    with torch.inference_mode():  # GRAD-FLOW: C09 no autograd at all, inference tensors
        h = x * 2
    error = _error(lambda: (h * w).sum().backward())
    with torch.no_grad():  # GRAD-FLOW: C09 no graph, normal tensors
        g = w * 2  # a constant 2·w: the product below is linear in w
    (g * w).sum().backward()
    return {
        "is_inference": torch.is_inference(h),
        "requires_grad": h.requires_grad,
        "error": error,
        "no_grad_tensor_requires_grad": g.requires_grad,
        "no_grad_tensor_grad": w.grad.tolist(),
        "speed": "see `detach-parity bench frozen_backbone`: torch forward_grad / forward_inference_mode and forward_no_grad / forward_inference_mode",
    }


def _rnn_loss(d: dict, x: torch.Tensor, every: int | None, all_steps: bool) -> torch.Tensor:
    w, u = _t(d["w"], True), _t(d["u"], True)
    h = torch.zeros(4, dtype=F64)
    total = torch.zeros((), dtype=F64)
    for t in range(x.shape[0]):
        if every and t > 0 and t % every == 0:
            h = h.detach()  # GRAD-FLOW: C10 truncate backprop through time
        h = torch.tanh(h @ w + x[t] @ u)
        total = total + h.sum()
    return total if all_steps else h.sum()


def _reached(g: torch.Tensor) -> list[int]:
    return [t for t in range(g.shape[0]) if bool(g[t].abs().sum() > 0)]


def check_c10() -> dict:
    """C10: detaching the hidden state every k steps: which inputs x_t the last output reaches.

    Returns: {"none" | "every_10" | "every_1": [steps with a nonzero gradient]}, T = 40.
    """
    d = toy("rnn")
    out = {}
    for name, every in (("none", None), ("every_10", 10), ("every_1", 1)):
        x = _t(d["x"], True)
        _rnn_loss(d, x, every, all_steps=False).backward()
        out[name] = _reached(x.grad)
    return out


def check_c11() -> dict:
    """C11: detaching every 10 steps with a loss summed over all steps saves no memory.

    Returns: saved bytes over T = 40 steps without / with detach every 10, max |dx| difference
    between the two (the truncation), and the largest graph held at one backward call when
    each 10-step chunk is backpropagated on its own.
    """
    d = toy("rnn")
    out, grads = {}, []
    for name, every in (("none", None), ("every_10", 10)):
        x = _t(d["x"], True)
        tally, loss = _saved(lambda x=x, every=every: _rnn_loss(d, x, every, all_steps=True))
        loss.backward()
        out[f"saved_bytes_{name}"] = tally["bytes"]
        grads.append(x.grad)
    out["grad_max_abs_diff"] = float((grads[0] - grads[1]).abs().max())
    w, u, x = _t(d["w"], True), _t(d["u"], True), _t(d["x"], True)
    h, chunk_bytes = torch.zeros(4, dtype=F64), []
    for start in range(0, 40, 10):
        h = h.detach()  # GRAD-FLOW: C11 chunk boundary: the previous graph can be freed

        def chunk(h=h, start=start) -> tuple[torch.Tensor, torch.Tensor]:
            total = torch.zeros((), dtype=F64)
            for t in range(start, start + 10):
                h = torch.tanh(h @ w + x[t] @ u)
                total = total + h.sum()
            return total, h

        tally, (loss, h) = _saved(chunk)
        loss.backward()
        chunk_bytes.append(tally["bytes"])
    out["max_saved_bytes_per_chunk_backward"] = max(chunk_bytes)
    return out


def _multitask(d: dict, isolate: bool, tasks: tuple[int, ...] = (1, 2)) -> tuple[list[torch.Tensor], torch.Tensor]:
    tw, tb = _t(d["trunk_w"], True), _t(d["trunk_b"], True)
    h1, h2 = _t(d["head1"], True), _t(d["head2"], True)
    f = torch.tanh(_t(d["x"]) @ tw + tb)
    f2 = f.detach() if isolate else f  # GRAD-FLOW: C12 task 2 does not shape the trunk
    loss = torch.zeros((), dtype=F64)
    if 1 in tasks:
        loss = loss + F.mse_loss(f @ h1, _t(d["y1"]))
    if 2 in tasks:
        loss = loss + F.mse_loss(f2 @ h2, _t(d["y2"]))
    loss.backward()
    return [tw.grad, tb.grad, h2.grad], f @ h1


def check_c12() -> dict:
    """C12: multitask isolation: the trunk gradient is exactly task 1's gradient alone.

    Returns: max |trunk grad (isolated) - trunk grad (task 1 alone)|, the same without
    isolation, whether head 2 still learns, and the error of backward on a [B, 1] output.
    """
    d = toy("multitask")
    iso, out = _multitask(d, True)
    alone, _ = _multitask(d, False, tasks=(1,))
    joint, _ = _multitask(d, False)
    diff = lambda a, b: max(float((p - q).abs().max()) for p, q in zip(a[:2], b[:2], strict=True))
    return {
        "isolated_vs_task1_max_abs": diff(iso, alone),
        "joint_vs_task1_max_abs": diff(joint, alone),
        "head2_grad_nonzero": bool(iso[2].abs().sum() > 0),
        "non_scalar_backward": _error(lambda: out.backward()),
    }


def _maml_losses(d: dict) -> tuple[Callable, Callable]:
    inner = lambda th: ((torch.tanh(_t(d["x_in"]) @ th) - _t(d["y_in"])) ** 2).mean()
    outer = lambda th: ((torch.tanh(_t(d["x_out"]) @ th) - _t(d["y_out"])) ** 2).mean()
    return inner, outer


def _maml_grad(d: dict, first_order: bool) -> torch.Tensor:
    inner, outer = _maml_losses(d)
    theta = _t(d["theta"], True)
    (g,) = torch.autograd.grad(inner(theta), theta, create_graph=True)
    if first_order:
        g = g.detach()  # GRAD-FLOW: C13 first-order MAML: the inner gradient is a constant
    (meta,) = torch.autograd.grad(outer(theta - float(d["alpha"]) * g), theta)
    return meta


def check_c13() -> dict:
    """C13: first-order MAML (inner gradient detached) drops the Hessian term.

    Returns: second- and first-order meta-gradients, their relative difference
    |so - fo| / |so|, and the max error of each against its closed form
    so = (I - alpha H_in(theta)) g_out(theta'), fo = g_out(theta').
    """
    d = toy("maml")
    so, fo = _maml_grad(d, False), _maml_grad(d, True)
    inner, outer = _maml_losses(d)
    theta, alpha = _t(d["theta"]), float(d["alpha"])
    grad = lambda fn, th: torch.autograd.grad(fn(th.requires_grad_()), th)[0]
    g_out = grad(outer, theta - alpha * grad(inner, theta.clone()))
    hess = torch.autograd.functional.hessian(inner, theta)
    closed_so = (torch.eye(3, dtype=F64) - alpha * hess) @ g_out
    return {
        "second_order": so.tolist(),
        "first_order": fo.tolist(),
        "relative_difference": float((so - fo).norm() / so.norm()),
        "second_order_vs_closed_form": float((so - closed_so).abs().max()),
        "first_order_vs_closed_form": float((fo - g_out).abs().max()),
    }


def _attention_grads(d: dict, stop_weights: bool) -> list[torch.Tensor | None]:
    x = _t(d["x"])
    wq, wk, wv = (_t(d[k], True) for k in ("wq", "wk", "wv"))
    q, k, v = x @ wq, x @ wk, x @ wv  # [N, E]
    a = torch.softmax(q @ k.T / math.sqrt(2), dim=-1)  # [N, N]
    if stop_weights:
        a = a.detach()  # GRAD-FLOW: C14 attention weights as constants
    ((a @ v - _t(d["target"])) ** 2).sum().backward()
    return [wq.grad, wk.grad, wv.grad]


def check_c14() -> dict:
    """C14: detaching attention weights removes the only gradient path to W_q and W_k.

    Returns: whether dW_q, dW_k are None with the weights detached, nonzero without,
    and max |dW_v (detached) - dW_v (not)|.
    """
    d = toy("attention")
    stop, full = _attention_grads(d, True), _attention_grads(d, False)
    return {
        "wq_wk_grad_none_detached": stop[0] is None and stop[1] is None,
        "wq_wk_grad_nonzero_full": bool(full[0].abs().sum() > 0 and full[1].abs().sum() > 0),
        "wv_grad_max_abs_diff": float((stop[2] - full[2]).abs().max()),
    }


def check_c15() -> dict:
    """C15: mixed precision involves no detach; detaching the loss breaks backward.

    Returns: the autocast (CPU, bfloat16) output dtype, the float32 parameter's gradient
    dtype and whether it is nonzero, the error of backward on loss.detach().
    """
    d = toy("mlp")
    x, w = torch.tensor(d["x"], dtype=torch.float32), torch.tensor(d["w1"], dtype=torch.float32, requires_grad=True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = x @ w  # [B, H] bfloat16
    loss = out.float().pow(2).mean()
    error = _error(lambda: loss.detach().backward())  # GRAD-FLOW: C15 a detached loss has no graph
    loss.backward()
    return {
        "autocast_dtype": str(out.dtype),
        "grad_dtype": str(w.grad.dtype),
        "grad_nonzero": bool(w.grad.abs().sum() > 0),
        "detached_loss_backward": error,
    }


def _frozen_graph(d: dict, how: str) -> dict:
    p = {k: _t(d[k], True) for k in ("w1", "b1", "w2", "b2", "head_w", "head_b")}
    if how == "requires_grad_false":
        for k in ("w1", "b1", "w2", "b2"):
            p[k].requires_grad_(False)  # GRAD-FLOW: C16 proper freezing

    def loss_fn() -> torch.Tensor:
        x = _t(d["x"])
        backbone = lambda: torch.tanh(torch.tanh(x @ p["w1"] + p["b1"]) @ p["w2"] + p["b2"])
        if how == "no_grad":
            with torch.no_grad():  # GRAD-FLOW: C16 no graph for the backbone
                f = backbone()
        else:
            f = backbone()
        if how == "detach":
            f = f.detach()  # GRAD-FLOW: C16 the backbone graph is built, then cut
        return F.mse_loss(f @ p["head_w"] + p["head_b"], _t(d["y"]))

    tally, loss = _saved(loss_fn)
    return {"saved_bytes": tally["bytes"], "backward_nodes": _graph_nodes(loss)}


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


def check_c17() -> dict:
    """C17: detaching logits before action selection gains nothing; detaching them in the loss kills learning.

    Returns: saved bytes of forward + action selection with and without detach and under
    no_grad, and the error of a policy-gradient loss built on detached logits.
    """
    d = toy("policy")
    s, w = _t(d["s"]), _t(d["w"], True)

    def select(stop: bool) -> tuple[torch.Tensor, bool]:
        logits = s @ w  # [B, A]
        scores = logits.detach() if stop else logits  # GRAD-FLOW: C17 action choice needs no gradient
        return scores.argmax(dim=1), scores.requires_grad

    saved_plain, _ = _saved(lambda: select(False))
    saved_detach, (_, detached_flag) = _saved(lambda: select(True))
    with torch.no_grad():  # GRAD-FLOW: C17 acting needs no graph
        saved_no_grad, _ = _saved(lambda: select(False))
    logits = (s @ w).detach()  # GRAD-FLOW: C17 the bug: policy-gradient loss on stopped logits
    logp = torch.log_softmax(logits, dim=1).gather(1, torch.as_tensor(d["a"])[:, None])[:, 0]
    loss = -(logp * _t(d["ret"])).mean()
    return {
        "saved_bytes_select": saved_plain["bytes"],
        "saved_bytes_select_detach": saved_detach["bytes"],
        "saved_bytes_select_no_grad": saved_no_grad["bytes"],
        "detached_scores_requires_grad": detached_flag,
        "pg_loss_on_detached_logits": _error(loss.backward),
    }


def _explode_grads(d: dict, every: int | None) -> list[torch.Tensor]:
    w, u = _t(d["w"], True), _t(d["u"], True)
    h = torch.zeros(3, dtype=F64)
    for t in range(d["x"].shape[0]):
        if every and t > 0 and t % every == 0:
            h = h.detach()  # GRAD-FLOW: C18 truncation, not clipping
        h = h @ w + _t(d["x"][t]) @ u
    return list(torch.autograd.grad(h.sum(), [w, u]))


def check_c18() -> dict:
    """C18: clip_grad_norm_ bounds the norm and keeps the direction; detaching every step does neither.

    Returns: the full gradient norm, the norm returned by and after clip_grad_norm_(max 1.0),
    the cosine of the clipped with the full gradient, the detach-every-step gradient norm and its cosine.
    """
    d = toy("explode")
    full = _explode_grads(d, None)
    params = [nn.Parameter(torch.zeros_like(g)) for g in full]
    for p, g in zip(params, full, strict=True):
        p.grad = g.clone()
    reported = float(torch.nn.utils.clip_grad_norm_(params, max_norm=1.0))
    clipped = _global([p.grad for p in params])
    trunc = _global(_explode_grads(d, 1))
    full = _global(full)
    return {
        "full_norm": float(full.norm()),
        "clip_reported_norm": reported,
        "clipped_norm": float(clipped.norm()),
        "clipped_cosine": _cos(clipped, full),
        "detach_every_step_norm": float(trunc.norm()),
        "detach_every_step_cosine": _cos(trunc, full),
    }


def check_c19() -> dict:
    """C19: feature statistics: torch .std() is unbiased (ddof 1); no_grad saves nothing.

    Returns: std over B = 8 samples of detached features, the biased std, the ratio against
    sqrt(B / (B - 1)), and saved bytes computing the features with grad vs under no_grad.
    """
    d = toy("mlp")
    x, w = _t(d["x"]), _t(d["w1"], True)
    saved_grad, f = _saved(lambda: torch.tanh(x @ w))
    with torch.no_grad():  # GRAD-FLOW: C19 statistics need no graph
        saved_no_grad, _ = _saved(lambda: torch.tanh(x @ w))
    feats = f.detach()  # GRAD-FLOW: C19 statistics of fixed features
    return {
        "std": feats.std(dim=0).tolist(),
        "std_requires_grad": feats.std(dim=0).requires_grad,
        "std_biased": feats.std(dim=0, correction=0).tolist(),
        "n": feats.shape[0],
        "saved_bytes_grad": saved_grad["bytes"],
        "saved_bytes_no_grad": saved_no_grad["bytes"],
    }


def check_c20() -> dict:
    """C20: no_grad and detach agree on values and flags only.

    Returns: values/flags of (x.exp()).detach() vs x.exp() under no_grad, tensors saved by each,
    requires_grad of a new tensor made with requires_grad=True under no_grad, the in-place leaf
    update error outside no_grad (and success inside), the no_grad-view error in grad mode.
    """
    x = torch.tensor([0.0, 1.0], dtype=F64, requires_grad=True)
    saved_detach, a = _saved(lambda: x.exp().detach())  # GRAD-FLOW: C20 recorded, then cut
    with torch.no_grad():  # GRAD-FLOW: C20 never recorded
        saved_no_grad, b = _saved(lambda: x.exp())
        fresh = torch.ones(2, requires_grad=True)
    leaf = torch.ones(2, dtype=F64, requires_grad=True)
    outside = _error(lambda: leaf.add_(1))
    with torch.no_grad():  # GRAD-FLOW: C20 how optimizers write parameters
        leaf.add_(1)
    base = x * 1
    with torch.no_grad():  # GRAD-FLOW: C20 a view made without grad mode
        view = base[:1]
    return {
        "same_values": bool(torch.equal(a, b)),
        "flags": [a.requires_grad, b.requires_grad],
        "saved_count_detach": saved_detach["count"],
        "saved_count_no_grad": saved_no_grad["count"],
        "new_tensor_under_no_grad_requires_grad": fresh.requires_grad,
        "leaf_inplace_outside_no_grad": outside,
        "leaf_after_no_grad_update": leaf.tolist(),
        "no_grad_view_inplace_in_grad_mode": _error(lambda: view.mul_(2)),
    }


def check_c21() -> dict:
    """C21: out.data.zero_() gives a silently wrong gradient; out.detach().zero_() raises.

    Returns: x.grad after out.data.zero_() (out = sigmoid(x), x = [1, 2, 3]), the right
    gradient sigmoid'(x), and the error after out.detach().zero_().
    """
    x = torch.tensor([1.0, 2.0, 3.0], dtype=F64, requires_grad=True)
    out = x.sigmoid()
    out.data.zero_()  # the bypass: autograd does not see this write
    out.sum().backward()
    wrong = x.grad.tolist()
    s = torch.sigmoid(x)
    x.grad = None
    out = x.sigmoid()
    out.detach().zero_()  # GRAD-FLOW: C21 an alias sharing the version counter
    return {
        "grad_fn_after_detach_zero": type(out.grad_fn).__name__,
        "data_zero_grad": wrong,
        "right_grad": (s * (1 - s)).tolist(),
        "detach_zero_backward": _error(lambda: out.sum().backward()),
    }


def check_c22() -> dict:
    """C22: detaching an input batch is a no-op; detaching features the loss needs stops training.

    Returns: requires_grad of the input and its detach, shared storage, max |param grad
    difference| with vs without the input detach, saved bytes both ways, and whether the
    backbone gets a gradient once the features are detached.
    """
    d = toy("mlp")
    x = _t(d["x"])
    xd = x.detach()  # GRAD-FLOW: C22 an input never required grad

    def grads(inp: torch.Tensor, stop_features: bool) -> tuple[dict[str, int], list[torch.Tensor | None]]:
        w1, w2 = _t(d["w1"], True), _t(d["head_w"], True)
        tally, f = _saved(lambda: torch.tanh(inp @ w1))
        if stop_features:
            f = f.detach()  # GRAD-FLOW: C22 features cut from the loss
        F.mse_loss(f @ w2, _t(d["y"])).backward()
        return tally, [w1.grad, w2.grad]

    (s_plain, g_plain), (s_det, g_det) = grads(x, False), grads(xd, False)
    _, g_stop = grads(x, True)
    return {
        "input_requires_grad": [x.requires_grad, xd.requires_grad],
        "shares_storage": x.data_ptr() == xd.data_ptr(),
        "detach_is_new_tensor": xd is not x,
        "grad_max_abs_diff": max(float((a - b).abs().max()) for a, b in zip(g_plain, g_det, strict=True)),
        "saved_bytes": [s_plain["bytes"], s_det["bytes"]],
        "backbone_grad_none_features_detached": g_stop[0] is None,
    }
