"""p18_default_init: the same nn.Linear / nnx.Linear starts from different weights unless the port copies them.

Shapes: B samples, D inputs, H hidden units, O outputs; pred = l2(tanh(l1(x))), MSE, `steps` SGD steps.
torch nn.Linear(fan_in, fan_out): weight kaiming_uniform_(a=√5) = U(−1/√fan_in, 1/√fan_in) (gain
sqrt(2/(1 + a²)) = sqrt(1/3) times sqrt(3/fan_in)), bias U(−1/√fan_in, 1/√fan_in): std 1/√(3·fan_in).
nnx.Linear: kernel lecun_normal = truncated normal on [−2, 2] scaled to std 1/√fan_in, bias 0.
Initialisers are random; here each is written as a map of fixture noise (u ~ U(−1, 1), z ~ the
standard normal truncated to [−2, 2]) so both frameworks and the oracle draw the same numbers:
  torch (every variant) and ported JAX:  W = u_W / √fan_in, b = u_b / √fan_in
  naive JAX (NNX defaults):              W = z_W / √fan_in / 0.8796..., b = 0
tests/test_pitfalls_p18_p19.py pins both maps to the libraries' own initialisers and measures the
distributions: the NNX kernel std is √3 ≈ 1.73× torch's, its bias is 0 where torch's has std 1/√(3·fan_in).
"""

from __future__ import annotations

import numpy as np

from ..core.oracle import fd_grad
from ..core.records import Porting, Scenario
from ..core.schema import Field

LAYERS = {"l1": ("D", "H"), "l2": ("H", "O")}
PARAMS = {**{f"{n}/kernel": s for n, s in LAYERS.items()}, **{f"{n}/bias": s[1:] for n, s in LAYERS.items()}}
TRUNCNORM_STD = 0.87962566103423978  # std of the standard normal truncated to (−2, 2), as jax.nn.initializers has it

SCHEMA = {
    "x": Field(("B", "D"), doc="inputs"),
    "y": Field(("B", "O"), doc="regression targets"),
    **{
        f"uniform/{k}": Field(s, low=-1.0, high=1.0, doc="U(−1, 1) noise of torch's uniform initialisers")
        for k, s in PARAMS.items()
    },
    **{
        f"normal/{n}/kernel": Field(s, low=-2.0, high=2.0, doc="truncated standard normal noise of lecun_normal")
        for n, s in LAYERS.items()
    },
    "lr": Field((), low=0.0, low_open=True, doc="SGD learning rate"),
    "steps": Field((), kind="int", low=1, doc="SGD steps"),
}


def init(a: dict[str, np.ndarray], form: str) -> dict[str, np.ndarray]:
    """Initial parameters (canonical layout) of the "torch" or the "nnx" default initialisers, from the fixture's noise."""
    out = {}
    for name in LAYERS:
        fan_in = a[f"uniform/{name}/kernel"].shape[0]
        if form == "torch":
            out[f"{name}/kernel"] = a[f"uniform/{name}/kernel"] / np.sqrt(fan_in)
            out[f"{name}/bias"] = a[f"uniform/{name}/bias"] / np.sqrt(fan_in)
        else:
            out[f"{name}/kernel"] = a[f"normal/{name}/kernel"] / np.sqrt(fan_in) / TRUNCNORM_STD
            out[f"{name}/bias"] = np.zeros_like(a[f"uniform/{name}/bias"])
    return out


def mse(p: dict[str, np.ndarray], x: np.ndarray, y: np.ndarray) -> float:
    h = np.tanh(x @ p["l1/kernel"] + p["l1/bias"])
    return float(np.mean((h @ p["l2/kernel"] + p["l2/bias"] - y) ** 2))


def build(rng: np.random.Generator, case: str) -> dict[str, np.ndarray]:
    sizes = {"B": int(rng.integers(4, 8)), "D": int(rng.integers(2, 5)), "H": int(rng.integers(3, 6)), "O": 1}
    out = {"x": rng.normal(size=(sizes["B"], sizes["D"])), "y": rng.normal(size=(sizes["B"], sizes["O"]))}
    for key, shape in PARAMS.items():
        out[f"uniform/{key}"] = rng.uniform(-1.0, 1.0, size=tuple(sizes[d] for d in shape))
    for name, shape in LAYERS.items():
        z = rng.normal(size=tuple(sizes[d] for d in shape))
        while np.any(np.abs(z) >= 2.0):  # truncated to (−2, 2) by redrawing, as jax.random.truncated_normal samples
            z = np.where(np.abs(z) >= 2.0, rng.normal(size=z.shape), z)
        out[f"normal/{name}/kernel"] = z
    out.update(lr=np.array(0.2), steps=np.array(10))
    return out


def _train(fx, form: str) -> dict[str, np.ndarray]:
    a = fx.float64()
    p = init(a, form)
    out = {f"init/{k}": v for k, v in p.items()}
    losses = []
    for _ in range(int(a["steps"])):
        losses.append(mse(p, a["x"], a["y"]))
        g = fd_grad(lambda q: mse(q, a["x"], a["y"]), p)
        p = {k: p[k] - a["lr"] * g[k] for k in p}
    out["losses"] = np.array(losses)
    out.update({f"params/{k}": v for k, v in p.items()})
    return out


def oracle(fx, variant: str) -> dict[str, np.ndarray]:
    return _train(fx, "torch")


def naive_oracle(fx, variant: str) -> dict[str, np.ndarray]:
    """What the naive port computes: NNX's default initialisers (lecun_normal kernels, zero biases), then the same SGD."""
    return _train(fx, "nnx")


SPEC = Scenario(
    name="p18_default_init",
    title="default initialisation: torch kaiming_uniform(a=√5) + uniform bias vs NNX lecun_normal + zero bias",
    family="pitfalls",
    claims=(),
    source="P18",
    lesson=(
        "The same architecture initialises differently: torch's nn.Linear draws U(±1/√fan_in) weights and "
        "biases, nnx.Linear a truncated-normal kernel √3 times wider and zero biases. A port that does not "
        "copy the weights (or match the initialisers) trains differently from step 0, with no error."
    ),
    variants=("ported", "naive"),
    schema=SCHEMA,
    build=build,
    oracle=oracle,
    naive_oracle=naive_oracle,
    constants={"truncnorm_std": TRUNCNORM_STD},
    pattern={
        "ported": (("init/*", "nonzero"), ("losses", "nonzero"), ("params/*", "nonzero")),
        "naive": (("init/*/kernel", "nonzero"), ("losses", "nonzero"), ("params/*/kernel", "nonzero")),
    },
    diverges={"naive": ("init/*", "losses", "params/*")},
    porting=Porting(
        torch="`nn.Linear(fan_in, fan_out)`: `kaiming_uniform_(weight, a=math.sqrt(5))`, bias `U(±1/√fan_in)`",
        jax=(
            "copy the torch weights, or `nnx.Linear(..., kernel_init=nnx.initializers.variance_scaling(1/3, "
            "'fan_in', 'uniform'), bias_init=<U(±1/√fan_in)>)`"
        ),
        trap=(
            "nnx.Linear's defaults are `lecun_normal()` (std 1/√fan_in, √3× torch's) and a zero bias: the same "
            "architecture, other starting weights, another training curve, no error"
        ),
    ),
)
