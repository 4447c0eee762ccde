"""claims, aliasing: what detach() returns, run in PyTorch.

What it teaches: detach() returns an alias, not a copy: it shares storage and the version
counter with its source (an in-place write shows in both and breaks a backward that saved the
source); the alias does not require grad and backward through it raises; no_grad differs
from detach beyond values and flags; .data hides in-place writes from autograd.
Gradient flow: z = y.detach() has y's values and no grad_fn: nothing flows from z back to y's
inputs; y's own path is untouched.
Port note: jax_impl/backend/claims/aliasing.py: JAX arrays are immutable (no write-through, no
version counter), there is no requires_grad flag, no grad mode and no .data: the flag becomes
a zero gradient, the errors become silent zeros, "no_grad" has nothing to compare.
Shapes: vectors of 2 or 3 entries, no letters needed.
Reference: PyTorch docs, "Autograd mechanics" (in-place correctness checks, saved tensors).
"""

from __future__ import annotations

import torch

from .evidence import error, evidence, saved

__all__ = ["check_c01", "check_c02", "check_c04", "check_c20", "check_c21"]

F64 = torch.float64


@evidence
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
    saved_error = error(loss.backward)
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


@evidence
def check_c02() -> dict:
    """C02: z = (x * 2).detach() does not require grad; y = x * 2 does.

    Returns: z.requires_grad, y.requires_grad, z.grad_fn is None.
    """
    x = torch.tensor([1.0, 2.0], requires_grad=True)
    y = x * 2
    z = (x * 2).detach()  # GRAD-FLOW: C02 z is cut from x
    return {"z_requires_grad": z.requires_grad, "y_requires_grad": y.requires_grad, "z_grad_fn_none": z.grad_fn is None}


@evidence
def check_c04() -> dict:
    """C04: backward through a detached tensor: the real error type and message.

    Returns: {"error": {"type", "message"}} of z.sum().backward() with z = (x * 2).detach().
    """
    x = torch.tensor([1.0, 2.0], requires_grad=True)
    z = (x * 2).detach()  # GRAD-FLOW: C04 nothing to differentiate
    return {"error": error(lambda: z.sum().backward())}


@evidence
def check_c20() -> dict:
    """C20: no_grad and detach agree on values and flags only.

    Returns: values/flags of (x.exp()).detach() vs x.exp() under no_grad, tensors saved by each,
    requires_grad of a new tensor made with requires_grad=True under no_grad, the in-place leaf
    update error outside no_grad (and success inside), the no_grad-view error in grad mode.
    """
    x = torch.tensor([0.0, 1.0], dtype=F64, requires_grad=True)
    saved_detach, a = saved(lambda: x.exp().detach())  # GRAD-FLOW: C20 recorded, then cut
    with torch.no_grad():  # GRAD-FLOW: C20 never recorded
        saved_no_grad, b = saved(lambda: x.exp())
        fresh = torch.ones(2, requires_grad=True)
    leaf = torch.ones(2, dtype=F64, requires_grad=True)
    outside = error(lambda: leaf.add_(1))
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
        "no_grad_view_inplace_in_grad_mode": error(lambda: view.mul_(2)),
    }


@evidence
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
        "detach_zero_backward": error(lambda: out.sum().backward()),
    }
