"""The declared surface: what the applications need from a framework, written once, framework-neutral.

Keras 3's shape (`keras/src/backend/{jax,torch}/`): one surface, one implementation per framework
with the same module and function names, chosen at one dispatch point. Here the implementations
are the backend packages `torch_impl/backend/` and `jax_impl/backend/`, and the one dispatch
point is `shared.apps.backends` (one accessor per framework; import-linter lets nothing else
import a backend). The lessons are not part of it: they are reached by scenario name through
`shared.core.runner.lesson`, under the contract of `Lesson` below.

Every member is a module of the backend package, structurally typed: a test checks that both
backends have every function named here with the same parameters (tests/test_backend.py).
Nothing here imports a framework; models, tensors and arrays are typed `Any`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any, Protocol, runtime_checkable

import numpy as np

__all__ = ["Lesson", "Port", "PortRun", "Bench", "Claims", "Profile", "Inside", "Optimizer", "Backend"]

Arrays = dict[str, np.ndarray]
Canonical = Mapping[str, Mapping[str, np.ndarray]]  # {unit path: {canonical leaf: array}}


@runtime_checkable
class Lesson(Protocol):
    """A scenario's module (`torch_impl/<name>.py`, `jax_impl/<name>.py`).

    `run(fx, variant)`: the outputs of one case, flat numpy arrays keyed like the oracle's.
    A lesson whose record has a step also has `make_step(fx, variant) -> () -> loss`, and either
    `step_calls(fx, variant)`, the calls that step makes (`StepCall`s of its `_common`: function,
    the modules and optimizers it updates, its arrays; the bench tunes them), or `NO_STEP_CALLS`,
    the reason it has none. A data-parallel lesson has `run_rank(fx, variant)`, what one rank computes.
    """

    def run(self, fx: Any, variant: str) -> Arrays: ...


@runtime_checkable
class Port(Protocol):
    """Layouts: a model's weights read, written and converted by the framework's rule table."""

    def worked_port(self, name: str) -> Any: ...
    def check_model(self, model: Any) -> None: ...
    def view(self, model: Any) -> tuple: ...
    def copy_model(self, model: Any, dtype: str) -> Any: ...
    def structure(self, model: Any) -> dict: ...
    def to_native(self, model: Any, canonical: Canonical, grad: bool = False) -> tuple: ...
    def read(self, model: Any, units: list[str] | None = None) -> dict[str, dict[str, np.ndarray]]: ...
    def native(self, model: Any) -> Arrays: ...
    def load(self, model: Any, canonical: Canonical, strict: bool = True) -> dict[str, str]: ...
    def register(self, module_type: type, leaves: Mapping[str, tuple]) -> Callable[[], None]: ...


@runtime_checkable
class PortRun(Protocol):
    """Runs of a user's model: forward with every submodule's output, gradients, K optimizer steps."""

    def knobs(self) -> frozenset[str]: ...
    def repeat_loss(self, model: Any, batch: Mapping[str, np.ndarray], loss_fn: Callable, dtype: str) -> tuple: ...
    def run_loss(
        self, model: Any, batch: Mapping[str, np.ndarray], loss_fn: Callable, dtype: str, wrt: Any = None, knob=None
    ) -> dict: ...
    def steps(
        self,
        model: Any,
        batch: Mapping[str, np.ndarray],
        loss_fn: Callable,
        dtype: str,
        optimizer: Any = None,
        step: Any = None,
        k: int = 5,
        knob: str | None = None,
    ) -> Iterator[dict]: ...
    def train(
        self,
        model: Any,
        batch: Mapping[str, np.ndarray],
        loss_fn: Callable,
        dtype: str,
        optimizer: Any = None,
        step: Any = None,
        k: int = 5,
        knob: str | None = None,
    ) -> list[dict]: ...


@runtime_checkable
class Bench(Protocol):
    """What `detach-parity bench` times: call overhead, tuned steps, freezing forms, truncation memory."""

    def configure(self, threads: int) -> dict[str, object]: ...
    def device(self) -> dict[str, object]: ...
    def dispatch_steps(self, fx: Any) -> dict[str, Callable[[], Any]]: ...
    def tuned_steps(self, fx: Any, variant: str, codegen: bool = True) -> dict[str, Any]: ...
    def freezing_steps(self, fx: Any) -> dict[str, Callable[[], Any]]: ...
    def tbptt_step(self, fx: Any, form: str, k: int) -> tuple[Callable[[], Any], Callable[[], int]]: ...


@runtime_checkable
class Claims(Protocol):
    """The claim checks: `CHECKS[name]()` runs one (e.g. "check_c12") and returns its JSON evidence.

    `THEMES` names the module of each theme (`backend/claims/<theme>.py`), whose `__all__` lists its checks.
    """

    THEMES: Mapping[str, Any]
    CHECKS: Mapping[str, Callable[[], dict]]


@runtime_checkable
class Profile(Protocol):
    """What `detach-parity run --profile` counts: `listen()` starts (once per process, never on import),
    `counters()` gives cumulative totals (JAX: traces, lowerings, compiles and their seconds)."""

    def listen(self) -> None: ...
    def counters(self) -> dict[str, float]: ...
    def persistent_cache(self, folder: str) -> dict: ...


@runtime_checkable
class Inside(Protocol):
    """Inside a module where a check parts: every value it computes with the line that computed it (and, with
    `backward`, the gradient arriving at each): the checker pairs both sides' by value to name the port's line."""

    def inside(
        self,
        model: Any,
        batch: Mapping[str, np.ndarray],
        loss_fn: Callable,
        path: str,
        dtype: str = "float64",
        backward: bool = False,
    ) -> dict: ...


@runtime_checkable
class Optimizer(Protocol):
    """An optimizer part by part: `facts` says what each side's is (torch's settings, optax's chain of parts);
    `stages` feeds gradients through the port's parts and torch's written in optax (JAX's; torch's twin has none)."""

    def facts(self, model: Any, optimizer: Any) -> dict: ...
    def stages(
        self, optimizer: Any, params: Mapping[str, np.ndarray], grads: Mapping[str, np.ndarray], torch: Mapping
    ) -> dict: ...


@runtime_checkable
class Backend(Protocol):
    """A framework's tools: `torch_impl/backend/` or `jax_impl/backend/` (the package itself)."""

    FRAMEWORK: str
    port: Port
    port_run: PortRun
    bench: Bench
    claims: Claims
    profile: Profile
    inside: Inside
    optimizer: Optimizer
