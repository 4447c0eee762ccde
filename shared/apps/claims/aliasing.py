"""Claims about what detach() returns, each record above its verifier.

The checks: `torch_impl/backend/claims/aliasing.py` and `jax_impl/backend/claims/aliasing.py`. Aliased storage,
the requires_grad flag, the error of a backward through a detached tensor, no_grad against
detach, detach against .data.
"""

from __future__ import annotations

from .record import INPLACE, NO_GRAD_FN, Facts, Theme, close, raised

__all__ = ["THEME"]

THEME = Theme(module="aliasing", title="what detach() returns: an alias without a graph, not a copy and not no_grad")


@THEME.claim(
    id="C01",
    article="A1",
    section="§2.1 (A2 intro)",
    scenario="basics",
    verdict="wrong",
    claim="A detached tensor is an independent snapshot: operations on it never affect the original.",
    right="detach() shares storage and version counter: an in-place write shows in the original and breaks a backward that saved it. Out-of-place ops are independent; .detach().clone() is the snapshot. JAX arrays are immutable.",
)
def detach_aliases_storage(t: dict, j: dict, f: Facts) -> None:
    f.need(
        t["shares_storage"] and t["version_bumped"] and t["y_after_alias_write"] == [100.0, 4.0, 6.0],
        "z = y.detach(); z[0] = 100 → y = [100, 4, 6] (shared storage and version counter)",
    )
    f.need(
        t["requires_grad"] == {"alias": False, "out_of_place": False, "snapshot": False}
        and t["grad_fn_after_alias_write"] == "MulBackward0",
        "alias, out-of-place result and clone do not require grad; the alias write is not recorded in y's graph",
    )
    f.need(
        raised(t["backward_after_alias_write"], "RuntimeError", INPLACE),
        "saved y: backward raises RuntimeError 'modified by an inplace operation'",
    )
    f.need(
        t["y_after_out_of_place"] == [2.0, 4.0, 6.0] and t["y_after_clone_write"] == [2.0, 4.0, 6.0],
        "out-of-place op / detach().clone() leave y = [2, 4, 6]",
    )
    f.need(
        raised(j["item_assignment"], "TypeError", "immutable") and j["y_after_at_set"] == [2.0, 4.0, 6.0],
        "JAX: TypeError (immutable), .at[].set leaves y unchanged",
    )


@THEME.claim(
    id="C02",
    article="A1",
    section="§2.2",
    scenario="basics",
    verdict="correct",
    claim="z = (x * 2).detach() does not require grad while y = x * 2 does.",
    right="Right. In JAX the flag has no equivalent: the gradient through stop_gradient is 0.",
)
def detached_result_needs_no_grad(t: dict, j: dict, f: Facts) -> None:
    f.need(
        not t["z_requires_grad"] and t["y_requires_grad"] and t["z_grad_fn_none"],
        "z.requires_grad False, y.requires_grad True",
    )
    f.need(j["z_grad"] == [0.0, 0.0] and j["y_grad"] == [2.0, 2.0], "JAX: gradient 0 through z, 2 through y")


@THEME.claim(
    id="C04",
    article="A3",
    section="§2.1",
    scenario="basics",
    verdict="wrong",
    claim="Backward on a detached tensor fails with a message saying the detached tensor has no grad_fn.",
    right=f"The real error is RuntimeError '{NO_GRAD_FN}'. JAX raises nothing: the gradient is 0.",
)
def backward_on_detached_raises(t: dict, j: dict, f: Facts) -> None:
    e = t["error"]
    f.need(e["type"] == "RuntimeError" and e["message"] == NO_GRAD_FN, f"RuntimeError '{e['message']}'")
    f.need("detached Tensor" not in e["message"], "the claimed message does not occur")
    f.need(j["error"]["type"] is None and j["grad"] == [0.0, 0.0], "JAX: no error, gradient [0, 0]")


@THEME.claim(
    id="C20",
    article="A3",
    section="§2.2 comment, §3.1",
    scenario="no_grad_inference",
    verdict="misleading",
    claim="no_grad is equivalent to calling detach on every result.",
    right="They agree on values and flags only: detach records then cuts, new tensors with requires_grad=True inside no_grad still require grad, in-place updates of a leaf that requires grad are allowed only under no_grad, views made under no_grad cannot be modified in place in grad mode.",
)
def no_grad_is_not_detach_everywhere(t: dict, j: dict, f: Facts) -> None:
    f.need(t["same_values"] and t["flags"] == [False, False], "same values and flags")
    f.need(
        t["saved_count_detach"] == 1 and t["saved_count_no_grad"] == 0, "detach records then cuts: 1 tensor saved vs 0"
    )
    f.need(t["new_tensor_under_no_grad_requires_grad"], "requires_grad=True inside no_grad still requires grad")
    f.need(
        raised(t["leaf_inplace_outside_no_grad"], "RuntimeError", "a leaf Variable that requires grad")
        and t["leaf_after_no_grad_update"] == [2.0, 2.0],
        "leaf in-place update only under no_grad",
    )
    f.need(
        raised(t["no_grad_view_inplace_in_grad_mode"], "RuntimeError", "A view was created in no_grad mode"),
        "no_grad view modified later raises",
    )
    f.need(j.get("applies") is False, "JAX: no grad mode")


@THEME.claim(
    id="C21",
    article="A3",
    section="§3.2",
    scenario="data_vs_detach",
    verdict="incomplete",
    claim="Prefer detach() over .data.",
    right="Right advice; the reason: out.data.zero_() after out = x.sigmoid() gives a silently wrong gradient [0, 0, 0], while out.detach().zero_() raises the version-counter error.",
)
def data_hides_writes_detach_raises(t: dict, j: dict, f: Facts) -> None:
    f.need(
        t["data_zero_grad"] == [0.0, 0.0, 0.0] and all(g > 0 for g in t["right_grad"]),
        "out.data.zero_(): grad [0, 0, 0], silently (right: σ′(x))",
    )
    f.need(
        raised(t["detach_zero_backward"], "RuntimeError", INPLACE)
        and t["grad_fn_after_detach_zero"] == "SigmoidBackward0",
        "out.detach().zero_(): not recorded in out's graph, yet backward raises",
    )
    f.need(
        close(j["grad"], t["right_grad"]) and j["zeroed_copy"] == [0.0, 0.0, 0.0] and j["out_after_zeroing"][0] > 0,
        "JAX: zeroing makes a copy, grad σ′(x)",
    )
