"""Layouts and parameter slots: P07 a Linear's layout or a registered rule's permutation, P08 GRU's b_hn, P09
LSTM / GRU layouts, P11 padding row, P18 weights never copied (the port's own initialisation), and the flatten order
of a CNN's features before its dense head (a P07 replay)."""

from __future__ import annotations

import itertools

import numpy as np

from .kinds import Diagnosis, Replay, Signature, StepContext

__all__ = ["RECORDS", "arrangement"]


def arrangement(j: np.ndarray, t: np.ndarray) -> str | None:
    """How the same numbers are arranged differently: a transpose, permuted axes, gate blocks, or None."""
    if j.shape != t.shape or j.size < 2 or not np.array_equal(np.sort(j, axis=None), np.sort(t, axis=None)):
        return None
    if j.ndim == 2 and j.shape[0] == j.shape[1] and np.array_equal(j, t.T):
        return (
            "equals the transpose of the torch weight's canonical layout (kernel = weight where the rule says weight.T)"
        )
    for perm in itertools.permutations(range(j.ndim)):
        if perm != tuple(range(j.ndim)) and np.transpose(t, perm).shape == j.shape:
            if np.array_equal(np.transpose(t, perm), j):
                return f"equals the expected array with its axes permuted {perm}"
    if j.ndim >= 1:  # recurrent kernels: GRU r | z | n, LSTM i | f | g | o in the columns
        for n in (3, 4):
            if j.shape[-1] % n:
                continue
            tb, jb = np.split(t, n, axis=-1), np.split(j, n, axis=-1)
            order = [next((i for i, b in enumerate(tb) if np.array_equal(b, x)), None) for x in jb]
            if None not in order and order != list(range(n)):
                return f"its {n} gate blocks are torch's in the order {order} (gate order)"
    return "holds the same numbers in another arrangement (a reshape or permutation)"


def _not_gates(row, j, t) -> str | None:
    found = arrangement(j, t)
    return f"{row.key} {found}" if found and "gate" not in found else None


def _own_init(row, j, t) -> str | None:
    """Numbers unrelated to torch's weight in any layout: no entry equal, no correlation. The port's own
    initialisation (transfer=False, or a loader that skipped the leaf); a layout bug or a partial copy is not."""
    if j.size < 4 or arrangement(j, t) or np.any(j == t):
        return None
    jc, tc = (j.ravel() - j.mean()), (t.ravel() - t.mean())
    norm = float(np.linalg.norm(jc) * np.linalg.norm(tc))
    corr = float(jc @ tc) / norm if norm else 0.0
    if abs(corr) > 0.5:
        return None
    return (
        f"{row.key}: no entry equal to torch's and no correlation ({corr:+.2f}); std {float(np.std(j)):.3g} against "
        f"torch's {float(np.std(t)):.3g}: the port's own initialisation (copy the weights: transfer=True)"
    )


def _gates(row, j, t) -> str | None:
    found = arrangement(j, t)
    return f"{row.key} {found}" if found and "gate" in found else None


def _b_hn(name: str, why: str, moved: bool) -> str:
    """The loader's reason at step 0 (confirmed: the weight has nowhere to go), or the steps' evidence."""
    return f"torch trains {name} away from 0 in the steps; nnx.GRUCell cannot follow" if moved else why


def _folded_biases(ctx: StepContext) -> list[tuple[str, str]]:
    out = []
    for key, q in ctx.ratios.items():
        src = ctx.sources.get(key, [])
        if len(src) > 1 and key not in ctx.no_grad and abs(q - 0.5) < 1e-6:
            ev = f"the NNX leaf folds {ctx.torch_name(src)}; its first update is {q:.6g} × torch's (torch trains both biases)"
            out.append((ctx.where(key), ev))
    return out


def _untied(group: list[tuple[str, bool]], values: dict, report) -> str | None:
    """Torch shares one tensor between modules (tied embeddings); the port holds one leaf per module.

    Torch's gradient of the shared tensor is the sum over its uses; each JAX leaf gets only its own
    use. Evidence: the JAX gradients of exactly that group differ from torch's, and their sum (each in
    the first leaf's layout) is torch's one combined gradient.
    """
    grads = [(key, tr, *values.get(("grads", None, key), (None, None))) for key, tr in group]
    if any(j is None for _, _, j, _ in grads):
        return None
    as_first = [j.T if tr else j for _, tr, j, _ in grads]
    combined = grads[0][3]
    if any(a.shape != combined.shape for a in as_first):
        return None
    total, scale = sum(as_first), float(np.max(np.abs(combined)))
    differ = [key for key, _, j, t in grads if np.max(np.abs(j - t)) > 1e-9 * max(scale, 1e-300)]
    if not differ or np.max(np.abs(total - combined)) > 1e-9 * max(scale, 1e-300):
        return None
    keys = " and ".join(key for key, _ in group)
    parted = [r for r in report.failed("float64") if r.section in ("outputs", "loss")]
    forward = "outputs and loss match at step 0, " if not parted else ""
    return (
        f"torch ties {keys} (one tensor, one gradient, the sum of its uses); the port holds them apart: "
        f"{forward}the gradients of exactly these leaves differ, and their sum is torch's combined gradient "
        f"(to {np.max(np.abs(total - combined)) / max(scale, 1e-300):.1e} relative)"
    )


def _padding_row(row, j: np.ndarray, t: np.ndarray) -> str | None:
    """Evidence of an embedding's padding row: the gradient differs only in rows where torch's is zero.

    torch's Embedding(padding_idx=i) never gives row i a gradient; nnx.Embed has no padding_idx, so the
    port trains it. Where torch's row does get a gradient (a decoder tied to the table) or the difference
    reaches other rows, this is not the bug, whatever the model's config says.
    """
    if row.section != "grads" or j.ndim != 2 or j.shape != t.shape:
        return None
    differs = np.any(np.abs(j - t) > 1e-9 * max(float(np.max(np.abs(t))), 1e-300), axis=1)
    zero = np.all(t == 0, axis=1)
    if not differs.any() or not np.all(zero[differs]) or zero.all():
        return None  # a leaf torch gives no gradient at all is frozen there (a flow difference), not a padding row
    rows = np.flatnonzero(differs).tolist()
    return (
        f"the gradient differs only in row(s) {rows[:5]}, where torch's is zero: torch's Embedding(padding_idx) "
        "never trains that row, nnx.Embed has no padding_idx (zero its gradient, or mask the row, in the port)"
    )


RECORDS = (
    Diagnosis(
        "P07",
        "a layout bug in the weights loaded into the NNX model",
        replays=(
            Replay(
                "torch",
                "flatten_channels_last",
                "[B, C, *spatial] features flattened channels last, the order of an NHWC port's reshape; "
                "a correct port permutes the dense rows in its loader (transfer=False)",
                title="flatten order: torch flattens [B, C, H, W] features channels first, the NHWC port "
                "channels last, so the head's rows are read in another order",
                modules=frozenset({"Conv1d", "Conv2d", "Conv3d"}),
            ),
            Replay(
                "torch",
                "linear_transposed",
                "square nn.Linear layers multiply by W instead of Wᵀ",
                title="a Linear's layout in the port's forward: x @ kernel.T on an [in, out] kernel (torch's "
                "x Wᵀ written against Flax's layout, which needs x @ kernel)",  # the weights match: not the loader
                modules=frozenset({"Linear"}),
            ),
            Replay(
                "torch",
                "leaf_permuted",
                "the leaf a registered rule declares read with its axes permuted (another permutation than the rule's)",
                title="a rule's layout: the port reads a leaf in another arrangement of its axes than its "
                "register_rule declares",
                per_leaf=True,
            ),
        ),
        signatures=(Signature("values", _not_gates, section="weights"),),
    ),
    Diagnosis(
        "P08",
        "GRU b_hn: nnx.GRUCell has no slot for it",
        replays=(
            Replay(
                "torch",
                "gru_bhn_outside",
                "every GRU step adds b_hn outside the reset gate: tanh(W_in x + b_in + r ⊙ (W_hn h) + b_hn)",
                title="GRU b_hn added outside the reset gate (torch: r ⊙ (W_hn h + b_hn))",
                modules=frozenset({"GRU"}),
            ),
        ),
        signatures=(Signature("dropped", _b_hn),),
    ),
    Diagnosis(
        "P09",
        "LSTM / GRU layouts: gate order, carry order, folded biases",
        replays=(
            Replay(
                "torch",
                "lstm_carry_swapped",
                "LSTM state returned as (c, h) instead of (h, c), nnx's carry order",
                title="LSTM carry order: torch (h, c), nnx (c, h)",
                modules=frozenset({"LSTM"}),
            ),
            Replay(
                "torch",
                "lstm_state_in_swapped",
                "the initial LSTM state handed in as (c0, h0): torch's (h0, c0) passed as nnx's (c, h) carry",
                title="LSTM initial state swapped: torch's (h0, c0) read as nnx's (c, h) carry",
                modules=frozenset({"LSTM"}),
            ),
            Replay(
                "torch",
                "lstm_gates_ifog",
                "the fused LSTM gate rows read as i | f | o | g (torch packs i | f | g | o)",
                title="LSTM gate order: the port splits the gates as i, f, o, g where torch packs i, f, g, o",
                modules=frozenset({"LSTM"}),
            ),
        ),
        signatures=(
            Signature(
                "values", _gates, title="a layout bug in the weights loaded into the NNX model", section="weights"
            ),
            Signature(
                "steps",
                _folded_biases,
                title="LSTM / GRU biases: torch trains b_ih and b_hh, the NNX cell one folded bias",
            ),
        ),
    ),
    Diagnosis(
        "tied_weights",
        "tied weights untied: torch shares one tensor between modules, the port gives each its own",
        signatures=(Signature("ties", _untied),),
    ),
    Diagnosis(
        "P18",
        "default initialisation: the NNX leaf holds its own initial values, not torch's",
        signatures=(Signature("values", _own_init, section="weights"),),
    ),
    Diagnosis(
        "P11",
        "embedding padding row: no gradient in torch, a gradient in JAX",
        signatures=(Signature("values", _padding_row),),
    ),
)
