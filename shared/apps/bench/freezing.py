"""Section 2 of the bench: the cost of the stop (claim C16) on frozen_backbone at bench size.

`full_finetune`, `detach_features` and `freeze_params` against the ideal frozen step measured
in parts (backbone forward + head step), and torch's grad modes for one forward (C09, C17).
The steps are the pair `torch_impl/backend/bench.py` / `jax_impl/backend/bench.py` (`freezing_steps`).
"""

from __future__ import annotations

from collections.abc import Mapping

from ..backends import backend
from .payload import CLAIM_C16, FREEZING_VARIANTS
from .sizes import fixture
from .timing import interleaved

__all__ = ["freezing_section"]


def freezing_section(dims: Mapping[str, int], repeats: int, target_s: float, deadline: float) -> dict:
    """Time every freezing step of both frameworks, interleaved; returns the `freezing` section."""
    fx = fixture("frozen_backbone", dims)
    t_steps, j_steps = backend("torch").bench.freezing_steps(fx), backend("jax").bench.freezing_steps(fx)
    both = {}
    for label in dict.fromkeys([*t_steps, *j_steps]):  # torch then JAX per label: interleaved
        if label in t_steps:
            both[f"torch/{label}"] = t_steps[label]
        if label in j_steps:
            both[f"jax/{label}"] = j_steps[label]
    timed = interleaved(both, repeats, target_s, deadline)
    per_fw = {
        fw: {k.split("/", 1)[1]: v for k, v in timed.items() if k.startswith(fw + "/")} for fw in ("torch", "jax")
    }
    summary = {}
    for fw, steps in per_fw.items():
        full = steps["full_finetune"]["median_s"]
        ideal = steps["backbone_forward"]["median_s"] + steps["head_step"]["median_s"]
        summary[fw] = {
            "full_finetune_s": full,
            "ideal_s": ideal,
            "ideal_saving": 1 - ideal / full,
            "saving": {v: 1 - steps[v]["median_s"] / full for v in FREEZING_VARIANTS[1:]},
            "over_ideal": {v: steps[v]["median_s"] / ideal for v in FREEZING_VARIANTS[1:]},
        }
    t = {k: v["median_s"] for k, v in per_fw["torch"].items()}
    grad_modes = {
        "forward_grad/forward_no_grad": t["forward_grad"] / t["forward_no_grad"],
        "forward_grad/forward_inference_mode": t["forward_grad"] / t["forward_inference_mode"],
        "forward_no_grad/forward_inference_mode": t["forward_no_grad"] / t["forward_inference_mode"],
        "detach_features/no_grad_backbone": t["detach_features"] / t["no_grad_backbone"],
    }
    d, h, c = dims["D"], dims["H"], dims["C"]
    return {
        "config": {**dims, "backbone_params": d * h + h + h * h + h, "head_params": h * c + c},
        "torch": per_fw["torch"],
        "jax": per_fw["jax"],
        "summary": summary,
        "jax_over_torch": {v: per_fw["jax"][v]["median_s"] / t[v] for v in FREEZING_VARIANTS},
        "torch_ratios": grad_modes,
        "claim": dict(CLAIM_C16),
    }
