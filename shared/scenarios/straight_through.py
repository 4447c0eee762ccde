"""straight_through: the straight-through estimator of a VQ-VAE quantizer, and of rounding and sign.

Shapes: B rows, D input features, K latent dimensions, C codebook entries.
  z_e = x W_enc + b_enc                          [B, K]  (the encoder)
  k   = argmin_c ‖z_e − e_c‖²,  z_q = e[k]       [B], [B, K]  (nearest code, first on a tie)
  z   = z_e + sg(z_q − z_e)                      forward z_q, gradient of the identity to z_e
  x̂   = z W_dec + b_dec                          [B, D]  (the decoder)
  recon = mean((x̂ − x)²), codebook = mean((sg(z_e) − z_q)²), commit = mean((z_e − sg(z_q))²)
  loss = recon + codebook + β·commit (codebook_loss, no_straight_through)
       = recon + β·commit, codebook by EMA of the assigned z_e (ema_codebook).
no_straight_through feeds z_q itself to the decoder (the bug): the encoder then learns only
from the commitment term. One SGD step (lr) on the loss; ema_codebook then overwrites the
codebook with the Laplace-smoothed EMA, as Sonnet's VectorQuantizerEMA:
  N ← γN + (1 − γ)·n,  m ← γm + (1 − γ)·onehotᵀ z_e,  e = m / ((N + ε)/(ΣN + Cε)·ΣN).
Rounding and sign: y = u + sg(q(u) − u) for q = round, sign; L = 0.5·Σ(y − t)²; the first
derivative is y − t (the forward value is rounded), the second that of the identity (1).
Margins: every z_e is nearer its code than any other by > MARGIN in squared distance, and
every u is > 0.1 from a half-integer and from 0, so float32 argmin / round agree everywhere.
"""

from __future__ import annotations

import numpy as np

from ..core.oracle import fd_grad, sgd
from ..core.records import Porting, Scenario
from ..core.schema import Field

PARAMS = {
    "encoder/kernel": ("D", "K"),
    "encoder/bias": ("K",),
    "codebook": ("C", "K"),
    "decoder/kernel": ("K", "D"),
    "decoder/bias": ("D",),
}
TERMS = {"codebook_loss": ("recon", "codebook", "commit"), "no_straight_through": ("recon", "codebook", "commit")}
TERMS["ema_codebook"] = ("recon", "commit")
MARGIN = 0.05
ROUNDINGS = ("round", "sign")

SCHEMA = {
    "x": Field(("B", "D"), doc="inputs, reconstructed by the decoder"),
    **{f"params/{k}": Field(shape, doc="initial parameter, canonical layout") for k, shape in PARAMS.items()},
    "ema_count": Field(("C",), low=0.0, low_open=True, doc="EMA of the code counts N (ema_codebook)"),
    "ema_sum": Field(("C", "K"), doc="EMA of the sums m of the z_e assigned to each code (ema_codebook)"),
    "beta": Field((), low=0.0, doc="commitment cost β (0.25 in the paper)"),
    "decay": Field((), low=0.0, high=1.0, high_open=True, doc="EMA decay γ (0.99 in Sonnet)"),
    "ema_eps": Field((), low=0.0, low_open=True, doc="Laplace smoothing ε of the counts (1e-5 in Sonnet)"),
    "lr": Field((), low=0.0, low_open=True, doc="SGD learning rate"),
    "u": Field(("B", "K"), doc="inputs of the straight-through round and sign (no half-integer, no 0)"),
    "t": Field(("B", "K"), doc="targets of 0.5·Σ(y − t)² for the round and sign estimators"),
}


def encode(p: dict[str, np.ndarray], x: np.ndarray) -> np.ndarray:
    return x @ p["encoder/kernel"] + p["encoder/bias"]


def nearest(z_e: np.ndarray, codebook: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(k [B] the nearest code, sorted squared distances [B, C]) of z_e [B, K]."""
    d = ((z_e[:, None, :] - codebook[None]) ** 2).sum(-1)
    return np.argmin(d, axis=1), np.sort(d, axis=1)


def build(rng: np.random.Generator, case: str) -> dict[str, np.ndarray]:
    sizes = {"B": int(rng.integers(4, 7)), "D": int(rng.integers(2, 5)), "K": int(rng.integers(2, 4))}
    sizes["C"] = int(rng.integers(3, 6))
    x = rng.normal(size=(sizes["B"], sizes["D"]))
    while True:  # resample until every row is clearly nearest one code, and two codes at least are used
        p = {k: rng.normal(size=tuple(sizes[d] for d in shape)) for k, shape in PARAMS.items()}
        k, d = nearest(encode(p, x), p["codebook"])
        if (d[:, 1] - d[:, 0]).min() > MARGIN and len(set(k.tolist())) >= 2:
            break
    count = rng.uniform(0.5, 2.0, size=sizes["C"])
    shape = (sizes["B"], sizes["K"])
    u = rng.integers(-2, 3, size=shape) + rng.choice([-1.0, 1.0], size=shape) * rng.uniform(0.1, 0.4, size=shape)
    out = {"x": x, **{f"params/{k}": v for k, v in p.items()}}
    out.update(ema_count=count, ema_sum=p["codebook"] * count[:, None] + 0.1 * rng.normal(size=p["codebook"].shape))
    out.update(beta=np.array(0.25), decay=np.array(0.9), ema_eps=np.array(1e-5), lr=np.array(0.1))
    out.update(u=u, t=rng.normal(size=shape))
    return out


def quantize_np(sign: str, u: np.ndarray) -> np.ndarray:
    return np.round(u) if sign == "round" else np.sign(u)


def ema_update(a: dict[str, np.ndarray], z_e: np.ndarray, k: np.ndarray) -> dict[str, np.ndarray]:
    """Sonnet's VectorQuantizerEMA step: new counts N [C], sums m [C, K] and codebook e [C, K]."""
    onehot = np.eye(len(a["ema_count"]))[k]  # [B, C]
    g = float(a["decay"])
    n = g * a["ema_count"] + (1 - g) * onehot.sum(0)
    m = g * a["ema_sum"] + (1 - g) * onehot.T @ z_e
    total = n.sum()
    smoothed = (n + a["ema_eps"]) / (total + len(n) * a["ema_eps"]) * total
    return {"ema/count": n, "ema/sum": m, "codebook": m / smoothed[:, None]}


def oracle(fx, variant: str) -> dict[str, np.ndarray]:
    a = fx.float64()
    p0 = {k: a[f"params/{k}"] for k in PARAMS}
    x, beta = a["x"], float(a["beta"])
    z_e0 = encode(p0, x)
    k0, _ = nearest(z_e0, p0["codebook"])
    z_q0 = p0["codebook"][k0]  # stopped values: computed once at the base point
    straight = variant != "no_straight_through"

    def recon(p):
        z = encode(p, x) + (z_q0 - z_e0) if straight else p["codebook"][k0]
        return np.mean((z @ p["decoder/kernel"] + p["decoder/bias"] - x) ** 2)

    terms = {
        "recon": recon,
        "codebook": lambda p: np.mean((z_e0 - p["codebook"][k0]) ** 2),
        "commit": lambda p: np.mean((encode(p, x) - z_q0) ** 2),
    }
    weight = {"recon": 1.0, "codebook": 1.0, "commit": beta}
    out: dict[str, np.ndarray] = {"codes": k0, "quantized": z_q0}
    total = {k: np.zeros_like(v) for k, v in p0.items()}
    for name in TERMS[variant]:
        out[f"loss/{name}"] = np.array(terms[name](p0))
        grads = fd_grad(terms[name], p0)
        out.update({f"grads/{name}/{k}": g for k, g in grads.items()})
        total = {k: total[k] + weight[name] * grads[k] for k in total}
    stepped = sgd(p0, total, float(a["lr"]))
    if variant == "ema_codebook":
        ema = ema_update(a, z_e0, k0)
        stepped["codebook"] = ema.pop("codebook")
        out.update(ema)
    out.update({f"params/{k}": v for k, v in stepped.items()})
    for q in ROUNDINGS:
        y = quantize_np(q, a["u"])
        out.update({f"st/{q}/value": y, f"st/{q}/grad": y - a["t"], f"st/{q}/second": np.ones_like(y)})
    return out


def _pattern(variant: str) -> tuple[tuple[str, str], ...]:
    recon_encoder = "zero" if variant == "no_straight_through" else "nonzero"
    rules = [
        ("grads/recon/encoder/*", recon_encoder),  # through the straight-through estimator only
        ("grads/recon/codebook", "nonzero" if variant == "no_straight_through" else "zero"),
        ("grads/recon/decoder/*", "nonzero"),
        ("grads/commit/encoder/*", "nonzero"),  # the commitment term trains the encoder alone
        ("grads/commit/codebook", "zero"),
        ("grads/commit/decoder/*", "zero"),
        ("st/*/grad", "nonzero"),
        ("st/*/second", "nonzero"),
    ]
    if variant != "ema_codebook":  # the codebook term trains the codebook alone
        rules += [("grads/codebook/encoder/*", "zero"), ("grads/codebook/codebook", "nonzero")]
        rules += [("grads/codebook/decoder/*", "zero")]
    else:
        rules += [("ema/*", "nonzero")]
    return tuple(rules)


VARIANTS = ("codebook_loss", "ema_codebook", "no_straight_through")

SPEC = Scenario(
    name="straight_through",
    title="Straight-through estimators: the VQ-VAE quantizer (codebook, commitment, EMA), round and sign",
    family="advanced",
    order=1,
    claims=(),
    source="van den Oord et al. 2017, arXiv:1711.00937 §3.2 and App. A.1; DeepMind Sonnet, sonnet/src/nets/vqvae.py",
    lesson=(
        "z_e + sg(z_q − z_e) sends the decoder's gradient to the encoder and none to the codebook; "
        "‖sg(z_e) − e‖² trains only the codebook and β‖z_e − sg(e)‖² only the encoder. With the EMA "
        "codebook no gradient reaches it: it is a parameter write. Feeding z_q itself (no straight-through) "
        "leaves the encoder only the commitment gradient. Through the estimator both frameworks give the "
        "identity's derivatives: first 1, second 0 (the loss's own curvature stays)."
    ),
    variants=VARIANTS,
    schema=SCHEMA,
    build=build,
    oracle=oracle,
    pattern={v: _pattern(v) for v in VARIANTS},
    porting=Porting(
        torch=(
            "z = z_e + (z_q - z_e).detach(); codebook loss F.mse_loss(z_q, z_e.detach()); commitment "
            "F.mse_loss(z_e, z_q.detach()); EMA: buffers lerp_ and codebook.copy_ under torch.no_grad()"
        ),
        jax=(
            "z = z_e + jax.lax.stop_gradient(z_q - z_e); the two losses with stop_gradient on the other side; "
            "EMA: optax.incremental_update on nnx.Variable statistics, written with nnx after the gradient"
        ),
        trap=(
            "Writing `z_q = z_e + (z_q - z_e)` without the stop is the value z_q with the encoder's gradient "
            "cancelled exactly (1 − 1 = 0): no error, an encoder that learns only from the commitment loss. "
            "Second order: the stopped difference is a constant in both frameworks, so torch's double "
            "backward (create_graph=True) and nested jax.grad give the identity's Hessian, never round's 0."
        ),
    ),
)
