"""shared.core.launch: ranks started and joined, a rank's error surfaced at once, timeouts named, ports retried,
no orphan. Framework-free ranks (tests/_launch_rank.py), so each start costs a Python start-up, not a torch import.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from detach_parity.shared.core import fixtures, launch, rank, registry

ROOT = Path(__file__).resolve().parents[1]
RANK = "_launch_rank"
SCENARIO = registry.names()[0]  # any record: the ranks echo its first field (named here by position only)
pytestmark = pytest.mark.xdist_group("data_parallel")


def _gone(pid: int) -> bool:
    """True once `pid` has exited (a zombie waiting for a reaper counts as exited)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return True
    return state in ("Z", "X")


def _wait_gone(pids: list[int], seconds: float = 10.0) -> list[int]:
    end = time.monotonic() + seconds
    while time.monotonic() < end and not all(_gone(p) for p in pids):
        time.sleep(0.05)
    return [p for p in pids if not _gone(p)]


@pytest.fixture(scope="module")
def fx():
    return fixtures.make(SCENARIO, "float64", seed=0)


@pytest.fixture
def ranks():
    r = launch.Ranks(RANK, 2).start()
    yield r
    r.close()


def test_ranks_answer_jobs_and_close_without_leftovers(ranks, fx) -> None:
    pids, folder = ranks.pids, ranks.dir
    assert len(set(pids)) == 2 and ranks.alive and folder.is_dir()
    first = sorted(fx)[0]
    out = ranks.run(SCENARIO, fx, "echo")
    assert sorted(out) == ["first", "rank"] and int(out["rank"]) == 0  # rank 0's outputs are the case's
    np.testing.assert_array_equal(out["first"], fx[first])  # exact: echoed, untouched
    job = {"scenario": SCENARIO, "variant": "echo", "fixture": _meta(fx, folder), "out": str(folder)}
    replies = ranks.submit(job)
    assert [r["ok"] for r in replies] == [True, True] and ranks.pids == pids  # one start serves many jobs
    np.testing.assert_array_equal(np.load(folder / "rank1.npz")["first"], 2 * fx[first])  # rank 1 really ran
    ranks.close()
    assert not ranks.alive and not _wait_gone(pids) and not folder.exists()


def _meta(fx, folder: Path) -> dict:
    return rank.save_fixture(fx, folder / "given.npz")


def test_a_rank_that_raises_fails_the_job_with_its_error_and_nothing_hangs(ranks, fx) -> None:
    pids = ranks.pids
    start = time.monotonic()
    with pytest.raises(
        launch.RankError, match=rf"(?s)rank 1 failed in job 1 \({SCENARIO}\[raise_on_1\]\).*boom from rank 1"
    ):
        ranks.run(SCENARIO, fx, "raise_on_1", timeout=60)
    assert time.monotonic() - start < 10  # rank 0 blocks forever; the error did not wait for it
    assert not ranks.alive and not _wait_gone(pids)  # the blocked peer was killed too
    with pytest.raises(launch.RankError, match="not running"):
        ranks.run(SCENARIO, fx, "echo")


def test_a_timeout_names_the_rank_that_did_not_arrive(ranks, fx) -> None:
    pids = ranks.pids
    with pytest.raises(launch.RankTimeout, match=r"rank\(s\) \[1\] did not arrive .*\(answered: \[0\]\)"):
        ranks.run(SCENARIO, fx, "hang_on_1", timeout=1.0)
    assert not _wait_gone(pids)


def test_a_rank_that_dies_is_reported_with_its_exit_code(ranks, fx) -> None:
    with pytest.raises(launch.RankError, match=r"(?s)rank 1 failed in job 1 .*exited with code 7 before answering"):
        ranks.run(SCENARIO, fx, "exit_on_1", timeout=60)


def test_a_port_in_use_is_retried_on_another() -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        taken = busy.getsockname()[1]
        offered = iter([taken, rank.free_port()])
        with launch.Ranks(RANK, 2, ports=lambda: next(offered)) as ranks:
            assert ranks.ports_tried[0] == taken and ranks.port == ranks.ports_tried[1] != taken
            assert ranks.alive
        with pytest.raises(
            launch.RankError, match=rf"port was in use on all 2 attempts \(ports \[{taken}, {taken}\]\)"
        ):
            launch.Ranks(RANK, 2, ports=lambda: taken, attempts=2).start()


def test_a_killed_parent_leaves_no_orphan() -> None:
    code = (
        "import json, sys, time\n"
        "from detach_parity.shared.core import launch\n"
        f"r = launch.Ranks({RANK!r}, 2).start()\n"
        "print(json.dumps([r.pids, str(r.dir)]), flush=True)\n"
        "time.sleep(600)\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "tests"), str(ROOT)])}
    parent = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, env=env, cwd=ROOT, text=True)
    try:
        pids, folder = json.loads(parent.stdout.readline())
        assert len(pids) == 2 and not any(_gone(p) for p in pids) and Path(folder).is_dir()
    finally:
        parent.send_signal(signal.SIGKILL)  # no atexit, no finally: the ranks must notice alone
        parent.wait(timeout=30)
        parent.stdout.close()
    assert not _wait_gone(pids), f"ranks {pids} outlived their killed parent"
    launch.Ranks(RANK, 1).start().close()  # the next start removes the dead owner's folder
    assert not Path(folder).exists()


def test_a_set_whose_rank_dies_while_idle_is_closed_and_its_folder_removed() -> None:
    """Issue 28 item 3: the surviving rank lived on (blocked on its stdin) and the folder stayed in /tmp
    until the parent exited; nobody would have asked the set for a job again."""
    ranks = launch.Ranks(RANK, 2).start()
    pids, folder = ranks.pids, ranks.dir
    try:
        os.kill(pids[1], signal.SIGKILL)  # while no job runs
        assert not _wait_gone(pids), f"rank {pids[0]} outlived its dead peer"
        end = time.monotonic() + 10
        while folder.exists() and time.monotonic() < end:
            time.sleep(0.05)
        assert not folder.exists() and not ranks.alive
    finally:
        ranks.close()


def _holder(code: str) -> tuple[subprocess.Popen, str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "tests"), str(ROOT.parent), str(ROOT)])}
    proc = subprocess.Popen(
        [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, cwd=ROOT, text=True
    )
    return proc, proc.stdout.readline().strip()


def _dead_pid() -> int:
    """A pid no process has in this namespace now (one that just exited and was reaped)."""
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def test_a_live_owner_in_another_pid_namespace_keeps_its_folder() -> None:
    """Issue 28 item 2: the sweep took a folder's owner for dead when its pid was not alive in this PID
    namespace, so a run in another container sharing /tmp had its live folder deleted. Liveness is the
    owner's advisory lock now: a real second process owns a set of ranks, its folder is renamed to carry
    a pid that means nothing here (as it would seen from another namespace), and the sweep keeps it until
    the owner is killed."""
    code = (
        "import sys\n"
        "from detach_parity.shared.core import launch\n"
        f"r = launch.Ranks({RANK!r}, 1).start()\n"
        "print(r.dir, flush=True)\n"
        "sys.stdin.read()\n"
    )
    owner, path = _holder(code)
    try:
        folder = Path(path)
        assert folder.is_dir() and folder.name.startswith(f"{launch.PREFIX}{owner.pid}-")
        elsewhere = folder.with_name(f"{launch.PREFIX}{_dead_pid()}-{folder.name.rsplit('-', 1)[1]}")
        folder.rename(elsewhere)
        launch.Ranks(RANK, 1).start().close()  # each start sweeps the folders of dead owners
        assert elsewhere.is_dir() and (elsewhere / "rank0.log").exists(), "a live owner's folder was deleted"
    finally:
        owner.kill()  # SIGKILL: no atexit, no close; the kernel drops the lock
        owner.wait(timeout=30)
        owner.stdin.close()
        owner.stdout.close()
    launch.Ranks(RANK, 1).start().close()
    assert not elsewhere.exists()  # its owner is gone now: swept


def test_pool_reuses_running_ranks_and_replaces_failed_ones(fx) -> None:
    first = launch.pool(RANK, 2)
    second = first
    try:
        assert launch.pool(RANK, 2) is first
        with pytest.raises(launch.RankError):
            first.run(SCENARIO, fx, "raise_on_1", timeout=60)
        second = launch.pool(RANK, 2)
        assert second is not first and second.alive
        assert int(second.run(SCENARIO, fx, "echo")["rank"]) == 0
    finally:
        second.close()  # this test's pool only: the data_parallel cases of this worker keep theirs


def test_fixture_round_trip_and_bad_arguments(tmp_path, fx) -> None:
    meta = rank.save_fixture(fx, tmp_path / "f.npz")
    back = rank.load_fixture(meta)
    assert (back.scenario, back.dtype, back.seed, back.case) == (SCENARIO, "float64", 0, fx.case)
    for key in fx:
        np.testing.assert_array_equal(back[key], fx[key])  # exact: saved and loaded, untouched
    with pytest.raises(
        ValueError, match="save_fixture: fx expected a detach_parity.shared.core.fixtures.Fixture, got dict"
    ):
        rank.save_fixture({"x": np.zeros(2)}, tmp_path / "g.npz")
    with pytest.raises(ValueError, match="world expected an int >= 1, got 0"):
        launch.Ranks(RANK, 0)


@pytest.mark.slow
@pytest.mark.parametrize(
    "module, mode",
    [("detach_parity.torch_impl._distributed", None), ("detach_parity.jax_impl._distributed", "processes")],
)
def test_real_ranks_retry_a_taken_port_and_report_a_rank_error(module: str, mode: str | None, fx) -> None:
    # the frameworks' own rendezvous (torch's TCPStore, JAX's coordinator) on a port someone holds
    env = {"DETACH_PARITY_JAX_RANKS": mode, "JAX_PLATFORMS": "cpu"} if mode else {"OMP_NUM_THREADS": "1"}
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        taken = busy.getsockname()[1]
        offered = iter([taken, rank.free_port()])
        with launch.Ranks(module, 2, env=env, ports=lambda: next(offered)) as ranks:
            assert ranks.ports_tried[0] == taken and ranks.port != taken
            pids = ranks.pids
            name = registry.names("data_parallel")[0]  # any case of the family (named by position: no proof of it)
            with pytest.raises(launch.RankError, match=r"(?s)rank 0 failed in job 1 .*variant expected one of"):
                ranks.run(name, fixtures.make(name, "float64"), "no_such_variant")  # raised inside both ranks
            assert not ranks.alive
    assert not _wait_gone(pids)
