"""gradient_reversal: custom backward passes: the gradient reversal layer (DANN) and a clip-gradient op.

Shapes: B samples, D inputs, H features, C classes, O = 1 domain logit.
  h = tanh(x W_f + b_f)                          [B, H]  the feature extractor
  label logits = h W_y + b_y                     [B, C]  the label predictor
  domain logit = R(h) W_d + b_d                  [B, O]  the domain classifier
  label loss  = mean over source rows (domain 0) of cross-entropy(label logits, label)
  domain loss = mean of binary cross-entropy(domain logit, domain)
R is the identity in the forward pass; its backward decides what the features receive:
  reversal     R = GRL_λ: the cotangent g becomes −λ·g (Ganin & Lempitsky 2015)
  no_reversal  R = identity (plain multi-task: the features help the domain classifier)
  clipped      R = clip_gradient(lo, hi, ·): g becomes clip(g, lo, hi) elementwise (JAX guide)
Outputs: the gradient of each loss on every parameter; feature_grads/head = ∂L_d/∂R(h) (what the
domain head sends) and feature_grads/received = ∂L_d/∂h (what the features get); the gradient on
the hyper-parameters λ, lo, hi, which the custom backward gives none (zero cotangents).
The oracle holds the received cotangent constant: the feature gradient is the finite-difference
gradient of ⟨R_bwd(G₀), h(θ)⟩ with G₀ = ∂L_d/∂h at the base point.
"""

from __future__ import annotations

import numpy as np

from ..core.oracle import fd_grad
from ..core.records import Porting, Scenario
from ..core.schema import Field

PARAMS = {
    "feature/kernel": ("D", "H"),
    "feature/bias": ("H",),
    "label/kernel": ("H", "C"),
    "label/bias": ("C",),
    "domain/kernel": ("H", "O"),
    "domain/bias": ("O",),
}
HYPER = {"reversal": ("lam",), "no_reversal": (), "clipped": ("clip_lo", "clip_hi")}

SCHEMA = {
    "x": Field(("B", "D"), doc="inputs of both domains"),
    "labels": Field(("B",), kind="int", low=0, high="C", doc="class labels in [0, C) (read on source rows only)"),
    "domains": Field(("B",), choices=(0.0, 1.0), doc="0.0 for a source row, 1.0 for a target row"),
    **{f"params/{k}": Field(shape, doc="parameter, canonical layout") for k, shape in PARAMS.items()},
    "lam": Field((), low=0.0, doc="reversal weight λ >= 0 (DANN's schedule value)"),
    "clip_lo": Field((), doc="lower bound of the clipped cotangent"),
    "clip_hi": Field((), doc="upper bound of the clipped cotangent (> clip_lo)"),
}


def _bounds_ordered(a, dims) -> str | None:
    if not a["clip_lo"] < a["clip_hi"]:
        return f"field 'clip_lo' expected < clip_hi = {a['clip_hi']}, got {a['clip_lo']}"
    return None


def features(p: dict[str, np.ndarray], x: np.ndarray) -> np.ndarray:
    return np.tanh(x @ p["feature/kernel"] + p["feature/bias"])


def label_loss(p: dict[str, np.ndarray], a: dict[str, np.ndarray]) -> float:
    logits = features(p, a["x"]) @ p["label/kernel"] + p["label/bias"]
    top = logits.max(1, keepdims=True)
    logp = logits - top - np.log(np.sum(np.exp(logits - top), 1, keepdims=True))
    source = a["domains"] == 0.0
    return float(-np.mean(logp[np.arange(len(logits)), a["labels"]][source]))


def domain_loss_of(h: np.ndarray, p: dict[str, np.ndarray], d: np.ndarray) -> float:
    logit = (h @ p["domain/kernel"] + p["domain/bias"])[:, 0]
    return float(np.mean(np.logaddexp(0.0, logit) - d * logit))


def backward_rule(g: np.ndarray, a: dict[str, np.ndarray], variant: str) -> np.ndarray:
    """What the custom backward hands the features for the cotangent g [B, H]."""
    if variant == "reversal":
        return -a["lam"] * g
    if variant == "clipped":
        return np.clip(g, a["clip_lo"], a["clip_hi"])
    return g


def build(rng: np.random.Generator, case: str) -> dict[str, np.ndarray]:
    sizes = {"B": int(rng.integers(5, 8)), "D": int(rng.integers(2, 5)), "H": int(rng.integers(2, 5)), "O": 1}
    sizes["C"] = int(rng.integers(2, 4))
    p = {k: rng.normal(size=tuple(sizes[d] for d in shape)) for k, shape in PARAMS.items()}
    domains = np.zeros(sizes["B"])
    domains[rng.permutation(sizes["B"])[: sizes["B"] // 2]] = 1.0  # both domains present, source rows first half
    a = {"x": rng.normal(size=(sizes["B"], sizes["D"])), "labels": rng.integers(0, sizes["C"], size=sizes["B"])}
    a.update(domains=domains, **{f"params/{k}": v for k, v in p.items()})
    # clip bounds inside the range of the head's cotangent, so that some entries are clipped and some are not
    g = _head_cotangent(p, a)
    a["clip_lo"] = np.array(np.quantile(g, 0.3))
    a["clip_hi"] = np.array(np.quantile(g, 0.7))
    a["lam"] = np.array(rng.uniform(0.2, 1.0))
    return a


def _head_cotangent(p: dict[str, np.ndarray], a: dict[str, np.ndarray]) -> np.ndarray:
    """G = ∂L_d/∂h [B, H] in closed form: (σ(logit) − d)/B · W_dᵀ."""
    h = features(p, a["x"])
    logit = (h @ p["domain/kernel"] + p["domain/bias"])[:, 0]
    return ((1.0 / (1.0 + np.exp(-logit)) - a["domains"]) / len(logit))[:, None] * p["domain/kernel"][:, 0]


def oracle(fx, variant: str) -> dict[str, np.ndarray]:
    a = fx.float64()
    p0 = {k: a[f"params/{k}"] for k in PARAMS}
    h0 = features(p0, a["x"])
    out: dict[str, np.ndarray] = {
        "loss/label": np.array(label_loss(p0, a)),
        "loss/domain": np.array(domain_loss_of(h0, p0, a["domains"])),
    }
    out.update({f"grads/label_loss/{k}": g for k, g in fd_grad(lambda p: label_loss(p, a), p0).items()})
    head = fd_grad(lambda q: domain_loss_of(q["h"], p0, a["domains"]), {"h": h0})["h"]
    received = backward_rule(head, a, variant)  # held constant: the custom backward's output at the base point
    head_params = [k for k in PARAMS if k.startswith("domain/")]
    feature_params = [k for k in PARAMS if k.startswith("feature/")]
    domain = fd_grad(lambda p: domain_loss_of(h0, p, a["domains"]), p0, wrt=head_params)
    domain.update(fd_grad(lambda p: float(np.sum(received * features(p, a["x"]))), p0, wrt=feature_params))
    domain.update({k: np.zeros_like(v) for k, v in p0.items() if k.startswith("label/")})
    out.update({f"grads/domain_loss/{k}": domain[k] for k in PARAMS})
    out.update({"feature_grads/head": head, "feature_grads/received": received})
    out.update({f"grads/hyper/{k}": np.zeros(()) for k in HYPER[variant]})
    return out


def _pattern(variant: str) -> tuple[tuple[str, str], ...]:
    rules = [
        ("grads/label_loss/feature/*", "nonzero"),
        ("grads/label_loss/label/*", "nonzero"),
        ("grads/label_loss/domain/*", "zero"),
        ("grads/domain_loss/feature/*", "nonzero"),  # reversed, plain or clipped: the features do receive it
        ("grads/domain_loss/domain/*", "nonzero"),
        ("grads/domain_loss/label/*", "zero"),
        ("feature_grads/*", "nonzero"),
    ]
    if HYPER[variant]:
        rules.append(("grads/hyper/*", "zero"))  # the custom backward returns no cotangent for them
    return tuple(rules)


VARIANTS = ("reversal", "no_reversal", "clipped")

SPEC = Scenario(
    name="gradient_reversal",
    title="Custom backward: the gradient reversal layer (DANN) and a clip-gradient op",
    family="advanced",
    order=2,
    claims=(),
    source=(
        "Ganin & Lempitsky 2015, arXiv:1409.7495 §3.2 (gradient reversal layer); JAX docs, Custom derivative "
        "rules, 'Gradient clipping' (clip_gradient with custom_vjp)"
    ),
    lesson=(
        "The reversal layer is the identity forward and −λ·g backward: the feature extractor receives "
        "exactly −λ times the domain gradient while the domain classifier's own gradient is unchanged; "
        "the label predictor never sees the domain loss. A custom backward gives the hyper-parameters "
        "no gradient (zero cotangents)."
    ),
    variants=VARIANTS,
    schema=SCHEMA,
    build=build,
    oracle=oracle,
    pattern={v: _pattern(v) for v in VARIANTS},
    checks=(_bounds_ordered,),
    constants={"hyper": HYPER},
    porting=Porting(
        torch=(
            "class F(torch.autograd.Function) with forward(x, lam), setup_context(ctx, inputs, output) and "
            "backward(ctx, g) -> (-lam * g, None): setup_context makes it work under torch.func.grad / vmap"
        ),
        jax=(
            "@jax.custom_vjp def f(x, lam); f.defvjp(fwd, bwd) with fwd -> (x, lam) and bwd(lam, g) -> "
            "(-lam * g, jnp.zeros_like(lam)); None is accepted for a zero cotangent"
        ),
        trap=(
            "custom_vjp's backward must return a tuple with one cotangent per primal input (a bare array "
            "or a short tuple raises at trace time), and a custom_vjp function cannot be forward-"
            "differentiated (jax.jvp / jacfwd raise); torch needs setup_context (not ctx in forward) for "
            "torch.func, and has no forward mode without a jvp staticmethod either."
        ),
    ),
)
