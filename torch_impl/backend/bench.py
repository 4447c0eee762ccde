"""bench: what one training step costs in PyTorch: eager and torch.compile, freezing forms, grad modes, BPTT memory.

What it teaches: what detach() and its alternatives buy at run time. A frozen backbone saves
its backward, whichever way it is frozen; truncation saves memory only when backward runs
per window (C11, C16). For speed a torch user compiles: `tuned_steps` is torch.compile of a
scenario's own step, set against the JAX twin's overhead-free forms of its steps.
Gradient flow: frozen_backbone `full_finetune` all layers; `detach_features`, `freeze_params`
and `no_grad_backbone` the head only. tbptt `windows` calls backward once per window;
`one_backward` detaches the carry every k steps and calls backward once on the summed loss.
Port note: the JAX twin (jax_impl/backend/bench.py) jits every step and reads memory from the compiled
function; torch has grad modes (no_grad, inference_mode) that JAX does not need. torch.compile
(TorchDynamo + inductor; torch 2.13) compiles on the first call, as jax.jit does, but splits a
step at every backward() or autograd.grad call (graph breaks) and refuses double backward.
Shapes: frozen_backbone B samples, D inputs, H features, C classes; tbptt T, B, I, H, O.
Reference: PyTorch docs, "Autograd mechanics", torch.profiler (profile_memory=True),
torch.cuda.max_memory_allocated, "Introduction to torch.compile"; Ansel et al. 2024 (PyTorch 2,
doi:10.1145/3620665.3640366); Yosinski et al. 2014, arXiv:1411.1792.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable

import torch
from torch import nn

from ...shared.core.checks import check_truncation
from ...shared.core.fixtures import require
from ...shared.core.runner import lesson
from .. import frozen_backbone, tbptt
from .._common import field

__all__ = ["configure", "device", "dispatch_steps", "tuned_steps", "freezing_steps", "tbptt_step"]

FORMS = ("windows", "one_backward")
# torch.compile's arguments by codegen; False, the quick smoke test: the same capture (graphs, breaks, a step
# that cannot compile) with no kernel built
_COMPILE = {True: {"mode": "default", "dynamic": False}, False: {"backend": "aot_eager", "dynamic": False}}


def configure(threads: int) -> dict[str, object]:
    """Set this process up for measuring (the bench's fresh worker only) and say where torch runs.

    torch.set_num_threads(threads); float32 matmuls without TF32 (as JAX's "highest"
    precision); with CUDA, tensors are created on the GPU; inductor compiles in this process
    (no pool of compile workers to outlive it) and Dynamo's warnings about graph breaks stay
    quiet (the bench counts the breaks). Returns device().
    """
    import logging
    import warnings

    import torch._inductor.config

    warnings.filterwarnings("ignore", category=UserWarning, module=r"torch\._dynamo")
    torch.set_num_threads(threads)
    torch._inductor.config.compile_threads = 1
    torch._logging.set_logs(dynamo=logging.ERROR, inductor=logging.ERROR)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    if torch.cuda.is_available():
        torch.set_default_device("cuda")  # every tensor a scenario creates lands on the GPU
    return device()


def device() -> dict[str, object]:
    """Where torch runs: {"device": "cuda:0 (<name>)" | "cpu", "threads": intra-op threads, "cuda": bool}."""
    if torch.cuda.is_available():
        return {"device": f"cuda:0 ({torch.cuda.get_device_name(0)})", "threads": torch.get_num_threads(), "cuda": True}
    return {"device": "cpu", "threads": torch.get_num_threads(), "cuda": False}


def dispatch_steps(fx) -> dict[str, Callable[[], torch.Tensor]]:
    """The fixed cost of one call: `eager_op`, one elementwise op on the fixture's x [B, D] (float32).

    What a tiny step pays per operation in eager mode; compare the JAX twin's per-call costs.
    """
    x = field(require(fx, "frozen_backbone", "float32", "dispatch_steps"), "x")
    return {"eager_op": _synced(lambda: x + 1.0)}


def tuned_steps(
    fx, variant: str, codegen: bool = True
) -> dict[str, tuple[Callable[[], torch.Tensor], Callable[[], dict]] | str]:
    """What a torch user reaches for when speed matters: {"torch_compile": (step, facts)}.

    step: torch.compile(mode="default", dynamic=False) of the step that the scenario's own
    make_step(fx, variant) returns (inductor: C++/OpenMP kernels on the CPU, Triton on a GPU);
    codegen False (`bench --quick`, a smoke test): backend="aot_eager", the same Dynamo capture and
    AOTAutograd graphs run by eager kernels, no kernel generated (on a CPU inductor's first compile
    of a graph is a C++ build: tens of seconds on 2 cores with a cold cache). Its first call
    compiles, and a step that cannot be compiled raises there (the bench reports it). Dynamo's
    caches are reset first, so each compile starts from nothing. facts(): the graphs compiled and
    the graph breaks met so far (Dynamo's counters: every backward() and autograd.grad call splits
    a step), and the backend that compiled them. Every lesson with a step gets the column:
    torch.compile takes the step whole (the JAX twin tunes the lesson's step_calls one by one).
    Raises ValueError unless fx is a float32 fixture of a scenario with a step and variant is one of its.
    """
    from torch._dynamo.utils import counters

    name = fx.scenario
    require(fx, name, "float32", "tuned_steps")
    fx.spec.check_variant(variant)
    if not fx.spec.has_step:
        raise ValueError(f"tuned_steps: fx expected a fixture of a scenario with a step, got {name!r}")
    step = lesson("torch", name).make_step(fx, variant)
    torch._dynamo.reset()
    counters.clear()
    compiled = torch.compile(step, **_COMPILE[codegen])

    def facts() -> dict[str, int]:
        return {
            "graphs": int(counters["stats"]["unique_graphs"]),
            "graph_breaks": sum(counters["graph_break"].values()),
            "backend": _COMPILE[codegen].get("backend", "inductor"),
        }

    return {"torch_compile": (_synced(compiled), facts)}


def _sync() -> None:
    if torch.cuda.is_available():  # CUDA kernels run asynchronously: wait before the clock stops
        torch.cuda.synchronize()


def freezing_steps(fx) -> dict[str, Callable[[], torch.Tensor]]:
    """One step per way of training the head of frozen_backbone at bench size; each returns its loss [].

    Steps: the scenario's AdamW train_step for `full_finetune`, `detach_features`, `freeze_params`;
    `no_grad_backbone` (features under torch.no_grad, AdamW on the head); the parts of the ideal
    frozen step, `backbone_forward` (no_grad) and `head_step` (head forward, backward and AdamW on
    fixed features); and the grad modes of one forward pass, `forward_grad` (graph built),
    `forward_no_grad`, `forward_inference_mode`. fx: a float32 frozen_backbone fixture.
    Raises ValueError for any other fixture.
    """
    require(fx, "frozen_backbone", "float32", "freezing_steps")
    x, labels = field(fx, "x"), field(fx, "labels")
    steps: dict[str, Callable[[], torch.Tensor]] = {}
    for variant in ("full_finetune", "detach_features", "freeze_params"):
        model = frozen_backbone.build_model(fx)
        optimizer = frozen_backbone.make_optimizer(model, fx, variant)
        step = lambda m=model, o=optimizer, v=variant: frozen_backbone.train_step(m, o, x, labels, v).detach()
        steps[variant] = _synced(step)  # detached: no step's graph outlives it

    model = frozen_backbone.build_model(fx)  # nothing frozen: only the grad modes below keep graphs away
    head_optimizer = torch.optim.AdamW(model.head.parameters(), **_adamw_settings(fx))
    with torch.no_grad():  # GRAD-FLOW: head_step's features are data, computed once
        features = model.backbone(x)

    def no_grad_backbone() -> torch.Tensor:
        with torch.no_grad():  # GRAD-FLOW: no graph is recorded for the backbone
            f = model.backbone(x)
        return _head_update(model.head, head_optimizer, f, labels)

    def backbone_forward() -> torch.Tensor:
        with torch.no_grad():  # GRAD-FLOW: the backbone's part of a frozen step is a forward alone
            return model.backbone(x).sum()

    def forward_in(mode: Callable[[], object]) -> Callable[[], torch.Tensor]:
        def forward() -> torch.Tensor:
            with mode():
                return frozen_backbone.cross_entropy(model(x, "full_finetune"), labels)

        return forward

    steps["no_grad_backbone"] = _synced(no_grad_backbone)
    steps["backbone_forward"] = _synced(backbone_forward)
    steps["head_step"] = _synced(lambda: _head_update(model.head, head_optimizer, features, labels))
    steps["forward_grad"] = _synced(forward_in(torch.enable_grad))
    steps["forward_no_grad"] = _synced(forward_in(torch.no_grad))  # GRAD-FLOW: no graph at all
    steps["forward_inference_mode"] = _synced(forward_in(torch.inference_mode))  # GRAD-FLOW: no autograd at all
    return steps


def _adamw_settings(fx) -> dict[str, object]:
    """The scenario's AdamW hyper-parameters from the fixture, as torch.optim.AdamW keywords."""
    return {
        "lr": fx.scalar("lr"),
        "betas": (fx.scalar("b1"), fx.scalar("b2")),
        "eps": fx.scalar("eps"),
        "weight_decay": fx.scalar("weight_decay"),
    }


def _head_update(head: nn.Linear, optimizer: torch.optim.Optimizer, f: torch.Tensor, labels: torch.Tensor):
    optimizer.zero_grad(set_to_none=True)
    loss = frozen_backbone.cross_entropy(head(f), labels)
    loss.backward()
    optimizer.step()
    return loss.detach()


def _synced(step: Callable[[], torch.Tensor]) -> Callable[[], torch.Tensor]:
    def run() -> torch.Tensor:
        out = step()
        _sync()
        return out

    return run


def tbptt_step(fx, form: str, k: int) -> tuple[Callable[[], torch.Tensor], Callable[[], int]]:
    """(step, peak_bytes) of truncated BPTT on the GRU of a tbptt fixture, carry detached every k steps.

    form "windows": tbptt.train_windows (backward per window); "one_backward": tbptt.unroll and
    one backward of the summed loss. step() returns the summed loss []. peak_bytes() runs one
    step and returns the most bytes allocated at once during it (CUDA: max_memory_allocated;
    CPU: the running sum of torch.profiler's memory events); inputs and weights are allocated
    before and not counted.
    Raises ValueError on an unknown form, a fixture that is not a float32 tbptt one, or a k that
    is not an int in [1, T] (dividing T for "windows").
    """
    if form not in FORMS:
        raise ValueError(f"tbptt_step: form expected one of {FORMS}, got {form!r}")
    t_steps = require(fx, "tbptt", "float32", "tbptt_step").dims["T"]
    k = check_truncation("tbptt_step", k, t_steps, divides=form == "windows")
    model = tbptt.build_model(fx, "gru")
    x, h0, targets = field(fx, "x"), field(fx, "h0"), field(fx, "targets")

    def step() -> torch.Tensor:
        model.zero_grad(set_to_none=True)
        if form == "windows":
            loss = tbptt.train_windows(model, x, h0, targets, k)
        else:  # the carry is detached every k steps, but every window's graph lives until this backward
            ys = tbptt.unroll(model, x, h0, k)
            loss = torch.stack([tbptt.step_loss(y, targets[t]) for t, y in enumerate(ys)]).sum()
            loss.backward()
        _sync()
        return loss.detach()

    return step, lambda: _peak_bytes(step)


def _peak_bytes(step: Callable[[], object]) -> int:
    if torch.cuda.is_available():
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        step()
        return torch.cuda.max_memory_allocated() - base
    peaks = [_profiled_peak(step) for _ in range(2)]  # the first profiled call also counts one-off buffers
    return peaks[-1]


def _profiled_peak(step: Callable[[], object]) -> int:
    with (
        _quiet_stderr(),
        torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], profile_memory=True) as prof,
    ):
        step()
    events = sorted(
        (e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"), key=lambda e: e.start_ns()
    )
    live = peak = 0
    for event in events:  # allocations are positive, frees negative
        live += event.nbytes()
        peak = max(peak, live)
    return peak


@contextlib.contextmanager
def _quiet_stderr():
    """Silence the profiler's own start/stop lines, written by C++ straight to file descriptor 2."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
