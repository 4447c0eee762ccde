"""The `run(fx, variant)` contract, checked the same way for both frameworks.

`torch_impl._common.scenario_run` and `jax_impl._common.scenario_run` wrap every
scenario's `run` with `check_call` (the fixture belongs to this scenario, the
variant is registered) and `finish` (a non-empty flat dict of numpy arrays).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from .fixtures import Fixture

__all__ = ["check_call", "finish"]


def check_call(scenario: str, fx: object, variant: str) -> None:
    """Raise ValueError unless `fx` is a Fixture of `scenario` and `variant` is registered.

    The record comes with the fixture (`fx.spec`): no second lookup.
    """
    if not isinstance(fx, Fixture):
        raise ValueError(
            f"{scenario}.run: fx expected a detach_parity.shared.core.fixtures.Fixture, got {type(fx).__name__}"
        )
    if fx.scenario != scenario:
        raise ValueError(f"{scenario}.run: fx expected a fixture of {scenario!r}, got one of {fx.scenario!r}")
    fx.spec.check_variant(variant)


def finish(scenario: str, variant: str, outputs: Mapping[str, object]) -> dict[str, np.ndarray]:
    """Outputs as a flat dict of numpy arrays; ValueError if empty or not keyed by str."""
    if not outputs:
        raise ValueError(f"{scenario}[{variant}].run: returned no outputs")
    out = {}
    for key, value in outputs.items():
        if not isinstance(key, str) or not key:
            raise ValueError(f"{scenario}[{variant}].run: output keys expected non-empty str, got {key!r}")
        out[key] = np.asarray(value)
    return out
