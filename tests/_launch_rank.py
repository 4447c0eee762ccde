"""A framework-free rank for tests/test_dp_launch.py: what `shared.core.launch` must survive.

`python -m _launch_rank` (tests/ is on the ranks' path: they inherit the parent's sys.path).
init: rank 0 listens on the rendezvous port, as a coordinator does (PortInUse if it is taken).
The variant names the behaviour: "echo" (every rank answers its rank and the fixture's first field
times rank + 1), "raise_on_1" (rank 1 raises while
rank 0 blocks, as in a collective its peer never joins), "hang_on_1" (rank 1 never answers),
"exit_on_1" (rank 1 dies with exit code 7).
"""

from __future__ import annotations

import errno
import os
import socket
import time

import numpy as np
from detach_parity.shared.core.rank import PortInUse, serve

_STATE: dict = {}


def init(rank: int, world: int, port: int) -> None:
    _STATE["rank"] = rank
    if rank == 0:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise PortInUse(str(exc)) from exc
            raise
        sock.listen()
        _STATE["socket"] = sock  # held for the life of the rank, like a coordinator


def run(scenario: str, fx, variant: str) -> dict:
    rank = _STATE["rank"]
    if variant == "raise_on_1":
        if rank == 1:
            raise ValueError("boom from rank 1")
        time.sleep(3600)  # blocked waiting for a peer that will never arrive
    if variant == "hang_on_1" and rank == 1:
        time.sleep(3600)
    if variant == "exit_on_1" and rank == 1:
        os._exit(7)
    return {"rank": np.array(rank), "first": np.asarray(fx[sorted(fx)[0]]) * (rank + 1)}


if __name__ == "__main__":
    os._exit(serve(init, run))
