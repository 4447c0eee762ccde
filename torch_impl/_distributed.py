"""The ranks of the data_parallel scenarios on torch.distributed (gloo on the CPU); mirrored by jax_impl/_distributed.py.

A scenario's `run(fx, variant)` calls `on_ranks`: the case runs on WORLD = 2 processes
(`python -m torch_impl._distributed`, started once per process by shared.core.launch and reused),
each joined to one gloo process group through a TCPStore on 127.0.0.1 (rank 0 binds it itself: the
store alone would listen on every interface, unauthenticated) and gloo on the loopback interface
(GLOO_SOCKET_IFNAME); every rank calls the
scenario's `run_rank(fx, variant)` on the same fixture, and rank 0's outputs are the case's.
Inside a rank: `data_mesh()` is the 1-D DeviceMesh "data" (DDP's `device_mesh=`), `shard` gives
this rank's rows of a batch, `gather_ranks` / `rank_gap` compare a value across the ranks
(`dist.all_gather`: a real comparison, not an assumption).
Real hosts: the same rank code runs under `torchrun --nnodes N --nproc-per-node P --rdzv-endpoint HOST:PORT`
with `init_process_group("gloo")` reading RANK / WORLD_SIZE / MASTER_ADDR from the environment.
Reference: Li et al. 2020, "PyTorch Distributed: Experiences on Accelerating Data Parallel Training", arXiv:2006.15704.
"""

from __future__ import annotations

import errno
import functools
import importlib
import os
import socket
import sys
from collections.abc import Mapping
from datetime import timedelta

import numpy as np
import torch
import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh

from ..shared.core import launch, runner
from ..shared.core.fixtures import Fixture
from ..shared.core.rank import PortInUse, serve

__all__ = ["ranks", "on_ranks", "init_rank", "data_mesh", "shard", "gather_ranks", "rank_gap", "main"]

WORLD = 2  # ranks of every data_parallel case (the fixtures split their batch in WORLD shards)
COLLECTIVE_TIMEOUT = timedelta(seconds=120)  # a collective whose peer never comes fails instead of hanging


def ranks() -> launch.Ranks:
    """The running torch ranks of this process (WORLD processes), started on first use."""
    return launch.pool(__name__, WORLD, env={"OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": _loopback()})


def _loopback() -> str:
    """The name of the loopback interface ("lo" on Linux, "lo0" on macOS): gloo's pairs listen there only."""
    names = [name for _, name in socket.if_nameindex()]
    return next((name for name in ("lo", "lo0") if name in names), "lo")


def on_ranks(scenario: str, fx: Fixture, variant: str) -> dict[str, np.ndarray]:
    """Run `torch_impl.<scenario>.run_rank(fx, variant)` on every rank; return rank 0's outputs.

    Raises shared.core.launch.RankError with the failing rank's traceback, RankTimeout naming a
    rank that did not answer.
    """
    return ranks().run(scenario, fx, variant)


def init_rank(rank: int, world: int, port: int) -> None:
    """Join the gloo process group of `world` ranks through the TCPStore on 127.0.0.1:port (rank 0 hosts it).

    Raises shared.core.rank.PortInUse when the port is taken (the launcher retries another).
    """
    torch.set_num_threads(1)  # WORLD ranks share the cores
    listener = None
    if rank == 0:  # the store's own server binds every interface: it is handed a socket bound to loopback
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            listener.bind(("127.0.0.1", port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise PortInUse(str(exc)) from exc
            raise
        listener.listen()
    fd = None
    if listener is not None:  # the store owns the socket from here on: it gets its own descriptor, ours closes
        fd = os.dup(listener.fileno())  # (not socket.detach(): selfcheck reads .detach() as a gradient stop)
        listener.close()
    store = dist.TCPStore("127.0.0.1", port, world, rank == 0, COLLECTIVE_TIMEOUT, master_listen_fd=fd)
    dist.init_process_group("gloo", store=store, rank=rank, world_size=world, timeout=COLLECTIVE_TIMEOUT)
    importlib.import_module("torch._dynamo")  # DDP's constructor imports it (seconds): pay it at start-up, once


@functools.cache
def data_mesh() -> DeviceMesh:
    """The 1-D DeviceMesh of the ranks, dimension "data" (jax_impl: the Mesh with axis "data")."""
    return init_device_mesh("cpu", (dist.get_world_size(),), mesh_dim_names=("data",))


def shard(fx: Fixture, key: str) -> torch.Tensor:
    """This rank's contiguous block of rows of a batch field [B, ...]: rows [r·B/W, (r+1)·B/W).

    Raises ValueError unless B divides by the world size W.
    """
    value = torch.tensor(np.array(fx[key]))
    world, rank = dist.get_world_size(), dist.get_rank()
    if value.shape[0] % world:
        raise ValueError(f"shard: field {key!r} expected a batch divisible by {world} ranks, got {value.shape[0]}")
    return value.chunk(world)[rank].clone()


def gather_ranks(value: torch.Tensor | np.ndarray) -> np.ndarray:
    """Every rank's copy of `value`, stacked [W, ...] on every rank (dist.all_gather over "data").

    A tensor must be outside any graph: one that requires grad raises (Tensor.numpy refuses it).
    """
    value = torch.from_numpy(np.array(value.numpy() if isinstance(value, torch.Tensor) else value))
    copies = [torch.empty_like(value) for _ in range(dist.get_world_size())]
    dist.all_gather(copies, value.contiguous(), group=data_mesh().get_group("data"))
    return torch.stack(copies).numpy()


def rank_gap(values: Mapping[str, torch.Tensor | np.ndarray]) -> dict[str, np.ndarray]:
    """max over ranks r of |value_r - value_0|, per element: exactly 0 where every rank holds the same bits."""
    out = {}
    for key, value in values.items():
        copies = gather_ranks(value)
        out[key] = np.max(np.abs(copies - copies[0]), axis=0)
    return out


def _run(scenario: str, fx: Fixture, variant: str) -> dict:
    return runner.lesson("torch", scenario).run_rank(fx, variant)


def main() -> None:
    """Entry point of a rank process: serve jobs until stdin closes (python -m torch_impl._distributed)."""
    code = serve(init_rank, _run)
    sys.stderr.flush()
    os._exit(code)  # no interpreter teardown: a peer that is already gone cannot block it


if __name__ == "__main__":
    from . import _distributed  # the importable module, whose caches the scenarios share

    _distributed.main()
