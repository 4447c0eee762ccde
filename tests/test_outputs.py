"""Nothing lost, nothing half-written: output folders, --json files, interrupts, a closed stdout.

shared.apps holds the rules, one module each: `OutputFolder` (out_folder: a folder is written only
when absent, empty or proven an earlier output of the command by its marker, built beside it and
swapped in whole, or its contents replaced on a mount point), `write_json` (json_file: atomic),
`interrupt_guard` (interrupts: Ctrl-C counted even when swallowed: exit 130, nothing committed);
shared.apps.cli turns a closed stdout into exit 141 with a message. The workers of `run --jobs 2`
(run_workers): Ctrl-C, a killed worker, a killed parent.
"""

from __future__ import annotations

import io
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from detach_parity.shared.apps import cli, interrupts, out_folder, selfcheck, site
from detach_parity.shared.apps import run as run_app
from detach_parity.shared.apps.common import MARKER, OutputError, OutputFolder
from detach_parity.shared.core import registry, runner

ROOT = Path(__file__).resolve().parents[1]
RUN = ["run", "basics", "--variant", "z_stopped", "--dtype", "float64", "--quiet"]  # 2 cases, about a second
# the first line of a child that is sent Ctrl-C: a suite run as a background job hands SIGINT down ignored
AS_AT_A_TERMINAL = "import signal\nsignal.signal(signal.SIGINT, signal.default_int_handler)\n"
PREVIOUS = '{"previous": true, "versions": {"jax": "0.10.2"}}\n'  # an earlier report: --json may replace it


def _siblings(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.parent.iterdir() if p.name.startswith(f".{folder.name}."))


def _write(folder: Path, files: dict[str, str], command: str = "site") -> None:
    with OutputFolder(folder, command) as root:
        for rel, text in files.items():
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_text(text, encoding="utf-8")


def _tree(folder: Path) -> dict[str, str]:
    return {p.relative_to(folder).as_posix(): p.read_text() for p in sorted(folder.rglob("*")) if p.is_file()}


# -- output folders (site --out) -------------------------------------------------------------------


def test_site_refuses_a_folder_with_files_it_did_not_write(tmp_path, capsys) -> None:
    # the reproduction: both files survived nothing before; now nothing is run, nothing touched
    d = tmp_path / "d"
    d.mkdir()
    (d / "index.html").write_text("mine\n")
    (d / "bench.html").write_text("mine\n")
    assert cli.main(["site", "--out", str(d), "basics"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert f"--out expected an empty folder or an earlier `detach-parity site` output (with its {MARKER})" in err
    assert f"got '{d}', which holds bench.html, index.html and no {MARKER}" in err
    assert _tree(d) == {"index.html": "mine\n", "bench.html": "mine\n"} and _siblings(d) == []


@pytest.mark.parametrize(
    "out, why",
    [
        ("/", "a folder that does not contain the package"),
        (str(ROOT), "a folder that does not contain the package"),
        (str(ROOT / "shared" / "apps" / "site" / "templates"), "a folder outside the package's own folders"),
        (str(ROOT / "torch_impl"), "a folder outside the package's own folders"),
        (str(ROOT / "jax_impl" / "new"), "a folder outside the package's own folders"),
    ],
)
def test_the_package_and_its_parents_are_refused(out, why) -> None:
    # checked on the writer itself: a regression must not get the chance to write into / or the package
    with pytest.raises(OutputError, match=f"--out expected {why}"):
        OutputFolder(out, "site").check()


def test_site_refuses_a_package_folder_and_the_working_directory(tmp_path, monkeypatch, capsys) -> None:
    pkg = tmp_path / "a" / "pkg"
    pkg.mkdir(parents=True)
    monkeypatch.setattr(out_folder, "_package_folders", lambda: [pkg.resolve()])  # a stand-in for shared/
    assert cli.main(["site", "basics", "--out", str(pkg / "templates")]) == 2
    assert "a folder outside the package's own folders" in " ".join(capsys.readouterr().err.split())
    sub = tmp_path / "b" / "sub"
    sub.parent.mkdir()
    _write(sub, {"index.html": "x"})  # an earlier site, and the working directory
    monkeypatch.chdir(sub)
    for out in (".", ".."):  # swapped away, it would vanish under the process
        assert cli.main(["site", "basics", "--out", out]) == 2
        assert "a folder other than the working directory or one above it" in " ".join(capsys.readouterr().err.split())
    assert list(pkg.iterdir()) == [] and set(_tree(sub)) == {"index.html", MARKER}


def test_package_folders_are_refused_whatever_the_marker_says(tmp_path, monkeypatch) -> None:
    pkg = tmp_path / "pkg"
    _write(pkg, {"a.txt": "ours"})  # a genuine earlier output ...
    monkeypatch.setattr(out_folder, "_package_folders", lambda: [pkg.resolve()])  # ... that is the package's folder
    with pytest.raises(OutputError, match="outside the package's own folders"):
        OutputFolder(pkg, "site").check()


def test_an_earlier_output_is_replaced_whole(tmp_path) -> None:
    d = tmp_path / "site"
    _write(d, {"index.html": "v1", "old.html": "v1", "figures/a.svg": "v1"})
    marker = json.loads((d / MARKER).read_text())
    assert marker["written_by"] == "detach-parity site" and sorted(marker["files"]) == [
        "figures/a.svg",
        "index.html",
        "old.html",
    ]
    _write(d, {"index.html": "v2", "figures/b.svg": "v2"})
    files = _tree(d)
    assert {k: v for k, v in files.items() if k != MARKER} == {"index.html": "v2", "figures/b.svg": "v2"}
    assert _siblings(d) == []  # neither the build folder nor the old one is left beside it
    assert (d.stat().st_mode & 0o777) == 0o777 & ~_umask()  # not mkdtemp's 0700


def test_an_empty_or_missing_folder_is_written(tmp_path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    _write(empty, {"index.html": "x"})
    _write(tmp_path / "new", {"index.html": "x"})
    for d in (empty, tmp_path / "new"):
        assert set(_tree(d)) == {"index.html", MARKER}


def test_the_two_rename_fallback_replaces_whole_too(tmp_path, monkeypatch) -> None:
    d = tmp_path / "site"
    _write(d, {"index.html": "v1", "old.html": "v1"})
    monkeypatch.setattr(out_folder, "_exchange", lambda a, b: False)  # no renameat2 (another OS, another filesystem)
    _write(d, {"index.html": "v2"})
    assert set(_tree(d)) == {"index.html", MARKER} and _tree(d)["index.html"] == "v2" and _siblings(d) == []


@pytest.mark.parametrize("tamper", ["added", "changed", "symlink", "other command", "marker escapes", "bad marker"])
def test_an_earlier_output_touched_since_is_refused(tmp_path, tamper) -> None:
    d = tmp_path / "site"
    _write(d, {"index.html": "ours", "figures/a.svg": "ours"})
    marker = json.loads((d / MARKER).read_text())
    if tamper == "added":
        (d / "figures" / "notes.txt").write_text("mine")
    elif tamper == "changed":
        (d / "index.html").write_text("edited by hand")
    elif tamper == "symlink":
        (d / "link").symlink_to(tmp_path)
    elif tamper == "other command":
        (d / MARKER).write_text(json.dumps({**marker, "written_by": "detach-parity bench"}))
    elif tamper == "marker escapes":
        (d / MARKER).write_text(json.dumps({**marker, "files": {**marker["files"], "../x": "0"}}))
    else:
        (d / MARKER).write_text("{")
    before = _tree(d)
    with pytest.raises(OutputError, match=r"--out expected .*, got '.*site'"):
        _write(d, {"index.html": "new"})
    assert _tree(d) == before and _siblings(d) == []


@pytest.mark.parametrize("error", [RuntimeError, KeyboardInterrupt])
def test_a_failed_or_interrupted_build_leaves_the_folder_as_it_was(tmp_path, error) -> None:
    d = tmp_path / "site"
    _write(d, {"index.html": "v1"})
    before = _tree(d)
    with pytest.raises(error), OutputFolder(d, "site") as root:
        (root / "index.html").write_text("half")
        raise error()
    assert _tree(d) == before and _siblings(d) == []


def test_a_swallowed_interrupt_still_stops_the_commit(tmp_path, monkeypatch) -> None:
    d = tmp_path / "site"
    monkeypatch.setattr(interrupts, "_interrupts", 1)  # a SIGINT arrived and a library caught its KeyboardInterrupt
    with pytest.raises(KeyboardInterrupt):
        _write(d, {"index.html": "x"})
    assert not d.exists() and _siblings(d) == []


def test_site_interrupted_mid_build_exits_130_and_keeps_the_earlier_site(tmp_path, monkeypatch, capsys) -> None:
    d = tmp_path / "site"
    _write(d, {"index.html": "earlier"})
    before = _tree(d)

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(site, "run_cases", interrupted)
    assert cli.main(["site", "basics", "--out", str(d), "--quiet"]) == 130
    assert "detach-parity site: interrupted" in capsys.readouterr().err
    assert _tree(d) == before and _siblings(d) == []


def test_site_in_a_read_only_working_directory_exits_2(monkeypatch, capsys) -> None:
    monkeypatch.chdir("/proc")  # no folder can be made here, not even by root
    assert cli.main(["site", "basics", "--quiet"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "detach-parity site: error: --out expected a folder whose parent can be written" in err
    assert "Traceback" not in err


@pytest.fixture
def mount_point(tmp_path):
    """An empty folder bind-mounted on `site` (what a bind-mounted site/ or a fresh disk is), unmounted after;
    the test is skipped, with the reason, where this machine forbids `mount --bind`."""
    disk, target = tmp_path / "disk", tmp_path / "site"
    disk.mkdir()
    target.mkdir()
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("a bind mount needs root and mount(8)")
    done = subprocess.run(["mount", "--bind", str(disk), str(target)], capture_output=True, text=True)
    if done.returncode:
        pytest.skip(f"this machine forbids a bind mount: {done.stderr.strip()}")
    try:
        yield target
    finally:
        subprocess.run(["umount", str(target)], check=True)


def test_an_output_folder_on_a_mount_point_is_replaced_in_place(mount_point) -> None:
    """Issue 28 item 4: a mount point cannot be renamed: everything was built, then the swap failed with
    [Errno 16] Device or resource busy. It is known up front now, the new folder is built inside the target,
    and the commit replaces the old output's files only (the marker rule holds; lost+found is left alone)."""
    with pytest.raises(OSError, match="Device or resource busy"):  # what a swap would meet
        os.rename(mount_point, mount_point.with_name("elsewhere"))
    assert out_folder.is_mount_point(mount_point) and not os.path.ismount(mount_point)  # a same-disk bind
    (mount_point / "lost+found").mkdir()  # a fresh disk's: the filesystem's, neither ours nor foreign
    _write(mount_point, {"index.html": "v1", "old.html": "v1", "figures/a.svg": "v1"})
    _write(mount_point, {"index.html": "v2", "figures/b.svg": "v2"})
    assert {k: v for k, v in _tree(mount_point).items() if k != MARKER} == {"index.html": "v2", "figures/b.svg": "v2"}
    assert sorted(p.name for p in mount_point.iterdir()) == [MARKER, "figures", "index.html", "lost+found"]
    assert _siblings(mount_point) == [] and out_folder.is_mount_point(mount_point)  # still the mount
    (mount_point / "notes.txt").write_text("mine")  # then a file the command did not write: refused, untouched
    with pytest.raises(OutputError, match=r"1 path\(s\) were not written by it or changed since: notes.txt"):
        _write(mount_point, {"index.html": "v3"})
    assert _tree(mount_point)["index.html"] == "v2" and _tree(mount_point)["notes.txt"] == "mine"
    assert [p.name for p in mount_point.iterdir() if p.name.startswith(".site.new-")] == []


def test_site_onto_a_mount_point_writes_the_site(mount_point, capsys) -> None:
    assert cli.main(["site", "basics", "--out", str(mount_point), "--quiet"]) == 0, capsys.readouterr().err
    files = _tree(mount_point)
    assert "index.html" in files and "basics.html" in files and MARKER in files
    marker = json.loads(files[MARKER])
    assert marker["written_by"] == "detach-parity site" and set(marker["files"]) == set(files) - {MARKER}


# -- --json files ------------------------------------------------------------------------------------


def test_run_json_over_a_file_size_limit_keeps_the_previous_file(tmp_path, capsys) -> None:
    path = tmp_path / "out.json"
    path.write_text(PREVIOUS)
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    # `ulimit -f 1` (the JSON is ~2 KiB); Python ignores SIGXFSZ, so the write fails with EFBIG
    resource.setrlimit(resource.RLIMIT_FSIZE, (1024, hard))
    try:
        code = cli.main([*RUN, "--json", str(path)])
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
    captured = capsys.readouterr()
    assert code == 2  # an output error, not the 1 of a failed check
    assert f"detach-parity run: error: could not write {path}" in " ".join(captured.err.split())
    assert "2 cases: 2 PASS" in captured.out  # the table still shows what was checked
    assert path.read_text() == PREVIOUS and [p.name for p in tmp_path.iterdir()] == ["out.json"]


def test_json_replaces_only_an_earlier_report(tmp_path, capsys) -> None:
    """--json writes an absent path or over an earlier report of the package; a symlink, the user's
    port source or any other file is left alone with exit 2, refused before any work is done (the
    argument's type checks the rule of write_json, through which every command writes)."""
    target, link = tmp_path / "target.txt", tmp_path / "out.json"
    target.write_text("not yours")
    link.symlink_to(target)
    source = tmp_path / "my_port.py"
    source.write_text("torch_model = ...\n")
    for argv in (RUN, ["check", "cnn"], ["claims", "C01"], ["bench", "basics", "--quick"]):
        for path in (link, source, target):
            with pytest.raises(SystemExit) as exc:
                cli.main([*argv, "--json", str(path)])
            captured = capsys.readouterr()
            assert exc.value.code == 2 and captured.out == ""  # nothing ran
            assert "a file this package did not write: it is left alone" in " ".join(captured.err.split())
    assert target.read_text() == "not yours" and link.is_symlink() and source.read_text() == "torch_model = ...\n"
    fresh = tmp_path / "run.json"
    assert (
        cli.main([*RUN, "--json", str(fresh)]) == 0 and cli.main([*RUN, "--json", str(fresh)]) == 0
    )  # its own: replaced
    assert json.loads(fresh.read_text())["ok"] is True


class _ClosedStdout(io.TextIOBase):
    """What `| head -1` leaves once head has exited: every write fails with EPIPE."""

    def write(self, text: str) -> int:
        raise BrokenPipeError(32, "Broken pipe")

    def isatty(self) -> bool:
        return False


def test_run_json_survives_a_closed_stdout(tmp_path, monkeypatch, capsys) -> None:
    path = tmp_path / "out.json"
    monkeypatch.setattr(sys, "stdout", _ClosedStdout())
    assert cli.main([*RUN, "--json", str(path)]) == 141
    assert "detach-parity run: error: standard output was closed" in " ".join(capsys.readouterr().err.split())
    data = json.loads(path.read_text())  # written before the table: nothing lost
    assert data["ok"] is True and len(data["results"]) == 2


def test_selfcheck_json_first_and_atomic(tmp_path, monkeypatch, capsys) -> None:
    (site_,) = [s for s in selfcheck.find_sites() if s.module == "basics" and s.path.startswith("jax_impl")]
    monkeypatch.setattr(selfcheck, "selfcheck", lambda sites, **kw: [selfcheck.Outcome(site_, "killed", 0.5, 1)])
    monkeypatch.setattr(selfcheck, "find_sites", lambda: [site_])
    path = tmp_path / "mutants.json"
    monkeypatch.setattr(sys, "stdout", _ClosedStdout())
    assert cli.main(["selfcheck", "basics", "--json", str(path)]) == 141
    data = json.loads(path.read_text())
    assert data["killed"] == data["total"] == 1 and data["mutants"][0]["status"] == "killed"


def test_a_closed_stdout_in_a_real_pipe_exits_141_without_a_traceback() -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "detach_parity.shared.apps.cli", "list"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    proc.stdout.close()  # the reader is gone before the first line
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 141, err
    assert "detach-parity list: error: standard output was closed" in " ".join(err.split())
    assert "Traceback" not in err and "Exception ignored" not in err


# -- interrupts --------------------------------------------------------------------------------------


def _in_own_session(script: str, **kwargs) -> subprocess.Popen:
    """`python -c SCRIPT` in a session and process group of its own, SIGINT delivered as at a terminal.

    A Ctrl-C test signals only that process (and the children it starts): never the pytest worker,
    where a KeyboardInterrupt raised at an arbitrary bytecode (a gc callback of hypothesis, say)
    surfaces as an unraisable exception. A suite run as a background job (`make test &`, nohup)
    hands SIGINT down ignored, which interrupt_guard rightly keeps: the script's first line undoes that.
    """
    return subprocess.Popen(
        [sys.executable, "-c", AS_AT_A_TERMINAL + script],
        cwd=ROOT,
        stderr=subprocess.PIPE,
        stdout=subprocess.PIPE,
        start_new_session=True,
        **kwargs,
    )


def test_an_interrupt_swallowed_inside_a_run_still_exits_130(tmp_path) -> None:
    """The issue's "Ctrl-C sometimes exits 0": a KeyboardInterrupt caught inside the JAX side."""
    path = tmp_path / "out.json"
    path.write_text(PREVIOUS)
    script = (
        "import os, signal, sys, time\n"
        "from detach_parity.jax_impl import basics\n"
        "from detach_parity.shared.apps import cli\n"
        "real = basics.run\n"
        "def swallowing(fx, variant):\n"
        "    try:\n"
        "        os.kill(os.getpid(), signal.SIGINT)\n"
        "        time.sleep(5)  # the handler runs here\n"
        "    except KeyboardInterrupt:\n"
        "        pass  # what a library's broad except does\n"
        "    return real(fx, variant)\n"
        "basics.run = swallowing\n"
        "handler = signal.getsignal(signal.SIGINT)\n"
        f"code = cli.main({[*RUN, '--json', str(path)]!r})\n"
        "print('HANDLER BACK' if signal.getsignal(signal.SIGINT) is handler else 'HANDLER LOST')\n"
        "sys.exit(code)\n"
    )
    proc = _in_own_session(script)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130 and "detach-parity run: interrupted" in err.decode(), err.decode()
    assert out.decode().split()[-2:] == ["HANDLER", "BACK"]  # the caller's handler is back
    assert path.read_text() == PREVIOUS


def test_ctrl_c_in_a_real_process_exits_130_and_writes_nothing(tmp_path) -> None:
    script = (
        "import sys, time\n"
        "from detach_parity.jax_impl import basics\n"
        "from detach_parity.shared.apps import cli\n"
        "def slow(fx, variant):\n"
        "    print('READY', file=sys.stderr, flush=True)\n"
        "    time.sleep(60)\n"
        "basics.run = slow\n"
        f"sys.exit(cli.main({[*RUN, '--json', str(tmp_path / 'out.json')]!r}))\n"
    )
    proc = _in_own_session(script)
    try:
        assert proc.stderr.readline().decode().strip() == "READY"
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 130, err.decode()
    assert "interrupted" in err.decode() and "Traceback" not in err.decode()
    assert not (tmp_path / "out.json").exists() and list(tmp_path.iterdir()) == []


WORKER = b"apps.run_workers"  # in the command line of a worker of `run --jobs N`


def _workers(pid: int) -> list[int]:
    """The run workers among a process's children (their command line runs shared.apps.run_workers)."""
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    return [int(c) for c in children if WORKER in _cmdline(int(c))]


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:  # gone
        return b""


def _start_with_two_workers(argv: list[str]) -> tuple[subprocess.Popen, list[int]]:
    """`detach-parity ARGV` in a real process, returned once its two worker processes exist."""
    proc = _in_own_session(f"import sys\nfrom detach_parity.shared.apps import cli\nsys.exit(cli.main({argv!r}))\n")
    deadline = time.monotonic() + 120
    while len(workers := _workers(proc.pid)) < 2 and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.2)
    if len(workers) != 2:
        proc.kill()
        raise AssertionError(f"expected 2 worker processes, found {workers}")
    return proc, workers


def test_ctrl_c_with_two_jobs_ends_the_workers_and_writes_nothing(tmp_path) -> None:
    argv = ["run", "--jobs", "2", "--quiet", "--json", str(tmp_path / "out.json")]
    proc, workers = _start_with_two_workers(argv)
    try:
        time.sleep(1.0)  # the workers are importing or running cases
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 130, err.decode()
    assert "interrupted" in err.decode() and "Traceback" not in err.decode() and "KeyboardInterrupt" not in err.decode()
    assert list(tmp_path.iterdir()) == []
    # terminated, not left running the suite: gone, or a zombie waiting for a reaper
    assert all(WORKER not in _cmdline(w) for w in workers), workers


# a few quick scenarios (by position: this file is no proof of them): more scenarios than workers, so that
# a lost worker's scenario goes back to the queue
SOME = registry.names("scenarios")[:4] + registry.names("pitfalls")[:1]


def test_a_worker_that_dies_fails_only_the_case_it_was_running_by_name(tmp_path) -> None:
    """multiprocessing.Pool replaced a killed worker and waited for its lost task forever (an adversarial pass);
    then ProcessPoolExecutor broke at one lost worker, and 92 of 108 cases failed, the healthy worker's
    included, with ✗ lines that did not name their case (issue 28, item 3). Now the case the killed worker
    was running fails, named, with how its worker ended; every other case runs (the rest of its scenario in
    another worker or a fresh one) and passes."""
    argv = ["run", *SOME, "--dtype", "float64", "--jobs", "2", "--quiet", "--json", str(tmp_path / "out.json")]
    proc, workers = _start_with_two_workers(argv)
    try:
        os.kill(workers[0], signal.SIGKILL)
        out, err = proc.communicate(timeout=300)
    finally:
        proc.kill()
    assert proc.returncode == 1, err.decode()
    payload = json.loads((tmp_path / "out.json").read_text())
    assert len(payload["results"]) == len(list(runner.iter_cases(SOME, dtypes=("float64",))))  # none dropped
    lost = [r for r in payload["results"] if not r["ok"]]
    assert len(lost) == 1 and lost[0]["verdict"] == "ERROR", [r["problems"] for r in lost]
    label = "{scenario}[{variant}] {case} {dtype}".format(**lost[0])
    why = f"{label}: the worker process running it died: it was killed by signal 9 (SIGKILL)"
    assert lost[0]["problems"] == [why]
    text = " ".join(out.decode().split())
    assert f"✗ {why}" in text and "1 failed" in text, text[-2000:]
    assert all(WORKER not in _cmdline(w) for w in workers)


def test_workers_do_not_outlive_a_terminated_parent(tmp_path) -> None:
    """SIGTERM (or SIGKILL) to the parent: its workers get the parent-death signal instead of running on."""
    proc, workers = _start_with_two_workers(["run", "--jobs", "2", "--quiet"])
    try:
        time.sleep(1.0)  # past the workers' initializer
        proc.kill()
        proc.communicate(timeout=60)
        deadline = time.monotonic() + 20
        while any(WORKER in _cmdline(w) for w in workers) and time.monotonic() < deadline:
            time.sleep(0.2)
    finally:
        proc.kill()
    assert all(WORKER not in _cmdline(w) for w in workers), workers


def test_a_command_started_with_stdout_closed_exits_141_with_a_message() -> None:
    """`detach-parity list >&-`: Python sets sys.stdout to None; it was an AttributeError traceback, exit 1."""
    script = "import sys\nfrom shared.apps import cli\nsys.exit(cli.main(['list']))\n"
    proc = subprocess.run(
        ["bash", "-c", 'exec >&- && exec "$0" -c "$1"', sys.executable, script], cwd=ROOT, stderr=subprocess.PIPE
    )
    assert proc.returncode == 141 and "Traceback" not in proc.stderr.decode()
    assert "standard output is closed; nothing was run" in proc.stderr.decode()


# -- bounds and repeated names -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "jobs, message",
    [
        ("0", f"expected an integer in [1, {run_app.MAX_JOBS}] (the CPUs this process may use), got 0"),
        ("1000000", f"expected an integer in [1, {run_app.MAX_JOBS}] (the CPUs this process may use), got 1000000"),
        ("two", "expected an integer, got 'two'"),
    ],
)
def test_run_jobs_is_bounded_by_the_cpus(capsys, jobs: str, message: str) -> None:
    with pytest.raises(SystemExit) as exc:
        cli.main(["run", "basics", "--jobs", jobs])
    assert exc.value.code == 2
    assert f"argument --jobs: {message}" in " ".join(capsys.readouterr().err.split())


def test_selfcheck_jobs_has_an_upper_bound(capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        cli.main(["selfcheck", "--jobs", "1000000", "--list"])
    assert exc.value.code == 2
    err = " ".join(capsys.readouterr().err.split())
    assert f"--jobs: expected an integer in [1, {selfcheck.MAX_JOBS}] (the CPUs this process may use)" in err
    with pytest.raises(ValueError, match=rf"jobs expected an integer in \[1, {selfcheck.MAX_JOBS}\], got 0"):
        selfcheck.selfcheck([], jobs=0)


def test_selfcheck_repeated_module_is_listed_once(capsys) -> None:
    assert cli.main(["selfcheck", "basics", "--list"]) == 0
    once = capsys.readouterr().out
    assert cli.main(["selfcheck", "basics", "basics", "--list"]) == 0
    assert capsys.readouterr().out == once and once.count("basics") >= 2


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
