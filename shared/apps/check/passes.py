"""One pass of a check (one dtype), compared as it goes: the checker's runs of both sides.

The mixin `Passes` gives checker._Checker its float64 / float32 passes (precision.py the bfloat16 one):
copies of both models in the dtype, the torch weights mapped into the NNX layout (loaded: transfer), each
side's recorded run (every submodule's output, the loss, every gradient), then the K steps, each judged
(compare.Judge) before the next is asked for: one step of each side alive, a dtype's arrays gone before the
next starts (GPT-2 small in 13 GB). The float64 arrays of a difference are kept for the diagnosis.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping

import numpy as np

from . import budget, flow
from .compare import Judge, Pass, backward_rows
from .guards import _WIDTH, Guards, _cast
from .match import Plan, PortInputError, plan
from .noise import NOISE64, OWN_STEP, ROUNDING_BOUND, noise_entries

__all__ = ["Passes"]


def _each(next_of: Callable, steps: Iterator[dict], first: dict) -> Iterator[dict]:
    """`first`, then the rest of a step generator, each fetched by next_of (which names a ValueError as
    bad input); no step is held once the next is asked for."""
    yield first
    del first
    while True:
        try:
            step = next_of(steps)
        except StopIteration:
            return
        yield step
        del step


def _same(a, b) -> bool:
    return (
        b is not None
        and np.shape(a) == np.shape(b)
        and np.asarray(a).dtype == np.asarray(b).dtype
        and np.array_equal(a, b)
    )


def _sums(values: Mapping[str, np.ndarray], keys=None) -> dict[str, float]:
    """Each floating leaf's sum (of those in `keys`, where given): equal before and after a step that moved nothing."""
    return {k: float(np.sum(v, dtype=np.float64)) for k, v in values.items()
            if (keys is None or k in keys) and np.asarray(v).dtype.kind == "f"}  # fmt: skip


class Passes(Guards):
    """The passes of checker._Checker (its models, losses, optimizers, steps and backends)."""

    def _start(self, dtype: str) -> tuple:
        """Copies of both models in `dtype`, the NNX one holding torch's weights (transfer) or its own."""
        tm, jm = self._copies(dtype)
        if self.transfer:
            self._impl(self.J.load, jm, self.plan.to_jax(self.T.read(tm)), strict=False)
        return tm, jm

    def _pass(self, dtype: str, rows: list) -> Pass:
        """One dtype's check, compared as it goes: the weights and the recorded run, then each step as
        both sides yield it, so one step of each side is alive, not K (rows appended to `rows`). In
        float64 the arrays of a difference are kept for the diagnosis, and the steps from the first one on."""
        T, J, stage = self.T, self.J, self.stages
        with stage("copies and weights"):
            tm, jm = self._copies(dtype)
            tstruct, jstruct = self._impl(T.structure, tm), J.structure(jm)
            pl = plan(tstruct, jstruct, self.mapping)
            weights = T.read(tm)
        p = Pass(dtype)
        self.plan, self.structures = pl, (tstruct, jstruct)
        if not any(weights.values()):
            raise PortInputError("torch_model: expected parameters or buffers to compare, got none")
        for unit, leaves in weights.items():  # the reference must be a number: NaN would equal NaN
            for leaf, value in leaves.items():
                if not np.all(np.isfinite(value)):
                    name = next(u["leaves"][leaf]["source"] for u in tstruct["units"] if u["path"] == unit)
                    raise PortInputError(f"torch_model: expected finite weights, got NaN / inf in {name}")
        with stage("copies and weights"):
            p.expected, p.sources, p.dropped = self._native(jm, pl, weights)
        del weights
        left = sorted(set(jstruct["variables"]) - set(p.expected))
        if left:
            shapes = ", ".join(f"{k} {jstruct['variables'][k]['shape']}" for k in left)
            raise PortInputError(f"the models' parameter sets differ: NNX leaves no torch parameter reaches: {shapes}")
        with stage("copies and weights"):
            if self.transfer:
                self._impl(J.load, jm, pl.to_jax(T.read(tm)), strict=False)
            # a leaf loaded as torch's shares its array with `expected`: one copy of the start, not two
            p.actual = {k: p.expected[k] if _same(v, p.expected.get(k)) else v for k, v in J.native(jm).items()}
        batch = _cast(self.batch, dtype)
        wide = dtype == "float64"
        untied = {key for group in pl.untied for key, _ in group}
        keep = lambda r: wide and (not r.ok or (r.section == "grads" and r.key in untied))  # noqa: E731
        judge = Judge(p, pl, self.transfer, keep, noise=None if wide else self.noise)
        if wide and "bfloat16" in self.dtypes:  # the bfloat16 pass judges each side against these
            judge.truth = self.truth
        # the pass's own models are the start: each side trains its copy in place (a replay makes new ones)
        torch_steps, p.torch = self._torch_side(tm, jm, pl, batch, dtype)
        loss = np.asarray(p.torch["loss"])
        if not np.all(np.isfinite(loss)):
            raise PortInputError(f"torch_loss: expected a finite loss on the batch ({dtype}), got {loss}")
        jax_steps, p.jax = self._jax_side(jm, batch, dtype)
        with stage("copies and weights"):
            self._torch_grads(p, jm, pl)
        if wide:
            p.flow = flow.states(p)
            tg = p.torch["grads_native"]
            p.no_grad = {k for k in p.flow if k in p.torch_none or not np.any(tg.get(k, 0))}
            p.grad_norm = float(np.sqrt(sum(float(np.sum(np.square(v))) for v in tg.values())))
            self.noise = noise_entries(tg, p.jax["grads"])  # for the float32 pass's steps
            # and this pass's: a gradient that is a zero's rounding on both sides, Adam scales to lr
            judge.noise, judge.noise_why = noise_entries(tg, p.jax["grads"], ROUNDING_BOUND), NOISE64
            self.zeros = judge.noise  # zero in exact arithmetic: the bfloat16 pass leaves them out too
        with stage("comparison"):
            parted = not all(r.ok for r in judge.run())
        if not (wide and parted):  # judged and matched: the outputs and gradients go (a replay skips them)
            p.torch.update(outputs={}, grads_native={})
            p.jax.update(outputs={}, grads={})
        keep_full = False  # memory for the kept steps ran out
        sums = {"torch": _sums(p.expected), "jax": _sums(p.actual)}  # a step that moved no leaf keeps every sum
        for s in range(1, self.k + 1):
            # one step of each side alive: the last one's arrays are gone before the next is asked for
            # (JAX donates its state to the update; a numpy view of it would force a copy)
            ts, js = next(torch_steps), next(jax_steps)  # each side's generator times itself (_timed)
            ts["step"] = js["step"] = s
            if wide and s == 1 and self.user_steps[1] is not None and np.asarray(js["loss"]).dtype != np.float64:
                judge.narrow_steps(OWN_STEP)
            for side, st in (("torch", ts), ("jax", js)):  # a skipped step (GradScaler on inf / nan): nothing moved
                now = _sums(st["values"], sums[side])
                if now == sums[side]:
                    self.report.skipped.setdefault(dtype, {}).setdefault(side, []).append(s)
                sums[side] = now
            p.step_dropped |= set(ts.pop("dropped"))
            with stage("comparison"):
                parted = not all(r.ok for r in judge.step(s, ts, js)) or parted
            # from the first difference on, the diagnosis (and its replays) read the steps, while they fit
            if wide and parted and not keep_full:
                keep_full = not budget.room(2 * sum(np.asarray(v).nbytes for v in js["values"].values()))
                if keep_full:
                    self.report.notes.append(
                        f"float64: steps from {s} on are compared but not kept for the diagnosis (no memory left "
                        "for them): a hint that reads the steps may be missing"
                    )
            if wide and parted and not keep_full:
                p.torch_steps.append(ts)
                p.jax_steps.append(js)
            if wide and s == self.k:
                p.moved = {
                    side: {k for k, v in st["values"].items() if not np.array_equal(v, start.get(k))}
                    for side, st, start in (("torch", ts, p.expected), ("jax", js, p.actual))
                }
                if not (p.moved["torch"] | p.moved["jax"]) & set(p.flow):  # no weight with a gradient moved
                    self.report.unmoved = self.k
                    self.report.notes.append(
                        f"steps: none of the {self.k} steps moved a trainable weight on either side (gradient "
                        "accumulation over more micro-batches than steps, a zero learning rate): equal steps that "
                        "changed nothing say nothing about the update; compare more steps (--steps)"
                    )
            del ts, js
            budget.release()
        rows += judge.rows

        layout: list = []  # the NNX model a torch-side replay maps onto (never trained: only its layout is read)

        def replay(knob: str, side: str = "torch") -> Pass:
            with stage("replays"):
                return _replay(knob, side)

        def _replay(knob: str, side: str) -> Pass:
            q = Pass(dtype, p.expected, p.actual, p.sources, dropped=p.dropped, orders=p.orders)
            kept = {st["step"] for st in p.jax_steps}
            if side == "torch":  # JAX's run is the pass's: one NNX copy per pass to map torch's arrays onto
                if not layout:
                    layout.append(self._impl(self.J.copy_model, self.models[1], dtype))
                t0 = self._impl(self.T.copy_model, self.models[0], dtype)
                q.jax, q.jax_steps = p.jax, p.jax_steps
                steps, q.torch = self._torch_side(t0, layout[0], pl, batch, dtype, knob)
                q.torch_steps = [dict(st, step=s) for s, st in enumerate(steps, start=1) if s in kept]
                self._torch_grads(q, layout[0], pl)
            else:
                _, j0 = self._start(dtype)
                q.torch, q.torch_steps, q.torch_none = p.torch, p.torch_steps, p.torch_none
                steps, q.jax = self._jax_side(j0, batch, dtype, knob)
                q.jax_steps = [dict(st, step=s) for s, st in enumerate(steps, start=1) if s in kept]
            return q

        p.replay = replay
        if wide:
            self.values64 = (
                p.values
            )  # the float64 differences kept: the bfloat16 pass's truth of the port where it parts
        return p

    def _backward(self, p: Pass) -> list:
        """The float64 rows of the gradient arriving at each module (fresh copies of both models)."""
        with self.stages("backward"):
            return self._backward_rows(p)

    def _backward_rows(self, p: Pass) -> list:
        tm, jm = self._start("float64")
        batch = _cast(self.batch, "float64")
        tcot = self._impl(self.TR.cotangents, tm, batch, self.losses[0], "float64")
        jcot = self._impl(self.JR.cotangents, jm, batch, self.losses[1], "float64")
        return backward_rows(p, self.plan, self.transfer, tcot, jcot)

    def _torch_grads(self, p: Pass, jm, pl: Plan) -> None:
        grads = p.torch.pop("grads")  # canonical: mapped to the NNX layout, then let go
        none = {f"{u}/{leaf}" for u, g in grads.items() for leaf, v in g.items() if v is None}
        filled = {
            u: {
                leaf: (np.zeros(self._shape(u, leaf), _WIDTH.get(p.dtype, p.dtype)) if v is None else v)
                for leaf, v in g.items()
            }
            for u, g in grads.items()
        }
        del grads
        native, sources, _ = self._native(jm, pl, filled, grad=True)
        inverse = {f"{ju}/{jl}".lstrip("/"): f"{tu}/{tl}".lstrip("/") for (tu, tl), (ju, jl) in pl.pairs.items()}
        p.torch["grads_native"] = native
        p.torch["grad_sources"] = {k: [inverse.get(s, s) for s in v] for k, v in sources.items()}
        p.torch_none = {k for k, v in p.torch["grad_sources"].items() if v and all(s in none for s in v)}

    def _shape(self, unit: str, leaf: str) -> tuple:
        return next(tuple(u["leaves"][leaf]["shape"]) for u in self.structures[0]["units"] if u["path"] == unit)

    def _next(self, steps: Iterator[dict]) -> dict:
        try:
            return next(steps)
        except ValueError as exc:
            raise PortInputError(str(exc)) from exc

    def _timed(self, stage: str, steps: Iterator[dict]) -> Iterator[dict]:
        """`steps`, each one's work counted in `stage`."""
        while True:
            with self.stages(stage):
                step = next(steps, None)
            if step is None:
                return
            yield step
            del step

    def _torch_side(self, tm, jm, pl: Plan, batch, dtype, knob=None) -> tuple[Iterator[dict], dict]:
        """torch's recorded run from the start `tm` and its K steps, a generator training `tm` in place
        (each step mapped to the NNX layout as it comes). With an optimizer the run is the first step's."""
        with self.stages("torch"):
            steps, run = self._torch_run(tm, jm, pl, batch, dtype, knob)
        return self._timed("torch", steps), run

    def _jax_side(self, jm, batch, dtype, knob=None) -> tuple[Iterator[dict], dict]:
        """JAX's recorded run from the start `jm` and its K steps, a generator training `jm` in place
        (one compile when an optimizer is given: the run is the first step's)."""
        with self.stages("jax"):
            steps, run = self._jax_run(jm, batch, dtype, knob)
        return self._timed("jax", steps), run

    def _torch_run(self, tm, jm, pl: Plan, batch, dtype, knob=None) -> tuple[Iterator[dict], dict]:
        T, TR = self.T, self.TR
        if not self.k:
            return iter(()), self._impl(TR.run_loss, tm, batch, self.losses[0], dtype, knob=knob)
        run = None
        if self.user_steps[0] is not None:  # the user's step records nothing: the run on a copy, before it
            run = self._impl(TR.run_loss, T.copy_model(tm, dtype), batch, self.losses[0], dtype, knob=knob)
        steps = TR.steps(tm, batch, self.losses[0], dtype, self.optimizers[0], self.user_steps[0], self.k, knob=knob)
        first = self._next(steps)
        run = first.pop("run", run)

        def mapped() -> Iterator[dict]:
            for s in _each(self._next, steps, first):
                values, _, dropped = self._native(jm, pl, s.pop("values"))
                yield {"loss": s["loss"], "values": values, "dropped": dropped}

        return mapped(), run

    def _jax_run(self, jm, batch, dtype, knob=None) -> tuple[Iterator[dict], dict]:
        J, JR = self.J, self.JR
        wrt = {"wrt": self.wrt} if self.wrt else {}
        if not self.k:
            return iter(()), self._impl(JR.run_loss, jm, batch, self.losses[1], dtype, knob=knob, **wrt)
        run = None
        if self.user_steps[1] is not None:
            run = self._impl(JR.run_loss, J.copy_model(jm, dtype), batch, self.losses[1], dtype, knob=knob, **wrt)
        steps = JR.steps(jm, batch, self.losses[1], dtype, self.optimizers[1], self.user_steps[1], self.k, knob=knob)
        first = self._next(steps)
        run = first.pop("run", run)
        return _each(self._next, steps, first), run
