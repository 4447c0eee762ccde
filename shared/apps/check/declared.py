"""Replays located by the user's rules: each leaf a registered rule declares, read in another arrangement of its axes.

A rule's permutation (register_rule(MyDense, {"w": ("kernel", (1, 0))})) is the user's word for a layout, and a
wrong one loads without complaint wherever the other arrangement has the same shape: the identity for a square
weight that needs its transpose, a transpose where none is needed, a conv kernel's window axes for its channel
axes. The weights then match through the rule and the outputs do not. A record's `per_leaf` replay (P07's
leaf_permuted) is tried on each such leaf, on every module of the rule's class at once (one rule, one
permutation), with each other permutation of the leaf's canonical axes that keeps its shape; where one makes
every difference vanish, the hint names the modules and the rule that reads the leaf so, filled in.
This module knows no pitfall by name: the records say which replays are per_leaf.
"""

from __future__ import annotations

import itertools

import numpy as np

from .rules import Rule, registered

__all__ = ["located"]


def _arrangements(shapes: list[tuple]) -> list[tuple[int, ...]]:
    """The permutations of the canonical axes, other than the identity, that keep every one of `shapes`: the
    fewest axes moved first."""
    n = len(shapes[0])
    if n < 2 or n > 5 or any(len(s) != n for s in shapes):
        return []
    keep = [p for p in itertools.permutations(range(n)) if all(tuple(s[i] for i in p) == tuple(s) for s in shapes)]
    return sorted((p for p in keep if p != tuple(range(n))), key=lambda p: (sum(i != a for i, a in enumerate(p)), p))


def _spec(name: str, perm) -> str:
    return repr(name) if perm is None or tuple(perm) == tuple(range(len(perm))) else f"({name!r}, {tuple(perm)})"


def _fixed(rule: Rule, key: str, sigma: tuple[int, ...]) -> str:
    """The rule with leaf `key`'s permutation the one that reads it as `sigma` does, as a register_rule line.

    torch rule (canonical = W.transpose(p)): the port reads W.transpose(t), t = argsort(p[σ][argsort(p)])[p];
    NNX rule (NNX leaf = canonical.transpose(n)): it reads canonical.transpose(argsort(argsort(n)[σ])).
    """
    name, perm = rule.leaves[key]
    p = np.asarray(perm if perm is not None else range(len(sigma)))
    if rule.framework == "torch":
        true = np.argsort(p[list(sigma)][np.argsort(p)])[p]
    else:
        true = np.argsort(np.argsort(p)[list(sigma)])
    leaves = {k: (n, tuple(int(i) for i in true) if k == key else q) for k, (n, q) in rule.leaves.items()}
    return f"register_rule({rule.module_type.__name__}, {{{', '.join(f'{k!r}: {_spec(n, q)}' for k, (n, q) in leaves.items())}}})"


def _names(cls: type) -> set[str]:
    """The class's name and its subclasses' (a torch rule holds for both; structures name types by __name__)."""
    out, todo = set(), [cls]
    while todo:
        c = todo.pop()
        out.add(c.__name__)
        todo += c.__subclasses__()
    return out


def _groups(structures, plan) -> list[tuple[Rule, str, str, list[dict]]]:
    """(rule, its leaf key, torch's canonical leaf, the torch units it holds for) for each leaf a rule declares."""
    units = [u for u in structures[0]["units"] if not u["bare"]]
    by_path = {u["path"]: u for u in units}
    groups = []
    for rule in registered():
        if rule.framework == "torch":
            types = _names(rule.module_type)
            for attr, (leaf, _) in rule.leaves.items():
                held = [u for u in units if u["type"] in types and leaf in u["leaves"]]
                groups += [(rule, attr, leaf, held)] if held else []
            continue
        jpaths = {m["path"] for m in structures[1]["modules"] if m["type"] == rule.module_type.__name__}
        for key in rule.leaves:
            pairs = [(tu, tl) for (tu, tl), (ju, jl) in plan.pairs.items() if ju in jpaths and jl == key]
            held = [by_path[tu] for tu, _ in pairs if tu in by_path]
            if held and len({tl for _, tl in pairs}) == 1:
                groups.append((rule, key, pairs[0][1], held))
    return groups


def located(applicable, structures, plan) -> list[tuple]:
    """(record, replay, knob, where) for each `per_leaf` replay among `applicable` ([(record, replay)]), each
    leaf a registered rule declares, and each other arrangement of its axes (see the module docstring).

    knob: "<replay's knob>@<dotted torch paths, ','-joined>:<torch's canonical leaf>=<axes>"; where: the
    hint's words for it, the rule that reads the leaf so included.
    """
    out = []
    for d, replay in applicable:
        if not replay.per_leaf:
            continue
        for rule, key, leaf, held in _groups(structures, plan):
            for sigma in _arrangements([tuple(u["leaves"][leaf]["shape"]) for u in held]):
                paths = ",".join(u["name"] for u in held)
                axes = ",".join(map(str, sigma))
                where = (
                    f" (in {', '.join(u['name'] or '(model)' for u in held)}: {leaf} read as canonical.transpose("
                    f"{sigma}); the rule that reads it so: {_fixed(rule, key, sigma)})"
                )
                out.append((d, replay, f"{replay.knob}@{paths}:{leaf}={axes}", where))
    return out
