"""Claims about where a loss stops its gradient, each record above its verifier.

The checks: `torch_impl/backend/claims/losses.py` and `jax_impl/backend/claims/losses.py`. A loss by hand, the
DQN target, multitask isolation, first-order MAML, detached attention weights, detached
policy logits.
"""

from __future__ import annotations

from .record import NO_GRAD_FN, SAME, Facts, Theme, close, fmt, raised

__all__ = ["THEME"]

THEME = Theme(
    module="losses", title="where a loss stops its gradient: targets, tasks, inner steps, attention, policies"
)


@THEME.claim(
    id="C03",
    article="A3",
    section="§1.2",
    scenario="linear_regression",
    verdict="correct",
    claim="For y = w·x + b with w = 3, x = 2, b = 1 and loss (y − 5)², y = 7, loss = 4, dw = 8, dx = 12.",
    right="Right (and db = 4), in both frameworks.",
)
def linear_loss_by_hand(t: dict, j: dict, f: Facts) -> None:
    keys = ("y", "loss", "w_grad", "x_grad", "b_grad")
    want = [7.0, 4.0, 8.0, 12.0, 4.0]
    f.need(close([t[k] for k in keys], want), f"torch y, loss, dw, dx, db = {[t[k] for k in keys]}")
    f.need(close([j[k] for k in keys], want), "JAX the same")


@THEME.claim(
    id="C08",
    article="A1",
    section="§3.2",
    scenario="dqn_target",
    verdict="wrong",
    claim="The DQN replay snippet detaches the next-state value before storing the transition.",
    right="As written it raises NameError and stores nothing detached; a stored target would be stale. Compute y = r + γ(1 − done)·max_a Q_target(s′, a) at training time, stopped.",
)
def td_target_belongs_at_training_time(t: dict, j: dict, f: Facts) -> None:
    f.need(raised(t["name_error"], "NameError", "next_state_value"), f"NameError: {t['name_error']['message']}")
    f.need(t["stale_max_abs"] > 1e-6, f"a stored target is stale by {fmt(t['stale_max_abs'])} after one step + sync")
    f.need(t["online_nonzero"] and t["target_grad_is_none"], "target at training time, stopped: target net grad None")
    f.need(
        j["online_nonzero"] and j["target_grad_zero"] and close(j["stale_max_abs"], t["stale_max_abs"], 1e-9),
        "JAX: target grad 0, same staleness",
    )


@THEME.claim(
    id="C12",
    article="A1",
    section="§6.1 (A3 §2.2 scenario 3)",
    scenario="multitask",
    verdict="correct",
    claim="Detaching one task's input isolates the shared trunk from that task.",
    right="Right: the trunk gradient is exactly the other task's gradient. (A3's snippet calls backward on a non-scalar output and raises.)",
)
def isolated_trunk_gets_one_task(t: dict, j: dict, f: Facts) -> None:
    f.need(
        t["isolated_vs_task1_max_rel"] <= SAME and t["joint_vs_task1_max_rel"] > 1e-3,
        "isolated trunk grad == task 1 alone (to rounding)",
    )
    f.need(t["head2_grad_nonzero"], "head 2 still learns")
    f.need(
        raised(t["non_scalar_backward"], "RuntimeError", "grad can be implicitly created only for scalar outputs"),
        "non-scalar backward raises",
    )
    f.need(
        j["isolated_vs_task1_max_rel"] <= SAME and j["joint_vs_task1_max_rel"] > 1e-3 and j["head2_grad_nonzero"],
        "JAX the same",
    )
    f.need(
        raised(j["non_scalar_grad"], "TypeError", "Gradient only defined for scalar-output functions"),
        "JAX: TypeError on non-scalar grad",
    )


@THEME.claim(
    id="C13",
    article="A1",
    section="§6.2",
    scenario="maml",
    verdict="misleading",
    claim="MAML uses detach to approximate second-order gradients.",
    right="The snippet has no detach. First-order MAML treats the inner gradient as a constant (detach, or grad without create_graph) and drops the Hessian term; the meta-gradients differ noticeably.",
)
def first_order_maml_drops_the_hessian(t: dict, j: dict, f: Facts) -> None:
    rel = t["relative_difference"]
    f.need(rel > 0.05, f"first- vs second-order meta-gradient differ by {rel:.1%}")
    f.need(
        t["second_order_vs_closed_form"] < 1e-12 and t["first_order_vs_closed_form"] < 1e-12,
        "SO = (I − αH)·g′, FO = g′ (closed forms)",
    )
    f.need(
        close(j["second_order"], t["second_order"], 1e-10) and close(j["first_order"], t["first_order"], 1e-10),
        "JAX the same",
    )


@THEME.claim(
    id="C14",
    article="A1",
    section="§7.1",
    scenario="attention_detach",
    verdict="wrong",
    claim="Detaching attention weights prunes unnecessary gradients.",
    right="It removes the only gradient path to Q and K: their projections never learn; dV is unchanged.",
)
def detached_attention_cuts_q_and_k(t: dict, j: dict, f: Facts) -> None:
    f.need(
        t["wq_wk_grad_none_detached"] and t["wq_wk_grad_nonzero_full"],
        "detached weights: dWq, dWk None (nonzero without)",
    )
    f.need(t["wv_grad_max_rel_diff"] <= SAME, "dWv unchanged")
    f.need(
        j["wq_wk_grad_zero_stopped"] and j["wq_wk_grad_nonzero_full"] and j["wv_grad_max_rel_diff"] <= SAME,
        "JAX: dWq, dWk zero, dWv unchanged",
    )


@THEME.claim(
    id="C17",
    article="A2",
    section="§2",
    scenario="actor_critic",
    verdict="misleading",
    claim="Detach the policy output before action selection for efficiency.",
    right="No gain (the graph is already built; no_grad is the cheap form), and detaching logits that feed a policy-gradient loss breaks training.",
)
def detaching_policy_logits_gains_nothing(t: dict, j: dict, f: Facts) -> None:
    f.need(
        t["saved_bytes_select"] == t["saved_bytes_select_detach"] > 0 == t["saved_bytes_select_no_grad"],
        f"saved B: {t['saved_bytes_select']} with or without detach, 0 under no_grad",
    )
    f.need(not t["detached_scores_requires_grad"], "the detach does cut the graph: it just saves nothing")
    f.need(
        raised(t["pg_loss_on_detached_logits"], "RuntimeError", NO_GRAD_FN),
        "PG loss on detached logits: backward raises",
    )
    f.need(
        j["grad_state"] == "nonzero" and j["stopped_logits_grad_state"] == "zero", "JAX: zero policy gradient, silently"
    )
    f.note("step-time ratios: detach-parity bench")
