"""Claims, checked: the tutorial claims C01–C22 about detach(), each a record with a verdict.

A `Claim` record holds what the article says (in our words, never the articles' text; the
sources are cited by title), the verdict (correct / incomplete / misleading / wrong), the
right statement, the related scenario and the name of its executable check. The checks live
in a mirrored pair, `torch_impl/claims.py` and `jax_impl/claims.py` (`check_c01` ...
`check_c22`), each returning an evidence dict from this run; `verify(claim, torch_ev, jax_ev)`
decides whether the evidence still supports the stated verdict. A new torch or JAX version
that changes a fact makes `detach-parity claims` exit 1.

Speed claims are judged here on what does not depend on a clock (saved-tensor bytes, autograd
nodes, residuals, errors); the ratios are measured by `detach-parity bench`.
No framework is imported at module level (the records are readable without torch or JAX).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from shared.core.runner import impl

__all__ = [
    "ARTICLES",
    "VERDICTS",
    "Claim",
    "CLAIMS",
    "get",
    "verify",
    "Outcome",
    "evaluate",
    "run_all",
    "markdown_table",
]

# Cited by title, never quoted (see shared/cases/CLAIMS.md of the project brief).
ARTICLES = {
    "A1": "PyTorch detach()：从原理到实战，解锁计算图控制的进阶技巧",
    "A2": "Pytorch 为什么在这个例子中需要调用detach函数",
    "A3": "Python中Delta与Detach的深度解析：计算图与张量操作的关键机制",
}
VERDICTS = ("correct", "incomplete", "misleading", "wrong")

NO_GRAD_FN = "element 0 of tensors does not require grad and does not have a grad_fn"
INPLACE = "modified by an inplace operation"


class _Facts:
    """Collects the facts a verifier needs; the text shows what was found, failures marked ✗."""

    def __init__(self) -> None:
        self.parts: list[str] = []
        self.failed: list[str] = []

    def need(self, cond: Any, text: str) -> None:
        ok = bool(cond)
        self.parts.append(text if ok else f"✗ {text}")
        if not ok:
            self.failed.append(text)

    def note(self, text: str) -> None:
        self.parts.append(text)

    def result(self) -> tuple[bool, str]:
        return not self.failed, "; ".join(self.parts)


def _err(ev: dict, typ: str, fragment: str) -> bool:
    return ev.get("type") == typ and fragment in ev.get("message", "")


def _close(a, b, tol: float = 1e-12) -> bool:
    a, b = (a if isinstance(a, list) else [a]), (b if isinstance(b, list) else [b])
    return len(a) == len(b) and all(abs(x - y) <= tol * max(1.0, abs(y)) for x, y in zip(a, b, strict=True))


def _fmt(x: float) -> str:
    return f"{x:.3g}"


def _v01(t: dict, j: dict) -> tuple[bool, str]:
    f = _Facts()
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
        _err(t["backward_after_alias_write"], "RuntimeError", INPLACE),
        "saved y: backward raises RuntimeError 'modified by an inplace operation'",
    )
    f.need(
        t["y_after_out_of_place"] == [2.0, 4.0, 6.0] and t["y_after_clone_write"] == [2.0, 4.0, 6.0],
        "out-of-place op / detach().clone() leave y = [2, 4, 6]",
    )
    f.need(
        _err(j["item_assignment"], "TypeError", "immutable") and j["y_after_at_set"] == [2.0, 4.0, 6.0],
        "JAX: TypeError (immutable), .at[].set leaves y unchanged",
    )
    return f.result()


def _v02(t: dict, j: dict) -> tuple[bool, str]:
    f = _Facts()
    f.need(
        not t["z_requires_grad"] and t["y_requires_grad"] and t["z_grad_fn_none"],
        "z.requires_grad False, y.requires_grad True",
    )
    f.need(j["z_grad"] == [0.0, 0.0] and j["y_grad"] == [2.0, 2.0], "JAX: gradient 0 through z, 2 through y")
    return f.result()


def _v03(t: dict, j: dict) -> tuple[bool, str]:
    f = _Facts()
    keys = ("y", "loss", "w_grad", "x_grad", "b_grad")
    want = [7.0, 4.0, 8.0, 12.0, 4.0]
    f.need(_close([t[k] for k in keys], want), f"torch y, loss, dw, dx, db = {[t[k] for k in keys]}")
    f.need(_close([j[k] for k in keys], want), "JAX the same")
    return f.result()


def _v04(t: dict, j: dict) -> tuple[bool, str]:
    f = _Facts()
    e = t["error"]
    f.need(e["type"] == "RuntimeError" and e["message"] == NO_GRAD_FN, f"RuntimeError '{e['message']}'")
    f.need("detached Tensor" not in e["message"], "the claimed message does not occur")
    f.need(j["error"]["type"] is None and j["grad"] == [0.0, 0.0], "JAX: no error, gradient [0, 0]")
    return f.result()


def _v05(t: dict, j: dict) -> tuple[bool, str]:
    f = _Facts()
    w = t["as_written"]
    cut = {"layer1": "none", "layer2": "none", "layer3": "nonzero"}
    f.need(all(w["printout"].values()), "printout all requires_grad=True")
    f.need(
        not w["output_has_grad_fn"] and _err(w["backward"], "RuntimeError", NO_GRAD_FN),
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
    return f.result()


def _v06(t: dict, j: dict) -> tuple[bool, str]:
    f = _Facts()
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
    return f.result()


def _v07(t: dict, j: dict) -> tuple[bool, str]:
    f = _Facts()
    f.need(
        not t["requires_grad_after"] and t["is_leaf_after"] and _close(t["grad_kept"], [0.1, 0.2, 0.3]),
        "detach_() on a leaf: requires_grad False, .grad kept",
    )
    f.need(_err(t["view_error"], "RuntimeError", "Can't detach views in-place"), "on a view: RuntimeError")
    f.need(
        _err(t["head_shape_error"], "RuntimeError", "(2x1000 and 512x10)"),
        "512-input head on 1000 outputs: shape error",
    )
    f.need(t["frozen_after_adamw"] == t["frozen_before"] and t["head_moved"], "torch AdamW skips the frozen parameter")
    f.need(
        _close(j["frozen_after_adamw"], j["expected_decay"]) and j["frozen_after_adamw"] != [1.0, -2.0, 3.0],
        "JAX zero-gradient port: adamw decays it ×0.99",
    )
    f.need(
        j["frozen_after_partition"] == [1.0, -2.0, 3.0] and j["frozen_after_partition_live_grad"] == [1.0, -2.0, 3.0],
        "optax.partition + set_to_zero keeps it, even under a non-zero gradient",
    )
    return f.result()


def _v08(t: dict, j: dict) -> tuple[bool, str]:
    f = _Facts()
    f.need(_err(t["name_error"], "NameError", "next_state_value"), f"NameError: {t['name_error']['message']}")
    f.need(t["stale_max_abs"] > 1e-6, f"a stored target is stale by {_fmt(t['stale_max_abs'])} after one step + sync")
    f.need(t["online_nonzero"] and t["target_grad_is_none"], "target at training time, stopped: target net grad None")
    f.need(
        j["online_nonzero"] and j["target_grad_zero"] and _close(j["stale_max_abs"], t["stale_max_abs"], 1e-9),
        "JAX: target grad 0, same staleness",
    )
    return f.result()


def _v09(t: dict, j: dict) -> tuple[bool, str]:
    f = _Facts()
    f.need(t["is_inference"] and not t["requires_grad"], "inference_mode output: inference tensor, no grad")
    f.need(
        _err(t["error"], "RuntimeError", "Inference tensors cannot be saved for backward"),
        "RuntimeError 'Inference tensors cannot be saved for backward'",
    )
    f.need(
        t["no_grad_tensor_grad"] == [2.0, 2.0, 2.0] and not t["no_grad_tensor_requires_grad"],
        "a no_grad tensor g = 2·w is a constant that can be used later: d/dw Σ g·w = 2",
    )
    f.need(j.get("applies") is False, "JAX: no inference mode")
    f.note("speed ratios: detach-parity bench")
    return f.result()


def _v10(t: dict, j: dict) -> tuple[bool, str]:
    f = _Facts()
    want = {"none": list(range(40)), "every_10": list(range(30, 40)), "every_1": [39]}
    f.need(t == want, "T=40: grad reaches steps 0..39 / 30..39 / 39 (none / every 10 / every step)")
    f.need(j == want, "JAX the same")
    return f.result()


def _v11(t: dict, j: dict) -> tuple[bool, str]:
    f = _Facts()
    b0, b10, bc = t["saved_bytes_none"], t["saved_bytes_every_10"], t["max_saved_bytes_per_chunk_backward"]
    f.need(b0 == b10, f"summed loss: saved {b0} B without vs {b10} B with detach every 10")
    f.need(t["grad_max_abs_diff"] > 0, "while the gradient is truncated")
    f.need(bc < b0, f"backward per 10-step chunk: at most {bc} B held")
    f.need(
        j["residuals_every_10"]["bytes"] >= j["residuals_none"]["bytes"],
        f"JAX residuals {j['residuals_none']['bytes']} vs {j['residuals_every_10']['bytes']} B",
    )
    return f.result()


def _v12(t: dict, j: dict) -> tuple[bool, str]:
    f = _Facts()
    f.need(
        t["isolated_vs_task1_max_abs"] == 0.0 and t["joint_vs_task1_max_abs"] > 0,
        "isolated trunk grad == task 1 alone (exactly)",
    )
    f.need(t["head2_grad_nonzero"], "head 2 still learns")
    f.need(
        _err(t["non_scalar_backward"], "RuntimeError", "grad can be implicitly created only for scalar outputs"),
        "non-scalar backward raises",
    )
    f.need(
        j["isolated_vs_task1_max_abs"] == 0.0 and j["joint_vs_task1_max_abs"] > 0 and j["head2_grad_nonzero"],
        "JAX the same",
    )
    f.need(
        _err(j["non_scalar_grad"], "TypeError", "Gradient only defined for scalar-output functions"),
        "JAX: TypeError on non-scalar grad",
    )
    return f.result()


def _v13(t: dict, j: dict) -> tuple[bool, str]:
    f = _Facts()
    rel = t["relative_difference"]
    f.need(rel > 0.05, f"first- vs second-order meta-gradient differ by {rel:.1%}")
    f.need(
        t["second_order_vs_closed_form"] < 1e-12 and t["first_order_vs_closed_form"] < 1e-12,
        "SO = (I − αH)·g′, FO = g′ (closed forms)",
    )
    f.need(
        _close(j["second_order"], t["second_order"], 1e-10) and _close(j["first_order"], t["first_order"], 1e-10),
        "JAX the same",
    )
    return f.result()


def _v14(t: dict, j: dict) -> tuple[bool, str]:
    f = _Facts()
    f.need(
        t["wq_wk_grad_none_detached"] and t["wq_wk_grad_nonzero_full"],
        "detached weights: dWq, dWk None (nonzero without)",
    )
    f.need(t["wv_grad_max_abs_diff"] == 0.0, "dWv unchanged")
    f.need(
        j["wq_wk_grad_zero_stopped"] and j["wq_wk_grad_nonzero_full"] and j["wv_grad_max_abs_diff"] == 0.0,
        "JAX: dWq, dWk zero, dWv unchanged",
    )
    return f.result()


def _v15(t: dict, j: dict) -> tuple[bool, str]:
    f = _Facts()
    f.need(
        t["autocast_dtype"] == "torch.bfloat16" and t["grad_dtype"] == "torch.float32" and t["grad_nonzero"],
        "autocast bf16 forward, float32 grads, no detach",
    )
    f.need(_err(t["detached_loss_backward"], "RuntimeError", NO_GRAD_FN), "detached loss: backward raises")
    f.need(
        j["compute_dtype"] == "bfloat16" and j["grad_dtype"] == "float32" and j["grad_state"] == "nonzero",
        "JAX bf16 compute, float32 grads",
    )
    f.need(j["stopped_loss_grad_state"] == "zero", "JAX stopped loss: zero gradients, silently")
    return f.result()


def _v16(t: dict, j: dict) -> tuple[bool, str]:
    f = _Facts()
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
    return f.result()


def _v17(t: dict, j: dict) -> tuple[bool, str]:
    f = _Facts()
    f.need(
        t["saved_bytes_select"] == t["saved_bytes_select_detach"] > 0 == t["saved_bytes_select_no_grad"],
        f"saved B: {t['saved_bytes_select']} with or without detach, 0 under no_grad",
    )
    f.need(not t["detached_scores_requires_grad"], "the detach does cut the graph: it just saves nothing")
    f.need(
        _err(t["pg_loss_on_detached_logits"], "RuntimeError", NO_GRAD_FN), "PG loss on detached logits: backward raises"
    )
    f.need(
        j["grad_state"] == "nonzero" and j["stopped_logits_grad_state"] == "zero", "JAX: zero policy gradient, silently"
    )
    f.note("step-time ratios: detach-parity bench")
    return f.result()


def _v18(t: dict, j: dict) -> tuple[bool, str]:
    f = _Facts()
    full = t["full_norm"]
    f.need(full > 1e6 and _close(t["clip_reported_norm"], full), f"norm {_fmt(full)}")
    f.need(
        abs(t["clipped_norm"] - 1) < 1e-9 and abs(t["clipped_cosine"] - 1) < 1e-9,
        "clip_grad_norm_ → 1.0, direction kept",
    )
    f.need(
        t["detach_every_step_norm"] > 1 and t["detach_every_step_cosine"] < 0.99,
        f"detach every step: norm {_fmt(t['detach_every_step_norm'])}, cosine {t['detach_every_step_cosine']:.2f}",
    )
    f.need(
        abs(j["clipped_norm"] - 1) < 1e-9
        and abs(j["clipped_cosine"] - 1) < 1e-9
        and _close(j["full_norm"], full, 1e-9)
        and _close(j["detach_every_step_cosine"], t["detach_every_step_cosine"], 1e-9),
        "JAX (optax.clip_by_global_norm) the same",
    )
    return f.result()


def _v19(t: dict, j: dict) -> tuple[bool, str]:
    f = _Facts()
    n = t["n"]
    ratio = [a / b for a, b in zip(t["std"], t["std_biased"], strict=True)]
    f.need(
        _close(ratio, [math.sqrt(n / (n - 1))] * len(ratio)),
        f"torch .std() / biased = sqrt(N/(N−1)) = {math.sqrt(n / (n - 1)):.4f}",
    )
    f.need(
        _close(j["std"], t["std_biased"]) and _close(j["std_ddof1"], t["std"]),
        "jnp.std is ddof=0 (ddof=1 matches torch)",
    )
    f.need(not t["std_requires_grad"], "statistics of detached features carry no graph")
    f.need(
        t["saved_bytes_grad"] > 0 == t["saved_bytes_no_grad"],
        f"no_grad saves {t['saved_bytes_no_grad']} B vs {t['saved_bytes_grad']} B",
    )
    return f.result()


def _v20(t: dict, j: dict) -> tuple[bool, str]:
    f = _Facts()
    f.need(t["same_values"] and t["flags"] == [False, False], "same values and flags")
    f.need(
        t["saved_count_detach"] == 1 and t["saved_count_no_grad"] == 0, "detach records then cuts: 1 tensor saved vs 0"
    )
    f.need(t["new_tensor_under_no_grad_requires_grad"], "requires_grad=True inside no_grad still requires grad")
    f.need(
        _err(t["leaf_inplace_outside_no_grad"], "RuntimeError", "a leaf Variable that requires grad")
        and t["leaf_after_no_grad_update"] == [2.0, 2.0],
        "leaf in-place update only under no_grad",
    )
    f.need(
        _err(t["no_grad_view_inplace_in_grad_mode"], "RuntimeError", "A view was created in no_grad mode"),
        "no_grad view modified later raises",
    )
    f.need(j.get("applies") is False, "JAX: no grad mode")
    return f.result()


def _v21(t: dict, j: dict) -> tuple[bool, str]:
    f = _Facts()
    f.need(
        t["data_zero_grad"] == [0.0, 0.0, 0.0] and all(g > 0 for g in t["right_grad"]),
        "out.data.zero_(): grad [0, 0, 0], silently (right: σ′(x))",
    )
    f.need(
        _err(t["detach_zero_backward"], "RuntimeError", INPLACE)
        and t["grad_fn_after_detach_zero"] == "SigmoidBackward0",
        "out.detach().zero_(): not recorded in out's graph, yet backward raises",
    )
    f.need(
        _close(j["grad"], t["right_grad"]) and j["zeroed_copy"] == [0.0, 0.0, 0.0] and j["out_after_zeroing"][0] > 0,
        "JAX: zeroing makes a copy, grad σ′(x)",
    )
    return f.result()


def _v22(t: dict, j: dict) -> tuple[bool, str]:
    f = _Facts()
    f.need(
        t["input_requires_grad"] == [False, False] and t["shares_storage"] and t["detach_is_new_tensor"],
        "an input batch does not require grad: detach is a no-op",
    )
    f.need(
        t["grad_max_abs_diff"] == 0.0 and t["saved_bytes"][0] == t["saved_bytes"][1], "same gradients, same saved bytes"
    )
    f.need(t["backbone_grad_none_features_detached"], "detaching needed features: backbone gets no gradient")
    f.need(
        j["grad_max_abs_diff"] == 0.0 and j["backbone_grad_state_features_stopped"] == "zero",
        "JAX the same (zero gradient)",
    )
    return f.result()


@dataclass(frozen=True)
class Claim:
    """One tutorial claim and its verdict.

    id: "C01" .. "C22"; article: "A1" | "A2" | "A3" (title in ARTICLES); section: e.g. "§2.1";
    claim: what the article says, in our words; verdict: one of VERDICTS; right: the right
    statement; scenario: the related registered scenario or None; verifier: (torch evidence,
    JAX evidence) -> (reproduced, evidence text).
    """

    id: str
    article: str
    section: str
    claim: str
    verdict: str
    right: str
    scenario: str | None
    verifier: Callable[[dict, dict], tuple[bool, str]]

    def __post_init__(self) -> None:
        if self.verdict not in VERDICTS:
            raise ValueError(f"{self.id}: verdict expected one of {VERDICTS}, got {self.verdict!r}")
        if self.article not in ARTICLES:
            raise ValueError(f"{self.id}: article expected one of {sorted(ARTICLES)}, got {self.article!r}")

    @property
    def check(self) -> str:
        """Name of the check function in torch_impl/claims.py and jax_impl/claims.py."""
        return f"check_{self.id.lower()}"

    @property
    def source(self) -> str:
        return f"{self.article} {self.section}"


_RECORDS = [
    ("C01", "A1", "§2.1 (A2 intro)", "A detached tensor is an independent snapshot: operations on it never affect the original.", "wrong",
     "detach() shares storage and version counter: an in-place write shows in the original and breaks a backward that saved it. Out-of-place ops are independent; .detach().clone() is the snapshot. JAX arrays are immutable.", "basics", _v01),
    ("C02", "A1", "§2.2", "z = (x * 2).detach() does not require grad while y = x * 2 does.", "correct",
     "Right. In JAX the flag has no equivalent: the gradient through stop_gradient is 0.", "basics", _v02),
    ("C03", "A3", "§1.2", "For y = w·x + b with w = 3, x = 2, b = 1 and loss (y − 5)², y = 7, loss = 4, dw = 8, dx = 12.", "correct",
     "Right (and db = 4), in both frameworks.", "linear_regression", _v03),
    ("C04", "A3", "§2.1", "Backward on a detached tensor fails with a message saying the detached tensor has no grad_fn.", "wrong",
     f"The real error is RuntimeError '{NO_GRAD_FN}'. JAX raises nothing: the gradient is 0.", "basics", _v04),
    ("C05", "A3", "§2.2 scenario 1", "Wrapping layer3 in no_grad freezes layer1 and layer2 (printout shows them requires_grad=False).", "wrong",
     "The printout is all True; layer3, the layer meant to train, is cut off and backward raises. Detach layer2's output, or requires_grad_(False) on layer1/2. The JAX port gives all-zero gradients silently.", "frozen_backbone", _v05),
    ("C06", "A1", "§3.1", "features = backbone(x).detach() trains only the head.", "incomplete",
     "Gradients are right, but the backbone graph is still built and BatchNorm statistics still move in train mode: use eval() and no_grad (or requires_grad_(False)).", "frozen_backbone", _v06),
    ("C07", "A2", "§1", "Freeze pretrained parameters with param.detach_() because of gradient accumulation.", "misleading",
     "detach_() on a leaf Parameter freezes it (requires_grad False, .grad kept; AdamW then skips it) and raises on a view; the reason given is wrong and the snippet's head shape does not match. requires_grad_(False) is the idiom; the JAX zero-gradient port is decayed by adamw.", "frozen_backbone", _v07),
    ("C08", "A1", "§3.2", "The DQN replay snippet detaches the next-state value before storing the transition.", "wrong",
     "As written it raises NameError and stores nothing detached; a stored target would be stale. Compute y = r + γ(1 − done)·max_a Q_target(s′, a) at training time, stopped.", "dqn_target", _v08),
    ("C09", "A1", "§4.2", "inference_mode is faster and fully disables autograd.", "incomplete",
     "True, but its tensors cannot later be saved for backward, and the speed-up is small except on overhead-bound code (ratios: detach-parity bench).", "no_grad_inference", _v09),
    ("C10", "A1", "§5.1", "Detaching the RNN hidden state stops gradient flow across time.", "correct",
     "Right: with T = 40 the last output's gradient reaches steps 0..39, 30..39 and 39 for no detach, every 10 and every step.", "tbptt", _v10),
    ("C11", "A1", "§5.2", "Detaching the hidden state every 10 steps saves memory.", "misleading",
     "Only with a backward per chunk: with one loss summed over all steps the saved activations are the same while the gradient is truncated. Dropping references saves memory, not detach itself.", "tbptt", _v11),
    ("C12", "A1", "§6.1 (A3 §2.2 scenario 3)", "Detaching one task's input isolates the shared trunk from that task.", "correct",
     "Right: the trunk gradient is exactly the other task's gradient. (A3's snippet calls backward on a non-scalar output and raises.)", "multitask", _v12),
    ("C13", "A1", "§6.2", "MAML uses detach to approximate second-order gradients.", "misleading",
     "The snippet has no detach. First-order MAML treats the inner gradient as a constant (detach, or grad without create_graph) and drops the Hessian term; the meta-gradients differ noticeably.", "maml", _v13),
    ("C14", "A1", "§7.1", "Detaching attention weights prunes unnecessary gradients.", "wrong",
     "It removes the only gradient path to Q and K: their projections never learn; dV is unchanged.", "attention_detach", _v14),
    ("C15", "A1", "§7.2", "detach helps precision in mixed-precision training.", "wrong",
     "Mixed precision involves no detach (autocast + float32 master weights / loss scaling); detaching the loss breaks backward.", "mixed_precision", _v15),
    ("C16", "A1", "§7", "detach speeds training up by 15–20 %.", "misleading",
     "The saving is the skipped backward of the frozen part: large against no freezing depending on where the compute is, ≈1.0× against proper freezing (requires_grad_(False) or no_grad). Ratios: detach-parity bench.", "frozen_backbone", _v16),
    ("C17", "A2", "§2", "Detach the policy output before action selection for efficiency.", "misleading",
     "No gain (the graph is already built; no_grad is the cheap form), and detaching logits that feed a policy-gradient loss breaks training.", "actor_critic", _v17),
    ("C18", "A2", "§3", "detach helps gradient clipping and prevents gradient explosion.", "wrong",
     "Clipping needs no detach (clip_grad_norm_ bounds the norm and keeps the direction); detaching every step is one-step truncation: it changes the direction and does not bound the norm.", "grad_clipping", _v18),
    ("C19", "A3", "§2.2 scenario 2", "Compute feature statistics on detached features.", "incomplete",
     "Runs; torch .std() is unbiased while jnp.std is not (ratio sqrt(N/(N−1))); no_grad is cheaper.", "feature_stats", _v19),
    ("C20", "A3", "§2.2 comment, §3.1", "no_grad is equivalent to calling detach on every result.", "misleading",
     "They agree on values and flags only: detach records then cuts, new tensors with requires_grad=True inside no_grad still require grad, in-place updates of a leaf that requires grad are allowed only under no_grad, views made under no_grad cannot be modified in place in grad mode.", "no_grad_inference", _v20),
    ("C21", "A3", "§3.2", "Prefer detach() over .data.", "incomplete",
     "Right advice; the reason: out.data.zero_() after out = x.sigmoid() gives a silently wrong gradient [0, 0, 0], while out.detach().zero_() raises the version-counter error.", "data_vs_detach", _v21),
    ("C22", "A3", "§3.1", "Detach inputs and features promptly to save memory.", "misleading",
     "A no-op for inputs (a batch does not require grad), and it stops training for features the loss needs.", "feature_stats", _v22),
]  # fmt: skip

CLAIMS: dict[str, Claim] = {r[0]: Claim(*r) for r in _RECORDS}


def get(claim_id: str) -> Claim:
    """The record of a claim; ValueError listing the valid ids if unknown."""
    try:
        return CLAIMS[claim_id.upper()]
    except KeyError:
        raise ValueError(f"claim expected one of {list(CLAIMS)}, got {claim_id!r}") from None


def verify(claim: Claim, torch_evidence: dict, jax_evidence: dict) -> tuple[bool, str]:
    """Whether this run's evidence still supports the claim's stated verdict, and a short text of it.

    A missing key or a wrong type in the evidence counts as not reproduced (the text says why).
    """
    try:
        return claim.verifier(torch_evidence, jax_evidence)
    except (KeyError, TypeError, ValueError, IndexError, ZeroDivisionError) as exc:
        return False, f"✗ evidence unreadable: {type(exc).__name__}: {exc}"


@dataclass
class Outcome:
    """One claim checked in this run."""

    claim: Claim
    reproduced: bool
    text: str
    torch: dict
    jax: dict
    error: str | None = None

    def to_json(self) -> dict:
        c = self.claim
        return {
            "id": c.id,
            "article": c.article,
            "article_title": ARTICLES[c.article],
            "section": c.section,
            "claim": c.claim,
            "verdict": c.verdict,
            "right": c.right,
            "scenario": c.scenario,
            "check": c.check,
            "reproduced": self.reproduced,
            "evidence_text": self.text,
            "error": self.error,
            "torch": self.torch,
            "jax": self.jax,
        }


def evaluate(claim: Claim) -> Outcome:
    """Run the torch and JAX checks of one claim and verify them (an exception = not reproduced)."""
    torch_claims, jax_claims = impl("torch", "claims"), impl("jax", "claims")

    try:
        t = getattr(torch_claims, claim.check)()
        j = getattr(jax_claims, claim.check)()
    except Exception as exc:  # a check that crashes no longer reproduces its finding: report it
        return Outcome(
            claim, False, f"✗ check raised {type(exc).__name__}: {exc}", {}, {}, f"{type(exc).__name__}: {exc}"
        )
    ok, text = verify(claim, t, j)
    return Outcome(claim, ok, text, t, j)


def run_all(ids: list[str] | None = None) -> list[Outcome]:
    """Evaluate the given claims (default all) in id order."""
    chosen = [get(i) for i in ids] if ids else list(CLAIMS.values())
    return [evaluate(c) for c in chosen]


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def markdown_table() -> str:
    """The "Claims, checked" table (id, source, claim, verdict, right statement) and the sources by title."""
    lines = ["| id | source | claim | verdict | right statement |", "|---|---|---|---|---|"]
    for c in CLAIMS.values():
        lines.append(f"| {c.id} | {_cell(c.source)} | {_cell(c.claim)} | **{c.verdict}** | {_cell(c.right)} |")
    lines.append("")
    lines.append("Sources (cited by title): " + "; ".join(f"{k}: “{v}”" for k, v in ARTICLES.items()) + ".")
    return "\n".join(lines) + "\n"
