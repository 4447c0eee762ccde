"""gradient_penalty: WGAN-GP's critic loss, a gradient penalty that is differentiated to second order.

Shapes: B samples, Z noise, X data, H hidden units, O = 1 critic output.
  G(z) = z W_g + b_g                     [B, X]  generator (its samples are stopped)
  D(x) = relu(x W_1 + b_1) W_2 + b_2     [B, O]  critic
  x̂ = ε·real + (1 − ε)·sg(G(z)),  g_b = ∇ₓD(x̂_b)  [B, X]
  L = mean D(sg G(z)) − mean D(real) + λ·mean_b (‖g_b‖ − 1)²
The penalty depends on the critic's parameters only through g, so its whole gradient is
second order (∂²D/∂θ∂x). create_graph: torch's autograd.grad(..., create_graph=True), JAX's
jax.grad of a function that calls jax.grad. no_create_graph: torch without create_graph
gets g as a constant and the penalty's gradient silently vanishes; JAX has no such switch:
its composition is second order anyway, so the JAX side of this variant differs from torch
on exactly the two critic kernels (g does not depend on b_1 or b_2 away from a ReLU kink).
The zero-norm case: row ZERO_ROW of x̂ switches every ReLU off (b_1 = −x̂₀W_1 − 1), so g₀ = 0
exactly; the norm's gradient there is pinned to 0 (torch's vector_norm, optax.safe_norm),
where jnp.linalg.norm would give NaN (P02). Every pre-activation is > MARGIN from the kink.
"""

from __future__ import annotations

import numpy as np

from ..core.oracle import fd_grad
from ..core.records import Porting, Scenario
from ..core.schema import Field

PARAMS = {
    "generator/kernel": ("Z", "X"),
    "generator/bias": ("X",),
    "critic/l1/kernel": ("X", "H"),
    "critic/l1/bias": ("H",),
    "critic/l2/kernel": ("H", "O"),
    "critic/l2/bias": ("O",),
}
CRITIC = [k for k in PARAMS if k.startswith("critic/")]
ZERO_ROW, MARGIN = 0, 0.1

SCHEMA = {
    "real": Field(("B", "X"), doc="a batch of real samples"),
    "z": Field(("B", "Z"), doc="generator noise"),
    "eps": Field(("B", "O"), low=0.0, high=1.0, doc="interpolation weights ε ~ U[0, 1]"),
    **{f"params/{k}": Field(shape, doc="parameter, canonical layout") for k, shape in PARAMS.items()},
    "gp_weight": Field((), low=0.0, doc="penalty weight λ (10 in the paper)"),
}


def generate(p: dict[str, np.ndarray], z: np.ndarray) -> np.ndarray:
    return z @ p["generator/kernel"] + p["generator/bias"]


def pre(p: dict[str, np.ndarray], x: np.ndarray) -> np.ndarray:
    return x @ p["critic/l1/kernel"] + p["critic/l1/bias"]


def critic(p: dict[str, np.ndarray], x: np.ndarray) -> np.ndarray:
    return np.maximum(pre(p, x), 0.0) @ p["critic/l2/kernel"] + p["critic/l2/bias"]


def input_grad(p: dict[str, np.ndarray], x: np.ndarray) -> np.ndarray:
    """∇ₓD(x_b) [B, X] in closed form: W_1 (1[a_b > 0] ⊙ W_2)."""
    return ((pre(p, x) > 0) * p["critic/l2/kernel"][:, 0]) @ p["critic/l1/kernel"].T


def build(rng: np.random.Generator, case: str) -> dict[str, np.ndarray]:
    sizes = {"B": int(rng.integers(4, 7)), "Z": int(rng.integers(2, 4)), "X": int(rng.integers(2, 4)), "O": 1}
    sizes["H"] = int(rng.integers(3, 6))
    while True:  # ReLU pre-activations clear of the kink, row ZERO_ROW all off, every other row partly on
        a = {
            "real": rng.normal(loc=1.0, scale=1.5, size=(sizes["B"], sizes["X"])),
            "z": rng.normal(size=(sizes["B"], sizes["Z"])),
        }
        a["eps"] = rng.uniform(size=(sizes["B"], 1))
        p = {k: rng.normal(size=tuple(sizes[d] for d in s)) for k, s in PARAMS.items()}
        x_hat = a["eps"] * a["real"] + (1 - a["eps"]) * generate(p, a["z"])
        p["critic/l1/bias"] = -x_hat[ZERO_ROW] @ p["critic/l1/kernel"] - 1.0
        acts = [pre(p, v) for v in (x_hat, a["real"], generate(p, a["z"]))]
        on = acts[0] > 0
        # ∂L/∂b_1 = (mean 1[a_fake > 0] − mean 1[a_real > 0]) ⊙ W_2: the large negative b_1 above can switch
        # every unit off for both batches, and the output bias's gradient is zero by design; the lesson needs
        # the first layer's bias to learn (seed 896502738 drew all units off)
        db1 = ((acts[2] > 0).mean(0) - (acts[1] > 0).mean(0)) * p["critic/l2/kernel"][:, 0]
        clear = min(np.abs(v).min() for v in acts) > MARGIN
        if clear and on[np.arange(sizes["B"]) != ZERO_ROW].any(1).all() and np.abs(db1).max() > MARGIN:
            break
    a.update({f"params/{k}": v for k, v in p.items()}, gp_weight=np.array(10.0))
    return a


def _outputs(fx, second_order: bool) -> dict[str, np.ndarray]:
    a = fx.float64()
    p0 = {k: a[f"params/{k}"] for k in PARAMS}
    fake0 = generate(p0, a["z"])  # stopped: the critic step treats generated samples as data
    x_hat = a["eps"] * a["real"] + (1 - a["eps"]) * fake0
    g0 = input_grad(p0, x_hat)
    lam = float(a["gp_weight"])

    def wasserstein(p):
        # mean D(fake) − mean D(real), with the output bias as the b − b it is (its finite difference is exactly 0)
        hidden = {
            v: np.maximum(pre(p, x), 0.0) @ p["critic/l2/kernel"] for v, x in (("fake", fake0), ("real", a["real"]))
        }
        return float(np.mean(hidden["fake"]) - np.mean(hidden["real"]) + (p["critic/l2/bias"] - p["critic/l2/bias"])[0])

    def penalty(p):
        g = input_grad(p, x_hat) if second_order else g0  # without create_graph g is a constant
        return lam * float(np.mean((np.linalg.norm(g, axis=1) - 1.0) ** 2))

    grads = fd_grad(lambda p: wasserstein(p) + penalty(p), p0)
    out = {"loss": np.array(wasserstein(p0) + penalty(p0)), "loss/wasserstein": np.array(wasserstein(p0))}
    out.update({"loss/penalty": np.array(penalty(p0)), "grad_norms": np.linalg.norm(g0, axis=1)})
    out.update({f"grads/{k}": g for k, g in grads.items()})
    return out


def oracle(fx, variant: str) -> dict[str, np.ndarray]:
    return _outputs(fx, second_order=variant == "create_graph")


def naive_oracle(fx, variant: str) -> dict[str, np.ndarray]:
    """no_create_graph on the JAX side: jax.grad of jax.grad is second order whatever the variant says."""
    return _outputs(fx, second_order=True)


_PATTERN = (
    ("grads/critic/l1/*", "nonzero"),
    ("grads/critic/l2/kernel", "nonzero"),
    ("grads/critic/l2/bias", "zero"),  # mean D(fake) − mean D(real): the output bias cancels exactly
    ("grads/generator/*", "zero"),  # the critic step's samples are stopped
    ("grad_norms", "nonzero"),
    ("loss/penalty", "nonzero"),
)

SPEC = Scenario(
    name="gradient_penalty",
    title="WGAN-GP: a gradient penalty that needs create_graph=True (torch) and is free in JAX",
    family="advanced",
    order=4,
    claims=(),
    source="Gulrajani et al. 2017, arXiv:1704.00028 Alg. 1 (igul222/improved_wgan_training, gan_toy.py)",
    lesson=(
        "The penalty (‖∇ₓD(x̂)‖ − 1)² reaches the critic's parameters only through ∇ₓD, so its gradient is "
        "entirely second order: torch needs create_graph=True, and without it the penalty still shows in "
        "the loss but adds nothing to the gradient, silently. JAX's jax.grad of jax.grad is second order with "
        "no flag. Fake samples are stopped: the generator gets exactly zero; the norm's gradient at a zero "
        "input-gradient is pinned to 0."
    ),
    variants=("create_graph", "no_create_graph"),
    schema=SCHEMA,
    build=build,
    oracle=oracle,
    pattern={"create_graph": _PATTERN, "no_create_graph": _PATTERN},
    diverges={"no_create_graph": ("grads/critic/l1/kernel", "grads/critic/l2/kernel")},
    naive_oracle=naive_oracle,
    porting=Porting(
        torch=(
            "x_hat.requires_grad_(True); g = torch.autograd.grad(D(x_hat).sum(), x_hat, create_graph=True)[0]; "
            "penalty = λ·((torch.linalg.vector_norm(g, dim=1) − 1)²).mean(); fake = G(z).detach()"
        ),
        jax=(
            "g = jax.grad(lambda x: D(x).sum())(x_hat) inside the loss that nnx.grad differentiates; "
            "optax.safe_norm(g, 0.0, axis=1); fake = jax.lax.stop_gradient(G(z))"
        ),
        trap=(
            "create_graph=False (the default) makes g a constant: the loss value includes the penalty, the "
            "gradient does not, and nothing warns. A JAX port cannot make that mistake, so a torch run without "
            "create_graph and its JAX port disagree on the critic kernels. jnp.linalg.norm at a zero input-"
            "gradient (all ReLUs off) gives NaN where torch gives 0."
        ),
    ),
)
