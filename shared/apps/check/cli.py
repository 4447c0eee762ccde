"""`detach-parity check FILE.py | WORKED[:VARIANT] [--json PATH] [--steps K]`: check a torch -> Flax NNX port.

FILE.py is run as a script (its folder first on sys.path, as `python FILE.py` has it) and must define
    torch_model, jax_model   an nn.Module and an nnx.Module
    batch                    a dict of numpy arrays (both losses get it, as tensors / jax arrays)
    torch_loss, jax_loss     (model, batch) -> scalar
and may define
    torch_optimizer, jax_optimizer   params -> torch.optim.Optimizer; an optax transformation or
                                     (transformation, NNX filter of the trainable leaves)
    torch_step, jax_step             (model, batch) -> loss: the user's own training steps instead
    mapping                          {torch path prefix: NNX path prefix} where the names differ
    transfer                         False: compare the weights the NNX model already holds
    torch_precision, jax_precision   with --bf16: "bfloat16" (parameters and compute, the default) or "mixed"
                                     (float32 parameters; torch.autocast to bfloat16, the port's own module dtypes)
WORKED is a shipped worked port (cnn, gru, transformer; transformers' llama, bert, vit, gpt2),
optionally with a buggy variant (`cnn:bn_momentum`). Exit status: 0 the port matches, 1 it differs, 2 bad input.
"""

from __future__ import annotations

import argparse
import difflib
import importlib.metadata as md
import os
import runpy
import sys
import time
import types
from pathlib import Path

from ..backends import backend
from ..common import UsageError, bounded_int, json_path, versions, write_json
from .checker import MAX_STEPS, check_port
from .match import PortInputError
from .named_line import optimizer_line
from .ports import REAL, WORKED, case, parse
from .stages import outside
from .text import profile_lines, profile_table

__all__ = ["REQUIRED", "OPTIONAL", "load_file", "cmd_check", "add_parser"]

REQUIRED = ("torch_model", "jax_model", "batch", "torch_loss", "jax_loss")
OPTIONAL = ("torch_optimizer", "jax_optimizer", "torch_step", "jax_step", "mapping", "transfer", "torch_precision",
            "jax_precision")  # fmt: skip


def _misspelt(names: dict) -> tuple[str, str] | None:
    """(defined, meant) for a name that looks like an optional name the file does not define: torch_opt,
    jax_steps (a prefix either way, not jax_steps_per_epoch), tranfer, Transfer, mappings (close). Modules, classes and functions
    without the torch_ / jax_ prefix are the file's own helpers (`from collections.abc import Mapping`)."""
    unread = [n for n in OPTIONAL if n not in names]
    for defined, value in sorted(names.items()):
        framework = defined.startswith(("torch_", "jax_"))
        own = isinstance(value, (types.ModuleType, type)) or (callable(value) and not framework)
        helper = any(defined.startswith(n + "_") for n in (*REQUIRED, *OPTIONAL))  # jax_step_size, torch_model_cfg
        if defined in (*REQUIRED, *OPTIONAL) or defined.startswith("__") or own or helper:
            continue
        # a prefix either way (torch_opt, jax_steps), not a longer name of its own (jax_steps_per_epoch)
        prefix = [
            n
            for n in unread
            if framework and (n.startswith(defined) or (defined.startswith(n) and "_" not in defined[len(n) :]))
        ]
        close = prefix or difflib.get_close_matches(defined.lower(), unread, n=1, cutoff=0.85)
        if close:
            return defined, close[0]
    return None


def load_file(path: str) -> dict:
    """Run FILE.py and collect check_port's arguments from its names; UsageError naming what is missing."""
    file = Path(path)
    if not file.exists():
        raise UsageError(f"FILE: no such file {path!r} (expected a Python file (.py) or one of {list(WORKED + REAL)})")
    if not file.is_file() or file.suffix != ".py":
        raise UsageError(f"FILE expected a Python file (.py) or one of {list(WORKED + REAL)}, got {path!r}")
    # as `python FILE.py` would: the file's folder first on sys.path, so that it imports the user's own
    # modules beside it (their model, their port); the caller's sys.path is back afterwards
    folder = str(file.resolve().parent)
    saved = list(sys.path)
    sys.path.insert(0, folder)
    try:
        names = runpy.run_path(str(file), run_name="__detach_parity_check__")
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # SystemExit too: a file's exit status must not become the verdict
        raise UsageError(f"{path}: running it raised {type(exc).__name__}: {exc}") from None
    finally:
        sys.path[:] = saved
    missing = [n for n in REQUIRED if n not in names]
    if missing:
        raise UsageError(f"{path}: expected the names {list(REQUIRED)} (optional {list(OPTIONAL)}), missing {missing}")
    if misspelt := _misspelt(names):  # it would silently compare no optimizer steps, or transfer the weights
        raise UsageError(
            f"{path}: defines {misspelt[0]!r}, which check does not read: did you mean {misspelt[1]!r}? "
            f"(names read: {list(REQUIRED)}, optional {list(OPTIONAL)})"
        )
    return {n: names[n] for n in (*REQUIRED, *OPTIONAL) if n in names}


NO_CACHE = "DETACH_PARITY_NO_CACHE"  # set (not "0") to keep nothing between checks


def cache_folder() -> Path:
    """Where `check` keeps JAX's compiled programs between processes: the user's cache folder (XDG_CACHE_HOME, else
    ~/.cache), never the project's, one folder per set of versions (jax, jaxlib, this package): a version change
    never reuses an entry."""
    root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    key = "-".join(f"{d}{_version(d)}" for d in ("jax", "jaxlib", "detach-parity"))
    return root / "detach-parity" / f"jax-{key}"


def _version(dist: str) -> str:
    try:
        return md.version(dist)
    except md.PackageNotFoundError:
        return "0"


def _keep_programs(args: argparse.Namespace) -> str:
    """JAX's persistent compilation cache for this process, where it is ours (the console script) and not turned
    off; the line the report gives about it."""
    if not getattr(args, "own_process", False):
        return ""
    if os.environ.get(NO_CACHE, "0") not in ("", "0"):
        return f"compiled programs: not kept between checks ({NO_CACHE} is set)"
    used = backend("jax").profile.persistent_cache(str(cache_folder()))
    if not used["ours"]:
        return f"compiled programs: kept in your own JAX cache, {used['folder']}"
    return f"compiled programs: kept in {used['folder']} for the next check ({NO_CACHE}=1 turns it off)"


def cmd_check(args: argparse.Namespace, console) -> int:
    target = args.file
    start = time.perf_counter()
    for framework in ("torch", "jax"):  # torch, JAX, Flax and optax: the import floor, timed apart from the file
        backend(framework)
    imported = time.perf_counter()
    kept = _keep_programs(args)  # before the file runs: its models' initialisers compile too
    worked = target.partition(":")[0] in WORKED + REAL  # a worked port's name, whatever the folder holds
    file = None
    if target.endswith(".py") or "/" in target or (Path(target).exists() and not worked):  # a path
        kwargs, file = load_file(target), target
    else:
        try:
            name, variant = parse(target)
            kwargs = case(name, variant)
        except PortInputError as exc:
            raise UsageError(str(exc)) from None
    model_t, model_j, batch = kwargs.pop("torch_model"), kwargs.pop("jax_model"), kwargs.pop("batch")
    loaded = time.perf_counter()
    try:
        with console.status("checking the port ...") as status:
            dtypes = ("float64", "float32", "bfloat16") if args.bf16 else ("float64", "float32")
            report = check_port(model_t, model_j, batch, steps=args.steps, progress=status.update, dtypes=dtypes,
                                profile=args.profile, **kwargs)  # fmt: skip
    except PortInputError as exc:
        raise UsageError(str(exc)) from None
    report.profile = outside(report.profile, {"imports": imported - start, "your file": loaded - imported})
    if report.line and report.line.get("optimizer") and file:  # the optimizer part that parts: the file's line
        report.line["port"] = optimizer_line(file, report.line["path"])
    if args.json:
        try:
            write_json(Path(args.json), {"target": target, "versions": versions(), **report.to_json()})
        except OSError as exc:
            raise UsageError(f"could not write {args.json}: {exc}") from None
    console.print(report.rich_table())
    for line in report.lines():
        console.print(line, markup=False, highlight=False, soft_wrap=True)  # one line each: grep and copy them whole
    if args.profile:
        console.print(profile_table(report))
        for line in [*profile_lines(report), *([kept] if kept else [])]:
            console.print(line, markup=False, highlight=False, soft_wrap=True)
    return 0 if report.ok else 1


def add_parser(sub) -> None:
    """Register `check` on an argparse subparsers object (shared/apps/cli.py SUBCOMMANDS)."""
    p = sub.add_parser(
        "check",
        help="check your own torch -> Flax NNX port: weights, outputs, gradients, K steps, the bug named",
        description=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("file", metavar="FILE.py|WORKED[:VARIANT]", help=f"your port file, or one of {list(WORKED + REAL)}")
    p.add_argument("--json", type=json_path, metavar="PATH", help="also write the report as JSON")
    p.add_argument(
        "--steps",
        type=bounded_int(0, MAX_STEPS),
        default=5,
        help=f"optimizer steps compared (default 5, at most {MAX_STEPS})",
    )
    p.add_argument(
        "--bf16",
        action="store_true",
        help="also a bfloat16 pass: each side's error against the float64 truth (the file's torch_precision / "
        "jax_precision: 'bfloat16' or 'mixed')",
    )
    p.add_argument(
        "--profile",
        action="store_true",
        help="also print where the time went: imports, your file, each stage of the check, and JAX's tracing, "
        "lowering and compiling in each",
    )
    p.set_defaults(func=cmd_check)
