"""Name the line: the checker's runs that find where the port parts (line.py pairs what they record), the
sentence the report gives, and the line of a check file that built the optimizer part that parts.

A forward parting is searched inside its first parting module, then the modules around it; a backward parting
(the forward matches, a gradient not) in the whole forward with each value's incoming gradient; a first step
that parts while the gradients match, in the optimizer, part by part. Each runs only where the check parts, on
float64 copies of both models, and its time is the report's "line" stage.
"""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np

from ..backends import backend
from .line import locate, twins
from .line_after import locate_backward, locate_optimizer

__all__ = ["name_line", "optimizer_line"]


def _optimizer(checker, report, p64) -> dict | None:
    """locate_optimizer on the float64 pass's first step (its gradients matched: the optimizer parts), from torch's
    gradients of a fresh run (the pass let its own go once they matched)."""
    if not p64.torch_steps or checker.optimizers[1] is None:
        return None
    from .compare import Pass
    from .guards import _cast

    tm, jm = checker._start("float64")
    q = Pass("float64")
    q.torch = checker._impl(checker.TR.run_loss, tm, _cast(checker.batch, "float64"), checker.losses[0], "float64")
    checker._torch_grads(q, jm, checker.plan)
    trainable = {k for k, v in p64.jax.get("trainable", {}).items() if v}
    grads = {k: v for k, v in q.torch["grads_native"].items() if k in trainable and k not in q.torch_none}
    params = {k: p64.expected[k] for k in grads if k in p64.expected}
    first = next((st["values"] for st in p64.torch_steps if st["step"] == 1), None)
    if first is None:  # the pass keeps the steps from the first difference on: torch's first step, run again
        tm, jm = checker._start("float64")
        steps, _ = checker._torch_side(tm, jm, checker.plan, _cast(checker.batch, "float64"), "float64")
        first = next(steps)["values"]
    delta = {k: np.asarray(first[k], np.float64) - np.asarray(p64.expected[k], np.float64) for k in grads if k in first}
    tm, _ = checker._start("float64")
    facts = checker._impl(backend("torch").optimizer.facts, tm, checker.optimizers[0])
    stages = checker._impl(backend("jax").optimizer.stages, checker.optimizers[1], params, grads, facts)
    found = locate_optimizer(stages, delta)
    return None if found is None else {**found, "module": "optimizer", "port": ["?", 0, ""]}


def _cut_parameter(checker, row, batch) -> dict | None:
    """A parameter whose gradient parts while every module's output and incoming gradient match: the port reads it
    through a stop (a stop_gradient on the weight itself). The line of that stop, in the module holding the
    parameter; None where the module reads it through none."""
    module, leaf = row.key.rpartition("/")[0], row.key.split("/")
    _, jm = checker._start("float64")
    values = checker._impl(backend("jax").inside.inside, jm, batch, checker.losses[1], module)["values"]
    for v in values:
        read = [values[i]["op"] for i in v["inputs"] if values[i]["kind"] == "param"] if v["kind"] == "op" else []
        if v["op"] == "stop_gradient" and any(all(part in name for part in leaf) for name in read):
            return {"port": v["line"], "op": v["op"], "inputs": [["", 0, f"its parameter {row.key}"]], "torch": None,
                    "relation": None, "backward": True, "module": row.torch}  # fmt: skip
    return None


def _parents(path: str) -> list[str]:
    parts = path.split(".") if path else []
    return [".".join(parts[:i]) for i in range(len(parts), -1, -1)]


def name_line(checker, report, p64, translate) -> dict | None:
    """Where the float64 forward parts, to the line: inside the first parting module (the loss, where it is the
    loss that parts), else in the module around it (a residual the parent adds, a scale applied between two
    modules: the child's own inputs have no twin there). `checker` runs both sides (its `_start`, batch,
    losses and backends); `translate` maps a dotted torch path to the port's ('/'-joined). None where the
    first parting is not a forward one, or no operation parts (the sentence `line_sentence` writes)."""
    first = report.first_parting("float64")
    if first is None:
        return None
    from .guards import _cast

    batch = _cast(checker.batch, "float64")
    if first.section == "grads" and report.backward_parting() is not None:  # the forward matches, a gradient not
        tm, jm = checker._start("float64")
        t = checker._impl(backend("torch").inside.inside, tm, batch, checker.losses[0], "", backward=True)
        j = checker._impl(backend("jax").inside.inside, jm, batch, checker.losses[1], "", backward=True)
        found = locate_backward(j["values"], t["values"])
        return None if found is None else {**found, "module": report.backward_parting().torch}
    if first.section == "grads" and report.backward_parting() is None:  # one parameter's gradient alone
        return _cut_parameter(checker, first, batch)
    if first.section == "steps" and not report.failed("float64", "grads"):  # the gradients match: the optimizer
        return _optimizer(checker, report, p64)
    if first.section not in ("outputs", "loss"):
        return None

    def run(path: str) -> tuple[dict, dict]:
        port_path = path if path == "(loss)" else translate(path)
        tm, jm = checker._start("float64")
        t = checker._impl(backend("torch").inside.inside, tm, batch, checker.losses[0], path)
        return t, checker._impl(backend("jax").inside.inside, jm, batch, checker.losses[1], port_path)

    seen: set[str] = set()
    for row in report.failed("float64", "outputs") + report.failed("float64", "loss"):
        torch_path = "(loss)" if row.section == "loss" else row.torch.removeprefix("(model)")
        if torch_path in seen or any(torch_path.startswith(s + ".") for s in seen if s):
            continue
        seen.add(torch_path)
        for path in ["(loss)"] if torch_path == "(loss)" else _parents(torch_path):
            t, j = run(path)
            found = locate(j["values"], t["values"], t["output"])
            if found is not None and found["early"] and path and _computed_outside(run(_parents(path)[1]), (t, j)):
                break  # a boundary drawn elsewhere (the port scales outside the module): the next parting
            if found is not None:
                return {**found, "module": path or "(model)"}
        if len(seen) > 4:  # each try is two runs: the first few partings only
            break
    return None


def _computed_outside(parent: tuple[dict, dict], child: tuple[dict, dict]) -> bool:
    """Whether the port computes, in the module around, torch's outputs of the child module that the port's child
    does not return: a boundary drawn elsewhere (the port scales outside the module), not a difference."""
    torch_child, port_child = child
    returned = [v for v in port_child["values"] if v.get("escapes")]
    outputs = [torch_child["values"][i] for i in torch_child["output"]]
    missing = [o for o, twin in zip(outputs, twins(outputs, returned), strict=True) if twin is None]
    return bool(missing) and all(i is not None for i in twins(missing, parent[1]["values"]))


def _resolve(node, names: dict):
    """A module-level expression with its names followed to their last assignment, a tuple to its first item."""
    for _ in range(8):
        if isinstance(node, ast.Name) and node.id in names:
            node = names[node.id]
        elif isinstance(node, ast.Tuple) and node.elts:  # (transformation, nnx filter)
            node = node.elts[0]
        else:
            break
    return node


def optimizer_line(file: str, path: list[int]) -> list:
    """[file, line, text] of the call in a check file that built the optimizer part at `path` (indices in the
    chain, as jax_impl/backend/optimizer.py numbers them): `jax_optimizer`'s assignment followed through names and
    optax.chain's arguments, down to the call the user wrote (optax.adamw builds three parts on one line).
    ["?", 0, ""] where the file has no such assignment."""
    try:
        source = Path(file).read_text(encoding="utf-8")
        tree = ast.parse(source)
    except (OSError, SyntaxError, ValueError):
        return ["?", 0, ""]
    names = {t.id: stmt.value for stmt in tree.body if isinstance(stmt, ast.Assign) for t in stmt.targets
             if isinstance(t, ast.Name)}  # fmt: skip
    node = _resolve(names.get("jax_optimizer"), names)
    if node is None:
        return ["?", 0, ""]
    for index in path:
        chain = isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", "")) == "chain"
        if not chain or index >= len(node.args):
            break
        node = _resolve(node.args[index], names)
    lines = source.splitlines()
    return [file, node.lineno, lines[node.lineno - 1].strip() if node.lineno <= len(lines) else ""]
