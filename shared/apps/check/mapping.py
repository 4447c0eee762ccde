"""The `mapping` argument: torch path prefixes -> NNX path prefixes, with wildcards over path components.

    {"encoder.rnn": "enc/gru"}                       one prefix
    {"transformer.h.*.attn": "blocks.*.attention"}   every layer: `*` is one whole component (a layer
                                                     index, a name), the target's `*`s take the values
                                                     the key's matched, in order

The most specific key applies: more components first, then fewer wildcards. A key that names nothing
in the torch model, a name two equally specific keys send to two places, or a key that sends two
torch modules to one NNX place is bad input (PortInputError naming the key): a 48-layer model needs one
line, and a line that is wrong says so rather than mapping by luck.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

__all__ = ["PortInputError", "check_mapping", "translate", "resolve", "check_patterns"]


class PortInputError(ValueError):
    """Input the checker cannot compare (the message names the argument, parameter or field)."""


def _parts(path: str) -> list[str]:
    return [p for p in path.replace("/", ".").split(".") if p]


def check_mapping(mapping) -> None:
    """PortInputError unless `mapping` is None or a dict of torch path prefix -> NNX path prefix strings,
    whose wildcards are whole components and whose target has the key's number of `*`s, or none."""
    if mapping is not None and (
        not isinstance(mapping, Mapping)
        or not all(isinstance(k, str) and isinstance(v, str) for k, v in mapping.items())
    ):
        raise PortInputError(f"mapping: expected a dict of torch path -> NNX path strings, got {mapping!r:.80}")
    for key, target in (mapping or {}).items():
        if any("*" in p and p != "*" for p in _parts(key) + _parts(target)):
            raise PortInputError(f"mapping: {key!r}: expected `*` as a whole path component, got {key!r} -> {target!r}")
        stars, used = _parts(key).count("*"), _parts(target).count("*")
        if used not in (0, stars):
            raise PortInputError(
                f"mapping: {key!r} -> {target!r}: expected the target to use the key's {stars} wildcard(s) or none, "
                f"got {used}"
            )


def _match(pattern: list[str], parts: list[str]) -> list[str] | None:
    """The values the pattern's `*`s take if it is a prefix of `parts`, else None."""
    if len(pattern) > len(parts):
        return None
    caught = []
    for p, n in zip(pattern, parts, strict=False):
        if p == "*":
            caught.append(n)
        elif p != n:
            return None
    return caught


def _rank(key: str) -> tuple[int, int]:
    return len(_parts(key)), -_parts(key).count("*")  # more components first, then fewer wildcards


def resolve(name: str, mapping: Mapping[str, str] | None) -> tuple[str | None, str]:
    """(the key that applies to a dotted torch path, or None; the NNX path it becomes, '/'-joined).

    Raises PortInputError naming both keys when two equally specific keys send it to two places.
    """
    parts = _parts(name)
    found: list[tuple[str, str]] = []
    for key in sorted(mapping or {}, key=_rank, reverse=True):
        if found and _rank(key) != _rank(found[0][0]):
            break
        caught = _match(_parts(key), parts)
        if caught is None:
            continue
        values = iter(caught)
        target = [next(values) if p == "*" else p for p in _parts(mapping[key])]
        found.append((key, "/".join(target + parts[len(_parts(key)) :])))
    if len({out for _, out in found}) > 1:
        raise PortInputError(
            f"mapping: keys {[k for k, _ in found]} both match torch {name!r}, to {[o for _, o in found]}: "
            "expected one place (make one key more specific)"
        )
    return found[0] if found else (None, "/".join(parts))


def translate(name: str, mapping: Mapping[str, str] | None) -> str:
    """A dotted torch path as the NNX path it should have ('/'-joined), after the mapping."""
    return resolve(name, mapping)[1]


def check_patterns(names: Iterable[str], units: Iterable[str], mapping: Mapping[str, str] | None) -> None:
    """PortInputError naming the key: one that matches none of the torch `names` (module paths and weight
    names), or one that sends two torch `units` (module paths) to one NNX place."""
    names = [_parts(n) for n in names]
    unused = [k for k in mapping or {} if k and not any(_match(_parts(k), n) is not None for n in names)]
    if unused:  # a prefix that names nothing is a typo, not a mapping
        raise PortInputError(
            f"mapping: expected torch path prefixes of the model, got {unused} (no torch name starts so)"
        )
    seen: dict[str, tuple[str, str | None]] = {}
    for unit in units:
        key, place = resolve(unit, mapping)
        if place in seen and (key or seen[place][1]):
            keys = sorted({k for k in (key, seen[place][1]) if k})
            raise PortInputError(
                f"mapping: {keys} send torch {seen[place][0]!r} and {unit!r} to one NNX place {place!r}: "
                "expected one torch module per place"
            )
        seen[place] = (unit, key)
