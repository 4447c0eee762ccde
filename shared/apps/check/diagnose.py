"""The likely bug named: a difference's signature tested against the package's catalogue.

Two kinds of evidence. A counterfactual replay: torch is run again with one convention changed
to the JAX default (the GELU approximation, norm epsilons, BatchNorm's momentum and running
variance, mask polarity, LSTM carry order, Adam's decay, first order); if every difference then
vanishes, the knob names the bug (confirmed). A signature on the arrays: a constant ratio
√(N/(N−1)) (std convention), NaN in JAX where torch is finite (a norm at zero, a where), the
same values in another layout (a transpose, gate blocks), a redistributed gradient (a tie
split), an update scaled by a constant (folded biases, a soft update's τ, the clip epsilon),
differences in float32 only (matmul precision), a static convention in the two modules'
settings. A signature is a hypothesis with its evidence; where nothing fits: "unexplained".
Pages: the registry's pitfalls records (`p04_gelu.html`) and scenarios (`grad_clipping.html`).
"""

from __future__ import annotations

import itertools

import numpy as np

from ...core import registry
from ..backends import backend
from .compare import rows_of
from .match import translate
from .report import Hint, Row

__all__ = ["KNOB_PITFALL", "STOP", "FREEZE", "CLIP", "page", "diagnose"]

# the scenarios (not pitfalls) a hint may name: a stop missing or extra, freezing, the clip epsilon
STOP, FREEZE, CLIP = "basics", "frozen_backbone", "grad_clipping"

KNOB_PITFALL = {
    "gelu_tanh": ("P04", "GELU: jax.nn.gelu defaults to the tanh approximation, torch to erf"),
    "norm_eps": ("P05", "LayerNorm epsilon: nnx 1e-6, torch 1e-5"),
    "bn_momentum": ("P06", "BatchNorm momentum inverted (nnx momentum weighs the old statistics)"),
    "bn_biased_var": ("P06", "BatchNorm running variance biased (nnx) vs unbiased (torch)"),
    "mask_inverted": ("P12", "attention mask polarity: torch True = masked out, Flax True = attend"),
    "lstm_carry_swapped": ("P09", "LSTM carry order: torch (h, c), nnx (c, h)"),
    "adam_swapped": ("P10", "Adam weight decay: coupled L2 (torch Adam) vs decoupled (optax.adamw)"),
    "first_order": ("maml", "first vs second order: the inner gradient is a constant in one port"),
    "matmul_default": ("P16", "float32 matmul precision"),
    "attention_full_precision": (
        "P16",
        "float32 inside float64: jax.nn.dot_product_attention takes its softmax in float32",
    ),
    "bn_momentum+bn_biased_var": ("P06", "BatchNorm: nnx.BatchNorm's momentum convention and biased running variance"),
}


def page(pitfall: str) -> str:
    """The site page of a pitfall id (P04) or scenario name, or "" if the registry has none."""
    for name in registry.names():
        spec = registry.get(name)
        if name == pitfall or (spec.family == "pitfalls" and spec.source == pitfall):
            return f"{name}.html"
    return ""


def _hint(pitfall: str, title: str, where: str, evidence: str, confirmed: bool = False) -> Hint:
    return Hint(pitfall, title, where, evidence, page(pitfall), confirmed)


def _failing(rows: list[Row]) -> set[tuple]:
    return {(r.section, r.step, r.key) for r in rows if not r.ok and r.section != "weights"}


def _knobs(structures, steps: int) -> list[tuple[str, str]]:
    types = {m["type"] for m in structures[0]["modules"]}
    wanted = [("gelu_tanh", "torch"), ("first_order", "torch")]
    if types & {"LayerNorm", "GroupNorm", "RMSNorm"}:
        wanted.append(("norm_eps", "torch"))
    if types & {"BatchNorm1d", "BatchNorm2d"}:
        wanted += [("bn_momentum", "torch"), ("bn_biased_var", "torch"), ("bn_momentum+bn_biased_var", "torch")]
    if "MultiheadAttention" in types:
        wanted.append(("mask_inverted", "torch"))
    if "LSTM" in types:
        wanted.append(("lstm_carry_swapped", "torch"))
    if steps:
        wanted.append(("adam_swapped", "torch"))
    jtypes = {m["type"] for m in structures[1]["modules"]}
    jax_knobs = [
        k for k in backend("jax").port_run.knobs() if k != "attention_full_precision" or "MultiHeadAttention" in jtypes
    ]
    return wanted + [(k, "jax") for k in jax_knobs]


def _replays(report, p, plan, structures, transfer: bool, steps: int) -> list[Hint]:
    base = [r for r in report.rows if r.dtype == "float64"]
    failing = _failing(base)
    if not failing:
        return []
    first = next(r for r in base if not r.ok and r.section != "weights")
    # a JAX-side precision replay costs new compiles: only for a float32-sized difference in float64
    rounding = 1e-9 < first.max_rel < 1e-5
    described = {**backend("torch").port_run.knobs(), **backend("jax").port_run.knobs()}
    hints = []
    for knob, side in _knobs(structures, steps):
        if side == "jax" and not rounding:
            continue
        try:
            q = p.replay(knob, side)
        except ValueError:
            continue  # the knob does not apply to this model (e.g. an optimizer without Adam's switch)
        rows = rows_of(q, plan, transfer)
        after = _failing(rows)
        fixed, broken = failing - after, after - failing
        if not fixed or broken:
            continue
        pitfall, title = KNOB_PITFALL[knob]
        change = f"{side} changed ({knob}: " + "; ".join(described.get(k, k) for k in knob.split("+")) + ")"
        worst = max((r.used for r in rows if np.isfinite(r.used)), default=0.0)
        if not after:
            ev = (f"with {change}, all {len(rows)} float64 quantities match "
                  f"(worst at {worst:.2g} of the tolerance); before: {len(failing)} differed, the first at "
                  f"{first.where} by {first.max_abs:.3g}")  # fmt: skip
            hints.append(_hint(pitfall, title, first.where, ev, confirmed=True))
        elif (first.section, first.step, first.key) in fixed:
            ev = f"with {change}, {len(fixed)} of {len(failing)} differences vanish, the first one included"
            hints.append(_hint(pitfall, title, first.where, ev))
    return hints


def _ratio_n(j: np.ndarray, t: np.ndarray) -> int | None:
    mask = np.abs(t) > 1e-12 * max(float(np.max(np.abs(t))), 1e-300)
    if mask.sum() < 2:  # one number has a ratio to anything: no evidence
        return None
    r = j[mask] / t[mask]
    if not np.all(np.isfinite(r)) or np.std(r) > 1e-9 * abs(np.mean(r)):
        return None
    r2 = float(np.mean(r)) ** 2
    if abs(r2 - 1) < 1e-12:
        return None
    n = r2 / (r2 - 1) if r2 > 1 else 1 / (1 - r2)
    return round(n) if 1.5 <= n <= 1e4 and abs(n - round(n)) < 1e-3 else None  # a count in a reduction


def _layout(j: np.ndarray, t: np.ndarray) -> str | None:
    if j.shape != t.shape or j.size < 2 or not np.array_equal(np.sort(j, axis=None), np.sort(t, axis=None)):
        return None
    if j.ndim == 2 and j.shape[0] == j.shape[1] and np.array_equal(j, t.T):
        return (
            "equals the transpose of the torch weight's canonical layout (kernel = weight where the rule says weight.T)"
        )
    for perm in itertools.permutations(range(j.ndim)):
        if (
            perm != tuple(range(j.ndim))
            and np.transpose(t, perm).shape == j.shape
            and np.array_equal(np.transpose(t, perm), j)
        ):
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


def _signatures(report, p, dtype: str = "float64") -> list[Hint]:
    hints, seen = [], set()

    def once(h: Hint) -> None:
        if (h.pitfall, h.where) not in seen:
            seen.add((h.pitfall, h.where))
            hints.append(h)

    for r in report.failed(dtype):
        j, t = p.values.get((r.section, r.step, r.key), (None, None))
        if j is None or j.shape != t.shape or j.dtype.kind != "f":
            continue
        nan_j = ~np.isfinite(j) & np.isfinite(t)
        if nan_j.any():
            at_zero = bool(np.all(t[nan_j] == 0))
            ev = f"{int(nan_j.sum())} NaN in JAX where torch is finite{' (0 there)' if at_zero else ''}"
            if r.section == "grads" or r.step:
                once(_hint("P02", "gradient of a norm or std at zero: torch 0, JAX NaN", r.where, ev))
                once(_hint("P13", "NaN through the untaken branch of a where", r.where, ev))
            continue
        if r.section == "weights":
            found = _layout(j, t)
            if found:
                pid = "P09" if "gate" in found else "P07"
                once(_hint(pid, "a layout bug in the weights loaded into the NNX model", r.where, f"{r.key} {found}"))
            continue
        n = _ratio_n(j, t) if r.section != "steps" else None
        if n:
            ev = f"JAX / torch is the constant {float(np.mean(j[t != 0] / t[t != 0])):.12g} = sqrt of N/(N-1) or (N-1)/N for N = {n}"
            once(_hint("P01", "std convention: torch divides by N−1 (unbiased), jnp.std by N", r.where, ev))
            continue
        d = j != t
        total, mass = float(t[d].sum()), float(np.abs(t[d]).sum())
        if (
            r.section == "grads"
            and d.sum() >= 2
            and abs(total) > 1e-3 * mass
            and np.isclose(j[d].sum(), total, rtol=1e-9, atol=0)
        ):
            ev = f"{int(d.sum())} entries differ but carry the same total gradient {t[d].sum():.6g}: redistributed over ties"
            once(_hint("P03", "a tie split: max / abs / clamp subgradients at kinks differ", r.where, ev))
    return hints


def _step_hints(report, p, plan) -> list[Hint]:
    """Signatures of the first step's update Δ = after − before on the leaves that part there."""
    if not p.torch_steps:
        return []
    hints = []
    first = [r for r in report.failed("float64") if r.section == "steps" and r.step == 1 and r.key != "loss"]
    ratios = {}
    for r in first:
        dj = p.jax_steps[0]["values"][r.key] - p.actual[r.key]
        dt = p.torch_steps[0]["values"][r.key] - p.expected[r.key]
        mask = np.abs(dt) > 0
        if mask.any() and np.all(np.isfinite(dj)):
            q = dj[mask] / dt[mask]
            if np.std(q) <= 1e-6 * abs(np.mean(q)):
                ratios[r.key] = float(np.mean(q))
    trained = {}
    for key, q in ratios.items():
        where = f"float64 steps step 1 {key}"
        src = p.sources.get(key, [])
        if key not in p.jax["grads"]:
            continue  # a BatchStat: moves without a gradient by design
        grads_zero = key in p.torch_none or not np.any(p.torch["grads_native"].get(key, 0))
        if len(src) > 1 and abs(q - 0.5) < 1e-6:
            ev = f"the NNX leaf folds {plan.torch_name(src)}; its first update is {q:.6g} × torch's (torch trains both biases)"
            hints.append(
                _hint("P09", "LSTM / GRU biases: torch trains b_ih and b_hh, the NNX cell one folded bias", where, ev)
            )
        elif grads_zero and abs(q - 1) > 1e-3:  # moved without a gradient, by another rule: a target update
            tau = 1 / (1 + q) if q > -1 else float("nan")
            ev = f"a leaf with no gradient that moves: its update is {q:.6g} × torch's; τ and 1 − τ swapped if τ = {tau:.4g}"
            hints.append(_hint("P17", "soft target update, optax.incremental_update argument order", where, ev))
        elif not grads_zero:
            trained[key] = q
    g = np.sqrt(sum(float(np.sum(v**2)) for v in p.torch["grads_native"].values()))
    # every trained leaf scaled by the one factor (‖g‖ + 1e-6) / ‖g‖, each to a thousandth of its distance
    # from 1 (a tolerance, not a rounding grid: two equal factors can round apart)
    if len(trained) >= 2 and g > 0 and all(abs(q - (g + 1e-6) / g) < 1e-3 * 1e-6 / g for q in trained.values()):
        q = float(np.mean(list(trained.values())))
        ev = f"every update is {q:.12g} × torch's = (‖g‖ + 1e-6) / ‖g‖ with ‖g‖ = {g:.6g}: torch's clip_grad_norm_ adds 1e-6"
        hints.append(_hint(CLIP, "clip epsilon: torch divides by ‖g‖ + 1e-6, optax by ‖g‖", "float64 steps", ev))
    return hints


def _config_hints(structures, plan) -> list[Hint]:
    tmods = {m["path"]: m for m in structures[0]["modules"]}
    jmods = {m["alias"]: m for m in structures[1]["modules"]}
    hints = []
    for path, tm in tmods.items():
        jm = jmods.get(translate(path.replace("/", "."), plan.mapping))
        if jm is None:
            continue
        tc, jc, where = tm["config"], jm["config"], f"{path or '(model)'} ({tm['type']} ↔ {jm['type']})"
        if "eps" in tc and "epsilon" in jc and not np.isclose(tc["eps"], jc["epsilon"], rtol=1e-12, atol=0):
            pid = "P06" if tm["type"].startswith("BatchNorm") else "P05"
            hints.append(
                _hint(
                    pid,
                    "normalisation epsilon differs",
                    where,
                    f"torch eps {tc['eps']:g}, nnx epsilon {jc['epsilon']:g}",
                )
            )
        if tm["type"].startswith("BatchNorm") and jm["type"] == "BatchNorm" and isinstance(tc.get("momentum"), float):
            if not np.isclose(jc["momentum"], 1 - tc["momentum"]):
                ev = f"torch momentum {tc['momentum']:g} (weight of the batch) ↔ nnx momentum {jc['momentum']:g} (weight of the old value): expected {1 - tc['momentum']:g}"
                hints.append(_hint("P06", "BatchNorm momentum convention", where, ev))
        if tc.get("padding_idx") is not None and jm["type"] == "Embed":
            ev = f"torch Embedding(padding_idx={tc['padding_idx']}) never trains that row; nnx.Embed has no padding_idx"
            hints.append(_hint("P11", "embedding padding row: no gradient in torch, a gradient in JAX", where, ev))
    return hints


def diagnose(report, passes: dict, plan, structures, transfer: bool = True, steps: int = 0) -> list[Hint]:
    """Hints for a report (see module docstring), confirmed ones first; [] when everything matches."""
    p = passes["float64"]
    hints: list[Hint] = []
    for key, why in p.dropped.items():
        hints.append(
            _hint("P08", "GRU b_hn: nnx.GRUCell has no slot for it", plan.torch_name([key]), why, confirmed=True)
        )
    moved = {k for s in p.torch_steps for k in s.get("dropped", {})} - set(p.dropped)
    for key in sorted(moved):
        ev = f"torch trains {plan.torch_name([key])} away from 0 in the steps; nnx.GRUCell cannot follow"
        hints.append(_hint("P08", "GRU b_hn: nnx.GRUCell has no slot for it", plan.torch_name([key]), ev))
    if report.failed("float64"):
        hints += _replays(report, p, plan, structures, transfer, steps)
        hints += _signatures(report, p) + _step_hints(report, p, plan)
        hints += [
            h for h in _config_hints(structures, plan) if h.pitfall not in {x.pitfall for x in hints if x.confirmed}
        ]
    elif report.failed("float32"):
        worst = max(report.failed("float32"), key=lambda r: r.max_rel)
        ev = f"float64 matches everywhere; float32 differs by up to {worst.max_rel:.1e} relative: rounding, or reduced-precision matmuls"
        hints.append(_hint("P16", "a float32-only difference", worst.where, ev))
    for line in report.mismatches:
        pid = FREEZE if ("frozen" in line.text or "freezes" in line.text) else STOP
        hints.append(_hint(pid, "gradient flow differs", line.keys, line.text))
    if report.failed("float64") and not hints:
        r = report.first_parting("float64")
        ev = f"max rel {r.max_rel:.3g}; no catalogue signature fits (replays tried: {', '.join(k for k, _ in _knobs(structures, steps))})"
        hints.append(Hint("unexplained", "a difference the catalogue does not explain", r.where, ev))
    return sorted(hints, key=lambda h: not h.confirmed)
