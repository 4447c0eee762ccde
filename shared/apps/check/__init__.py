"""`detach-parity check`: check your own torch -> Flax NNX port (weights, outputs, gradients, steps, the bug named).

    from . import check_port, assert_port_matches, transfer_weights, register_rule

One implementation under three surfaces: `check_port(...) -> PortReport` (checker.py), the
pytest helper `assert_port_matches(...)` (fails with the report as its message), and
`detach-parity check FILE.py` (cli.py). `transfer_weights` / `transfer_back` copy weights
across by the rule tables (torch_impl/_layout.py, jax_impl/backend/port.py), in place;
`register_rule` adds a rule for a module class of the user's (rules.py).
"""

from __future__ import annotations

from collections.abc import Mapping

from ..backends import backend
from .checker import check_port
from .compare import STEP_TOLERANCE, TOLERANCE
from .match import PortInputError, plan
from .report import Hint, PortMismatch, PortReport
from .rules import Rule, register_rule

__all__ = [
    "TOLERANCE",
    "STEP_TOLERANCE",
    "PortInputError",
    "PortMismatch",
    "PortReport",
    "Hint",
    "check_port",
    "assert_port_matches",
    "transfer_weights",
    "transfer_back",
    "register_rule",
    "Rule",
    "bench_one_million",
]


def assert_port_matches(torch_model, jax_model, batch, **kwargs) -> PortReport:
    """check_port, for a test: returns the report when the port matches, else raises PortMismatch(report.table())."""
    report = check_port(torch_model, jax_model, batch, **kwargs)
    if not report.ok:
        raise PortMismatch("\n" + report.table())
    return report


def _plan(torch_model, jax_model, mapping):
    T, J = backend("torch").port, backend("jax").port
    try:
        torch_model = T.view(torch_model)[0]  # through torch.compile's wrapper: the same tensors
        return T, J, plan(T.structure(torch_model), J.structure(jax_model), mapping), torch_model
    except ValueError as exc:
        raise PortInputError(str(exc)) from None


def transfer_weights(torch_model, jax_model, mapping: Mapping[str, str] | None = None) -> None:
    """Copy a torch module's parameters and buffers into an NNX module, in place (its dtypes kept).

    Raises PortInputError: names or shapes that no rule pairs (listed), an NNX leaf no torch
    weight reaches, or a torch weight with no place in the NNX model (b_hn in an nnx.GRUCell, P08).
    """
    T, J, pl, torch_model = _plan(torch_model, jax_model, mapping)
    values = pl.to_jax(T.read(torch_model))
    try:
        leaves, _, _ = J.to_native(jax_model, values)
        left = sorted(set(J.structure(jax_model)["variables"]) - set(leaves))
        if left:
            raise ValueError(f"NNX leaves no torch parameter reaches: {left}")
        J.load(jax_model, values, strict=True)
    except ValueError as exc:
        raise PortInputError(f"transfer_weights: {exc}") from None


def transfer_back(jax_model, torch_model, mapping: Mapping[str, str] | None = None) -> None:
    """Copy an NNX module's leaves into a torch module, in place: the reverse of transfer_weights.

    A folded bias (nnx.LSTMCell's one bias per gate) comes back whole in torch's bias_ih and as
    zeros in bias_hh: the same function. Raises PortInputError as transfer_weights.
    """
    T, J, pl, torch_model = _plan(torch_model, jax_model, mapping)
    units = sorted({ju for ju, _ in pl.pairs.values()})
    try:
        canon = J.read(jax_model, units)
        back: dict[str, dict] = {}
        for (tu, tl), (ju, jl) in pl.pairs.items():
            back.setdefault(tu, {})[tl] = canon[ju][jl]
        T.load(torch_model, back)
    except (KeyError, ValueError) as exc:
        raise PortInputError(f"transfer_back: {exc}") from None


def bench_one_million(steps: int = 5, name: str = "transformer") -> dict:
    """Check the 1 M-parameter worked port (float64 + float32 + K steps) and time it, for the bench.

    Returns {"model", "parameters", "steps", "seconds": {"float64", "float32", "diagnosis", "total"},
    "cpu_seconds", "ok"}: wall-clock seconds per stage, and the process's CPU seconds (on a busy
    machine the wall clock measures the neighbours too).
    """
    import time

    from .ports import case

    args = case(name, "correct", size="1m")
    parameters = sum(int(v.size) for v in backend("jax").port.native(args["jax_model"]).values())
    cpu = time.process_time()
    model_t, model_j, batch = args.pop("torch_model"), args.pop("jax_model"), args.pop("batch")
    report = check_port(model_t, model_j, batch, steps=steps, **args)
    return {
        "model": name,
        "parameters": parameters,
        "steps": steps,
        "seconds": dict(report.seconds),
        "cpu_seconds": time.process_time() - cpu,
        "ok": report.ok,
    }
