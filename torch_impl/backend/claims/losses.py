"""claims, losses: where a loss stops its gradient, run in PyTorch.

What it teaches: the gradients a loss really gets when one of its inputs is detached: a plain
loss by hand (C03), the DQN target computed at training time and stopped (C08), one task kept
out of a shared trunk (C12), first-order MAML (C13), attention weights cut from Q and K (C14),
policy logits detached before a policy-gradient loss (C17).
Gradient flow: loss(f(theta), stop(g(theta))): only f's path reaches theta; the stopped input
is a constant (its own parameters get no gradient, .grad None).
Port note: jax_impl/backend/claims/losses.py has the same losses with jax.lax.stop_gradient: the cut
parameters get zero gradients instead of None, and the errors torch raises (a misspelt name,
backward on a non-scalar, backward through detached logits) become a TypeError or silent zeros.
Shapes: B samples, D inputs, A actions, N tokens, E head width (the toys in shared/core/toys.py).
Reference: PyTorch docs, "Autograd mechanics"; Mnih et al. 2015 (doi:10.1038/nature14236);
Finn et al. 2017, arXiv:1703.03400 (MAML).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F

from ....shared.core.toys import toy
from .evidence import array, error, evidence, rel_diff, saved

__all__ = ["check_c03", "check_c08", "check_c12", "check_c13", "check_c14", "check_c17"]

F64 = torch.float64


@evidence
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


def _td_target(d: dict, target_w: torch.Tensor) -> torch.Tensor:
    """y [B] = r + gamma (1 - done) max_a s2 @ target_w, stopped."""
    q_next = (array(d["s2"]) @ target_w).max(dim=1).values
    y = array(d["r"]) + float(d["gamma"]) * (1 - array(d["done"])) * q_next
    return y.detach()  # GRAD-FLOW: C08 TD target is a constant for the online net


@evidence
def check_c08() -> dict:
    """C08: the replay snippet's misspelt name; a stored target goes stale; the right TD target.

    Returns: the NameError of a snippet reading a misspelt name, max |stored - fresh| target
    after one online step and a target sync, the online / target gradient states.
    """
    d = toy("dqn")
    namespace = {"q_next": torch.ones(2, 3), "reward": torch.zeros(2), "gamma": 0.9}
    snippet = "next_state_values = q_next.max(1).values.detach()\ntarget = reward + gamma * next_state_value"
    name_error = error(lambda: exec(snippet, namespace))  # noqa: S102 - the typo is the finding
    online, target = array(d["online"], True), array(d["target"], True)
    stored = _td_target(d, target)  # computed at collection time and kept in the buffer

    def td_loss() -> torch.Tensor:
        q = (array(d["s"]) @ online).gather(1, torch.as_tensor(d["a"])[:, None])[:, 0]
        return 0.5 * ((_td_target(d, target) - q) ** 2).mean()

    loss = td_loss()
    loss.backward()
    grads = {"online_nonzero": bool(online.grad.abs().sum() > 0), "target_grad_is_none": target.grad is None}
    with torch.no_grad():
        online -= 0.5 * online.grad
        target.copy_(online)  # target sync
    return {"name_error": name_error, "stale_max_abs": float((stored - _td_target(d, target)).abs().max()), **grads}


def _multitask(d: dict, isolate: bool, tasks: tuple[int, ...] = (1, 2)) -> tuple[list[torch.Tensor], torch.Tensor]:
    tw, tb = array(d["trunk_w"], True), array(d["trunk_b"], True)
    h1, h2 = array(d["head1"], True), array(d["head2"], True)
    f = torch.tanh(array(d["x"]) @ tw + tb)
    f2 = f.detach() if isolate else f  # GRAD-FLOW: C12 task 2 does not shape the trunk
    loss = torch.zeros((), dtype=F64)
    if 1 in tasks:
        loss = loss + F.mse_loss(f @ h1, array(d["y1"]))
    if 2 in tasks:
        loss = loss + F.mse_loss(f2 @ h2, array(d["y2"]))
    loss.backward()
    return [tw.grad, tb.grad, h2.grad], f @ h1


@evidence
def check_c12() -> dict:
    """C12: multitask isolation: the trunk gradient is exactly task 1's gradient alone.

    Returns: max |trunk grad (isolated) - trunk grad (task 1 alone)| / max |task 1's|, the same without
    isolation, whether head 2 still learns, and the error of backward on a [B, 1] output.
    """
    d = toy("multitask")
    iso, out = _multitask(d, True)
    alone, _ = _multitask(d, False, tasks=(1,))
    joint, _ = _multitask(d, False)
    diff = lambda a, b: max(rel_diff(p, q) for p, q in zip(a[:2], b[:2], strict=True))
    return {
        "isolated_vs_task1_max_rel": diff(iso, alone),
        "joint_vs_task1_max_rel": diff(joint, alone),
        "head2_grad_nonzero": bool(iso[2].abs().sum() > 0),
        "non_scalar_backward": error(lambda: out.backward()),
    }


def _maml_losses(d: dict) -> tuple[Callable, Callable]:
    inner = lambda th: ((torch.tanh(array(d["x_in"]) @ th) - array(d["y_in"])) ** 2).mean()
    outer = lambda th: ((torch.tanh(array(d["x_out"]) @ th) - array(d["y_out"])) ** 2).mean()
    return inner, outer


def _maml_grad(d: dict, first_order: bool) -> torch.Tensor:
    inner, outer = _maml_losses(d)
    theta = array(d["theta"], True)
    (g,) = torch.autograd.grad(inner(theta), theta, create_graph=True)
    if first_order:
        g = g.detach()  # GRAD-FLOW: C13 first-order MAML: the inner gradient is a constant
    (meta,) = torch.autograd.grad(outer(theta - float(d["alpha"]) * g), theta)
    return meta


@evidence
def check_c13() -> dict:
    """C13: first-order MAML (inner gradient detached) drops the Hessian term.

    Returns: second- and first-order meta-gradients, their relative difference
    |so - fo| / |so|, and the max error of each against its closed form
    so = (I - alpha H_in(theta)) g_out(theta'), fo = g_out(theta').
    """
    d = toy("maml")
    so, fo = _maml_grad(d, False), _maml_grad(d, True)
    inner, outer = _maml_losses(d)
    theta, alpha = array(d["theta"]), float(d["alpha"])
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
    x = array(d["x"])
    wq, wk, wv = (array(d[k], True) for k in ("wq", "wk", "wv"))
    q, k, v = x @ wq, x @ wk, x @ wv  # [N, E]
    a = torch.softmax(q @ k.T / math.sqrt(2), dim=-1)  # [N, N]
    if stop_weights:
        a = a.detach()  # GRAD-FLOW: C14 attention weights as constants
    ((a @ v - array(d["target"])) ** 2).sum().backward()
    return [wq.grad, wk.grad, wv.grad]


@evidence
def check_c14() -> dict:
    """C14: detaching attention weights removes the only gradient path to W_q and W_k.

    Returns: whether dW_q, dW_k are None with the weights detached, nonzero without,
    and max |dW_v (detached) - dW_v (not)| / max |dW_v (not)|.
    """
    d = toy("attention")
    stop, full = _attention_grads(d, True), _attention_grads(d, False)
    return {
        "wq_wk_grad_none_detached": stop[0] is None and stop[1] is None,
        "wq_wk_grad_nonzero_full": bool(full[0].abs().sum() > 0 and full[1].abs().sum() > 0),
        "wv_grad_max_rel_diff": rel_diff(stop[2], full[2]),
    }


@evidence
def check_c17() -> dict:
    """C17: detaching logits before action selection gains nothing; detaching them in the loss kills learning.

    Returns: saved bytes of forward + action selection with and without detach and under
    no_grad, and the error of a policy-gradient loss built on detached logits.
    """
    d = toy("policy")
    s, w = array(d["s"]), array(d["w"], True)

    def select(stop: bool) -> tuple[torch.Tensor, bool]:
        logits = s @ w  # [B, A]
        scores = logits.detach() if stop else logits  # GRAD-FLOW: C17 action choice needs no gradient
        return scores.argmax(dim=1), scores.requires_grad

    saved_plain, _ = saved(lambda: select(False))
    saved_detach, (_, detached_flag) = saved(lambda: select(True))
    with torch.no_grad():  # GRAD-FLOW: C17 acting needs no graph
        saved_no_grad, _ = saved(lambda: select(False))
    logits = (s @ w).detach()  # GRAD-FLOW: C17 the bug: policy-gradient loss on stopped logits
    logp = torch.log_softmax(logits, dim=1).gather(1, torch.as_tensor(d["a"])[:, None])[:, 0]
    loss = -(logp * array(d["ret"])).mean()
    return {
        "saved_bytes_select": saved_plain["bytes"],
        "saved_bytes_select_detach": saved_detach["bytes"],
        "saved_bytes_select_no_grad": saved_no_grad["bytes"],
        "detached_scores_requires_grad": detached_flag,
        "pg_loss_on_detached_logits": error(loss.backward),
    }
