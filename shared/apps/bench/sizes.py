"""The bench's sizes, and float32 fixtures built at those sizes from a scenario's own schema.

At its fixture size a scenario's step is a few microseconds of arithmetic under tens of
microseconds of framework overhead: a ratio measured there compares call overhead. LARGE
gives the scenarios of each kind of model (a fine-tuned classifier, a multi-task trunk, an RL
Q-network, a GAN, meta-learning, attention, a recurrent net) a size where arithmetic
dominates, so the bench reports the JAX/torch ratios at both sizes.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from ...core import registry
from ...core.fixtures import Fixture, from_arrays, make

__all__ = ["SIZES", "fixture"]

# Per mode. freezing: frozen_backbone dims (backbone D*H + H*H weights, head H*C); tbptt: GRU
# dims, the sequence lengths T swept, the fixed truncation k; large: the dims of each scenario
# timed at a size where arithmetic dominates (letters not named keep the fixture's size; tbptt's
# G is the GRU's 3 H gates); target_s: the least time one timed block of steps takes (steps are
# repeated inside a block to reach it); budget_s: the default time cap of the whole command; codegen:
# whether torch.compile builds kernels (inductor) or, in the quick smoke test, only captures the step
# (aot_eager: the same graphs and breaks, no C++ build).
SIZES = {
    "full": {
        "freezing": {"B": 256, "D": 1024, "H": 1024, "C": 10},
        "tbptt": {"B": 16, "I": 32, "H": 128, "O": 8, "T": (64, 256, 1024), "k": 32},
        "large": {
            "frozen_backbone": {"B": 256, "D": 1024, "H": 1024, "C": 10},
            "multitask": {"B": 512, "D": 512, "H": 1024, "C": 10},
            "dqn_target": {"B": 512, "D": 64, "H": 512, "A": 16},
            "maml": {"T": 8, "S": 128, "Q": 128, "H": 512},
            "attention_detach": {"N": 512, "E": 256, "K": 64},
            "gan": {"B": 256, "X": 256, "Z": 64, "H": 512},
            "tbptt": {"T": 32, "B": 64, "I": 64, "H": 256, "O": 8, "G": 768},
        },
        "target_s": 0.02,
        "budget_s": 150.0,
        "codegen": True,
    },
    "quick": {
        "freezing": {"B": 4, "D": 8, "H": 8, "C": 3},
        "tbptt": {"B": 2, "I": 2, "H": 3, "O": 1, "T": (8, 32), "k": 4},
        "large": {
            "frozen_backbone": {"B": 8, "D": 16, "H": 16, "C": 3},
            "multitask": {"B": 8, "D": 8, "H": 8, "C": 3},
            "dqn_target": {"B": 8, "D": 4, "H": 8, "A": 3},
            "maml": {"T": 2, "S": 8, "Q": 8, "H": 8},
            "attention_detach": {"N": 8, "E": 4, "K": 4},
            "gan": {"B": 8, "X": 4, "Z": 4, "H": 8},
        },  # no tbptt: its quick memory sweep times the same kind of step, and the suite stays fast
        "target_s": 0.0,
        "budget_s": 300.0,
        "codegen": False,
    },
}

# fields whose values carry meaning beyond their shape
_ZEROS = {("tbptt", "h0")}  # the initial hidden state of the scenario is zero
_CAUSAL = {("attention_detach", "mask")}  # token i attends to tokens j <= i: no empty row


def fixture(name: str, dims: Mapping[str, int], seed: int = 0) -> Fixture:
    """A float32 fixture of scenario `name` with the shape letters in dims, validated like any other.

    Every field of the scenario's schema is drawn at the new shape: kernels N(0, 1/fan_in)
    (fan_in: the first axis, the canonical [in, out] layout), other parameters zero, other float
    arrays N(0, 1) (uniform inside a declared range), ints uniform in their range, fields with
    declared choices drawn from them, bool masks all true (attention: causal); scalars
    (hyper-parameters, step counts) are the scenario's own fixture's. case is "bench".
    Raises ValueError on an unknown scenario or a letter the schema does not use, and as
    shared.core.fixtures.from_arrays for arrays its validation refuses.
    """
    spec = registry.get(name)
    base = make(name, "float32", seed=0, case=spec.cases[0])
    letters = {d for f in spec.schema.values() for d in f.shape if isinstance(d, str)}
    unknown = sorted(set(dims) - letters)
    if unknown:
        raise ValueError(f"bench fixture {name!r}: dims expected letters of {sorted(letters)}, got {unknown}")
    sizes = {**base.dims, **dims}
    rng = np.random.Generator(np.random.PCG64(seed))
    arrays = {}
    for key, field in spec.schema.items():
        shape = tuple(sizes[d] if isinstance(d, str) else d for d in field.shape)
        if not shape:
            arrays[key] = np.array(base[key])
        elif field.kind == "bool":
            full = np.ones(shape, dtype=bool)
            arrays[key] = np.tril(full) if (name, key) in _CAUSAL else full
        elif field.kind == "int":
            high = sizes[field.high] if isinstance(field.high, str) else int(field.high or 2**31)
            arrays[key] = rng.integers(int(field.low or 0), high, size=shape).astype(np.int64)
        elif field.choices is not None:
            arrays[key] = rng.choice(np.array(field.choices), size=shape).astype(np.float32)
        elif (name, key) in _ZEROS or (key.startswith("params/") and len(shape) == 1):
            arrays[key] = np.zeros(shape, np.float32)
        elif key.startswith("params/"):
            arrays[key] = (rng.normal(size=shape) / np.sqrt(shape[0])).astype(np.float32)
        elif field.low is not None and field.high is not None:
            arrays[key] = rng.uniform(field.low, field.high, size=shape).astype(np.float32)
        else:
            arrays[key] = rng.normal(size=shape).astype(np.float32)
    return from_arrays(name, arrays, case="bench")
