"""Precision in bfloat16: the port computes in bfloat16 what the reference computes in float32.

The bfloat16 pass (../precision.py) judges each side's error against the float64 truth and notes where the
reference keeps float32 inside a bfloat16 model (HF's `.float()` in an RMSNorm or the rotary table, the loss's
upcast, a softmax or layer-norm kernel's float32 normaliser). This record names what that pass found: each
module where the reference keeps a kind of computation in float32 and the port does not, with the port's
error there against torch's; or, where every such kind is kept, the first quantity whose error jumps past
the factor the pass allows.
"""

from __future__ import annotations

from .kinds import Diagnosis, Signature

__all__ = ["RECORDS", "cheatsheet"]


def _ratio_at(report, key: str) -> str:
    """The port's error against torch's at a module's output in the bfloat16 pass, in words ("" if not compared)."""
    module = key.split(":", 1)[0]
    rows = [r for r in report.rows if r.dtype == "bfloat16" and r.section == "outputs" and r.key == module]
    if not rows:
        return ""
    r = max(rows, key=lambda r: r.max_rel)
    return f"; its output's error against float64 truth is {r.max_rel:.2g}x torch's there"


def _bfloat16(report) -> list[tuple[str, str]]:
    policy = [r for r in report.failed("bfloat16") if r.section == "precision"]
    found = [
        (f"bfloat16 precision {r.torch}", f"{r.problem}{_ratio_at(report, r.key)} (a compiler may keep more; the "
         "port asks for less than the reference: cast to float32 there, as it does)")
        for r in policy
    ]  # fmt: skip
    numeric = [r for r in report.failed("bfloat16") if r.section != "precision"]
    if numeric and not found:
        first = numeric[0]
        found.append((first.where, f"the port loses precision first here: {first.problem}; every kind the reference "
                      "keeps in float32 the port keeps too, so the loss is elsewhere in its arithmetic"))  # fmt: skip
    return found


RECORDS = (
    Diagnosis(
        "precision",
        "bfloat16: the port computes in bfloat16 what the reference computes in float32",
        signatures=(Signature("bfloat16", _bfloat16),),
    ),
)


_KEPT = (  # the kinds the bfloat16 pass compares: where the reference keeps float32, and what the port does
    ("exp", "a softmax (HF's eager attention, scaled-dot-product attention's kernel), a log-softmax",
     "`jax.nn.softmax(x.astype(jnp.float32)).astype(x.dtype)`; `force_fp32_for_softmax=True` in Flax's attention"),
    ("log", "a log-softmax or logsumexp (the loss: HF's labels= loss upcasts the logits)",
     "the loss on `logits.astype(jnp.float32)`"),
    ("rsqrt", "a norm's statistics (HF's RMSNorm casts to float32; layer and batch norm kernels)",
     "`nnx.RMSNorm` / `nnx.LayerNorm` (their reductions and rsqrt in float32), or the cast HF writes"),
    ("sin / cos", "the rotary table (HF builds it from float32 positions and frequencies)",
     "the table in float32, cast to the activations' dtype"),
)  # fmt: skip


def cheatsheet() -> list[str]:
    """The cheatsheet's "Precision in bfloat16" section (docs/cheatsheet.md): the kinds the pass compares."""
    rows = [f"| {kind} | {where} | {port} |" for kind, where, port in _KEPT]
    intro = (
        "`detach-parity check --bf16` (`dtypes=(..., 'bfloat16')`) runs both sides in bfloat16 and judges each "
        "one's error against the float64 truth: the port matches while its error stays within a factor of the "
        "reference's own (docs/precision.md). It also names, as `precision`, each module where the reference "
        "keeps one of these kinds of computation in float32 and the port computes it in bfloat16."
    )
    head = ["| kind | the reference keeps float32 in | the port keeps it with |", "|---|---|---|"]
    return ["## Precision in bfloat16 (port checker)", "", intro, "", *head, *rows, ""]
