"""What the subcommands share: exit codes, errors, interrupts, argparse types, and the two writers.

A `UsageError` raised by a command is printed on stderr by shared.apps.cli and exits 2;
argparse types reject bad values before any work starts, with a message naming the
option, the expected and the actual value.

Writing files follows one rule: a command never overwrites or deletes what it did not
write, and never leaves anything half-written.
  * one file (`--json PATH`): `write_json` writes a temporary file beside PATH and renames
    it over PATH once complete (PATH is the user's explicit choice; a symlink there is
    replaced, never written through);
  * a folder (`site --out DIR`): `OutputFolder` builds the whole folder in a temporary
    sibling and swaps it in only when complete. DIR must be absent, empty, or an earlier
    output of the same command, proven by the marker file it wrote (every file listed with
    its SHA-256: a file added or changed since makes the folder foreign). The package's own
    folders, their parents and the working directory are refused whatever the marker says.
  * an interrupt (Ctrl-C) is counted by `interrupt_guard` even when a library swallows the
    KeyboardInterrupt on its way up; the writers check `check_interrupted()` before they
    commit, so an interrupted command writes nothing and exits 130.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import errno
import hashlib
import importlib.metadata as md
import importlib.util
import json
import os
import platform
import shutil
import signal
import tempfile
import threading
import warnings
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

from rich.console import Console
from rich.text import Text

__all__ = [
    "EXIT_OK",
    "EXIT_FAILED",
    "EXIT_USAGE",
    "EXIT_INTERRUPTED",
    "EXIT_BROKEN_PIPE",
    "UsageError",
    "OutputError",
    "versions",
    "non_negative_int",
    "positive_int",
    "bounded_int",
    "json_path",
    "out_dir",
    "failure_line",
    "print_error",
    "interrupt_guard",
    "interrupted",
    "check_interrupted",
    "write_json",
    "MARKER",
    "OutputFolder",
]

EXIT_OK = 0  # every check passed
EXIT_FAILED = 1  # a check failed (a mismatch, a broken lesson, a surviving mutant)
EXIT_USAGE = 2  # bad arguments, or an output that could not be written where asked
EXIT_INTERRUPTED = 130  # Ctrl-C (128 + SIGINT), nothing half-written left behind
EXIT_BROKEN_PIPE = 141  # standard output closed early (128 + SIGPIPE, as a shell reports it)


class UsageError(Exception):
    """Bad command-line input: printed, exit status 2."""


class OutputError(UsageError):
    """An output that cannot be written where asked (refused folder, read-only place, full disk): exit 2."""


def versions() -> dict[str, str]:
    """Python and the installed versions of torch, jax, flax, optax and numpy ("missing" if absent)."""
    out = {"python": platform.python_version()}
    for dist in ("torch", "jax", "flax", "optax", "numpy"):
        try:
            out[dist] = md.version(dist)
        except md.PackageNotFoundError:
            out[dist] = "missing"
    return out


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None


def non_negative_int(text: str) -> int:
    """An int >= 0 (fixture seeds)."""
    value = _int(text)
    if not 0 <= value < 2**63:
        raise argparse.ArgumentTypeError(f"expected an integer in [0, 2**63), got {value}")
    return value


def positive_int(text: str) -> int:
    """An int >= 1 (repeats, parallel jobs)."""
    value = _int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {value}")
    return value


def bounded_int(low: int, high: int, why: str = "") -> Callable[[str], int]:
    """An argparse type: an int in [low, high]; `why` says where the upper bound comes from."""

    def parse(text: str) -> int:
        value = _int(text)
        if not low <= value <= high:
            reason = f" ({why})" if why else ""
            raise argparse.ArgumentTypeError(f"expected an integer in [{low}, {high}]{reason}, got {value}")
        return value

    return parse


def json_path(text: str) -> str:
    """A file path that can be written: its folder exists, it is not a folder, and it is absent or an
    earlier report of this package (the rule of `write_json`).

    Checked before any work is done, so a typo never costs a whole run.
    """
    path = Path(text)
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"expected a file path, got the folder {text!r}")
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        raise argparse.ArgumentTypeError(
            f"expected a path in an existing folder, got {text!r} ({parent} does not exist)"
        )
    if not os.access(parent, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise argparse.ArgumentTypeError(f"expected a writable path, got {text!r}")
    if (path.exists() or path.is_symlink()) and not _our_json(path):  # write_json's rule, before the work
        raise argparse.ArgumentTypeError(
            f"expected a new path or an earlier JSON report of detach-parity, got {text!r} (a file this "
            "package did not write: it is left alone)"
        )
    return text


def out_dir(text: str) -> str:
    """An output folder, first look: not an existing file, its parent folder exists.

    The full check (empty, or an earlier output of the command; never the package) is
    OutputFolder's, done before any work starts.
    """
    path = Path(text)
    if path.exists() and not path.is_dir():
        raise argparse.ArgumentTypeError(f"expected a folder, got the existing file {text!r}")
    parent = path.absolute().parent
    if not parent.is_dir():
        raise argparse.ArgumentTypeError(
            f"expected a folder in an existing folder, got {text!r} ({parent} does not exist)"
        )
    return text


def failure_line(message: str) -> Text:
    """A failure line for the terminal: a red ✗, then the message as plain text (no markup parsed)."""
    return Text.assemble(("✗", "red"), " ", message)


def print_error(message: str) -> None:
    """Print one error line on stderr as plain text, never folded (a path in it stays one copyable token).

    A closed or full stderr is ignored: the exit status still tells what happened.
    """
    with contextlib.suppress(OSError):
        Console(stderr=True, soft_wrap=True).print(message, markup=False, highlight=False)


# -- interrupts ----------------------------------------------------------------------------------

_interrupts = 0


def _on_sigint(signum, frame) -> None:
    global _interrupts
    _interrupts += 1
    raise KeyboardInterrupt


@contextlib.contextmanager
def interrupt_guard() -> Iterator[None]:
    """Count every SIGINT while a command runs (the previous handler is restored after).

    Each SIGINT still raises KeyboardInterrupt, as Python's own handler does; the count
    survives when a library catches that exception on its way up (JAX may, inside a
    callback), so `interrupted()` and `check_interrupted()` still know. A process that
    ignores SIGINT (nohup, a background job) keeps ignoring it. Main thread only; elsewhere
    a no-op.
    """
    global _interrupts
    _interrupts = 0
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.getsignal(signal.SIGINT)
    if previous is not signal.SIG_IGN:
        signal.signal(signal.SIGINT, _on_sigint)
    try:
        yield
    finally:
        if previous is not signal.SIG_IGN:
            signal.signal(signal.SIGINT, previous if previous is not None else signal.default_int_handler)


def interrupted() -> bool:
    """True when a SIGINT arrived since the current `interrupt_guard` began."""
    return _interrupts > 0


def check_interrupted() -> None:
    """Raise KeyboardInterrupt if a SIGINT arrived (even one that was swallowed): call before committing output."""
    if _interrupts:
        raise KeyboardInterrupt


@contextlib.contextmanager
def _signals_deferred() -> Iterator[None]:
    """SIGINT and SIGTERM held back (delivered after) while a few renames complete."""
    deferred = {signal.SIGINT, signal.SIGTERM}
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = signal.pthread_sigmask(signal.SIG_BLOCK, deferred)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def _umask() -> int:
    umask = os.umask(0)
    os.umask(umask)
    return umask


# -- one file ------------------------------------------------------------------------------------


def _our_json(path: Path) -> bool:
    """Whether `path` is a plain file holding a JSON report of this package (an object with `versions`)."""
    if path.is_symlink() or not path.is_file():
        return False
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except (OSError, ValueError):
        return False
    return isinstance(data, dict) and isinstance(data.get("versions"), dict) and "jax" in data["versions"]


def write_json(path: Path | str, payload: Mapping) -> None:
    """Write `payload` as JSON atomically: a temporary file in the same folder, renamed over `path`
    once complete, so a full disk, a file-size limit or an interrupt never leaves a truncated file
    (a previous file there stays as it was). Only an absent path or an earlier report of this
    package (a JSON object with `versions`) is replaced: any other file, or a symlink, is left alone.

    Raises OSError (the caller reports it: exit 2, never the code of a failed check): FileExistsError
    for a file this package did not write; KeyboardInterrupt if a SIGINT arrived during the command
    (nothing is written).
    """
    path = Path(path)
    if (path.exists() or path.is_symlink()) and not _our_json(path):
        raise FileExistsError(
            errno.EEXIST, "a file this command did not write is there (not a JSON report of detach-parity)", str(path)
        )
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; the result should read like any file written here
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(payload, fh, indent=2, sort_keys=True)
            fh.write("\n")
        check_interrupted()
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


# -- a folder ------------------------------------------------------------------------------------

MARKER = ".detach-parity.json"  # in an output folder: which command wrote it, and every file it wrote
_RENAME_EXCHANGE = 2  # linux/fs.h
_AT_FDCWD = -100


def _package_folders() -> list[Path]:
    """The folders of the package detach_parity's subpackages (located without importing them)."""
    found = []
    for name in ("detach_parity.shared", "detach_parity.torch_impl", "detach_parity.jax_impl"):
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.submodule_search_locations:
            found += [Path(p).resolve() for p in spec.submodule_search_locations]
    return found


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _walk(root: Path) -> Iterator[tuple[str, Path, bool]]:
    """(relative posix path, path, is a plain file) of everything under root, symlinks not followed."""
    for folder, dirs, files in os.walk(root, followlinks=False):
        for name in sorted(dirs) + sorted(files):
            path = Path(folder) / name
            plain = name in files and path.is_file() and not path.is_symlink()
            if name in dirs and not path.is_symlink():
                continue  # a real folder: its contents are listed in turn
            yield path.relative_to(root).as_posix(), path, plain


def _exchange(a: Path, b: Path) -> bool:
    """Swap two paths in one step (Linux renameat2 RENAME_EXCHANGE); False where unsupported."""
    try:
        renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
    except (AttributeError, OSError):
        return False
    rc = renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE)
    if rc == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.ENOSYS, errno.EINVAL, errno.ENOTSUP):
        return False
    raise OSError(err, os.strerror(err), str(b))


class OutputFolder:
    """Write a command's output folder without losing or half-writing anything.

        with OutputFolder("site", "site") as root:   # root: a temporary sibling of site/
            (root / "index.html").write_text(...)
        # complete: site/ now holds exactly what was written (plus the marker), swapped in at once

    On entering, the target is checked (see `check`) and the temporary sibling created, so
    a refused or unwritable folder costs no work. On a clean exit the target is checked
    again (it may have changed during a long run), the marker listing every file written
    (with its SHA-256) is added, the new folder replaces the old one in one rename (an
    exchange on Linux, so the path always holds a whole site), and only the files the old
    marker lists are deleted. On an exception or an interrupt the temporary sibling is
    removed and the target is left as it was.

    Args:
      path: the folder (absent, empty, or an earlier output of `command`).
      command: the subcommand that writes it, e.g. "site" (recorded in the marker).
      option: how the folder is named in messages, e.g. "--out".
    Raises (on entering and on committing):
      OutputError: the folder is refused (message: expected, got, why), or an OSError
        (read-only place, full disk) prevented writing.
    """

    def __init__(self, path: Path | str, command: str, option: str = "--out") -> None:
        self.text = str(path)
        self.command = command
        self.option = option
        self.target = Path(path).resolve()
        self.tmp: Path | None = None

    @property
    def written_by(self) -> str:
        return f"detach-parity {self.command}"

    def _refuse(self, why: str, detail: str = "") -> OutputError:
        return OutputError(f"{self.option} expected {why}, got {self.text!r}{detail}")

    def check(self) -> dict[str, str]:
        """Raise OutputError unless the target may be written; return what an earlier run wrote there.

        Returns:
          relative path -> SHA-256 of the files the target's marker lists ({} for a new or empty folder).
        """
        target = self.target
        for pkg in _package_folders():
            if target == pkg or pkg in target.parents:
                raise self._refuse("a folder outside the package's own folders", f", inside {pkg}")
            if target in pkg.parents:
                raise self._refuse("a folder that does not contain the package", f", which contains {pkg}")
        cwd = Path.cwd().resolve()
        if target == cwd or target in cwd.parents:
            raise self._refuse("a folder other than the working directory or one above it")
        if target.exists() and not target.is_dir():
            raise self._refuse("a folder", ", an existing file")
        if not target.parent.is_dir():
            raise self._refuse("a folder in an existing folder", f" ({target.parent} does not exist)")
        if not target.exists():
            return {}
        try:
            entries = sorted(p.name for p in target.iterdir())
        except OSError as exc:
            raise self._refuse("a readable folder", f" ({exc.strerror})") from None
        if not entries:
            return {}
        owned = self._marker(target, entries)
        foreign = []
        for rel, path, plain in _walk(target):
            if rel == MARKER:
                continue
            if not plain or rel not in owned or _sha256(path) != owned[rel]:
                foreign.append(rel)
        if foreign:
            shown = ", ".join(foreign[:5]) + (f" and {len(foreign) - 5} more" if len(foreign) > 5 else "")
            raise self._refuse(
                f"an empty folder or an earlier `{self.written_by}` output",
                f", where {len(foreign)} path(s) were not written by it or changed since: {shown} "
                "(move them, or choose another folder)",
            )
        return owned

    def _marker(self, target: Path, entries: list[str]) -> dict[str, str]:
        marker = target / MARKER
        shown = ", ".join(entries[:5]) + (" ..." if len(entries) > 5 else "")
        if not marker.is_file() or marker.is_symlink():
            raise self._refuse(
                f"an empty folder or an earlier `{self.written_by}` output (with its {MARKER})",
                f", which holds {shown} and no {MARKER}",
            )
        try:
            data = json.loads(marker.read_text(encoding="utf-8"))
            files = data["files"]
            ok = data["written_by"] == self.written_by and isinstance(files, dict)
            ok = ok and all(
                isinstance(k, str) and isinstance(v, str) and k and not k.startswith("/") and ".." not in k.split("/")
                for k, v in files.items()
            )
        except (OSError, ValueError, KeyError, TypeError):
            ok = False
        if not ok:
            raise self._refuse(
                f"an empty folder or an earlier `{self.written_by}` output",
                f", whose {MARKER} was not written by `{self.written_by}` or is damaged",
            )
        return dict(files)

    def __enter__(self) -> Path:
        self.check()
        try:
            self.tmp = Path(tempfile.mkdtemp(prefix=f".{self.target.name}.new-", dir=self.target.parent))
        except OSError as exc:
            raise self._refuse(
                "a folder whose parent can be written (the new folder is built beside it, then swapped in)",
                f": {exc.strerror} in {self.target.parent}",
            ) from None
        return self.tmp

    def __exit__(self, exc_type, exc, tb) -> None:
        try:
            if exc_type is None:
                self._commit()
        except OSError as exc:
            raise OutputError(f"{self.option} {self.text!r}: could not write the folder: {exc}") from None
        finally:
            if self.tmp is not None:
                shutil.rmtree(self.tmp, ignore_errors=True)  # only ever our own temporary sibling
                self.tmp = None

    def _commit(self) -> None:
        assert self.tmp is not None
        tmp, target = self.tmp, self.target
        check_interrupted()
        old = self.check()
        files = {rel: _sha256(path) for rel, path, plain in _walk(tmp) if plain}
        (tmp / MARKER).write_text(
            json.dumps({"written_by": self.written_by, "files": files}, indent=1, sort_keys=True) + "\n",
            encoding="utf-8",
        )
        os.chmod(tmp, 0o777 & ~_umask())  # mkdtemp makes 0700
        with _signals_deferred():
            if not target.exists() or not any(target.iterdir()):
                os.rename(tmp, target)  # a missing or empty folder is replaced in one step
                self.tmp = None
                return
            if _exchange(tmp, target):
                previous, self.tmp = tmp, None
            else:  # two renames, with the signals held back in between
                previous = Path(tempfile.mkdtemp(prefix=f".{target.name}.old-", dir=target.parent))
                os.rename(target, previous)
                os.rename(tmp, target)
                self.tmp = None
            _remove_owned(previous, old)


def _remove_owned(root: Path, owned: Mapping[str, str]) -> None:
    """Delete the files of an earlier output that its marker lists, then its empty folders.

    Anything else found there (added after the check) is kept, and the folder with it.
    """
    for rel in [*owned, MARKER]:
        path = root / rel
        if path.is_file() and not path.is_symlink():
            path.unlink()
    for folder, _, _ in sorted(os.walk(root), key=lambda w: -len(Path(w[0]).parts)):
        with contextlib.suppress(OSError):
            os.rmdir(folder)
    if root.exists():
        warnings.warn(f"kept {root}: it holds files that appeared after the check", stacklevel=2)
