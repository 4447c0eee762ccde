"""shared.core.children: every process the package starts is started, followed, shielded from Ctrl-C and reaped
in one place. Real processes throughout: a real kill, a real SIGINT to a real process group."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from detach_parity.shared.core import children

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc: Linux only")
ECHO = "import sys\nfor line in sys.stdin:\n    print(line.strip().upper(), flush=True)\n"


def _gone(pid: int) -> bool:
    """True once `pid` has exited and been reaped (no /proc entry) or is a zombie nobody reaped yet."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return True
    return state in ("Z", "X")


def _wait_gone(pid: int, seconds: float = 15.0) -> bool:
    end = time.monotonic() + seconds
    while time.monotonic() < end and not _gone(pid):
        time.sleep(0.05)
    return _gone(pid)


def test_a_spawned_child_talks_in_lines_in_a_session_of_its_own_and_is_reaped() -> None:
    child = children.spawn([sys.executable, "-c", ECHO], "echo", pipes=True)
    try:
        assert os.getsid(child.pid) == child.pid != os.getsid(0)  # the terminal's Ctrl-C is not its
        assert child.send(b"one") and child.send(b"two\n")
        got: list[bytes] = []
        end = time.monotonic() + 30
        while len(got) < 2 and time.monotonic() < end:
            children.readable([child], 0.5)
            got += child.lines()
        assert got == [b"ONE", b"TWO"] and child.running
    finally:
        children.end([child], grace=10)  # stdin closed: it exits by itself
    assert child.returncode == 0 and child.exit_text() == "exited with code 0"
    assert not Path(f"/proc/{child.pid}").exists()  # reaped, not a zombie
    assert not child.send(b"late")  # its pipe is closed: refused, not raised


def test_end_kills_a_child_that_does_not_stop_and_reaps_it() -> None:
    stubborn = "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\ntime.sleep(600)\n"
    child = children.spawn([sys.executable, "-c", stubborn], "stubborn", pipes=True)
    start = time.monotonic()
    children.end([child], grace=0.5)
    assert time.monotonic() - start < 10
    assert child.returncode == -signal.SIGKILL and child.exit_text() == "was killed by signal 9 (SIGKILL)"
    assert not Path(f"/proc/{child.pid}").exists()


def test_a_forked_child_returns_its_status_in_its_own_session() -> None:
    ok = children.fork(lambda: 7 if os.getsid(0) == os.getpid() else 1, "fork ok")
    raised = children.fork(lambda: 1 // 0, "fork raised")
    assert ok.wait(30) == 7 and raised.wait(30) == 3
    assert not Path(f"/proc/{ok.pid}").exists() and not Path(f"/proc/{raised.pid}").exists()


def test_a_copy_of_a_child_in_a_forked_process_ends_nothing() -> None:
    sleeper = children.spawn([sys.executable, "-c", "import time; time.sleep(600)"], "sleeper")
    try:
        copy = children.fork(lambda: (children.end([sleeper]), 0)[1], "tries to end it")
        assert copy.wait(30) == 0
        time.sleep(0.2)
        assert sleeper.running  # only the process that started it ends it
    finally:
        children.end([sleeper])
    assert sleeper.returncode == -signal.SIGKILL


def test_a_child_whose_parent_is_already_gone_exits_at_once() -> None:
    code = "import time, detach_parity.shared.core.children as c; c.follow_parent(-1); time.sleep(30)"  # -1: never ours
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, timeout=30, check=False)
    assert done.returncode == children.ORPHANED


def _parent(script: str, tmp_path: Path) -> tuple[subprocess.Popen, int]:
    """A real parent (in a session of its own, so that its signals never reach pytest) that spawns one child
    through the module, the child running `script`; returns the parent and the child's pid."""
    child = f"import detach_parity.shared.core.children as c, sys\nc.follow_parent(int(sys.argv[1]))\n{script}"
    code = (
        "import os, signal, sys, time\n"
        "signal.signal(signal.SIGINT, signal.default_int_handler)  # as at a terminal, even under a background job\n"
        "from detach_parity.shared.core import children\n"
        f"kid = children.spawn([sys.executable, '-c', {child!r}, str(os.getpid())], 'kid', cwd={str(tmp_path)!r})\n"
        "print(kid.pid, flush=True)\n"
        "time.sleep(600)\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, start_new_session=True, cwd=ROOT
    )
    return proc, int(proc.stdout.readline())


def test_a_child_never_outlives_its_parent_killed_by_sigkill(tmp_path) -> None:
    proc, kid = _parent("import time\ntime.sleep(600)\n", tmp_path)
    try:
        assert not _gone(kid)
        time.sleep(0.5)  # past follow_parent
        proc.kill()  # SIGKILL: no atexit, no finally
        proc.wait(timeout=30)
        assert _wait_gone(kid), f"child {kid} outlived its killed parent"
    finally:
        proc.stdout.close()
        if not _gone(kid):
            os.kill(kid, signal.SIGKILL)


def test_ctrl_c_reaches_the_parent_only_which_ends_its_child(tmp_path) -> None:
    """A Ctrl-C at a terminal is SIGINT to its foreground process group: the child is not in it."""
    watch = (
        "import json, signal, time\n"
        "signal.signal(signal.SIGINT, lambda *a: open('sigint', 'w').write('seen'))\n"
        "open('ready', 'w').write(json.dumps(True))\n"
        "time.sleep(600)\n"
    )
    proc, kid = _parent(watch, tmp_path)
    try:
        end = time.monotonic() + 30
        while not (tmp_path / "ready").exists() and time.monotonic() < end:
            time.sleep(0.05)
        assert json.loads((tmp_path / "ready").read_text()) is True
        os.killpg(proc.pid, signal.SIGINT)  # the parent's process group, as the terminal does
        assert proc.wait(timeout=30) != 0  # KeyboardInterrupt: it exits, ending its child at exit
        assert _wait_gone(kid), f"child {kid} outlived its interrupted parent"
        assert not (tmp_path / "sigint").exists()  # the child never saw the Ctrl-C
    finally:
        proc.stdout.close()
        if not _gone(kid):
            os.kill(kid, signal.SIGKILL)


PLANTED = "import pathlib\npathlib.Path(__file__).with_name('imported').write_text('json.py from the working folder')\n"


@pytest.mark.parametrize(
    "argv",
    [["run", "--jobs", "2", "basics", "linear_regression"], ["run", "dp_allreduce_mean", "--dtype", "float64"]],
    ids=["run-workers", "data-parallel-ranks"],
)
def test_no_child_imports_code_from_the_working_folder(tmp_path, argv) -> None:
    """A json.py planted in the folder the command runs from is imported by no worker and no rank (`-P`)."""
    (tmp_path / "json.py").write_text(PLANTED + "raise ImportError('planted')\n")
    cli = Path(sys.executable).with_name("detach-parity")
    done = subprocess.run([str(cli), *argv, "--quiet"], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert not (tmp_path / "imported").exists(), "a child imported the planted json.py"
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]


def test_a_python_child_gets_safe_path_mode_and_the_parents_path(tmp_path) -> None:
    (tmp_path / "json.py").write_text(PLANTED)
    code = "import json, sys; print(json.__file__); print(sys.flags.safe_path)"
    child = children.spawn(children.python("-c", code), "safe", pipes=True, cwd=tmp_path)
    try:
        assert child.wait() == 0
        out = child.popen.stdout.read().decode().split()  # type: ignore[union-attr]
    finally:
        children.end([child])
    assert out[1] == "True" and not out[0].startswith(str(tmp_path)), out
    assert not (tmp_path / "imported").exists()
