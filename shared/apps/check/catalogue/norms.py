"""Normalisation and statistics: P01 std convention, P02 a norm at zero, P05 norm epsilon, P06 BatchNorm."""

from __future__ import annotations

import numpy as np

from .kinds import Diagnosis, Replay, Signature

__all__ = ["RECORDS", "nan_where_torch_is_finite"]

NORMS = frozenset({"LayerNorm", "GroupNorm", "RMSNorm", "norm"})  # "norm": a norm by what it is (LlamaRMSNorm)
BATCH_NORMS = frozenset({"BatchNorm1d", "BatchNorm2d", "BatchNorm3d"})


def _std_ratio(row, j: np.ndarray, t: np.ndarray) -> str | None:
    """JAX / torch one constant √(N/(N−1)) or its inverse, N a count in a reduction: the std convention."""
    mask = np.abs(t) > 1e-12 * max(float(np.max(np.abs(t))), 1e-300)
    if mask.sum() < 2:  # one number has a ratio to anything: no evidence
        return None
    r = j[mask] / t[mask]
    if not np.all(np.isfinite(r)) or np.std(r) > 1e-9 * abs(np.mean(r)):
        return None
    r2 = float(np.mean(r)) ** 2
    if abs(r2 - 1) < 1e-12:
        return None
    n = r2 / (r2 - 1) if r2 > 1 else 1 / (1 - r2)
    if not (1.5 <= n <= 1e4 and abs(n - round(n)) < 1e-3):  # a count in a reduction
        return None
    return f"JAX / torch is the constant {float(np.mean(r)):.12g} = sqrt of N/(N-1) or (N-1)/N for N = {round(n)}"


def nan_where_torch_is_finite(row, j: np.ndarray, t: np.ndarray) -> str | None:
    """NaN in a JAX gradient or step where torch is finite (P02 at a norm's zero, P13 through a where)."""
    nan_j = ~np.isfinite(j) & np.isfinite(t)
    if not nan_j.any() or not (row.section == "grads" or row.step):
        return None
    at_zero = bool(np.all(t[nan_j] == 0))
    return f"{int(nan_j.sum())} NaN in JAX where torch is finite{' (0 there)' if at_zero else ''}"


def _eps(kinds: frozenset[str]):
    def differs(tm: dict, jm: dict) -> str | None:
        tc, jc = tm["config"], jm["config"]
        if not ({tm["type"], tc.get("kind")} & kinds) or tm["type"] in BATCH_NORMS and kinds is NORMS:
            return None
        if "eps" not in tc or "epsilon" not in jc:
            return None
        if np.isclose(tc["eps"], jc["epsilon"], rtol=1e-12, atol=0):
            return None
        return f"torch eps {tc['eps']:g}, nnx epsilon {jc['epsilon']:g}"

    return differs


def _bn_momentum(tm: dict, jm: dict) -> str | None:
    tc, jc = tm["config"], jm["config"]
    if tm["type"] not in BATCH_NORMS or jm["type"] != "BatchNorm" or not isinstance(tc.get("momentum"), float):
        return None
    if not isinstance(jc.get("momentum"), float):  # a BatchNorm of the user's own (no nnx momentum to compare)
        return None
    if not tc.get("training", True):  # in eval mode the running statistics are read, never updated
        return None
    if np.isclose(jc["momentum"], 1 - tc["momentum"]):
        return None
    return (
        f"torch momentum {tc['momentum']:g} (weight of the batch) ↔ nnx momentum {jc['momentum']:g} "
        f"(weight of the old value): expected {1 - tc['momentum']:g}"
    )


RECORDS = (
    Diagnosis(
        "P01",
        "std convention: torch divides by N−1 (unbiased), jnp.std by N",
        replays=(
            Replay(
                "torch",
                "std_correction_flipped",
                "every torch.std / var computes with the other correction (N−1 <-> N: jnp.std's ddof=0 or ddof=1)",
            ),
        ),
        signatures=(Signature("values", _std_ratio),),
    ),
    Diagnosis(
        "P02",
        "gradient of a norm or std at zero: torch 0, JAX NaN",
        signatures=(Signature("values", nan_where_torch_is_finite),),
    ),
    Diagnosis(
        "P05",
        "LayerNorm epsilon: nnx 1e-6, torch 1e-5",
        replays=(
            Replay(
                "torch",
                "norm_eps",
                "LayerNorm / GroupNorm / RMSNorm eps = 1e-6, the nnx default",
                modules=NORMS,
                per_module=True,
            ),
        ),
        signatures=(Signature("config", _eps(NORMS), title="normalisation epsilon differs"),),
    ),
    Diagnosis(
        "P06",
        "BatchNorm: nnx.BatchNorm's momentum convention and biased running variance",
        replays=(
            Replay(
                "torch",
                "bn_momentum",
                "BatchNorm momentum m -> 1 - m (nnx's momentum weighs the old value)",
                title="BatchNorm momentum inverted (nnx momentum weighs the old statistics)",
                modules=BATCH_NORMS,
                per_module=True,
            ),
            Replay(
                "torch",
                "bn_biased_var",
                "BatchNorm running_var updated with the biased batch variance (nnx's rule)",
                title="BatchNorm running variance biased (nnx) vs unbiased (torch)",
                modules=BATCH_NORMS,
                per_module=True,
            ),
            Replay(
                "torch",
                "bn_batch_stats",
                "every eval-mode BatchNorm normalises with the batch's statistics (a port left training)",
                title="BatchNorm in eval mode: the port normalises with batch statistics, torch with running ones",
                modules=BATCH_NORMS,
            ),
            Replay(
                "torch",
                "bn_running_stats",
                "every train-mode BatchNorm normalises with its running statistics (a port left in eval)",
                title="BatchNorm in training: the port normalises with running statistics, torch with the batch's",
                modules=BATCH_NORMS,
            ),
            Replay(
                "torch",
                "bn_momentum+bn_biased_var",
                "both of the above",
                modules=BATCH_NORMS,
            ),
        ),
        signatures=(
            Signature("config", _eps(BATCH_NORMS), title="normalisation epsilon differs"),
            Signature("config", _bn_momentum, title="BatchNorm momentum convention"),
        ),
        in_steps=True,
    ),
)
