"""The ranks of the data_parallel scenarios on JAX multi-process SPMD; mirrored by torch_impl/_distributed.py.

A scenario's `run(fx, variant)` calls `on_ranks`: the case runs in a separate process
(`python -m jax_impl._distributed`, started once per process by shared.core.launch and reused)
over WORLD = 2 devices, in one of two modes chosen by DETACH_PARITY_JAX_RANKS:
  "processes" (default): two processes, `jax.distributed.initialize(coordinator_address=
      "127.0.0.1:PORT", num_processes=2, process_id=i)` with gloo CPU collectives, one device each;
      the coordinator and gloo listen on 127.0.0.1 only (by default on every interface, unauthenticated);
  "devices": one process with XLA_FLAGS=--xla_force_host_platform_device_count=2 (the quick path:
      the same program over two devices of one host, no rendezvous).
Every process calls the scenario's `run_rank(fx, variant)`; process 0's outputs are the case's.
Inside a rank: `data_mesh()` is the Mesh over jax.devices() with axis "data", `shard` gives a batch
as a global array sharded over it, `gather_ranks` / `rank_gap` compare a value across the devices
(each device's own buffer, gathered with process_allgather: a real comparison).
Real hosts: the same rank code with `jax.distributed.initialize(coordinator_address="HOST0:PORT",
num_processes=N, process_id=i)` on each host (or the cluster auto-detection), one process per host.
Reference: Xu et al. 2021, "GSPMD: General and Scalable Parallelization for ML Computation Graphs", arXiv:2105.04663.
"""

from __future__ import annotations

import errno
import functools
import os
import socket
import sys
from collections.abc import Mapping

import jax
import numpy as np
from jax.experimental import multihost_utils
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from ..shared.core import launch, runner
from ..shared.core.fixtures import Fixture
from ..shared.core.rank import PortInUse, serve

__all__ = ["ranks", "on_ranks", "init_rank", "data_mesh", "shard", "gather_ranks", "rank_gap", "main"]

WORLD = 2  # devices of every data_parallel case (the fixtures split their batch in WORLD shards)
MODES = ("processes", "devices")
MODE_ENV = "DETACH_PARITY_JAX_RANKS"
FORCE = "--xla_force_host_platform_device_count"


def _mode(mode: str | None = None) -> str:
    mode = os.environ.get(MODE_ENV, MODES[0]) if mode is None else mode
    if mode not in MODES:
        raise ValueError(f"{MODE_ENV}: expected one of {list(MODES)}, got {mode!r}")
    return mode


def ranks(mode: str | None = None) -> launch.Ranks:
    """The running JAX ranks of this process for `mode` (default: $DETACH_PARITY_JAX_RANKS or "processes")."""
    mode = _mode(mode)
    env = {MODE_ENV: mode, "JAX_PLATFORMS": "cpu"}
    if mode == "devices":
        flags = [f for f in os.environ.get("XLA_FLAGS", "").split() if not f.startswith(FORCE)]
        env["XLA_FLAGS"] = " ".join([*flags, f"{FORCE}={WORLD}"])
    return launch.pool(__name__, WORLD if mode == "processes" else 1, env=env)


def on_ranks(scenario: str, fx: Fixture, variant: str, mode: str | None = None) -> dict[str, np.ndarray]:
    """Run `jax_impl.<scenario>.run_rank(fx, variant)` on the ranks of `mode`; return process 0's outputs.

    Raises ValueError for an unknown mode, shared.core.launch.RankError with the failing rank's
    traceback, RankTimeout naming a rank that did not answer.
    """
    return ranks(mode).run(scenario, fx, variant)


def init_rank(rank: int, world: int, port: int) -> None:
    """Join the `world` processes through the coordinator on 127.0.0.1:port (process 0 hosts it), gloo collectives.

    In "devices" mode (world 1) there is nothing to join. Either way WORLD devices must be visible.
    Raises shared.core.rank.PortInUse when the port is taken (the launcher retries another).
    """
    if _mode() == "processes":
        if rank == 0:
            with socket.socket() as probe:  # the coordinator's gRPC error does not say why it failed
                try:
                    probe.bind(("127.0.0.1", port))
                except OSError as exc:
                    if exc.errno == errno.EADDRINUSE:
                        raise PortInUse(str(exc)) from exc
                    raise
        jax.config.update("jax_cpu_collectives_implementation", "gloo")  # this rank process's own setting
        try:
            jax.distributed.initialize(
                coordinator_address=f"127.0.0.1:{port}",
                coordinator_bind_address=f"127.0.0.1:{port}",  # the default, [::]:port, is every interface
                num_processes=world,
                process_id=rank,
                initialization_timeout=120,
            )
        except jax.errors.JaxRuntimeError as exc:
            if "Failed to start RPC server" in str(exc):
                raise PortInUse(str(exc)) from exc
            raise
        _loopback_collectives()
    if jax.device_count() != WORLD:
        raise RuntimeError(f"init_rank: expected {WORLD} devices, got {jax.devices()}")


def _loopback_collectives() -> None:
    # Gloo's pairs listen on the address the host name resolves to (a container's own address, say),
    # and jax 0.10 has no public setting for it: before its first use, this rank process's CPU backend
    # is registered again with gloo collectives made on 127.0.0.1. Where these private names moved,
    # the default stays (tests/test_dp_listen.py checks every listening socket of the ranks).
    try:
        from jax._src import distributed, xla_bridge
        from jax._src.lib import _jax

        collectives = _jax.make_gloo_tcp_collectives(
            distributed_client=distributed.global_state.client, hostname="127.0.0.1"
        )
        factory = functools.partial(xla_bridge.make_cpu_client, collectives=collectives)
        xla_bridge.register_backend_factory("cpu", factory, priority=0, fail_quietly=False)
    except (ImportError, AttributeError, TypeError):
        pass


@functools.cache
def data_mesh() -> Mesh:
    """The 1-D Mesh over jax.devices(), axis "data" (torch_impl: the DeviceMesh with dimension "data")."""
    return Mesh(np.array(jax.devices()), ("data",))


def shard(fx: Fixture, key: str) -> jax.Array:
    """A batch field [B, ...] as a global array sharded over "data": device r holds rows [r·B/W, (r+1)·B/W).

    Raises ValueError unless B divides by the world size W.
    """
    value = np.asarray(fx[key])
    if value.shape[0] % WORLD:
        raise ValueError(f"shard: field {key!r} expected a batch divisible by {WORLD} ranks, got {value.shape[0]}")
    return jax.make_array_from_callback(value.shape, NamedSharding(data_mesh(), P("data")), lambda idx: value[idx])


def gather_ranks(value: jax.Array) -> np.ndarray:
    """Every device's copy of a replicated array (or each device's row of one sharded [W, ...]), stacked [W, ...]."""
    if value.sharding.is_fully_replicated:
        value = _own_rows()(value)
    return np.asarray(multihost_utils.process_allgather(value, tiled=True))


@functools.cache
def _own_rows():
    # each device's own buffer of a replicated array, one row per device (compiled once per shape)
    rows = jax.shard_map(
        lambda v: jax.lax.pcast(v, "data", to="varying")[None], mesh=data_mesh(), in_specs=P(), out_specs=P("data")
    )
    return jax.jit(rows)


def rank_gap(values: Mapping[str, jax.Array]) -> dict[str, np.ndarray]:
    """max over ranks r of |value_r - value_0|, per element: exactly 0 where every device holds the same bits."""
    out = {}
    for key, value in values.items():
        copies = gather_ranks(value)
        out[key] = np.max(np.abs(copies - copies[0]), axis=0)
    return out


def _run(scenario: str, fx: Fixture, variant: str) -> dict:
    with jax.enable_x64(fx.dtype == "float64"):  # scoped to the case, as scenario_run does
        out = runner.lesson("jax", scenario).run_rank(fx, variant)
        return {k: np.asarray(v) for k, v in out.items()}


def main() -> None:
    """Entry point of a rank process: serve jobs until stdin closes (python -m jax_impl._distributed)."""
    code = serve(init_rank, _run)
    sys.stderr.flush()
    os._exit(code)  # no interpreter teardown: a peer that is already gone cannot block it


if __name__ == "__main__":
    from . import _distributed  # the importable module, whose caches the scenarios share

    _distributed.main()
