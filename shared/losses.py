"""Shape guards shared by every loss in both frameworks (pitfall P14).

A TD target of shape [B] against Q(s, a) of shape [B, 1] broadcasts to [B, B]
and gives a wrong loss: torch only warns, jnp.mean is silent. Every loss in the
package calls `check_same_shape` first.
"""

from __future__ import annotations

__all__ = ["check_same_shape", "check_rank"]


def check_same_shape(loss: str, **shapes: tuple[int, ...]) -> None:
    """Raise ValueError unless every named shape is identical.

    Example: check_same_shape("td_loss", q=(4, 1), target=(4,)) raises
    "td_loss: q has shape (4, 1) but target has shape (4,); expected identical shapes
    (no broadcasting in a loss)".
    """
    items = [(name, tuple(int(d) for d in shape)) for name, shape in shapes.items()]
    first_name, first = items[0]
    for name, shape in items[1:]:
        if shape != first:
            raise ValueError(
                f"{loss}: {first_name} has shape {first} but {name} has shape {shape}; "
                "expected identical shapes (no broadcasting in a loss)"
            )


def check_rank(loss: str, name: str, shape: tuple[int, ...], axes: str) -> None:
    """Raise ValueError unless `shape` has one axis per letter of `axes`.

    Example: check_rank("cross_entropy", "logits", (4,), "BC") raises
    "cross_entropy: logits expected rank 2 [B, C], got shape (4,)".
    """
    shape = tuple(int(d) for d in shape)
    if len(shape) != len(axes):
        raise ValueError(f"{loss}: {name} expected rank {len(axes)} [{', '.join(axes)}], got shape {shape}")
