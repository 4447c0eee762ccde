"""Claims about freezing part of a model, each record above its verifier.

The checks: `torch_impl/backend/claims/freezing.py` and `jax_impl/backend/claims/freezing.py`. no_grad around the
wrong layer, detached backbone features, param.detach_(), the cost of freezing, detached inputs.
Speed is judged on what does not depend on a clock (saved bytes, autograd nodes, residuals);
the ratios are measured by `detach-parity bench`.
"""

from __future__ import annotations

from .record import NO_GRAD_FN, SAME, Facts, Theme, close, raised

__all__ = ["THEME"]

THEME = Theme(module="freezing", title="freezing part of a model: what each stop really freezes, and what it costs")


@THEME.claim(
    id="C05",
    article="A3",
    section="§2.2 scenario 1",
    scenario="frozen_backbone",
    verdict="wrong",
    claim="Wrapping layer3 in no_grad freezes layer1 and layer2 (printout shows them requires_grad=False).",
    right="The printout is all True; layer3, the layer meant to train, is cut off and backward raises. Detach layer2's output, or requires_grad_(False) on layer1/2. The JAX port gives all-zero gradients silently.",
)
def no_grad_cuts_the_layer_meant_to_train(t: dict, j: dict, f: Facts) -> None:
    w = t["as_written"]
    cut = {"layer1": "none", "layer2": "none", "layer3": "nonzero"}
    f.need(all(w["printout"].values()), "printout all requires_grad=True")
    f.need(
        not w["output_has_grad_fn"] and raised(w["backward"], "RuntimeError", NO_GRAD_FN),
        "output has no grad_fn, backward raises",
    )
    f.need(
        t["fix_detach"] == cut and t["fix_requires_grad"] == cut,
        "fix (detach layer2's output or requires_grad_(False)): only layer3 learns",
    )
    f.need(not any(t["fix_printout"].values()), "requires_grad_(False) gives the claimed all-False printout")
    f.need(set(j["as_written"].values()) == {"zero"}, "JAX port: all-zero gradients, silently")
    f.need(
        j["fix_stop_below_layer3"] == {"layer1": "zero", "layer2": "zero", "layer3": "nonzero"},
        "JAX fix: layer3 learns",
    )


@THEME.claim(
    id="C06",
    article="A1",
    section="§3.1",
    scenario="frozen_backbone",
    verdict="incomplete",
    claim="features = backbone(x).detach() trains only the head.",
    right="Gradients are right, but the backbone graph is still built and BatchNorm statistics still move in train mode: use eval() and no_grad (or requires_grad_(False)).",
)
def detached_features_still_build_the_graph(t: dict, j: dict, f: Facts) -> None:
    sd, se, sh = t["saved_elements_detach_train"], t["saved_elements_eval_no_grad"], t["saved_elements_head_only"]
    f.need(t["backbone_grad_is_none"] and t["head_grad_nonzero"], "gradients right: head only")
    f.need(sd > se == sh, f"saved elements {sd} with detach vs {se} with eval()+no_grad (head alone {sh})")
    f.need(
        t["bn_moved_detach_train"] and t["bn_moved_no_grad_train"] and not t["bn_moved_eval_no_grad"],
        "BN running_mean moves in train mode (detach or no_grad), not in eval",
    )
    f.need(
        j["residuals_stop"]["bytes"] < j["residuals_none"]["bytes"] and j["backbone_grad_zero"],
        f"JAX: stop_gradient prunes residuals ({j['residuals_stop']['bytes']} vs {j['residuals_none']['bytes']} B)",
    )
    f.need(j["bn_moved_train"] and not j["bn_moved_eval"], "JAX nnx.BatchNorm stats move in train mode too")


@THEME.claim(
    id="C07",
    article="A2",
    section="§1",
    scenario="frozen_backbone",
    verdict="misleading",
    claim="Freeze pretrained parameters with param.detach_() because of gradient accumulation.",
    right="detach_() on a leaf Parameter freezes it (requires_grad False, .grad kept; AdamW then skips it) and raises on a view; the reason given is wrong and the snippet's head shape does not match. requires_grad_(False) is the idiom; the JAX zero-gradient port is decayed by adamw.",
)
def detach_inplace_freezes_a_leaf(t: dict, j: dict, f: Facts) -> None:
    f.need(
        not t["requires_grad_after"] and t["is_leaf_after"] and close(t["grad_kept"], [0.1, 0.2, 0.3]),
        "detach_() on a leaf: requires_grad False, .grad kept",
    )
    f.need(raised(t["view_error"], "RuntimeError", "Can't detach views in-place"), "on a view: RuntimeError")
    f.need(
        raised(t["head_shape_error"], "RuntimeError", "(2x1000 and 512x10)"),
        "512-input head on 1000 outputs: shape error",
    )
    f.need(t["frozen_after_adamw"] == t["frozen_before"] and t["head_moved"], "torch AdamW skips the frozen parameter")
    f.need(
        close(j["frozen_after_adamw"], j["expected_decay"]) and j["frozen_after_adamw"] != [1.0, -2.0, 3.0],
        "JAX zero-gradient port: adamw decays it ×0.99",
    )
    f.need(
        j["frozen_after_partition"] == [1.0, -2.0, 3.0] and j["frozen_after_partition_live_grad"] == [1.0, -2.0, 3.0],
        "optax.partition + set_to_zero keeps it, even under a non-zero gradient",
    )


@THEME.claim(
    id="C16",
    article="A1",
    section="§7",
    scenario="frozen_backbone",
    verdict="misleading",
    claim="detach speeds training up by 15–20 %.",
    right="The saving is the skipped backward of the frozen part: large against no freezing depending on where the compute is, ≈1.0× against proper freezing (requires_grad_(False) or no_grad). Ratios: detach-parity bench.",
)
def freezing_skips_the_backward(t: dict, j: dict, f: Facts) -> None:
    n = {k: t[k]["backward_nodes"] for k in ("none", "detach", "requires_grad_false", "no_grad")}
    s = {k: t[k]["saved_bytes"] for k in ("none", "detach", "requires_grad_false", "no_grad")}
    f.need(
        n["detach"] == n["requires_grad_false"] == n["no_grad"] < n["none"],
        f"backward nodes {n['none']} → {n['detach']} (any freezing)",
    )
    f.need(
        s["detach"] > s["requires_grad_false"] == s["no_grad"],
        f"saved B: detach {s['detach']} vs frozen {s['no_grad']}",
    )
    f.need(
        j["stop"]["grad_eqns"] < j["none"]["grad_eqns"] and j["stop"]["residuals"] == j["head_only"]["residuals"],
        f"JAX grad eqns {j['none']['grad_eqns']} → {j['stop']['grad_eqns']}",
    )
    f.note("step-time ratios: detach-parity bench")


@THEME.claim(
    id="C22",
    article="A3",
    section="§3.1",
    scenario="feature_stats",
    verdict="misleading",
    claim="Detach inputs and features promptly to save memory.",
    right="A no-op for inputs (a batch does not require grad), and it stops training for features the loss needs.",
)
def detaching_inputs_is_a_no_op(t: dict, j: dict, f: Facts) -> None:
    f.need(
        t["input_requires_grad"] == [False, False] and t["shares_storage"] and t["detach_is_new_tensor"],
        "an input batch does not require grad: detach is a no-op",
    )
    f.need(
        t["grad_max_rel_diff"] <= SAME and t["saved_bytes"][0] == t["saved_bytes"][1],
        "same gradients, same saved bytes",
    )
    f.need(t["backbone_grad_none_features_detached"], "detaching needed features: backbone gets no gradient")
    f.need(
        j["grad_max_rel_diff"] <= SAME and j["backbone_grad_state_features_stopped"] == "zero",
        "JAX the same (zero gradient)",
    )
