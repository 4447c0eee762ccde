"""per_example_grads: one gradient per example (vmap of grad), and DP-SGD's per-example clipping plus noise.

Shapes: B examples, D input features, H hidden units; a scalar regression output.
  pred_i = tanh(x_i W1 + b1) W2 + b2, ℓ_i = 0.5·(pred_i − y_i)², loss = mean_i ℓ_i
  g_i = ∇θ ℓ_i (per example), ‖g_i‖ the global L2 norm over every parameter    [B]
  dp_sgd:          ḡ = (Σ_i g_i·min(1, C/‖g_i‖) + σ·C·z) / B        (Abadi et al. 2016, Algorithm 1)
  clip_after_sum:  ḡ = (Σ_i g_i·min(1, C/‖Σ_i g_i‖) + σ·C·z) / B    (the wrong order: not private)
  θ ← θ − lr·ḡ.
The noise z ~ N(0, 1) per parameter entry is a fixture field, so both frameworks add the same
noise. build() places C at the geometric midpoint of two neighbouring per-example norms at least
10 % apart: some examples are clipped, some are not, none sits at the kink.
The oracle is closed-form backpropagation (tests/test_per_example_grads.py checks it against fd_grad).
"""

from __future__ import annotations

import numpy as np

from ..core.records import Porting, Scenario
from ..core.schema import Field

PARAMS = {"l1/kernel": ("D", "H"), "l1/bias": ("H",), "l2/kernel": ("H", 1), "l2/bias": (1,)}

SCHEMA = {
    "x": Field(("B", "D"), doc="inputs"),
    "y": Field(("B",), doc="regression targets"),
    **{f"params/{k}": Field(shape, doc="parameter, canonical layout") for k, shape in PARAMS.items()},
    **{f"noise/{k}": Field(shape, doc="standard-normal noise z of the DP-SGD step") for k, shape in PARAMS.items()},
    "l2_norm_clip": Field((), low=0.0, low_open=True, doc="C: the per-example gradient norm bound"),
    "noise_multiplier": Field((), low=0.0, doc="σ: the noise std in units of C"),
    "lr": Field((), low=0.0, low_open=True, doc="SGD learning rate"),
}


def example_grads(p: dict[str, np.ndarray], x: np.ndarray, y: np.ndarray) -> dict[str, np.ndarray]:
    """Per-example gradients {param: [B, ...]} of ℓ_i = 0.5·(pred_i − y_i)², by backpropagation in closed form."""
    h = np.tanh(x @ p["l1/kernel"] + p["l1/bias"])  # [B, H]
    r = (h @ p["l2/kernel"] + p["l2/bias"])[:, 0] - y  # [B]
    dz = r[:, None] * p["l2/kernel"][:, 0] * (1.0 - h**2)  # [B, H]
    return {
        "l1/kernel": x[:, :, None] * dz[:, None, :],
        "l1/bias": dz,
        "l2/kernel": (r[:, None] * h)[:, :, None],
        "l2/bias": r[:, None],
    }


def global_norms(per_example: dict[str, np.ndarray]) -> np.ndarray:
    """‖g_i‖ [B] over every parameter."""
    return np.sqrt(sum(np.sum(g.reshape(len(g), -1) ** 2, axis=1) for g in per_example.values()))


def build(rng: np.random.Generator, case: str) -> dict[str, np.ndarray]:
    sizes = {"B": int(rng.integers(4, 7)), "D": int(rng.integers(2, 4)), "H": int(rng.integers(2, 4))}
    while True:
        out = {"x": rng.normal(size=(sizes["B"], sizes["D"])), "y": rng.normal(size=sizes["B"])}
        for key, shape in PARAMS.items():
            out[f"params/{key}"] = 0.8 * rng.normal(size=tuple(sizes.get(d, d) for d in shape))
            out[f"noise/{key}"] = rng.normal(size=tuple(sizes.get(d, d) for d in shape))
        norms = np.sort(global_norms(example_grads({k: out[f"params/{k}"] for k in PARAMS}, out["x"], out["y"])))
        ratios = norms[1:] / norms[:-1]
        gaps = [i for i in range(1, len(norms) - 1) if ratios[i] > 1.1]  # a 10 % gap, clipped on both sides of it
        if gaps:
            i = gaps[len(gaps) // 2]
            out["l2_norm_clip"] = np.array(np.sqrt(norms[i] * norms[i + 1]))
            out.update(noise_multiplier=np.array(0.5), lr=np.array(0.1))
            return out


def oracle(fx, variant: str) -> dict[str, np.ndarray]:
    a = fx.float64()
    p = {k: a[f"params/{k}"] for k in PARAMS}
    per = example_grads(p, a["x"], a["y"])
    norms = global_norms(per)
    c, b = float(a["l2_norm_clip"]), len(a["y"])
    if variant == "dp_sgd":
        factors = np.minimum(1.0, c / norms)  # per example, before the sum
        clipped = {k: np.tensordot(factors, g, axes=1) for k, g in per.items()}
        num_clipped = int(np.sum(factors < 1.0))
    else:
        summed = {k: g.sum(axis=0) for k, g in per.items()}
        factor = min(1.0, c / float(global_norms({k: v[None] for k, v in summed.items()})[0]))
        clipped, num_clipped = {k: factor * v for k, v in summed.items()}, int(factor < 1.0)
    noisy = {k: (clipped[k] + a["noise_multiplier"] * c * a[f"noise/{k}"]) / b for k in PARAMS}
    h = np.tanh(a["x"] @ p["l1/kernel"] + p["l1/bias"])
    out = {"loss": np.array(0.5 * np.mean(((h @ p["l2/kernel"] + p["l2/bias"])[:, 0] - a["y"]) ** 2))}
    out.update(norms=norms, num_clipped=np.array(num_clipped, dtype=np.int64))
    out.update({f"grads/{k}": g.mean(axis=0) for k, g in per.items()})  # the batch gradient of the mean loss
    out.update({f"per_example/{k}": g for k, g in per.items()})
    out.update({f"dp_grads/{k}": v for k, v in noisy.items()})
    out.update({f"params/{k}": p[k] - a["lr"] * noisy[k] for k in PARAMS})
    return out


_PATTERN = (("per_example/*", "nonzero"), ("grads/*", "nonzero"), ("dp_grads/*", "nonzero"), ("norms", "nonzero"))

SPEC = Scenario(
    name="per_example_grads",
    title="Per-example gradients (vmap of grad) and DP-SGD's per-example clipping",
    family="advanced",
    order=13,
    claims=(),
    source="Abadi et al. 2016, arXiv:1607.00133; torch.func and JAX autodiff docs (per-sample gradients)",
    lesson=(
        "vmap(grad(ℓ)) gives one gradient per example; their mean is the batch gradient of the mean loss. "
        "DP-SGD clips each example's gradient to norm C before the sum: clipping the summed gradient "
        "instead bounds nothing about any one example (clip_after_sum), and gives a different step."
    ),
    variants=("dp_sgd", "clip_after_sum"),
    schema=SCHEMA,
    build=build,
    oracle=oracle,
    pattern={"dp_sgd": _PATTERN, "clip_after_sum": _PATTERN},
    porting=Porting(
        torch=(
            "`torch.func.vmap(torch.func.grad(loss_one), in_dims=(None, 0, 0))(dict(model.named_parameters()), x, y)` "
            "with `torch.func.functional_call(model, params, (x_i[None],))`; clip by hand or Opacus"
        ),
        jax=(
            "`jax.vmap(jax.grad(loss_one), in_axes=(None, 0, 0))(params, x, y)` over `nnx.split`'s state; "
            "`optax.per_example_global_norm_clip(grads, l2_norm_clip=C)` returns the clipped sum"
        ),
        trap=(
            "Clipping after the sum (or `clip_grad_norm_` on the batch gradient) is not DP-SGD. torch's "
            "`clip_grad_norm_` divides by ‖g‖ + 1e-6, optax's `clip_by_global_norm` by ‖g‖: not equal in float64. "
            "`torch.func.grad` of a function that does not use its params returns zeros, not an error."
        ),
    ),
)
