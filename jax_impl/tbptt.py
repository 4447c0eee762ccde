"""tbptt: truncated backpropagation through time, Elman tanh cell and GRU as plain functions.

Gradient flow: loss_t -> h_t -> h_{t-1} -> ... back to the start of t's window; the
carry is stopped at t = 0, k, 2k, ...: in a jax.lax.scan over the steps where a window
starts (`unroll`, one compile for every k), or at the start of each window's body in a
scan over windows (`unroll_windows`, k must divide T). k = T is full BPTT.
Port note: torch's GRU keeps b_hn inside the reset gate, n = tanh(W_in x + b_in + r * (W_hn h
+ b_hn)). nnx.GRUCell (flax 0.12) has dense_i [I, 3H] with a bias and dense_h [H, 3H] without
one: b_ir + b_hr and b_iz + b_hz merge into dense_i's bias, b_hn has no slot (P08). So the
cell is a plain function of torch's canonical leaves: ih/kernel = weight_ih.T [I, 3H], ih/bias
= bias_ih, hh/kernel = weight_hh.T [H, 3H], hh/bias = bias_hh, gate columns r | z | n.
The Elman cell keeps torch's two biases too (nnx.SimpleCell has one).
Shapes: T steps, B sequences, I inputs, H hidden units, G = 3H GRU gates, O outputs.
Reference: Williams & Peng 1990, doi:10.1162/neco.1990.2.4.490; Cho et al. 2014, arXiv:1406.1078.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

from ..shared.core.checks import check_same_shape, check_truncation, check_x64, truncation_length
from ._common import StepCall, field, flat, nested, numpy, scenario_run, scenario_step, step_of

__all__ = [
    "Recurrent",
    "build_model",
    "step_loss",
    "unroll",
    "unroll_windows",
    "train_windows",
    "gradients",
    "step_calls",
    "make_step",
    "run",
]

CELLS = ("elman", "gru")  # the cells this module implements (the record lists the same)


@dataclasses.dataclass(frozen=True)
class Recurrent:
    """h_t = cell(x_t [B, I], h_{t-1} [B, H]); y_t [B, O] = readout(h_t). cell: "elman" (tanh) or "gru".

    Stateless: `__call__(params, x, h)` is one step; params is the canonical pytree
    {"cell": {"ih": {"kernel", "bias"}, "hh": {...}}, "readout": {"kernel", "bias"}}.
    Frozen, compared by its cell: a static argument of jax.jit (one compile per cell).
    """

    cell: str

    def __post_init__(self) -> None:
        if self.cell not in CELLS:
            raise ValueError(f"Recurrent: cell expected one of {CELLS}, got {self.cell!r}")

    def __call__(self, params: dict, x: jax.Array, h: jax.Array) -> tuple[jax.Array, jax.Array]:
        c = params["cell"]
        gi = x @ c["ih"]["kernel"] + c["ih"]["bias"]  # [B, H] or [B, 3H]
        gh = h @ c["hh"]["kernel"] + c["hh"]["bias"]
        if self.cell == "elman":
            h = jnp.tanh(gi + gh)
        else:
            i_r, i_z, i_n = jnp.split(gi, 3, axis=-1)
            h_r, h_z, h_n = jnp.split(gh, 3, axis=-1)  # h_n = W_hn h + b_hn
            r, z = jax.nn.sigmoid(i_r + h_r), jax.nn.sigmoid(i_z + h_z)
            n = jnp.tanh(i_n + r * h_n)
            h = (1.0 - z) * n + z * h
        return h, h @ params["readout"]["kernel"] + params["readout"]["bias"]


def build_model(fx, cell: str) -> tuple[Recurrent, dict]:
    """(Recurrent, canonical parameter pytree) of one cell from the fixture.

    Raises ValueError for a float64 fixture outside jax.enable_x64 (JAX would build float32 arrays).
    """
    check_x64("build_model", fx.dtype, jax.config.jax_enable_x64)
    return Recurrent(cell), nested(fx.under(f"params/{cell}"))


def step_loss(y: jax.Array, target: jax.Array) -> jax.Array:
    """0.5 * mean((y - target)^2) of one step, y and target [B, O]. Raises ValueError on a shape mismatch."""
    check_same_shape("step_loss", y=y.shape, target=target.shape)
    return 0.5 * jnp.mean((y - target) ** 2)


def unroll(model: Recurrent, params: dict, x: jax.Array, h: jax.Array, k: int) -> jax.Array:
    """Outputs y [T, B, O] over x [T, B, I] from h [B, H], the carry stopped every k steps.

    One scan over the steps; `starts` [T] marks the window starts t % k == 0. The mask
    is data, not structure, so one compiled scan serves every k (see unroll_windows).
    Raises ValueError unless k is an int in [1, T] (k = 0 once ran as k = 1; a traced k is run's, checked there).
    """
    check_truncation("unroll", k, x.shape[0], divides=False)
    starts = jnp.arange(x.shape[0]) % k == 0

    def step(h, inputs):
        x_t, start = inputs
        h = jnp.where(start, jax.lax.stop_gradient(h), h)  # GRAD-FLOW: a new window starts from a constant carry
        return model(params, x_t, h)

    return jax.lax.scan(step, h, (x, starts))[1]


def unroll_windows(model: Recurrent, params: dict, x: jax.Array, h: jax.Array, k: int) -> jax.Array:
    """As `unroll`, structured as a scan over windows of k steps, each starting from a stopped carry.

    Raises ValueError unless k is an int in [1, T] dividing T (a scan needs equal windows).
    Compiles once per k.
    """
    t_steps = x.shape[0]
    k = check_truncation("unroll_windows", k, t_steps)

    def run_window(h, xs):  # xs [k, B, I]
        h = jax.lax.stop_gradient(h)  # GRAD-FLOW: a new window starts from a constant carry
        return jax.lax.scan(lambda h, x_t: model(params, x_t, h), h, xs)

    _, ys = jax.lax.scan(run_window, h, x.reshape(t_steps // k, k, *x.shape[1:]))
    return ys.reshape(t_steps, *ys.shape[2:])


def train_windows(
    model: Recurrent, params: dict, x: jax.Array, h: jax.Array, targets: jax.Array, k: int
) -> tuple[jax.Array, dict]:
    """Truncated BPTT as a training loop runs it: a scan over windows, each with its own value_and_grad.

    x [T, B, I], h [B, H], targets [T, B, O]. Returns (summed loss [], gradient pytree like
    params). Under jit only one window's residuals are alive at a time: peak memory is flat
    in T for a fixed k, where one jax.grad over `unroll` keeps the residuals of all T steps
    whatever k is (stop_gradient cuts the gradient, not the memory).
    Raises ValueError unless k is an int in [1, T] dividing T (a scan needs equal windows) and
    targets have T steps, or on a targets shape mismatch (step_loss).
    """
    t_steps = x.shape[0]
    k = check_truncation("train_windows", k, t_steps, targets.shape[0])

    def window_loss(params, h, xs, ts):  # xs [k, B, I], ts [k, B, O]
        def step(h, inputs):
            h, y = model(params, inputs[0], h)
            return h, step_loss(y, inputs[1])

        h, losses = jax.lax.scan(step, h, (xs, ts))
        return losses.sum(), h

    def run_window(carry, inputs):
        h, total, grads = carry
        # only params are differentiated: the carry h is an argument of the window's gradient, not a parameter
        # GRAD-FLOW: a new window starts from a constant carry
        (loss, h), g = jax.value_and_grad(window_loss, has_aux=True)(params, h, *inputs)
        return (h, total + loss, jax.tree.map(jnp.add, grads, g)), None

    windows = (x.reshape(t_steps // k, k, *x.shape[1:]), targets.reshape(t_steps // k, k, *targets.shape[1:]))
    start = (h, jnp.zeros((), x.dtype), jax.tree.map(jnp.zeros_like, params))
    (_, total, grads), _ = jax.lax.scan(run_window, start, windows)
    return total, grads


@functools.partial(jax.jit, static_argnames="model")
def gradients(model: Recurrent, params: dict, x: jax.Array, h: jax.Array, targets: jax.Array, k: int):
    """One forward, then the gradients run reports: (summed loss [], gradient pytree like params,
    d loss / dx [T, B, I], d loss_{T-1} / dx [T, B, I] of the last step's loss alone).

    x [T, B, I], h [B, H], targets [T, B, O]; the carry stopped every k steps (unroll).
    """
    losses, vjp = jax.vjp(lambda p, x: jax.vmap(step_loss)(unroll(model, p, x, h, k), targets), params, x)  # [T]
    _, grad_last = vjp(jnp.zeros_like(losses).at[-1].set(1.0))  # the last step's loss alone
    # the summed loss: torch's backward per window adds up to this one backward (the carry is stopped between)
    g_params, g_x = vjp(jnp.ones_like(losses))
    return losses.sum(), g_params, g_x, grad_last


def step_calls(fx, variant: str) -> list[StepCall]:
    """make_step's calls: run's gradients of each cell on the fixture (no update; the summed loss first)."""
    k = truncation_length(variant, fx.dims["T"])
    models = [build_model(fx, cell) for cell in CELLS]
    x, targets, h0 = field(fx, "x"), field(fx, "targets"), field(fx, "h0")
    return [StepCall(gradients, (), (model, params, x, h0, targets, k)) for model, params in models]


@scenario_step("tbptt")
def make_step(fx, variant: str) -> Callable[[], jax.Array]:
    """Both cells, as run: per-window backward and d(last loss)/dx; returns the loss summed over steps and cells."""
    return step_of(step_calls(fx, variant))


@scenario_run("tbptt")
def run(fx, variant: str) -> dict[str, np.ndarray]:
    """Outputs per cell: loss [], grads/<param>, grads/x [T, B, I], grads_last/x/tNN [B, I] (last step's loss)."""
    out = {}
    t_steps = fx.dims["T"]
    k = truncation_length(variant, t_steps)
    for cell in CELLS:
        model, params = build_model(fx, cell)
        x, targets = field(fx, "x"), field(fx, "targets")
        loss, grads, g_x, grad_last = gradients(model, params, x, field(fx, "h0"), targets, k)
        out[f"{cell}/loss"] = numpy(loss)
        out.update({f"{cell}/grads/{key}": g for key, g in flat(grads).items()})
        out[f"{cell}/grads/x"] = numpy(g_x)
        grad_last = numpy(grad_last)
        out.update({f"{cell}/grads_last/x/t{t:02d}": grad_last[t] for t in range(t_steps)})
    return out
