"""mixed_precision: bfloat16 forward (autocast), float32 master weights, loss scaling, a skipped overflow.

Shapes: B samples, D inputs, H features, O outputs. pred = tanh(x W1 + b1) W2 + b2,
loss = mean((pred - y)²) in the master dtype. `steps` Adam steps; the loss of step
`overflow_at` (1-based) is multiplied by inf, so its gradients are non-finite.
  dynamic        torch.amp.GradScaler semantics: scale starts at init_scale, a non-finite
                 step is skipped (parameters and Adam's step count unchanged) and the scale
                 multiplied by backoff_factor, growth_interval finite steps in a row multiply
                 it by growth_factor. JAX: optax.apply_if_finite + the same rule, pure.
  static         a fixed scale; the non-finite step is skipped all the same.
  naive_no_skip  the P15 naive JAX port: the scale rule without apply_if_finite, so the
                 NaN update is applied (diverges; its torch twin is GradScaler, the reference).
Oracle: exact float64 gradients (the bfloat16 rounding is what the tolerances bound), the
Adam update both torch.optim.Adam and optax.adam document, the scale rule in integers.
float64 fixtures: torch.autocast never casts float64 tensors (only float32/float16/bfloat16
are eligible), so the float64 run checks the scaling / skipping / Adam machinery at
float64 parity with no bfloat16 at all; JAX's autocast mirror follows the same rule.
"""

from __future__ import annotations

import numpy as np

from ..core.oracle import adamw
from ..core.parity import Tolerance
from ..core.records import Porting, Scenario
from ..core.schema import Field

PARAMS = {
    "encoder/kernel": ("D", "H"),
    "encoder/bias": ("H",),
    "head/kernel": ("H", "O"),
    "head/bias": ("O",),
}

SCHEMA = {
    "x": Field(("B", "D"), doc="inputs"),
    "y": Field(("B", "O"), doc="regression targets"),
    **{f"params/{k}": Field(shape, doc="master weights, canonical layout") for k, shape in PARAMS.items()},
    "lr": Field((), low=0.0, low_open=True, doc="Adam learning rate"),
    "b1": Field((), low=0.0, high=1.0, high_open=True),
    "b2": Field((), low=0.0, high=1.0, high_open=True),
    "eps": Field((), low=0.0, low_open=True),
    "init_scale": Field((), low=0.0, low_open=True, doc="dynamic loss scale at step 1 (GradScaler init_scale)"),
    "growth_factor": Field((), low=1.0, low_open=True, doc="scale multiplier after growth_interval finite steps"),
    "backoff_factor": Field(
        (), low=0.0, high=1.0, low_open=True, high_open=True, doc="scale multiplier after a non-finite step"
    ),
    "growth_interval": Field((), kind="int", low=1, doc="finite steps in a row before the scale grows"),
    "static_scale": Field((), low=0.0, low_open=True, doc="the fixed scale of variant 'static'"),
    "steps": Field((), kind="int", low=1, doc="optimizer steps"),
    "overflow_at": Field((), kind="int", low=1, doc="1-based step whose loss is multiplied by inf (the lesson)"),
}


def build(rng: np.random.Generator, case: str) -> dict[str, np.ndarray]:
    sizes = {"B": 6, "D": 4, "H": 8, "O": 2}
    out = {"x": rng.normal(size=(sizes["B"], sizes["D"])), "y": rng.normal(size=(sizes["B"], sizes["O"]))}
    for key, shape in PARAMS.items():
        out[f"params/{key}"] = 0.6 * rng.normal(size=tuple(sizes[d] for d in shape))
    out.update(lr=np.array(1e-2), b1=np.array(0.9), b2=np.array(0.999), eps=np.array(1e-8))
    out.update(init_scale=np.array(2.0**16), growth_factor=np.array(2.0), backoff_factor=np.array(0.5))
    out.update(static_scale=np.array(2.0**10))
    out.update(growth_interval=np.array(2), steps=np.array(6), overflow_at=np.array(2))
    return out


def loss_and_grads(p: dict[str, np.ndarray], x: np.ndarray, y: np.ndarray) -> tuple[float, dict[str, np.ndarray]]:
    """Exact loss and gradients (closed form, as feature_stats)."""
    h = np.tanh(x @ p["encoder/kernel"] + p["encoder/bias"])
    r = h @ p["head/kernel"] + p["head/bias"] - y
    g = 2.0 * r / r.size
    dz = (g @ p["head/kernel"].T) * (1.0 - h**2)
    grads = {"encoder/kernel": x.T @ dz, "encoder/bias": dz.sum(0), "head/kernel": h.T @ g, "head/bias": g.sum(0)}
    return float(np.mean(r**2)), grads


def scale_rule(scale: float, tracker: int, finite: bool, a: dict[str, np.ndarray]) -> tuple[float, int]:
    """torch.amp.GradScaler.update (aten _amp_update_scale_): back off and reset, or count and maybe grow."""
    if not finite:
        return scale * float(a["backoff_factor"]), 0
    if tracker + 1 == int(a["growth_interval"]):
        return scale * float(a["growth_factor"]), 0
    return scale, tracker + 1


def oracle(fx, variant: str) -> dict[str, np.ndarray]:
    a = fx.float64()
    x, y = a["x"], a["y"]
    params = {k: a[f"params/{k}"].copy() for k in PARAMS}
    loss0, grads0 = loss_and_grads(params, x, y)
    scale, tracker = float(a["static_scale" if variant == "static" else "init_scale"]), 0
    scales, skipped = [], []
    for step in range(1, int(a["steps"]) + 1):
        finite = step != int(a["overflow_at"])
        skipped.append(not finite)
        if variant != "static":
            scale, tracker = scale_rule(scale, tracker, finite, a)
        scales.append(scale)
    # the reference skips a non-finite step entirely (parameters, moments and count unchanged),
    # so the steps taken are plain Adam steps: naive_no_skip's torch twin too
    count = skipped.count(False)
    hyper = {k: float(a[k]) for k in ("lr", "b1", "b2", "eps")}
    params = adamw(lambda p: loss_and_grads(p, x, y)[1], params, count, weight_decay=0.0, **hyper)
    out = {"loss": np.array(loss0)}
    out.update({f"grads/{k}": g for k, g in grads0.items()})
    out.update({f"grads_full/{k}": g.copy() for k, g in grads0.items()})
    out.update({f"params/{k}": v for k, v in params.items()})
    out.update(scale=np.array(scales, dtype=np.int64), skipped=np.array(skipped), optimizer_steps=np.array(count))
    return out


def naive_oracle(fx, variant: str) -> dict[str, np.ndarray]:
    """The naive port (`naive_no_skip`): the scale rule without apply_if_finite. Adam takes every step, so the
    overflow step's ±inf gradient enters the moments (m̂ / sqrt(v̂) = inf / inf): NaN parameters from then on;
    their gradients stay NaN, so every later step is non-finite too and the scale backs off at each one."""
    a = fx.float64()
    x, y, at, steps = a["x"], a["y"], int(a["overflow_at"]), int(a["steps"])
    scale, tracker, scales, step = float(a["init_scale"]), 0, [], 0

    def grad_fn(p: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        nonlocal scale, tracker, step
        step += 1
        grads = loss_and_grads(p, x, y)[1]
        if step == at:  # the loss times inf: ±inf where the gradient is non-zero, inf · 0 = NaN elsewhere
            grads = {k: g * np.inf for k, g in grads.items()}
        scale, tracker = scale_rule(scale, tracker, all(np.all(np.isfinite(g)) for g in grads.values()), a)
        scales.append(scale)
        return grads

    hyper = {k: float(a[k]) for k in ("lr", "b1", "b2", "eps")}
    params = {k: a[f"params/{k}"].copy() for k in PARAMS}
    with np.errstate(invalid="ignore", over="ignore"):
        params = adamw(grad_fn, params, steps, weight_decay=0.0, **hyper)
    out = {f"params/{k}": v for k, v in params.items()}
    out.update(scale=np.array(scales, dtype=np.int64), skipped=np.zeros(steps, dtype=bool))
    out["optimizer_steps"] = np.array(steps)
    return out


# bfloat16 unit roundoff u = 2^-8; 8u covers the measured worst case twice (see tolerance_note)
BF16 = Tolerance(rtol=2.0**-5, atol=1e-5)

_PATTERN = (
    ("grads/*", "nonzero"),
    ("grads_full/*", "nonzero"),
    ("params/*", "nonzero"),
    ("scale", "nonzero"),
    ("skipped", "nonzero"),
    ("optimizer_steps", "nonzero"),
)


def _overflow_step_exists(arrays, dims) -> str | None:
    """`overflow_at` is the 1-based index of a step that runs: the lesson needs one overflowing step."""
    at, steps = int(arrays["overflow_at"]), int(arrays["steps"])
    return None if 1 <= at <= steps else f"field 'overflow_at': expected a value in [1, steps={steps}], got {at}"


SPEC = Scenario(
    name="mixed_precision",
    title="bfloat16 autocast with float32 master weights and loss scaling: the overflow step is skipped",
    family="scenarios",
    order=14,
    step_loss=lambda o, a: o["loss"],
    step_updates=True,
    claims=("C15",),
    source="A1 §7.2, P15",
    lesson=(
        "Mixed precision needs no detach (C15): autocast, float32 master weights and loss scaling. "
        "Loss scaling by a power of two is exact, so unscaled bfloat16 gradients agree with float32 "
        "gradients to bfloat16 precision; a non-finite step must be skipped (parameters and Adam's step "
        "count unchanged) while the scale backs off — the scale sequences of torch and JAX are identical."
    ),
    variants=("dynamic", "static", "naive_no_skip"),
    schema=SCHEMA,
    checks=(_overflow_step_exists,),
    build=build,
    oracle=oracle,
    pattern={
        "dynamic": _PATTERN,
        "static": _PATTERN,
        # the naive JAX port's parameters are NaN and it never skips: only step 1 and the scale agree
        "naive_no_skip": (("grads/*", "nonzero"), ("grads_full/*", "nonzero"), ("scale", "nonzero")),
    },
    porting=Porting(
        torch=(
            'with torch.autocast("cpu", dtype=torch.bfloat16): pred = model(x); '
            "scaler = torch.amp.GradScaler('cpu'); scaler.scale(loss).backward(); scaler.unscale_(opt); "
            "scaler.step(opt); scaler.update()"
        ),
        jax=(
            "explicit casts: dot(x.astype(bf16), W.astype(bf16), preferred_element_type=float32) + b, "
            "rounded to bf16 once; optax.apply_if_finite(optax.adam(...)) + a pure scale rule"
        ),
        trap=(
            "Without apply_if_finite the overflow step writes NaN into every parameter (P15). "
            "nnx.Linear(dtype=bfloat16) rounds the matmul to bf16 before adding the bias; torch's CPU "
            "autocast rounds once. nnx.Optimizer.step counts skipped updates too; Adam's count does not."
        ),
    ),
    tolerances={"float32": {"parity": BF16, "oracle": BF16}},
    tolerance_note=(
        "float32 runs compute in bfloat16 (u = 2^-8): measured max 4.4u (grads vs float64), 4u (params "
        "after 6 Adam steps, whose sign-like first steps amplify tiny gradients), seeds 0-9; bound 8u = 2^-5"
    ),
    diverges={"naive_no_skip": ("params/*", "optimizer_steps", "scale", "skipped")},
    naive_oracle=naive_oracle,
    nonfinite_ok=("params/*",),  # the naive port's NaN parameters (the lesson); the other variants assert finite
)
