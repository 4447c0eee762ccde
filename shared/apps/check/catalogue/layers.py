"""Layer and loss conventions a port re-implements: a convolution's padding, cross-entropy's mean.

Each is a convention a port writes by hand and gets wrong without an error: the shapes agree (or differ only
where the input size is odd), the numbers do not. The evidence is a replay of the torch reference with the port's
convention (torch_impl/backend/layer_knobs.py), confirmed when every difference vanishes. These records have no
lesson of their own: the cheatsheet's "Layers and losses" table lists them.
"""

from __future__ import annotations

from .kinds import Diagnosis, Replay, table

__all__ = ["RECORDS", "cheatsheet"]

RECORDS = (
    Diagnosis(
        "conv_padding",
        "convolution padding 'SAME' (XLA's: the odd unit at the end) where torch pads both sides alike",
        replays=(
            Replay(
                "torch",
                "conv_padding_same",
                "every convolution padded as XLA's 'SAME' (out = ⌈in / stride⌉), not torch's symmetric padding",
                modules=frozenset({"Conv1d", "Conv2d", "Conv3d"}),
            ),
        ),
    ),
    Diagnosis(
        "ignore_index",
        "cross-entropy averaged over every position, ignored ones as zeros (torch's mean counts the kept ones)",
        replays=(
            Replay(
                "torch",
                "ignore_index_mean",
                "F.cross_entropy's sum over the kept positions divided by every position (ignore_index counted)",
            ),
        ),
    ),
)


def cheatsheet() -> list[str]:
    """The cheatsheet's "Layers and losses" section (docs/cheatsheet.md): each record, what its replays change."""
    intro = ("Conventions a port writes by hand outside the pitfall lessons; `detach-parity check` names one when a "
             "replay of the torch reference with the port's convention makes every difference vanish.")  # fmt: skip
    return table("Layers and losses (port checker)", intro, RECORDS)
