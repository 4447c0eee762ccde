"""What a check makes sure of before its passes run (checker._Checker, through passes.Passes): that it fits
in memory (budget.py: refused up front, never killed mid-check) and that the forward is deterministic (a
random one's differences would be read as the port's)."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from . import budget
from .match import Plan, PortInputError

__all__ = ["Guards"]

_WIDTH = {"bfloat16": "float32"}  # numpy has no bfloat16: a bfloat16 pass's arrays come as float32 (exactly)


def _cast(batch: Mapping[str, np.ndarray], dtype: str) -> dict[str, np.ndarray]:
    dtype = _WIDTH.get(dtype, dtype)
    return {k: v.astype(dtype) if v.dtype.kind == "f" else v for k, v in batch.items()}


class Guards:
    """The checks before the passes, and the helpers both they and the passes use."""

    def _impl(self, fn, *args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except ValueError as exc:
            raise PortInputError(str(exc)) from exc

    def _native(self, jm, pl: Plan, canonical: dict, grad: bool = False) -> tuple[dict, dict, dict]:
        return self._impl(self.J.to_native, jm, pl.to_jax(canonical), grad=grad)

    def _copies(self, dtype: str) -> tuple:
        """Copies of both of the user's models in `dtype` (theirs are never touched)."""
        return self._impl(self.T.copy_model, self.models[0], dtype), self._impl(
            self.J.copy_model, self.models[1], dtype
        )

    def _repeatable(self, dtype: str) -> None:
        """Refuse a forward that draws random numbers (dropout left on where no module says so: F.dropout's
        training=True): its differences would be read as the port's. Two losses of fresh copies must agree."""
        tm, jm = self._copies(dtype)  # copies: a train-mode BatchNorm moves its running statistics
        batch = _cast(self.batch, dtype)
        for name, runs, model, loss in (
            ("torch_loss", self.TR, tm, self.losses[0]),
            ("jax_loss", self.JR, jm, self.losses[1]),
        ):
            pair = self._impl(runs.repeat_loss, model, batch, loss, dtype)
            if pair is None:  # no random state to draw from (a JAX model without nnx.Rngs)
                continue
            first, second = pair
            if abs(first - second) > 1e-6 * max(abs(first), abs(second)):  # one program on one input: equal
                raise PortInputError(
                    f"{name}: expected the same loss twice on the same weights and batch, got {first!r} and "
                    f"{second!r}: the forward draws random numbers (dropout left on: F.dropout(x, p) trains unless "
                    "given training=False; nnx.Dropout needs deterministic=True); check the model in eval mode"
                )

    def _budget(self) -> list[str]:
        """Refuse up front a check that would not fit in memory (budget.py), never killed mid-check: the
        parameters, and the recorded forward measured on the batch's first rows. Returns the notes to report."""
        tstruct = self._impl(self.T.structure, self.models[0])

        def record(sub: dict) -> dict:
            copy = self.T.copy_model(self.models[0], "float64")
            return self.TR.run_loss(copy, sub, self.losses[0], "float64")["outputs"]

        held = budget.activations(record, self.batch)
        budget.require(budget.parameters(tstruct), self.k, self.dtypes, activations=held or 0)
        if held is None:
            return [
                "memory: the estimate counts the parameters only: the recorded forward could not be measured on "
                "the batch's first rows (its arrays share no leading axis, or the loss refused 2 rows)"
            ]
        return []
