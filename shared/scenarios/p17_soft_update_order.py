"""p17_soft_update_order (pitfall P17): Polyak (soft) target update, argument order.

Shapes: I inputs, O outputs of one dense layer (online and target copies).
target <- tau * online + (1 - tau) * target. torch: `target_p.lerp_(online_p, tau)`.
optax.incremental_update(new_tensors, old_tensors, step_size) returns
step_size * new + (1 - step_size) * old: the online network goes first. The
naive JAX port swaps the arguments and gets tau * target + (1 - tau) * online, a
near-hard copy of the online network, with no error. It diverges from torch.
"""

from __future__ import annotations

import numpy as np

from ..core.records import Porting, Scenario
from ..core.schema import Field

LEAVES = {"kernel": ("I", "O"), "bias": ("O",)}

SCHEMA = {
    **{f"online/{k}": Field(s, doc="online network parameter, canonical layout") for k, s in LEAVES.items()},
    **{f"target/{k}": Field(s, doc="target network parameter before the update") for k, s in LEAVES.items()},
    "tau": Field((), low=0.0, high=1.0, doc="Polyak step size: weight on the online network, in [0, 1]"),
}


def build(rng: np.random.Generator, case: str) -> dict[str, np.ndarray]:
    if case == "handed":  # P17 gives no numbers: online far from a zero target, the usual tau
        return {
            "online/kernel": np.array([[1.0, 2.0], [3.0, 4.0]]),
            "online/bias": np.array([1.0, -1.0]),
            "target/kernel": np.zeros((2, 2)),
            "target/bias": np.zeros(2),
            "tau": np.array(0.005),
        }
    out = {
        f"{net}/{k}": rng.normal(size=(2, 2) if k == "kernel" else 2) for net in ("online", "target") for k in LEAVES
    }
    out["tau"] = np.array(0.01)
    return out


def oracle(fx, variant: str) -> dict[str, np.ndarray]:
    a = fx.float64()
    tau = float(a["tau"])
    # torch's reference in both variants: the weight tau is on the online network
    return {f"target/{k}": tau * a[f"online/{k}"] + (1.0 - tau) * a[f"target/{k}"] for k in LEAVES}


def naive_oracle(fx, variant: str) -> dict[str, np.ndarray]:
    """The naive port `incremental_update(target, online, tau)`: tau·target + (1 − tau)·online."""
    a = fx.float64()
    tau = float(a["tau"])
    return {f"target/{k}": tau * a[f"target/{k}"] + (1.0 - tau) * a[f"online/{k}"] for k in LEAVES}


SPEC = Scenario(
    name="p17_soft_update_order",
    title="soft target update, optax.incremental_update argument order",
    family="pitfalls",
    claims=(),
    source="P17",
    lesson=(
        "optax.incremental_update(new, old, tau) puts the weight tau on its FIRST argument: pass the "
        "online network first. Swapped, the target becomes a near-hard copy of the online network."
    ),
    variants=("ported", "naive"),
    cases=("handed", "random"),
    schema=SCHEMA,
    build=build,
    oracle=oracle,
    pattern={"ported": (("target/*", "nonzero"),), "naive": (("target/*", "nonzero"),)},
    porting=Porting(
        torch="`target_p.lerp_(online_p, tau)` under `torch.no_grad()`",
        jax="`optax.incremental_update(online_params, target_params, tau)`",
        trap="`incremental_update(target, online, tau)` swaps the weights: a near-hard copy, no error",
    ),
    diverges={"naive": ("target/*",)},
    naive_oracle=naive_oracle,
)
