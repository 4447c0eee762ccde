"""Which NNX module holds which torch unit: names matched by module structure, or by an explicit mapping.

A torch unit (torch_impl/backend/port.py `structure`) is a ruled module (nn.Linear, nn.GRU ...) or the
bare parameters of a module. Its NNX twin sits at the same attribute path, `.` written `/`
(`blocks.0.attn` <-> `blocks/0/attn`); nnx.Sequential's `layers/` is skipped, as torch's
nn.Sequential has no such level. Where the two models name things differently, `mapping`
rewrites torch path prefixes (`{"encoder.rnn": "enc/gru"}`, `{"h.*.attn": "blocks.*.attention"}`), the most
specific first (mapping.py).
Anything left unmatched on either side is an error listing the names and shapes.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from .mapping import PortInputError, check_mapping, check_patterns, translate

__all__ = ["PortInputError", "Plan", "check_mapping", "translate", "plan"]


@dataclass
class Plan:
    """The pairing: torch (unit, leaf) -> (NNX unit path, leaf), and what is left over."""

    pairs: dict[tuple[str, str], tuple[str, str]] = field(default_factory=dict)
    sources: dict[str, str] = field(default_factory=dict)  # "nnx_unit/leaf" -> torch source name
    units: dict[str, str] = field(default_factory=dict)  # NNX unit path -> torch type
    notes: list[str] = field(default_factory=list)
    mapping: dict[str, str] = field(default_factory=dict)
    ties: dict[str, str] = field(default_factory=dict)  # torch source -> canonical key of the tensor it shares
    # one torch tensor given several NNX leaves: [(NNX key, its layout is the first one's transpose)], 2 or more
    untied: list[list[tuple[str, bool]]] = field(default_factory=list)

    def to_jax(self, canonical: Mapping[str, Mapping[str, np.ndarray]]) -> dict[str, dict[str, np.ndarray]]:
        """Torch canonical tables {unit: {leaf: array}} re-keyed by NNX unit path."""
        out: dict[str, dict[str, np.ndarray]] = {}
        for (unit, leaf), (junit, jleaf) in self.pairs.items():
            if unit in canonical and leaf in canonical[unit]:
                out.setdefault(junit, {})[jleaf] = canonical[unit][leaf]
        return out

    def torch_name(self, keys: list[str]) -> str:
        """The torch names behind canonical NNX keys, e.g. `rnn.bias_ih_l0 + rnn.bias_hh_l0`."""
        return " + ".join(dict.fromkeys(self.sources.get(k, k) for k in keys))


def _index(items: Mapping[str, str], what: str) -> dict[str, str]:
    by_alias: dict[str, str] = {}
    for real, alias in items.items():
        if alias in by_alias and by_alias[alias] != real:
            raise PortInputError(f"jax_model: {what} {by_alias[alias]!r} and {real!r} both read as {alias!r}")
        by_alias.setdefault(alias, real)
    return by_alias


def _holds(junit: str, facts: Mapping, jax_structure: Mapping) -> bool:
    """Whether the NNX module at `junit` holds an array the size of this torch leaf (in any layout: the
    module's rule names it)."""
    size, head = math.prod(facts["shape"]), f"{junit}/" if junit else ""
    return any(k.startswith(head) and math.prod(v["shape"]) == size for k, v in jax_structure["variables"].items())


def _places(torch_structure: Mapping, jax_structure: Mapping, modules: dict, variables: dict, mapping) -> dict:
    """Each torch leaf's NNX place (NNX unit, leaf), or None: a ruled unit goes to the module at its
    path, a bare parameter to the leaf at its path. A tied leaf (the second name of one tensor) goes to
    its module only where that module holds an array of its size: a head that keeps its bias and reads
    the embedding table (AWD-LSTM's decoder, Embed.attend) holds the tensor where the table is."""
    places: dict[tuple[str, str], tuple | None] = {}
    for unit in torch_structure["units"]:
        for leaf, facts in unit["leaves"].items():
            if not unit["bare"]:
                alias = translate(unit["name"], mapping)
                held = alias in modules and (not facts.get("tied_to") or _holds(modules[alias], facts, jax_structure))
                places[(unit["path"], leaf)] = (modules[alias], leaf) if held else None
            else:
                alias = translate(facts["source"], mapping)
                junit, _, jleaf = variables.get(alias, "").rpartition("/")
                places[(unit["path"], leaf)] = (junit, jleaf) if alias in variables else None
    return places


def _tie_note(unit: Mapping, leaf: str) -> str:
    facts = unit["leaves"][leaf]
    if not facts.get("tied_to"):
        return ""
    return f" (its {leaf} is tied to {facts['tied_to']}, which has no NNX place either)"


def _untied_note(unit: Mapping, jax_structure: Mapping) -> str:
    """For a torch matrix of its own whose transpose the NNX model holds elsewhere: the port may reuse that
    leaf (Embed.attend), tying what torch keeps apart. A hint in the refusal, not a verdict."""
    for facts in unit["leaves"].values():
        shape = tuple(facts["shape"])
        others = [
            k for k, v in jax_structure["variables"].items() if len(shape) == 2 and tuple(v["shape"]) == shape[::-1]
        ]
        if others:
            return (
                f" (torch's {facts['source']} is its own tensor, tied to no other: a port that reuses "
                f"{others[0]} for it, as Embed.attend does, ties what torch keeps apart)"
            )
    return ""


def _root(unit: Mapping, leaf: str) -> str:
    """The canonical key of the tensor a leaf holds: the first leaf that holds it (tied weights share one)."""
    return unit["leaves"][leaf].get("tied_to") or f"{unit['path']}/{leaf}".lstrip("/")


def plan(torch_structure: Mapping, jax_structure: Mapping, mapping: Mapping[str, str] | None = None) -> Plan:
    """Pair every torch unit with the NNX module (or leaf) that holds it.

    Tied weights (one torch tensor in several modules: GPT-2's lm_head and wte) are one parameter:
    it needs one NNX place (Embed.attend reuses the table), is copied once and its one combined
    gradient is compared there; the tied leaves with no NNX place of their own are noted, not
    missing. A port that gives a tied weight two NNX places unties it: `untied` lists those groups.
    Raises PortInputError listing the torch units with no NNX module, and the unpaired leaves of
    both sides with their shapes; the NNX leaves no torch unit reaches are checked once the rules
    have run (see checker.py), as only the rules know which NNX leaves a unit fills.
    """
    check_mapping(mapping)
    modules = _index({m["path"]: m["alias"] for m in jax_structure["modules"]}, "modules")
    variables = _index({k: v["alias"] for k, v in jax_structure["variables"].items()}, "leaves")
    result, missing = Plan(mapping=dict(mapping or {})), []
    places = _places(torch_structure, jax_structure, modules, variables, mapping)
    placed: dict[str, list] = {}  # a tensor's canonical key -> its leaves that have an NNX place
    for unit in torch_structure["units"]:
        for leaf in unit["leaves"]:
            if places[(unit["path"], leaf)] is not None:
                placed.setdefault(_root(unit, leaf), []).append((unit["path"], leaf))
    for unit in torch_structure["units"]:
        unplaced = [leaf for leaf in unit["leaves"] if places[(unit["path"], leaf)] is None]
        tied_elsewhere = [leaf for leaf in unplaced if placed.get(_root(unit, leaf))]
        for leaf in tied_elsewhere:  # one tensor, placed through another module: copied and compared there
            facts = unit["leaves"][leaf]
            result.ties[facts["source"]] = _root(unit, leaf)
        for leaf in [leaf for leaf in unplaced if leaf not in tied_elsewhere]:
            facts = unit["leaves"][leaf]
            if unit["bare"]:
                line = f"torch {facts['source']} {tuple(facts['shape'])} -> no NNX leaf at {translate(facts['source'], mapping)!r}"
                if facts["buffer"]:  # a constant buffer (a causal mask, a table) the NNX port may compute instead
                    result.notes.append(f"{line}: a buffer, not compared")
                else:
                    missing.append(line + _tie_note(unit, leaf))
        if not unit["bare"] and len(tied_elsewhere) < len(unplaced):
            leaves = ", ".join(f"{k} {tuple(v['shape'])}" for k, v in unit["leaves"].items())
            tied = "".join(_tie_note(unit, leaf) for leaf in unit["leaves"])
            alias = translate(unit["name"], mapping)
            where = f"no NNX module at {alias!r}"
            if alias in modules:  # the module is there without the tied tensor, which has no NNX place either
                lost = ", ".join(leaf for leaf in unplaced if leaf not in tied_elsewhere)
                where = f"the NNX module at {alias!r} holds no array for its {lost}"
            missing.append(
                f"torch {unit['name'] or '(model)'} ({unit['type']}: {leaves}) -> {where}"
                f"{tied or _untied_note(unit, jax_structure)}"
            )
        for leaf, facts in unit["leaves"].items():
            if places[(unit["path"], leaf)] is None:
                continue
            junit, jleaf = places[(unit["path"], leaf)]
            result.units.setdefault(junit, unit["type"] if not unit["bare"] else "Parameter")
            result.pairs[(unit["path"], leaf)] = (junit, jleaf)
            result.sources[f"{junit}/{jleaf}".lstrip("/")] = facts["source"]
    facts_of = {(u["path"], leaf): f for u in torch_structure["units"] for leaf, f in u["leaves"].items()}
    for members in placed.values():
        if len(members) > 1:  # one torch tensor, two NNX leaves: the port unties it
            result.untied.append(
                [("/".join(p for p in places[m] if p), bool(facts_of[m].get("tie_transposed"))) for m in members]
            )
    for source, root in result.ties.items():
        result.notes.append(f"torch {source} is tied to {root}: one parameter, copied and compared once, there")
    names = [u["name"] for u in torch_structure["units"]] + [
        f["source"] for u in torch_structure["units"] for f in u["leaves"].values()
    ]
    # what needs a place of its own: a ruled module, a bare parameter (not a second name of a tied one)
    own = [
        u["name"]
        for u in torch_structure["units"]
        if not u["bare"] and not all(f.get("tied_to") for f in u["leaves"].values())
    ]
    own += [
        f["source"] for u in torch_structure["units"] if u["bare"] for f in u["leaves"].values() if not f.get("tied_to")
    ]
    check_patterns(names, own, mapping)
    if missing:
        near = ", ".join(f"{k} {tuple(v['shape'])}" for k, v in sorted(jax_structure["variables"].items()))
        raise PortInputError(
            "the models' parameter sets differ (pass mapping={torch path: NNX path} where the names differ):\n  "
            + "\n  ".join(missing)
            + f"\n  NNX leaves: {near}"
        )
    return result
