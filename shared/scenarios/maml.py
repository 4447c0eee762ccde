"""maml: few-shot sinusoid regression, meta-gradient through n inner SGD steps (C13).

Shapes: T tasks, S support points, Q query points, D = 1 input, H hidden, O = 1
output. A 1 → H → 1 tanh MLP f_θ; each task adapts θ'_t by n plain SGD steps on
its support loss (θ ← θ - α ∇L_sup), the meta-loss is Σ_t L_query(θ'_t). Cases
`n1` and `n3` are the same fixed tasks and initial θ with `inner_steps` = 1 and 3: the
number of steps is data (a hyper-parameter), the stop is the variant, so each n
runs both variants and the two can be compared on one fixture. `random` draws the
tasks, θ and n in {1, 2, 3} from the fixture seed.

  second_order  meta-gradient d/dθ Σ_t L_q(θ'_t(θ)), through the inner gradients
                (oracle: finite differences of the whole inner-loop-plus-query map);
  first_order   FOMAML: every inner gradient is a constant, dθ'/dθ = I, so the
                meta-gradient is Σ_t ∇L_q(θ'_t) (oracle: finite differences with
                the inner gradients computed at the base point and held fixed).
The support targets get a gradient only through the inner gradients: exactly zero
in first_order (`data_grads/support_y`), which is the pattern's exact lesson.
"""

from __future__ import annotations

import numpy as np

from ..core.oracle import fd_grad
from ..core.records import Porting, Scenario
from ..core.schema import Field

PARAMS = {
    "l1/kernel": ("D", "H"),
    "l1/bias": ("H",),
    "l2/kernel": ("H", "O"),
    "l2/bias": ("O",),
}

MAX_INNER_STEPS = 10  # Finn et al. 2017 §5.1 evaluate up to 10 inner steps; the unrolled loop compiles in O(n)
# (each lesson's adapt() checks its steps against its own MAX_INNER_STEPS: tests/test_maml.py keeps them equal)

SCHEMA = {
    "support_x": Field(("T", "S", "D"), doc="support inputs, x in [-5, 5]"),
    "support_y": Field(("T", "S", "O"), doc="support targets A sin(x - φ)"),
    "query_x": Field(("T", "Q", "D"), doc="query inputs"),
    "query_y": Field(("T", "Q", "O"), doc="query targets"),
    **{f"params/{k}": Field(shape, doc="initial (meta) parameter θ, canonical layout") for k, shape in PARAMS.items()},
    "alpha": Field((), low=0.0, low_open=True, doc="inner-loop SGD step size α"),
    "inner_steps": Field((), kind="int", low=1, high=MAX_INNER_STEPS, doc="inner-loop SGD steps n, in [1, 10]"),
}

CASES = {"n1": 1, "n3": 3}
SEED = 1703  # the named cases are fixed: both draw the same tasks and θ (arXiv:1703.03400)


def build(rng: np.random.Generator, case: str) -> dict[str, np.ndarray]:
    """Sinusoid tasks (Finn et al. 2017 §5.1: A in [0.1, 5], φ in [0, π], x in [-5, 5]).

    The named cases `n1`, `n3` are fixed (the seed is ignored); `random` draws the tasks, θ and
    n in {1, 2, 3} from the seed.
    """
    if case == "random":
        steps = int(rng.integers(1, 4))
    else:
        rng, steps = np.random.Generator(np.random.PCG64(SEED)), CASES[case]
    sizes = {"T": 2, "S": 4, "Q": 4, "D": 1, "H": 8, "O": 1}
    amp = rng.uniform(0.1, 5.0, size=(sizes["T"], 1, 1))
    phase = rng.uniform(0.0, np.pi, size=(sizes["T"], 1, 1))
    sx = rng.uniform(-5.0, 5.0, size=(sizes["T"], sizes["S"], 1))
    qx = rng.uniform(-5.0, 5.0, size=(sizes["T"], sizes["Q"], 1))
    out = {"support_x": sx, "support_y": amp * np.sin(sx - phase), "query_x": qx, "query_y": amp * np.sin(qx - phase)}
    for key, shape in PARAMS.items():
        out[f"params/{key}"] = 0.7 * rng.normal(size=tuple(sizes[d] for d in shape))
    out["alpha"] = np.array(0.01)
    out["inner_steps"] = np.array(steps)
    return out


def mlp(p: dict[str, np.ndarray], x: np.ndarray) -> np.ndarray:
    """f_θ(x) [N, O] = tanh(x W1 + b1) W2 + b2."""
    return np.tanh(x @ p["l1/kernel"] + p["l1/bias"]) @ p["l2/kernel"] + p["l2/bias"]


def mse(p: dict[str, np.ndarray], x: np.ndarray, y: np.ndarray) -> float:
    return float(np.mean((mlp(p, x) - y) ** 2))


def mse_grad(p: dict[str, np.ndarray], x: np.ndarray, y: np.ndarray) -> dict[str, np.ndarray]:
    """Closed-form backprop of mean((f_θ(x) - y)²) [exact: the inner gradient of the oracle]."""
    h = np.tanh(x @ p["l1/kernel"] + p["l1/bias"])  # [N, H]
    dout = 2.0 * (h @ p["l2/kernel"] + p["l2/bias"] - y) / y.size  # [N, O]
    dz = (dout @ p["l2/kernel"].T) * (1.0 - h**2)  # [N, H]
    return {"l1/kernel": x.T @ dz, "l1/bias": dz.sum(0), "l2/kernel": h.T @ dout, "l2/bias": dout.sum(0)}


def adapt(p, x, y, alpha, steps, held=None):
    """n SGD steps; `held` = the inner gradients as constants (first order), else recomputed at each θ'."""
    grads_used = []
    for k in range(steps):
        g = mse_grad(p, x, y) if held is None else held[k]
        grads_used.append(g)
        p = {name: p[name] - alpha * g[name] for name in p}
    return p, grads_used


def oracle(fx, variant: str) -> dict[str, np.ndarray]:
    a = fx.float64()
    theta = {k: a[f"params/{k}"] for k in PARAMS}
    alpha, steps, n_tasks = float(a["alpha"]), int(a["inner_steps"]), fx.dims["T"]
    adapted, held = [], []
    for t in range(n_tasks):
        p_t, g_t = adapt(theta, a["support_x"][t], a["support_y"][t], alpha, steps)
        adapted.append(p_t)
        held.append(g_t)  # base-point inner gradients: the first-order constants
    stopped = variant == "first_order"

    def meta_loss(q: dict[str, np.ndarray]) -> float:
        total = 0.0
        for t in range(n_tasks):
            sy = q["support_y"][t]
            p_t, _ = adapt({k: q[k] for k in PARAMS}, a["support_x"][t], sy, alpha, steps, held[t] if stopped else None)
            total += mse(p_t, a["query_x"][t], a["query_y"][t])
        return total

    base = {**theta, "support_y": a["support_y"]}
    # h = 3e-4, not the default 1e-3: n = 3 steps with A up to 5 make the fifth derivative large enough
    # for the O(h⁴) truncation to reach 1e-7 relative (seed 7); at 3e-4 it is 1 % of the float64 bound
    meta = fd_grad(meta_loss, base, h=3e-4)
    out = {f"adapted/{k}": np.stack([p[k] for p in adapted]) for k in PARAMS}
    out["query_loss"] = np.array([mse(adapted[t], a["query_x"][t], a["query_y"][t]) for t in range(n_tasks)])
    qg = [mse_grad(adapted[t], a["query_x"][t], a["query_y"][t]) for t in range(n_tasks)]
    out.update({f"query_grads/{k}": np.stack([g[k] for g in qg]) for k in PARAMS})
    out.update({f"meta_grads/{k}": meta[k] for k in PARAMS})
    out["data_grads/support_y"] = meta["support_y"]
    return out


_COMMON = (
    ("adapted/*", "nonzero"),
    ("query_loss", "nonzero"),
    ("query_grads/*", "nonzero"),
    ("meta_grads/*", "nonzero"),
)

SPEC = Scenario(
    name="maml",
    title="MAML: second-order meta-gradient vs first-order (FOMAML)",
    family="scenarios",
    order=7,
    step_loss=lambda o, a: o["query_loss"].sum(),  # summed over tasks
    claims=("C13",),
    source="A1 §6.2",
    lesson=(
        "Second-order MAML differentiates through the inner gradients (torch: create_graph=True; JAX: "
        "jax.grad of a function that calls jax.grad). First-order MAML holds them constant: its "
        "meta-gradient is the sum of the query gradients at the adapted parameters, without the Hessian "
        "term. No detach is needed for either; forgetting create_graph silently gives first order."
    ),
    variants=("second_order", "first_order"),
    cases=(*CASES, "random"),
    schema=SCHEMA,
    build=build,
    oracle=oracle,
    pattern={
        "second_order": (*_COMMON, ("data_grads/support_y", "nonzero")),
        "first_order": (*_COMMON, ("data_grads/support_y", "zero")),
    },
    porting=Porting(
        torch=(
            "g = torch.autograd.grad(L_sup(θ), θ, create_graph=True); θ' = θ - α g; L_q(θ').backward(). "
            "FOMAML: create_graph=False (g carries no graph: the same as g.detach()). Reptile: under "
            "torch.no_grad(), θ += ε (θ'.detach() - θ). torch.func: grad(lambda θ: L_q(adapt(θ)))(θ) composes "
            "like JAX."
        ),
        jax=(
            "jax.grad(lambda θ: L_q(adapt(θ)))(θ) where adapt calls jax.grad(L_sup): nested jax.grad is "
            "second order by default. FOMAML: g = jax.lax.stop_gradient(g) inside adapt. Reptile: "
            "θ + ε (adapt(θ) - θ), a plain function of values, no jax.grad around it."
        ),
        trap=(
            "create_graph / retain_graph have no JAX counterpart: jax.grad returns an ordinary traceable "
            "function, so the inner gradient is differentiable unless stopped, and there is no tape to keep "
            "or free. In torch the default (create_graph=False) silently drops the Hessian term: the "
            "'second-order' code is first order, with no error. Detaching the inner gradient does not "
            "approximate the second-order term (A1 §6.2), it drops it: that is FOMAML."
        ),
    ),
)
