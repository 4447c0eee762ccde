"""The mutation sites of `detach-parity selfcheck`: every gradient-control construct of torch_impl/ and jax_impl/.

`find_sites` parses each module with `ast` and makes one `Site` per construct: `.detach()`, `.detach_()`,
`torch.no_grad()`, `torch.inference_mode()`, `requires_grad_(False)` / `requires_grad=False`,
`jax.lax.stop_gradient(x)`, parameter filters that freeze (`nnx.Optimizer(..., wrt=F)`,
`nnx.DiffState(i, F)`), `optax.set_to_zero()`, the collectives and checkpointing of the data-parallel and
advanced lessons, custom backward rules, plus a few arithmetic sites a lesson depends on (`1 - done`,
`ddof=`, `correction=`, `create_graph=`: first and second order swapped). A site is the bytes to replace
and their replacement: the mutant removes the construct. `covering_tests` names the tests that must
kill the mutants of a module.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

__all__ = ["IMPL_DIRS", "Site", "find_sites", "covering_tests"]

IMPL_DIRS = ("torch_impl", "jax_impl")
ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Site:
    """One mutation: replace bytes [start, end) of `path` by `replacement`."""

    path: str  # relative to the repository root
    line: int
    construct: str
    module: str  # file stem: the scenario (or helper module) it belongs to
    start: int
    end: int
    original: str
    replacement: str
    kind: str  # "stop" (gradient control removed) or "arith" (lesson arithmetic changed)

    @property
    def where(self) -> str:
        return f"{self.path}:{self.line}"


def _dotted(node: ast.AST) -> str:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
    return ".".join(reversed(parts))


def _is_true(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and node.value is True


class _Finder(ast.NodeVisitor):
    # custom backward rules (a torch.autograd.Function's `backward`, a bwd given to JAX's `defvjp`):
    # their sign flips (gradient reversal) and clips are the gradient control of the pair
    backward_names: frozenset[str] = frozenset()
    in_function_class = False
    in_backward = False

    def __init__(self, src: bytes, rel: str, module: str) -> None:
        self.src, self.rel, self.module = src, rel, module
        self.offsets = [0]
        for line in src.split(b"\n"):
            self.offsets.append(self.offsets[-1] + len(line) + 1)
        self.sites: list[Site] = []

    def _span(self, node: ast.AST) -> tuple[int, int]:
        return (
            self.offsets[node.lineno - 1] + node.col_offset,  # type: ignore[attr-defined]
            self.offsets[node.end_lineno - 1] + node.end_col_offset,  # type: ignore[attr-defined]
        )

    def _text(self, node: ast.AST) -> str:
        a, b = self._span(node)
        return self.src[a:b].decode()

    def _add(self, node: ast.AST, construct: str, replacement: str, kind: str = "stop") -> None:
        a, b = self._span(node)
        self.sites.append(
            Site(self.rel, node.lineno, construct, self.module, a, b, self.src[a:b].decode(), replacement, kind)  # type: ignore[attr-defined]
        )

    def visit_Call(self, node: ast.Call) -> None:
        name = _dotted(node.func)
        attr = node.func.attr if isinstance(node.func, ast.Attribute) else ""
        if attr in ("detach", "detach_") and not node.args:
            self._add(node, f".{attr}()", f"({self._text(node.func.value)})")  # type: ignore[attr-defined]
        elif name in ("torch.no_grad", "torch.inference_mode"):
            self._add(node, f"{name}()", "torch.enable_grad()")
        elif (
            attr == "requires_grad_"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and node.args[0].value is False
        ):
            self._add(node.args[0], "requires_grad_(False)", "True")
        elif name.endswith("stop_gradient") and len(node.args) == 1:
            self._add(node, "jax.lax.stop_gradient(x)", f"({self._text(node.args[0])})")
        elif name.endswith("set_to_zero") and name.startswith("optax"):
            self._add(node, "optax.set_to_zero()", "optax.identity()")
        elif name.endswith("DiffState") and len(node.args) == 2 and _dotted(node.args[1]) != "nnx.Param":
            self._add(node.args[1], "nnx.DiffState filter", "nnx.Param")
        elif attr == "no_sync" and not node.args:
            # DDP accumulation without an all-reduce: every micro-batch syncs instead
            self._add(node, "ddp.no_sync()", '__import__("contextlib").nullcontext()')
        elif name in ("jax.lax.pmean", "lax.pmean") and len(node.args) == 2:
            # the average over the data axis becomes a sum (W times the value)
            self._add(node.func, "jax.lax.pmean(x, axis)", "jax.lax.psum", "arith")
        elif name in ("jax.lax.psum", "lax.psum") and len(node.args) == 2:
            self._add(node, "jax.lax.psum(x, axis)", f"({self._text(node.args[0])})")
        elif name.endswith(("funcol.all_reduce", "_functional_collectives.all_reduce")) and node.args:
            # the autograd-aware all-reduce: without it each rank keeps its own share
            self._add(node, "funcol.all_reduce(x)", f"({self._text(node.args[0])})")
        elif name in ("checkpoint", "torch.utils.checkpoint.checkpoint") and len(node.args) >= 2:
            # activation checkpointing removed: the block runs plainly (same values, everything kept for backward)
            args = ", ".join(self._text(a) for a in node.args[1:])
            self._add(node, "torch checkpoint(f, *args)", f"{self._text(node.args[0])}({args})")
        elif name in ("nnx.remat", "jax.checkpoint", "jax.remat") and len(node.args) == 1 and not node.keywords:
            self._add(node, f"{name}(f)", f"({self._text(node.args[0])})")  # rematerialisation removed
        elif name.endswith("functional_call") and len(node.args) == 3:
            # the module's own parameters instead of the ones differentiated: their gradient becomes 0
            inputs = node.args[2]
            args = (
                ", ".join(self._text(e) for e in inputs.elts) if isinstance(inputs, ast.Tuple) else self._text(inputs)
            )
            self._add(node, "functional_call(model, params, args)", f"{self._text(node.args[0])}({args})")
        elif attr == "backward" and isinstance(node.func.value, ast.BinOp) and isinstance(node.func.value.op, ast.Div):  # type: ignore[attr-defined]
            # gradient accumulation: (loss / n).backward() -> (loss).backward(), n micro-batches summed
            self._add(node.func.value, "(loss / n).backward()", f"({self._text(node.func.value.left)})", "arith")  # type: ignore[attr-defined]
        elif self.in_backward and attr in ("clip", "clamp") and isinstance(node.func, ast.Attribute):
            # g.clamp(lo, hi) -> g; jnp.clip(g, lo, hi) -> g: the cotangent passes unclipped
            module_call = _dotted(node.func.value) in ("jnp", "np", "numpy", "torch", "jax.numpy") and node.args
            clipped = node.args[0] if module_call else node.func.value
            self._add(node, "custom backward: clip", f"({self._text(clipped)})")
        for kw in node.keywords:
            if kw.arg == "requires_grad" and isinstance(kw.value, ast.Constant) and kw.value.value is False:
                self._add(kw.value, "requires_grad=False", "True")
            elif kw.arg == "wrt" and name.endswith("Optimizer") and _dotted(kw.value) != "nnx.Param":
                self._add(kw.value, "nnx.Optimizer(wrt=filter)", "nnx.Param")
            elif kw.arg in ("ddof", "correction") and isinstance(kw.value, ast.Constant) and kw.value.value in (0, 1):
                self._add(kw.value, f"{kw.arg}={kw.value.value}", str(1 - kw.value.value), "arith")
            elif kw.arg == "create_graph" and isinstance(kw.value, ast.Constant) and kw.value.value is True:
                self._add(kw.value, "create_graph=True", "False", "arith")
            elif kw.arg == "create_graph" and not isinstance(kw.value, ast.Constant):
                # swap first- and second-order: the switch itself is inverted
                self._add(kw.value, "create_graph=<switch>", f"not ({self._text(kw.value)})", "arith")
            elif kw.arg in ("find_unused_parameters", "static_graph") and _is_true(kw.value):
                self._add(kw.value, f"{kw.arg}=True", "False")  # DDP no longer told about unused parameters
            elif kw.arg == "axis_name" and isinstance(kw.value, ast.Constant) and isinstance(kw.value.value, str):
                self._add(kw.value, "axis_name='data' (statistics over the devices)", "None")
            elif kw.arg == "use_reentrant" and isinstance(kw.value, ast.Constant) and isinstance(kw.value.value, bool):
                self._add(kw.value, f"use_reentrant={kw.value.value}", str(not kw.value.value))
            elif kw.arg == "use_reentrant":
                self._add(kw.value, "use_reentrant=<switch>", f"not ({self._text(kw.value)})")
            elif kw.arg in ("use_stop_gradient", "stop_target_gradients") and _is_true(kw.value):
                self._add(kw.value, f"{kw.arg}=True (rlax's stop)", "False")
            elif kw.arg in ("use_stop_gradient", "stop_target_gradients") and not isinstance(kw.value, ast.Constant):
                self._add(kw.value, f"{kw.arg}=<switch> (rlax's stop)", f"not ({self._text(kw.value)})")
            elif kw.arg == "l2_norm_clip":
                self._add(kw.value, "l2_norm_clip= (per-example clipping)", 'float("inf")', "arith")
            elif kw.arg == "every_k_schedule":
                self._add(kw.value, "every_k_schedule= (optax.MultiSteps accumulation)", "1", "arith")
            elif kw.arg == "hard" and isinstance(kw.value, ast.Constant) and kw.value.value is True:
                self._add(kw.value, "hard=True (straight-through sample)", "False")
            elif kw.arg == "hard" and not isinstance(kw.value, ast.Constant):
                self._add(kw.value, "hard=<switch>", f"not ({self._text(kw.value)})")
        self.generic_visit(node)

    def visit_Module(self, node: ast.Module) -> None:
        self.backward_names = frozenset(
            call.args[1].id
            for call in ast.walk(node)
            if isinstance(call, ast.Call)
            and isinstance(call.func, ast.Attribute)
            and call.func.attr == "defvjp"
            and len(call.args) >= 2
            and isinstance(call.args[1], ast.Name)
        )
        self.generic_visit(node)

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        outer = self.in_function_class
        self.in_function_class = any(_dotted(b).endswith("autograd.Function") for b in node.bases)
        self.generic_visit(node)
        self.in_function_class = outer

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        outer = self.in_backward
        custom = (self.in_function_class and node.name == "backward") or node.name in self.backward_names
        self.in_backward = outer or custom
        self.generic_visit(node)
        self.in_backward = outer

    def visit_UnaryOp(self, node: ast.UnaryOp) -> None:
        if self.in_backward and isinstance(node.op, ast.USub):  # -λ·g: the reversal itself
            self._add(node, "custom backward: -g (sign flip)", f"({self._text(node.operand)})", "arith")
        self.generic_visit(node)

    def visit_BinOp(self, node: ast.BinOp) -> None:
        if (
            isinstance(node.op, ast.Sub)
            and isinstance(node.left, ast.Constant)
            and node.left.value == 1
            and "done" in self._text(node.right)
        ):
            self._add(node, "(1 - done)", "1", "arith")
        self.generic_visit(node)


def find_sites(root: Path = ROOT) -> list[Site]:
    """Every mutation site in torch_impl/ and jax_impl/ (lessons and backends), in file and line order.

    A site's module is its dotted path below the framework folder: "dqn_target", "backend.claims.freezing".
    """
    sites: list[Site] = []
    for d in IMPL_DIRS:
        for path in sorted((root / d).rglob("*.py")):
            if path.name == "__init__.py" or "__pycache__" in path.parts:
                continue
            rel = path.relative_to(root / d)
            src = path.read_bytes()
            finder = _Finder(src, f"{d}/{rel.as_posix()}", ".".join(rel.with_suffix("").parts))
            finder.visit(ast.parse(src))
            sites.extend(sorted(finder.sites, key=lambda s: s.start))
    return sites


# test files that check the whole tree rather than a scenario's behaviour: a
# mutant failing them (e.g. formatting) would be killed for the wrong reason
GLOBAL_TESTS = {
    "test_lint.py",
    "test_mirror.py",
    "test_docs.py",
    "test_fixtures.py",
    "test_parity.py",
    "test_selfcheck.py",
    "test_cli.py",
    "test_outputs.py",  # the commands' files, interrupts and pipes; they run basics only as a workload
    "test_settings.py",  # the process's numeric settings; likewise
}


# the tests of a backend's modules: the application each one serves
BACKEND_TESTS = {
    "backend.claims": ["tests/test_claims.py"],
    "backend.bench": ["tests/test_bench.py", "tests/test_steps.py"],
    # the checker's modules (port, port_run, ports, knobs, layout, outputs): its behaviour tests, the bare and
    # tied leaves, the user's own steps and batches (edges) included
    **{
        f"backend.{m}": [
            "tests/test_port_layout.py",
            "tests/test_port_check.py",
            "tests/test_port_diagnose.py",
            "tests/test_port_tied.py",
            "tests/test_port_edges.py",
            "tests/test_port_cli.py",
        ]
        for m in ("port", "knobs", "layout", "outputs")
    },
}


def covering_tests(module: str, root: Path = ROOT) -> list[str]:
    """pytest arguments for the tests that cover a module of torch_impl/ or jax_impl/.

    A registered scenario: its parity cases, its make_step test when the record has a step,
    plus every test file that names it.
    A private helper (`_common`, `_layout`): the layout tests and one scenario's cases.
    A backend module: the tests of the application it serves (BACKEND_TESTS; the port's table
    covers port, port_run and the worked ports).
    """
    from ..core.registry import SCENARIOS
    from .docs import scenario_tests

    if module.startswith("backend."):
        return next((tests for prefix, tests in BACKEND_TESTS.items() if module.startswith(prefix)), [])
    if module.startswith("_"):
        return ["tests/test_layout.py", "tests/test_parity.py", "-k", "layout or frozen_backbone or basics"]
    files = [f for f in scenario_tests(module, root) if Path(f).name not in GLOBAL_TESTS]
    own = root / "tests" / f"test_{module}.py"
    if own.exists() and f"tests/{own.name}" not in files:
        files.append(f"tests/{own.name}")
    keywords = [module] + [Path(f).stem for f in files]
    registered = ["tests/test_parity.py"] if module in SCENARIOS else []
    if module in SCENARIOS and SCENARIOS[module].has_step:
        registered.append("tests/test_steps.py")  # make_step: the returned loss must carry no graph
    args = registered + files
    if not args:
        return []
    return args + ["-k", " or ".join(keywords)]
