"""Which NNX module holds which torch unit: names matched by module structure, or by an explicit mapping.

A torch unit (torch_impl/backend/port.py `structure`) is a ruled module (nn.Linear, nn.GRU ...) or the
bare parameters of a module. Its NNX twin sits at the same attribute path, `.` written `/`
(`blocks.0.attn` <-> `blocks/0/attn`); nnx.Sequential's `layers/` is skipped, as torch's
nn.Sequential has no such level. Where the two models name things differently, `mapping`
rewrites torch path prefixes (`{"encoder.rnn": "enc/gru"}`), longest prefix first.
Anything left unmatched on either side is an error listing the names and shapes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

__all__ = ["PortInputError", "Plan", "check_mapping", "translate", "plan"]


class PortInputError(ValueError):
    """Input the checker cannot compare (the message names the argument, parameter or field)."""


def check_mapping(mapping) -> None:
    """PortInputError unless `mapping` is None or a dict of torch path prefix -> NNX path prefix strings."""
    if mapping is not None and (
        not isinstance(mapping, Mapping)
        or not all(isinstance(k, str) and isinstance(v, str) for k, v in mapping.items())
    ):
        raise PortInputError(f"mapping: expected a dict of torch path -> NNX path strings, got {mapping!r:.80}")


def translate(name: str, mapping: Mapping[str, str] | None) -> str:
    """A dotted torch path as the NNX path it should have ('/'-joined), after the mapping."""
    for prefix in sorted(mapping or {}, key=len, reverse=True):
        if name == prefix or name.startswith(f"{prefix}.") or not prefix:
            target = str(mapping[prefix]).replace(".", "/").strip("/")
            rest = name[len(prefix) :].lstrip(".")
            name = f"{target}.{rest}" if target and rest else (target or rest)
            break
    return name.replace(".", "/")


@dataclass
class Plan:
    """The pairing: torch (unit, leaf) -> (NNX unit path, leaf), and what is left over."""

    pairs: dict[tuple[str, str], tuple[str, str]] = field(default_factory=dict)
    sources: dict[str, str] = field(default_factory=dict)  # "nnx_unit/leaf" -> torch source name
    units: dict[str, str] = field(default_factory=dict)  # NNX unit path -> torch type
    notes: list[str] = field(default_factory=list)
    mapping: dict[str, str] = field(default_factory=dict)

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


def plan(torch_structure: Mapping, jax_structure: Mapping, mapping: Mapping[str, str] | None = None) -> Plan:
    """Pair every torch unit with the NNX module (or leaf) that holds it.

    Raises PortInputError listing the torch units with no NNX module, and the unpaired leaves of
    both sides with their shapes; the NNX leaves no torch unit reaches are checked once the rules
    have run (see checker.py), as only the rules know which NNX leaves a unit fills.
    """
    check_mapping(mapping)
    modules = _index({m["path"]: m["alias"] for m in jax_structure["modules"]}, "modules")
    variables = _index({k: v["alias"] for k, v in jax_structure["variables"].items()}, "leaves")
    result, missing = Plan(mapping=dict(mapping or {})), []
    for unit in torch_structure["units"]:
        if not unit["bare"]:
            alias = translate(unit["name"], mapping)
            if alias not in modules:
                leaves = ", ".join(f"{k} {tuple(v['shape'])}" for k, v in unit["leaves"].items())
                missing.append(
                    f"torch {unit['name'] or '(model)'} ({unit['type']}: {leaves}) -> no NNX module at {alias!r}"
                )
                continue
            junit = modules[alias]
            result.units[junit] = unit["type"]
            for leaf, facts in unit["leaves"].items():
                result.pairs[(unit["path"], leaf)] = (junit, leaf)
                result.sources[f"{junit}/{leaf}".lstrip("/")] = facts["source"]
            continue
        for leaf, facts in unit["leaves"].items():
            alias = translate(facts["source"], mapping)
            if alias not in variables:
                line = f"torch {facts['source']} {tuple(facts['shape'])} -> no NNX leaf at {alias!r}"
                if facts["buffer"]:  # a constant buffer (a causal mask, a table) the NNX port may compute instead
                    result.notes.append(f"{line}: a buffer, not compared")
                else:
                    missing.append(line)
                continue
            junit, _, jleaf = variables[alias].rpartition("/")
            result.units.setdefault(junit, "Parameter")
            result.pairs[(unit["path"], leaf)] = (junit, jleaf)
            result.sources[variables[alias]] = facts["source"]
    names = [u["name"] for u in torch_structure["units"]] + [
        f["source"] for u in torch_structure["units"] for f in u["leaves"].values()
    ]
    unused = [k for k in mapping or {} if k and not any(n == k or n.startswith(f"{k}.") for n in names)]
    if unused:  # a prefix that names nothing is a typo, not a mapping
        raise PortInputError(
            f"mapping: expected torch path prefixes of the model, got {unused} (no torch name starts so)"
        )
    if missing:
        near = ", ".join(f"{k} {tuple(v['shape'])}" for k, v in sorted(jax_structure["variables"].items()))
        raise PortInputError(
            "the models' parameter sets differ (pass mapping={torch path: NNX path} where the names differ):\n  "
            + "\n  ".join(missing)
            + f"\n  NNX leaves: {near}"
        )
    return result
