"""lora: a low-rank adapter on a frozen base, trained with AdamW (weight decay on).

Shapes: B samples, D inputs, H hidden units, R the adapter rank, O outputs.
  l1(x) = x W + b + s·(x A) B,  A [D, R], B [R, H], s = lora_alpha / R  (Hu et al. 2021, eq. 3)
  pred = l2(tanh(l1(x))) [B, O], loss = mean((pred − y)²)
Trainable: the adapter A, B only; the base (l1's W, b and the whole of l2) is frozen. B starts
at 0 (the paper's initialisation), so the first gradient of A is exactly 0 and the model starts
as the base model. `steps` AdamW steps; the merged kernel W + s·A B then gives the same outputs.
naive_wrt_param is the JAX port that gives `wrt=nnx.Param` (and differentiates nnx.Param):
nnx.LoRAParam is a subclass of nnx.Param, so the "frozen" base trains too.
"""

from __future__ import annotations

import numpy as np

from ..core.oracle import adamw, fd_grad
from ..core.records import Porting, Scenario
from ..core.schema import Field

PARAMS = {
    "l1/base/kernel": ("D", "H"),
    "l1/base/bias": ("H",),
    "l1/adapter/lora_a": ("D", "R"),
    "l1/adapter/lora_b": ("R", "H"),
    "l2/kernel": ("H", "O"),
    "l2/bias": ("O",),
}
ADAPTER = ("l1/adapter/lora_a", "l1/adapter/lora_b")

SCHEMA = {
    "x": Field(("B", "D"), doc="inputs"),
    "y": Field(("B", "O"), doc="regression targets"),
    **{f"params/{k}": Field(shape, doc="initial parameter, canonical layout") for k, shape in PARAMS.items()},
    "lora_alpha": Field((), low=0.0, low_open=True, doc="α: the adapter is scaled by α / R"),
    "lr": Field((), low=0.0, low_open=True, doc="AdamW learning rate"),
    "weight_decay": Field((), low=0.0, low_open=True, doc="decoupled weight decay (on: it moves what it is given)"),
    "b1": Field((), low=0.0, high=1.0, high_open=True),
    "b2": Field((), low=0.0, high=1.0, high_open=True),
    "eps": Field((), low=0.0, low_open=True),
    "steps": Field((), kind="int", low=1, doc="optimizer steps"),
}


def scale(a: dict[str, np.ndarray]) -> float:
    """s = α / R."""
    return float(a["lora_alpha"]) / a["params/l1/adapter/lora_a"].shape[1]


def merged_kernel(p: dict[str, np.ndarray], s: float) -> np.ndarray:
    """W + s·A B [D, H]: the adapter folded into the base kernel."""
    return p["l1/base/kernel"] + s * p["l1/adapter/lora_a"] @ p["l1/adapter/lora_b"]


def forward(p: dict[str, np.ndarray], x: np.ndarray, s: float) -> np.ndarray:
    """pred [B, O]."""
    h = np.tanh(x @ p["l1/base/kernel"] + p["l1/base/bias"] + s * (x @ p["l1/adapter/lora_a"]) @ p["l1/adapter/lora_b"])
    return h @ p["l2/kernel"] + p["l2/bias"]


def build(rng: np.random.Generator, case: str) -> dict[str, np.ndarray]:
    sizes = {"B": int(rng.integers(3, 6)), "D": int(rng.integers(2, 5)), "H": int(rng.integers(3, 5))}
    sizes.update(R=2, O=int(rng.integers(1, 3)))
    out = {"x": rng.normal(size=(sizes["B"], sizes["D"])), "y": rng.normal(size=(sizes["B"], sizes["O"]))}
    for key, shape in PARAMS.items():
        out[f"params/{key}"] = 0.5 * rng.normal(size=tuple(sizes[d] for d in shape))
    out["params/l1/adapter/lora_b"] = np.zeros((sizes["R"], sizes["H"]))  # Hu et al.: B = 0, the base model at start
    out.update(lora_alpha=np.array(4.0), lr=np.array(1e-2), weight_decay=np.array(0.1))
    out.update(b1=np.array(0.9), b2=np.array(0.999), eps=np.array(1e-8), steps=np.array(3))
    return out


def _train(fx, trainable) -> dict[str, np.ndarray]:
    a = fx.float64()
    params = {k: a[f"params/{k}"] for k in PARAMS}
    s = scale(a)

    def loss(p):
        return float(np.mean((forward(p, a["x"], s) - a["y"]) ** 2))

    def grad_fn(p):
        g = fd_grad(loss, p, wrt=[k for k in PARAMS if trainable(k)])
        return {k: g.get(k, np.zeros_like(v)) for k, v in p.items()}  # frozen: no gradient at all

    hyper = {k: float(a[k]) for k in ("lr", "b1", "b2", "eps", "weight_decay")}
    after = adamw(grad_fn, params, int(a["steps"]), trainable=trainable, **hyper)
    out = {"loss": np.array(loss(params))}
    out.update({f"grads/{k}": g for k, g in grad_fn(params).items()})
    out.update({f"params/{k}": v for k, v in after.items()})
    out.update({f"moved/{k}": after[k] - params[k] for k in PARAMS})
    out["merged/l1/kernel"] = merged_kernel(after, s)
    return out


def oracle(fx, variant: str) -> dict[str, np.ndarray]:
    return _train(fx, lambda k: k in ADAPTER)


def naive_oracle(fx, variant: str) -> dict[str, np.ndarray]:
    """What the naive JAX port computes: every nnx.Param trains, the base with the adapter (AdamW on all)."""
    return _train(fx, lambda k: True)


_COMMON = (("grads/l1/adapter/lora_b", "nonzero"), ("moved/l1/adapter/*", "nonzero"), ("merged/*", "nonzero"))

SPEC = Scenario(
    name="lora",
    title="LoRA: a low-rank adapter on a frozen base under AdamW with weight decay",
    family="advanced",
    order=14,
    step_loss=lambda o, a: o["loss"],
    step_updates=True,
    claims=(),
    source="Hu et al. 2021, arXiv:2106.09685; Hugging Face peft LoraLayer; flax.nnx.LoRA",
    lesson=(
        "Only the adapter trains: the frozen base must have no gradient and no optimizer state, so AdamW's "
        "weight decay leaves it bit-identical. In NNX that is wrt=nnx.LoRAParam for the optimizer and the "
        "gradient; nnx.Param matches LoRAParam too (a subclass) and trains the base. With B = 0 at start the "
        "first gradient of A is exactly 0; after training W + s·A B is the same layer."
    ),
    variants=("lora", "naive_wrt_param"),
    schema=SCHEMA,
    build=build,
    oracle=oracle,
    naive_oracle=naive_oracle,
    pattern={
        "lora": (
            *_COMMON,
            ("grads/l1/adapter/lora_a", "zero"),  # B = 0: no path to A at the first step
            ("grads/l1/base/*", "zero"),
            ("grads/l2/*", "zero"),
            ("moved/l1/base/*", "zero"),  # frozen: bit-identical, weight decay included
            ("moved/l2/*", "zero"),
        ),
        "naive_wrt_param": _COMMON,
    },
    diverges={"naive_wrt_param": ("grads/l1/base/*", "grads/l2/*", "params/*", "moved/*", "merged/*")},
    porting=Porting(
        torch=(
            "base `requires_grad_(False)`, `lora_A`, `lora_B` as `nn.Parameter`; "
            "`AdamW([p for p in model.parameters() if p.requires_grad], weight_decay=wd)`"
        ),
        jax=(
            "`nnx.LoRA(d, r, h, rngs=...)` (lora_a, lora_b are `nnx.LoRAParam`) next to the base; "
            "`nnx.Optimizer(model, optax.adamw(...), wrt=nnx.LoRAParam)`, `nnx.grad(..., argnums=nnx.DiffState(0, nnx.LoRAParam))`"
        ),
        trap=(
            "`nnx.LoRAParam` subclasses `nnx.Param`: `wrt=nnx.Param` trains the base too, silently. nnx.LoRA has no "
            "α / r scaling: peft's `scaling = lora_alpha / r` is a separate multiply (scaling B instead changes "
            "what AdamW does, it is not scale-invariant per parameter)."
        ),
    ),
)
