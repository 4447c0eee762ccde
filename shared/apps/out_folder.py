"""A command's output folder (`site --out DIR`): written whole, and only where nothing foreign is lost.

DIR must be absent, empty, or an earlier output of the same command, proven by the marker file it
wrote (every file listed with its SHA-256: a file added or changed since makes the folder foreign).
The package's own folders, their parents and the working directory are refused whatever the marker
says. The new folder is built beside DIR and swapped in once complete; a mount point (a bind-mounted
folder, a fresh disk) cannot be renamed, so there it is built inside DIR and its contents replaced.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import hashlib
import importlib.util
import json
import os
import shutil
import tempfile
import warnings
from collections.abc import Iterator, Mapping
from pathlib import Path

from .exits import OutputError
from .interrupts import check_interrupted, signals_deferred
from .json_file import current_umask

__all__ = ["MARKER", "OutputFolder", "is_mount_point"]

MARKER = ".detach-parity.json"  # in an output folder: which command wrote it, and every file it wrote
LOST_FOUND = "lost+found"  # at the root of a fresh disk: the filesystem's, never ours to judge or touch
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


def is_mount_point(path: Path) -> bool:
    """Whether `path` is a mount point: one of /proc/self/mountinfo's (a bind mount of a folder of the same
    disk included, which os.path.ismount misses), or one os.path.ismount sees (another device)."""
    path = Path(path).resolve()
    with contextlib.suppress(OSError):
        with open("/proc/self/mountinfo", encoding="utf-8") as fh:
            for line in fh:
                field = line.split()[4]  # the mount point, its blanks and backslashes escaped as \\ooo
                if Path(field.encode().decode("unicode_escape").encode("latin-1").decode()) == path:
                    return True
    return os.path.ismount(path)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _walk(root: Path, skip: frozenset[str] = frozenset()) -> Iterator[tuple[str, Path, bool]]:
    """(relative posix path, path, is a plain file) of everything under root but `skip` (top-level names),
    symlinks not followed."""
    for folder, dirs, files in os.walk(root, followlinks=False):
        if Path(folder) == root:
            dirs[:] = [d for d in dirs if d not in skip]
            files = [f for f in files if f not in skip]
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

        with OutputFolder("site", "site") as root:   # root: a temporary folder beside site/ (or inside it)
            (root / "index.html").write_text(...)
        # complete: site/ now holds exactly what was written (plus the marker)

    On entering, the target is checked (see `check`) and the temporary folder created, so a refused
    or unwritable folder costs no work. On a clean exit the target is checked again (it may have
    changed during a long run), the marker listing every file written (with its SHA-256) is added,
    and the new folder replaces the old one in one rename (an exchange on Linux: the path always holds
    a whole site); only the files the old marker lists are deleted. A mount point cannot be renamed
    ("Device or resource busy"): there the temporary folder is inside the target, and the commit
    deletes the files the old marker lists, then moves the new ones in, the marker last, with SIGINT
    and SIGTERM held back. On an exception or an interrupt the temporary folder is removed and the
    target is left as it was.

    path: the folder (absent, empty, or an earlier output of `command`, e.g. "site", recorded in the
    marker); option: how the folder is named in messages ("--out"). Raises OutputError, on entering and
    on committing: the folder is refused (expected, got, why), or an OSError prevented writing.
    """

    def __init__(self, path: Path | str, command: str, option: str = "--out") -> None:
        self.text = str(path)
        self.command = command
        self.option = option
        self.target = Path(path).resolve()
        self.tmp: Path | None = None
        self.in_place = self.target.is_dir() and is_mount_point(self.target)

    @property
    def written_by(self) -> str:
        return f"detach-parity {self.command}"

    def _refuse(self, why: str, detail: str = "") -> OutputError:
        return OutputError(f"{self.option} expected {why}, got {self.text!r}{detail}")

    @property
    def _skip(self) -> frozenset[str]:
        """What the target holds that is neither ours nor foreign: our build folder, a disk's lost+found."""
        names = {self.tmp.name} if self.in_place and self.tmp is not None else set()
        lost = self.target / LOST_FOUND
        if self.in_place and lost.is_dir() and not lost.is_symlink():
            names.add(LOST_FOUND)
        return frozenset(names)

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
            entries = sorted(p.name for p in target.iterdir() if p.name not in self._skip)
        except OSError as exc:
            raise self._refuse("a readable folder", f" ({exc.strerror})") from None
        if not entries:
            return {}
        owned = self._marker(target, entries)
        foreign = []
        for rel, path, plain in _walk(target, self._skip):
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
        where = self.target if self.in_place else self.target.parent
        try:
            self.tmp = Path(tempfile.mkdtemp(prefix=f".{self.target.name}.new-", dir=where))
        except OSError as exc:
            what = "a folder that can be written (a mount point: the new site is built inside it)"
            if not self.in_place:
                what = "a folder whose parent can be written (the new folder is built beside it, then swapped in)"
            raise self._refuse(what, f": {exc.strerror} in {where}") from None
        return self.tmp

    def __exit__(self, exc_type, exc, tb) -> None:
        try:
            if exc_type is None:
                self._commit()
        except OSError as exc:
            raise OutputError(f"{self.option} {self.text!r}: could not write the folder: {exc}") from None
        finally:
            if self.tmp is not None:
                shutil.rmtree(self.tmp, ignore_errors=True)  # only ever our own temporary folder
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
        if self.in_place:
            self._replace_contents(old, files)
            return
        os.chmod(tmp, 0o777 & ~current_umask())  # mkdtemp makes 0700
        with signals_deferred():
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

    def _replace_contents(self, old: Mapping[str, str], files: Mapping[str, str]) -> None:
        """The commit on a mount point: the old output's files out, the new ones in (same disk: renames)."""
        assert self.tmp is not None
        tmp, target = self.tmp, self.target
        for rel in files:  # before anything moves: a path that appeared since the check would be overwritten
            if rel not in old and (os.path.lexists(target / rel) or _blocked(target, rel)):
                raise FileExistsError(errno.EEXIST, "appeared since the check, not written by this command", rel)
        with signals_deferred():
            _remove_owned(target, old, keep={tmp.name, LOST_FOUND})
            for rel in [*files, MARKER]:  # the marker last: the folder claims to be ours once it is whole
                (target / rel).parent.mkdir(parents=True, exist_ok=True)
                os.rename(tmp / rel, target / rel)


def _blocked(root: Path, rel: str) -> bool:
    """Whether a parent of root/rel exists but is not a real folder (a file or a symlink is in the way)."""
    for parent in list(Path(rel).parents)[:-1]:
        path = root / parent
        if os.path.lexists(path) and (path.is_symlink() or not path.is_dir()):
            return True
    return False


def _remove_owned(root: Path, owned: Mapping[str, str], keep: set[str] | frozenset[str] = frozenset()) -> None:
    """Delete the files of an earlier output that its marker lists, then its empty folders (but `keep`'s,
    top-level names). Anything else found there (added after the check) is kept, and the folder with it."""
    for rel in [*owned, MARKER]:
        path = root / rel
        if path.is_file() and not path.is_symlink():
            path.unlink()
    for folder, _, _ in sorted(os.walk(root), key=lambda w: -len(Path(w[0]).parts)):
        inside = Path(folder).relative_to(root).parts
        if keep and (not inside or inside[0] in keep):
            continue  # the target itself (a mount point), our build folder, lost+found
        with contextlib.suppress(OSError):
            os.rmdir(folder)
    if not keep and root.exists():
        warnings.warn(f"kept {root}: it holds files that appeared after the check", stacklevel=2)
