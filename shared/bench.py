"""`detach-parity bench [--json PATH] [--repeats N] [--quick]`: timing and memory, torch vs JAX.

For a compute-bound model (4 × Linear(512), batch 256) and an overhead-bound one (4 × Linear(8),
batch 4): median step time per variant (torch: train_full / train_detach / train_frozen /
train_no_grad / forward_grad / forward_no_grad / forward_inference_mode; JAX, jitted:
train_full / train_stop / train_frozen / forward), the ratios the tutorial speed claims are
about (C09, C16, C17), torch saved-tensor bytes and JAX residual bytes. Timings are
measurements, never assertions: the tests check the JSON structure only.
torch and JAX are imported lazily (inside the functions).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import time

import numpy as np
from rich.console import Console
from rich.table import Table

from shared.cliargs import json_path, positive_int

__all__ = ["MODELS", "QUICK", "RATIOS", "weights", "run_bench", "add_parser", "cmd_bench"]

# name -> width W, depth (layers, the last one is the head), batch B, steps per timing
MODELS = {
    "mlp_4x512": {"width": 512, "depth": 4, "batch": 256, "inner": 2},
    "tiny_4x8": {"width": 8, "depth": 4, "batch": 4, "inner": 50},
}
QUICK = {  # --quick: the same structure, small enough for a test
    "mlp_4x512": {"width": 32, "depth": 4, "batch": 8, "inner": 1},
    "tiny_4x8": {"width": 8, "depth": 4, "batch": 4, "inner": 2},
}
# (framework, numerator variant, denominator variant, what the ratio answers)
RATIOS = (
    ("torch", "train_full", "train_detach", "C16: detach vs no freezing"),
    ("torch", "train_full", "train_frozen", "C16: requires_grad_(False) vs no freezing"),
    ("torch", "train_detach", "train_frozen", "C16: detach vs proper freezing"),
    ("torch", "train_detach", "train_no_grad", "C16: detach vs no_grad backbone"),
    ("torch", "forward_grad", "forward_no_grad", "C17/C19: graph building vs no_grad"),
    ("torch", "forward_grad", "forward_inference_mode", "C09: grad mode vs inference_mode"),
    ("torch", "forward_no_grad", "forward_inference_mode", "C09: no_grad vs inference_mode"),
    ("jax", "train_full", "train_stop", "stop_gradient vs no freezing (jit)"),
    ("jax", "train_full", "train_frozen", "grad of the head alone vs no freezing (jit)"),
    ("jax", "train_stop", "train_frozen", "stop_gradient vs grad of the head alone (jit)"),
)
# torch variant -> its JAX counterpart, for torch/JAX time ratios
COUNTERPARTS = {
    "train_full": "train_full",
    "train_detach": "train_stop",
    "train_frozen": "train_frozen",
    "forward_no_grad": "forward",
}


def weights(width: int, depth: int, batch: int, seed: int = 0) -> dict[str, np.ndarray]:
    """float32 x [B, W], w{i} [W, W] (He-scaled), b{i} [W] for i < depth; canonical [in, out]."""
    rng = np.random.default_rng(seed)
    out = {"x": rng.standard_normal((batch, width)).astype(np.float32)}
    for i in range(depth):
        out[f"w{i}"] = (rng.standard_normal((width, width)) * np.sqrt(2 / width)).astype(np.float32)
        out[f"b{i}"] = np.zeros(width, np.float32)
    return out


def run_bench(repeats: int = 20, quick: bool = False) -> dict:
    """Measure every model and variant; returns the JSON payload (see module docstring).

    Raises: ValueError if repeats < 1.
    """
    if repeats < 1:
        raise ValueError(f"repeats expected >= 1, got {repeats}")
    import torch

    from jax_impl import bench as jax_bench
    from torch_impl import bench as torch_bench

    models = {}
    for name, cfg in (QUICK if quick else MODELS).items():
        data = weights(cfg["width"], cfg["depth"], cfg["batch"])
        t = torch_bench.measure(data, repeats, cfg["inner"])
        j = jax_bench.measure(data, repeats, cfg["inner"])
        side = {"torch": t, "jax": j}
        ratios = {
            f"{fw} {num}/{den}": {"ratio": side[fw][num]["median_s"] / side[fw][den]["median_s"], "about": about}
            for fw, num, den, about in RATIOS
        }
        torch_over_jax = {f"{tv}/{jv}": t[tv]["median_s"] / j[jv]["median_s"] for tv, jv in COUNTERPARTS.items()}
        models[name] = {"config": cfg, "torch": t, "jax": j, "ratios": ratios, "torch_over_jax": torch_over_jax}
    return {
        "settings": {"repeats": repeats, "quick": quick, "torch_threads": torch.get_num_threads()},
        "models": models,
    }


def cmd_bench(args: argparse.Namespace, console: Console) -> int:
    """Run the bench, print the tables, write JSON on request; 0 (bad arguments exit 2 in argparse)."""
    from shared.cli import _versions

    start = time.perf_counter()
    with contextlib.nullcontext() if args.quiet else console.status("benchmarking"):
        payload = run_bench(args.repeats, args.quick)
    payload = {"versions": _versions(), **payload, "seconds": round(time.perf_counter() - start, 3)}
    for name, m in payload["models"].items():
        table = Table(title=f"{name} {m['config']}: median step time", header_style="bold")
        for col in ("framework", "variant", "median", "saved / residual bytes"):
            table.add_column(col, justify="left" if col in ("framework", "variant") else "right")
        for fw in ("torch", "jax"):
            for variant, r in m[fw].items():
                nbytes = r.get("saved_bytes", r.get("residual_bytes"))
                table.add_row(fw, variant, f"{r['median_s'] * 1e3:.3f} ms", f"{nbytes:,}")
        console.print(table)
        ratios = Table(title=f"{name}: ratios (> 1: the denominator is faster)", header_style="bold")
        for col in ("ratio", "value", "about"):
            ratios.add_column(col)
        for key, r in m["ratios"].items():
            ratios.add_row(key, f"{r['ratio']:.2f}×", r["about"])
        for key, r in m["torch_over_jax"].items():
            ratios.add_row(f"torch/jax {key}", f"{r:.2f}×", "same step, torch eager vs JAX jit")
        console.print(ratios)
    console.print(f"bench done in {payload['seconds']:.1f} s ({args.repeats} repeats; measurements, not assertions)")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(payload, fh, indent=2, sort_keys=True)
            fh.write("\n")
    return 0


def add_parser(sub) -> None:
    """Register the `bench` subcommand on an argparse subparsers object."""
    p = sub.add_parser("bench", help="timing and memory, torch vs JAX, detach vs not / no_grad / freezing")
    p.add_argument("--repeats", type=positive_int, default=20, help="timings per variant, median reported (default 20)")
    p.add_argument("--quick", action="store_true", help="small models (smoke test of the bench itself)")
    p.add_argument("--json", type=json_path, metavar="PATH", help="also write the measurements as JSON")
    p.add_argument("--quiet", action="store_true", help="no spinner")
    p.set_defaults(func=cmd_bench)
