"""The ranks of the data_parallel family listen on the loopback interface only (issue 28, item 1).

torch's TCPStore and JAX's coordinator listened on every interface (`*`, unauthenticated) although the
README says the ranks run on 127.0.0.1. While a case of the family runs on its real processes, every
socket the ranks listen on (read from /proc/net/tcp and /proc/net/tcp6 through the ranks' own file
descriptors) must be on 127.0.0.1: the store or the coordinator, and gloo's pairs.
"""

from __future__ import annotations

import ipaddress
import os
import sys
from pathlib import Path

import pytest
from detach_parity.jax_impl import _distributed as jax_distributed
from detach_parity.shared.core import fixtures, registry, runner
from detach_parity.torch_impl import _distributed as torch_distributed

pytestmark = [
    pytest.mark.xdist_group("data_parallel"),
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/net/tcp: Linux only"),
]
NAME = registry.names("data_parallel")[0]  # any case of the family (named by position: no proof of it)
LISTEN = "0A"  # the state column of /proc/net/tcp*


def _address(field: str) -> tuple[ipaddress.IPv4Address | ipaddress.IPv6Address, int]:
    """A local_address column of /proc/net/tcp* ("0100007F:1F90") as (address, port)."""
    hexaddr, hexport = field.split(":")
    raw = bytes.fromhex(hexaddr)
    words = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))  # each 32-bit word is in host order
    addr = ipaddress.ip_address(words)
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        addr = addr.ipv4_mapped  # a dual-stack socket bound to ::ffff:127.0.0.1
    return addr, int(hexport, 16)


def listening(pids: list[int]) -> list[tuple[str, int, int]]:
    """(address, port, pid) of every listening TCP socket among the open file descriptors of `pids`."""
    inodes = {}
    for pid in pids:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue  # closed meanwhile
            if target.startswith("socket:["):
                inodes[target[len("socket:[") : -1]] = pid
    found = []
    for table in ("tcp", "tcp6"):
        path = Path(f"/proc/net/{table}")
        if not path.exists():
            continue
        for line in path.read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == LISTEN and fields[9] in inodes:
                addr, port = _address(fields[1])
                found.append((str(addr), port, inodes[fields[9]]))
    return found


def test_the_address_column_is_read_right() -> None:
    assert _address("0100007F:1F90") == (ipaddress.ip_address("127.0.0.1"), 8080)
    assert _address("00000000:0050")[0] == ipaddress.ip_address("0.0.0.0")
    assert str(_address("00000000000000000000000000000000:CF53")[0]) == "::"
    assert str(_address("0000000000000000FFFF00000100007F:DE17")[0]) == "127.0.0.1"


@pytest.mark.parametrize("framework", ["torch", "jax"])
def test_every_socket_the_ranks_listen_on_is_on_loopback(framework: str) -> None:
    fx = fixtures.make(NAME, "float64")
    variant = registry.get(NAME).variants[0]
    if framework == "torch":
        ranks = torch_distributed.ranks()  # the ranks the family's torch cases run on in this process
        runner.lesson("torch", NAME).run(fx, variant)
    else:
        ranks = jax_distributed.ranks("processes")  # two processes, jax.distributed and gloo
        jax_distributed.on_ranks(NAME, fx, variant, mode="processes")
    try:
        assert ranks.alive and len(ranks.pids) == 2
        sockets = listening(ranks.pids)
        # rank 0 hosts the store or the coordinator, on the port the launcher picked; each rank has gloo's
        assert ranks.port in [port for _, port, pid in sockets if pid == ranks.pids[0]], sockets
        assert {pid for _, _, pid in sockets} == set(ranks.pids), sockets
        exposed = [s for s in sockets if s[0] != "127.0.0.1"]
        assert not exposed, f"{framework} ranks listen beyond 127.0.0.1: {exposed}"
    finally:
        if framework == "jax":
            ranks.close()  # this test's set: the suite's JAX cases run on forced devices
