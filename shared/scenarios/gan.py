"""gan: one discriminator step and one generator step of a tiny GAN, generated batch stopped or not.

Shapes: B samples, Z noise, X data, H hidden units, O = 1 logit. G(z) = l2(tanh(l1(z))),
D(x) = l2(tanh(l1(x))) (a logit), BCE with logits, Adam(betas 0.5, 0.999) per network.

  discriminator step: L_D = bce(D(real), 1) + bce(D(stop(G(z))), 0); Adam on D only.
  generator step:     L_G = bce(D(G(z)), 1) (non-saturating, -log σ(D(G(z)))) with the
                      updated D; the gradient passes through D, Adam on G only.
Variants: `fake_stopped` (the generated batch is data for the D step: G's gradient of
L_D is exactly zero) and `fake_not_stopped` (the bug: the D step also writes generator
gradients). Everything else is identical in both variants: D's gradient does not
depend on the stop, and the G step starts from fresh gradients.
Outputs per step: loss, grads of every parameter, params after the step and
moved = after - before (exactly zero for the network the step does not update).
"""

from __future__ import annotations

import numpy as np

from ..core.oracle import adamw, fd_grad
from ..core.records import Porting, Scenario
from ..core.schema import Field

PARAMS = {
    "gen/l1/kernel": ("Z", "H"),
    "gen/l1/bias": ("H",),
    "gen/l2/kernel": ("H", "X"),
    "gen/l2/bias": ("X",),
    "disc/l1/kernel": ("X", "H"),
    "disc/l1/bias": ("H",),
    "disc/l2/kernel": ("H", "O"),
    "disc/l2/bias": ("O",),
}

SCHEMA = {
    "real": Field(("B", "X"), doc="a batch of real data"),
    "z": Field(("B", "Z"), doc="generator noise"),
    **{f"params/{k}": Field(shape, doc="initial parameter, canonical layout") for k, shape in PARAMS.items()},
    "lr": Field((), low=0.0, low_open=True, doc="Adam learning rate (both networks)"),
    "b1": Field((), low=0.0, high=1.0, high_open=True, doc="Adam β1 (0.5, Radford et al. 2015)"),
    "b2": Field((), low=0.0, high=1.0, high_open=True, doc="Adam β2"),
    "eps": Field((), low=0.0, low_open=True, doc="Adam ε (1e-8: the torch.optim.Adam and optax.adam default)"),
}


def build(rng: np.random.Generator, case: str) -> dict[str, np.ndarray]:
    sizes = {
        **dict(zip("BZXH", (int(v) for v in rng.integers(2, 6, size=4)), strict=True)),
        "O": 1,
    }  # small, from the seed
    out = {"real": rng.normal(loc=1.0, size=(sizes["B"], sizes["X"])), "z": rng.normal(size=(sizes["B"], sizes["Z"]))}
    for key, shape in PARAMS.items():
        out[f"params/{key}"] = 0.7 * rng.normal(size=tuple(sizes[d] for d in shape))
    out.update(lr=np.array(2e-4), b1=np.array(0.5), b2=np.array(0.999), eps=np.array(1e-8))
    return out


def mlp(p: dict[str, np.ndarray], net: str, x: np.ndarray) -> np.ndarray:
    h = np.tanh(x @ p[f"{net}/l1/kernel"] + p[f"{net}/l1/bias"])
    return h @ p[f"{net}/l2/kernel"] + p[f"{net}/l2/bias"]


def bce_with_logits(logits: np.ndarray, label: float) -> float:
    """mean(softplus(l) - label·l), the stable form of -[y log σ(l) + (1 - y) log(1 - σ(l))]."""
    return float(np.mean(np.logaddexp(0.0, logits) - label * logits))


def oracle(fx, variant: str) -> dict[str, np.ndarray]:
    a = fx.float64()
    real, z = a["real"], a["z"]
    p0 = {k: a[f"params/{k}"] for k in PARAMS}
    hyper = {"lr": float(a["lr"]), "b1": float(a["b1"]), "b2": float(a["b2"]), "eps": float(a["eps"])}
    fake0 = mlp(p0, "gen", z)

    def d_loss(p: dict[str, np.ndarray]) -> float:
        fake = fake0 if variant == "fake_stopped" else mlp(p, "gen", z)  # stopped: computed once, held fixed
        return bce_with_logits(mlp(p, "disc", real), 1.0) + bce_with_logits(mlp(p, "disc", fake), 0.0)

    def g_loss(p: dict[str, np.ndarray]) -> float:
        return bce_with_logits(mlp(p, "disc", mlp(p, "gen", z)), 1.0)

    out: dict[str, np.ndarray] = {}
    before = p0
    for step, loss, net in (("d_step", d_loss, "disc"), ("g_step", g_loss, "gen")):
        grads = fd_grad(loss, before)
        trainable = lambda k, net=net: k.startswith(f"{net}/")  # each step's optimizer holds one network
        after = adamw(lambda _, g=grads: g, before, 1, weight_decay=0.0, trainable=trainable, **hyper)
        out[f"{step}/loss"] = np.array(loss(before))
        out.update({f"{step}/grads/{k}": g for k, g in grads.items()})
        out.update({f"{step}/params/{k}": v for k, v in after.items()})
        out.update({f"{step}/moved/{k}": after[k] - before[k] for k in PARAMS})
        before = after
    return out


def _pattern(d_step_gen: str) -> tuple[tuple[str, str], ...]:
    return (
        ("d_step/grads/disc/*", "nonzero"),
        ("d_step/grads/gen/*", d_step_gen),
        ("d_step/moved/disc/*", "nonzero"),
        ("d_step/moved/gen/*", "zero"),
        ("g_step/grads/gen/*", "nonzero"),
        ("g_step/grads/disc/*", "nonzero"),
        ("g_step/moved/gen/*", "nonzero"),
        ("g_step/moved/disc/*", "zero"),
    )


SPEC = Scenario(
    name="gan",
    title="GAN: the generated batch stopped in the discriminator step",
    family="scenarios",
    order=9,
    step_loss=lambda o, a: o["d_step/loss"] + o["g_step/loss"],
    step_updates=True,
    claims=(),
    source="Goodfellow et al. 2014, arXiv:1406.2661 §3; DCGAN training loop (Radford et al. 2015, arXiv:1511.06434)",
    lesson=(
        "The discriminator step treats the generated batch as data: with the stop the generator gets "
        "exactly zero gradient from it, without it the D step also computes (torch: writes into .grad) "
        "generator gradients. The generator step's gradient passes through the discriminator, which "
        "only the generator's optimizer steps: the discriminator stays bit-identical."
    ),
    variants=("fake_stopped", "fake_not_stopped"),
    schema=SCHEMA,
    build=build,
    oracle=oracle,
    pattern={"fake_stopped": _pattern("zero"), "fake_not_stopped": _pattern("nonzero")},
    porting=Porting(
        torch=(
            "d_loss uses netD(fake.detach()); d_opt = Adam(netD.parameters(), betas=(0.5, 0.999)); "
            "g_loss = bce(netD(fake), 1); g_opt = Adam(netG.parameters(), ...) steps G only"
        ),
        jax=(
            "fake = jax.lax.stop_gradient(G(z)) in d_loss; nnx.value_and_grad(..., argnums=(gen, disc)); "
            "nnx.Optimizer(model.disc, optax.adam(lr, b1=0.5, b2=0.999)) and one for model.gen"
        ),
        trap=(
            "Without the detach, d_loss.backward() writes generator gradients into .grad and frees G's "
            "graph (reusing `fake` for the G step then raises); if G's .grad is not zeroed before the G "
            "step, that leaked gradient (it pushes D(G(z)) down, against G) joins G's update. JAX only "
            "computes what jax.grad's argnums ask for, so the leak appears only when a port "
            "differentiates and updates the whole model with one optimizer."
        ),
    ),
)
