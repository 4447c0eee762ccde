"""The rank side of shared.core.launch: a rank's main loop, the fixtures it is sent, the errors both sides share.

A rank is `python -m <module>` whose `__main__` calls `serve(init, run)`: it follows its parent
(children.follow_parent: it never outlives it), joins its framework's process group with `init`, answers
"ready", then runs one job per line of its stdin until stdin closes. Answers are JSON lines on its
original stdout (children.answer_channel); stderr is its log. Fixtures travel as an .npz in the pool's
folder (`save_fixture` / `load_fixture`); each rank writes its outputs as `rank<r>.npz` beside it.
"""

from __future__ import annotations

import argparse
import json
import socket
import sys
import time
import traceback
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import IO

import numpy as np

from . import children, registry
from .fixtures import Fixture

__all__ = ["PortInUse", "RankError", "RankTimeout", "free_port", "save_fixture", "load_fixture", "serve"]


class PortInUse(RuntimeError):
    """Raised by a rank's `init` when the rendezvous port is taken: the parent retries on another port."""


class RankError(RuntimeError):
    """A rank raised, exited or could not start; the message names the rank and quotes its error."""


class RankTimeout(RankError, TimeoutError):
    """A rank did not answer in time; the message names the ranks that did not arrive."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (the ranks bind it; a lost race is retried)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def save_fixture(fx: Fixture, path: Path) -> dict:
    """Write a fixture's arrays to `path` (.npz); return the metadata `load_fixture` needs with it."""
    if not isinstance(fx, Fixture):
        raise ValueError(
            f"save_fixture: fx expected a detach_parity.shared.core.fixtures.Fixture, got {type(fx).__name__}"
        )
    np.savez(path, **{k: np.asarray(v) for k, v in fx.items()})
    return {"path": str(path), "scenario": fx.scenario, "dtype": fx.dtype, "seed": fx.seed, "case": fx.case}


def load_fixture(meta: Mapping) -> Fixture:
    """The fixture `save_fixture` wrote, rebuilt from its record and validated again."""
    with np.load(meta["path"]) as data:
        arrays = {k: data[k] for k in data.files}
    spec = registry.get(meta["scenario"])
    return Fixture(spec, meta["dtype"], arrays, seed=meta["seed"], case=meta["case"])


def serve(init: Callable[[int, int, int], None], run: Callable[[str, Fixture, str], Mapping[str, object]]) -> int:
    """The main loop of a rank process: `init(rank, world, port)`, then one job per stdin line.

    `init` joins the framework's process group (and raises PortInUse when the rendezvous port
    is taken); `run(scenario, fx, variant)` computes this rank's outputs, written as
    `<job out>/rank<r>.npz`. Every exception is answered with its traceback, and the loop ends
    when stdin closes (the parent closed it, or died). Returns the exit status.
    """
    parser = argparse.ArgumentParser(prog=f"python -m {sys.argv[0]}")
    for name in ("rank", "world", "port", "parent"):
        parser.add_argument(f"--{name}", type=int, required=True)
    args = parser.parse_args()
    children.follow_parent(args.parent)
    with children.answer_channel() as answers:
        return _serve(args, answers, init, run)


def _serve(args: argparse.Namespace, answers: IO[str], init: Callable, run: Callable) -> int:
    def answer(**message) -> None:
        answers.write(json.dumps(message) + "\n")
        answers.flush()

    try:
        init(args.rank, args.world, args.port)
    except PortInUse as exc:
        answer(ready=False, port_in_use=True, error=f"port {args.port} in use: {exc}")
        return 1
    except BaseException:
        answer(ready=False, error=traceback.format_exc())
        return 1
    answer(ready=True)
    while True:
        line = sys.stdin.readline()
        if not line:
            return 0
        start = time.perf_counter()
        job = json.loads(line)
        try:
            fx = load_fixture(job["fixture"])
            outputs = run(job["scenario"], fx, job["variant"])
            np.savez(Path(job["out"]) / f"rank{args.rank}.npz", **{k: np.asarray(v) for k, v in outputs.items()})
        except Exception:
            answer(id=job["id"], ok=False, error=traceback.format_exc())
            continue
        answer(id=job["id"], ok=True, seconds=round(time.perf_counter() - start, 4))
