"""p15_loss_scale_overflow (pitfall P15): dynamic loss scaling skips an overflowing step.

Shapes: B samples, D features. A linear model computed in float16 (master
weights in the fixture dtype), loss mean((x w - y)**2), Adam, dynamic loss scale
starting at 2**16 (torch.amp.GradScaler defaults: growth 2, backoff 0.5, growth
interval 2000). Step 1 overflows by construction: the scaled cotangent 65536
does not fit float16 (max 65504), so every gradient is inf / nan. torch skips
the step (parameters and Adam's step count unchanged) and halves the scale to
32768; step 2 then runs at 32768 and is applied. The naive JAX port keeps a
fixed scale and applies the non-finite update: NaN parameters. It diverges;
optax.apply_if_finite plus the scale rule reproduces torch.
"""

from __future__ import annotations

import numpy as np

from ..core.oracle import adamw
from ..core.records import Porting, Scenario
from ..core.schema import Field

SCHEMA = {
    "x": Field(("B", "D"), doc="inputs"),
    "y": Field(("B",), doc="targets"),
    "w": Field(("D",), doc="initial master weights"),
    "lr": Field((), low=0.0, low_open=True, doc="Adam learning rate, > 0"),
    "b1": Field((), low=0.0, high=1.0, high_open=True, doc="Adam beta1, in [0, 1)"),
    "b2": Field((), low=0.0, high=1.0, high_open=True, doc="Adam beta2, in [0, 1)"),
    "eps": Field((), low=0.0, low_open=True, doc="Adam epsilon, > 0"),
    "init_scale": Field((), low=0.0, low_open=True, doc="initial loss scale (GradScaler default 2**16), > 0"),
    "growth_factor": Field((), low=1.0, low_open=True, doc="scale multiplier after growth_interval finite steps, > 1"),
    "backoff_factor": Field(
        (), low=0.0, high=1.0, low_open=True, high_open=True, doc="scale multiplier after a non-finite step, in (0, 1)"
    ),
    "growth_interval": Field((), kind="int", low=1, doc="finite steps before the scale grows, >= 1"),
}


_DRAWS = 100  # about 3 % of draws overflow at 2**15: 100 failures in a row have probability ~1e-150


def build(rng: np.random.Generator, case: str) -> dict[str, np.ndarray]:
    if case == "handed":  # P15: scale 2**16; the data are hand-written (P15 states only the rule)
        data = {
            "x": np.array([[1.0, 2.0, 3.0], [0.5, 0.1, -1.0]]),
            "y": np.array([1.0, 0.0]),
            "w": np.array([0.5, -0.3, 0.2]),
        }
    else:
        for _ in range(_DRAWS):  # the lesson needs step 2 to run: redraw while it overflows at 2**15 too (seed 8)
            data = {"x": 0.5 * rng.normal(size=(2, 3)), "y": 0.5 * rng.normal(size=2), "w": 0.5 * rng.normal(size=3)}
            if np.all(np.isfinite(scaled_grad_fp16(data["w"], data["x"], data["y"], 2.0**15))):
                break
        else:
            raise ValueError(f"p15_loss_scale_overflow: no draw of {_DRAWS} whose step 2 is finite at scale 2**15")
    data.update(lr=np.array(1e-2), b1=np.array(0.9), b2=np.array(0.999), eps=np.array(1e-8))
    data.update(init_scale=np.array(2.0**16), growth_factor=np.array(2.0), backoff_factor=np.array(0.5))
    data["growth_interval"] = np.array(2000)
    return data


def scaled_grad_fp16(w: np.ndarray, x: np.ndarray, y: np.ndarray, scale: float) -> np.ndarray:
    """d (scale * loss) / d w with the model in float16, as both frameworks compute it (numpy emulation)."""
    f16 = np.float16
    with np.errstate(over="ignore", invalid="ignore"):
        r = x.astype(f16) @ w.astype(f16) - y.astype(f16)
        ct = np.asarray(scale).astype(f16)  # the cotangent of the float16 loss: 65536 -> inf
        d_pred = (ct / f16(len(y))) * (f16(2.0) * r)  # mean's backward, then the square's, as autograd orders them
        return (x.astype(f16).T @ d_pred).astype(np.float64)


def oracle(fx, variant: str) -> dict[str, np.ndarray]:
    a = fx.float64()
    x, y, w = a["x"], a["y"], a["w"]
    scale, good, count = float(a["init_scale"]), 0, 0
    out = {}
    for step in (1, 2):  # torch's GradScaler rule in both variants
        g = scaled_grad_fp16(w, x, y, scale) / scale
        if np.all(np.isfinite(g)):
            kw = dict(lr=float(a["lr"]), b1=float(a["b1"]), b2=float(a["b2"]), eps=float(a["eps"]))
            assert count == 0, "the oracle's Adam restarts from zero moments: valid for one applied step"
            w_new = adamw(lambda p, g=g: {"w": g}, {"w": w}, 1, weight_decay=0.0, **kw)["w"]
            count, good = count + 1, good + 1
            if good == int(a["growth_interval"]):
                scale, good = scale * float(a["growth_factor"]), 0
        else:  # skipped: parameters and optimizer state unchanged, scale backs off
            w_new, scale, good = w, scale * float(a["backoff_factor"]), 0
        out.update({f"step{step}/moved": w_new - w, f"step{step}/scale": np.array(scale)})
        out[f"step{step}/count"] = np.array(count, dtype=np.int64)
        w = w_new
    out["params/w"] = w
    return out


def naive_oracle(fx, variant: str) -> dict[str, np.ndarray]:
    """The naive port: a fixed scale and plain Adam, no finite check. Step 1's inf gradient enters Adam's
    moments (m̂ / sqrt(v̂) = inf / inf): NaN parameters, and every later step stays NaN; the count still grows."""
    a = fx.float64()
    x, y, w0, scale = a["x"], a["y"], a["w"], float(a["init_scale"])
    kw = dict(lr=float(a["lr"]), b1=float(a["b1"]), b2=float(a["b2"]), eps=float(a["eps"]), weight_decay=0.0)
    out, w = {}, w0
    with np.errstate(over="ignore", invalid="ignore"):
        for step in (1, 2):  # Adam restarted for `step` steps: the same trajectory, read after each step
            w_new = adamw(lambda p: {"w": scaled_grad_fp16(p["w"], x, y, scale) / scale}, {"w": w0}, step, **kw)["w"]
            out[f"step{step}/moved"] = w_new - w
            out[f"step{step}/scale"] = np.array(scale)
            out[f"step{step}/count"] = np.array(step, dtype=np.int64)
            w = w_new
    out["params/w"] = w
    return out


SPEC = Scenario(
    name="p15_loss_scale_overflow",
    title="dynamic loss scaling must skip an overflowing step",
    family="pitfalls",
    claims=(),
    source="P15",
    lesson=(
        "With a float16 model, an overflowing step (inf / nan gradients) must be skipped and the scale "
        "halved: parameters and optimizer state unchanged. A fixed-scale port applies the NaN update."
    ),
    variants=("ported", "naive"),
    cases=("handed", "random"),
    schema=SCHEMA,
    build=build,
    oracle=oracle,
    pattern={
        "ported": (
            ("step1/moved", "zero"),
            ("step1/count", "zero"),
            ("step2/moved", "nonzero"),
            ("step*/scale", "nonzero"),
        ),
        "naive": (("step*/scale", "nonzero"),),  # JAX's parameters are NaN here: asserted in tests
    },
    porting=Porting(
        torch="`scaler.scale(loss).backward(); scaler.step(opt); scaler.update()` (`torch.amp.GradScaler`)",
        jax="`optax.apply_if_finite(adam, n)` plus the scale rule: halve on overflow, double every 2000 good steps",
        trap="a fixed scale without the finite check applies inf / nan gradients: NaN parameters, no error",
    ),
    diverges={"naive": ("params/*", "step1/*", "step2/*")},
    naive_oracle=naive_oracle,
    nonfinite_ok=("params/w", "step*/moved"),  # the naive port's NaN parameters (the lesson); "ported" asserts finite
)
