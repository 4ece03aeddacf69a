"""What the sandbox plan's code asked of the filesystem, noted so that a later start can ask it again.

While `FactLog.recording`, the questions the plan's code asks through `os` (posixpath, shutil, pathlib and
platformdirs ask through it) are noted with their answers, normalised to what a plan reads of them: a
path's type, mode and owner or why it is not there, where a link leads, the directories and links a
directory holds (a scan of a write grant looks for .git directories, not at the files a server writes),
the names a listed directory holds, what the access check said, the working directory, whether a
directory was made or was there. `facts_hold` asks them again in order, making directories as then.

The plan is a function of the policy, the environment, the command line and these answers: when every
answer reads the same, the same code makes the same plan (transport/start_record.py keeps them, and
transport/early_start.py asks them again before it spawns a server under a recorded plan).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterable, Iterator, Sequence

Fact = tuple[str, tuple[object, ...], object]  # (operation, its arguments, what it gave, normalised)


def _stat(path: str, follow: bool) -> object:
    try:
        found = os.stat(path, follow_symlinks=follow)
    except OSError as exc:
        return ("err", exc.errno)
    return ("ok", found.st_mode, found.st_uid)


def _readlink(path: str) -> object:
    try:
        return ("ok", os.readlink(path))
    except OSError as exc:
        return ("err", exc.errno)


def _entries(entries: Iterable[os.DirEntry[str]]) -> tuple[object, ...]:
    """A listing's directories and links, as the plan's scans read it (the git scan of write grants walks
    directories only): the files a server writes in its grants do not make the next start plan afresh."""
    seen = []
    for entry in entries:
        link = entry.is_symlink()
        if not link and not entry.is_dir(follow_symlinks=False):
            continue
        kind = (entry.is_dir(follow_symlinks=False), entry.is_file(follow_symlinks=False), link)
        followed = (entry.is_dir(), entry.is_file()) if link else ()
        seen.append((entry.name, kind, followed))
    return tuple(sorted(seen))


def _scandir(path: str) -> object:
    try:
        with os.scandir(path) as entries:
            return ("ok", _entries(entries))
    except OSError as exc:
        return ("err", exc.errno)


def _listdir(path: str) -> object:
    try:
        return ("ok", tuple(sorted(os.listdir(path))))
    except OSError as exc:
        return ("err", exc.errno)


def _access(path: str, mode: int) -> object:
    return os.access(path, mode)


def _mkdir(path: str, mode: int) -> object:
    try:
        os.mkdir(path, mode)
    except FileExistsError:
        return ("ok",)
    except OSError as exc:
        return ("err", exc.errno)
    return ("ok",)


_LOOKS: dict[str, Callable[..., object]] = {
    "stat": _stat,
    "readlink": _readlink,
    "scandir": _scandir,
    "listdir": _listdir,
    "access": _access,
    "mkdir": _mkdir,
    "getcwd": os.getcwd,
}


def facts_hold(facts: Sequence[Fact]) -> bool:
    """Every fact, looked at again in order (directories made as then), reads as it did."""
    for operation, arguments, seen in facts:
        look = _LOOKS.get(operation)
        if look is None or look(*arguments) != seen:
            return False
    return True


class FactLog:
    """What the plan's code asks of the filesystem while `recording`: each question and its answer, as
    `facts_hold` asks it again. Patches `os` for the while (posixpath, shutil, pathlib and platformdirs
    call through it); a question it cannot repeat (a file descriptor, `dir_fd`, another thread) spoils the
    log, and a spoiled log writes no record."""

    def __init__(self) -> None:
        self.facts: list[Fact] = []
        self.spoiled = False

    @contextlib.contextmanager
    def recording(self) -> Iterator[FactLog]:
        import threading  # start-up: loaded by then (the bwrap probe's subprocess)

        main = threading.get_ident()
        originals = {name: getattr(os, name) for name in ("stat", "lstat", "readlink", "scandir", "listdir")}
        originals |= {name: getattr(os, name) for name in ("access", "getcwd", "mkdir")}

        def path_of(value: object) -> str | None:
            if threading.get_ident() != main:
                return None
            if isinstance(value, int):  # a descriptor: not a path a later start could look at
                self.spoiled = True
                return None
            try:
                found = os.fspath(value)  # type: ignore[call-overload]
            except TypeError:
                self.spoiled = True
                return None
            if isinstance(found, bytes):
                self.spoiled = True
                return None
            return str(found)

        def note(operation: str, arguments: tuple[object, ...], seen: object) -> None:
            self.facts.append((operation, arguments, seen))

        def spoil_on(kwargs: dict[str, object], *allowed: str) -> None:
            if any(key not in allowed and value is not None for key, value in kwargs.items()):
                self.spoiled = True

        def stat_(path: object, *, dir_fd: int | None = None, follow_symlinks: bool = True) -> os.stat_result:
            named = path_of(path) if dir_fd is None else None
            if dir_fd is not None:
                self.spoiled = True
            try:
                found = originals["stat"](path, dir_fd=dir_fd, follow_symlinks=follow_symlinks)
            except OSError as exc:
                if named is not None:
                    note("stat", (named, follow_symlinks), ("err", exc.errno))
                raise
            if named is not None:
                note("stat", (named, follow_symlinks), ("ok", found.st_mode, found.st_uid))
            return found  # type: ignore[no-any-return]

        def lstat_(path: object, *, dir_fd: int | None = None) -> os.stat_result:
            return stat_(path, dir_fd=dir_fd, follow_symlinks=False)

        def readlink_(path: object, *, dir_fd: int | None = None) -> str:
            named = path_of(path) if dir_fd is None else None
            if dir_fd is not None:
                self.spoiled = True
            try:
                target = originals["readlink"](path, dir_fd=dir_fd)
            except OSError as exc:
                if named is not None:
                    note("readlink", (named,), ("err", exc.errno))
                raise
            if named is not None:
                note("readlink", (named,), ("ok", target))
            return target  # type: ignore[no-any-return]

        def scandir_(path: object = ".") -> _Listed:
            named = path_of(path)
            try:
                with originals["scandir"](path) as entries:
                    listed = list(entries)
            except OSError as exc:
                if named is not None:
                    note("scandir", (named,), ("err", exc.errno))
                raise
            if named is not None:
                note("scandir", (named,), ("ok", _entries(listed)))
            return _Listed(listed)

        def listdir_(path: object = ".") -> list[str]:
            named = path_of(path)
            try:
                names = originals["listdir"](path)
            except OSError as exc:
                if named is not None:
                    note("listdir", (named,), ("err", exc.errno))
                raise
            if named is not None:
                note("listdir", (named,), ("ok", tuple(sorted(names))))
            return names  # type: ignore[no-any-return]

        def access_(path: object, mode: int, **kwargs: object) -> bool:
            spoil_on(kwargs)
            named = path_of(path)
            allowed = bool(originals["access"](path, mode, **kwargs))
            if named is not None:
                note("access", (named, mode), allowed)
            return allowed

        def getcwd_() -> str:
            here = str(originals["getcwd"]())
            if threading.get_ident() == main:
                note("getcwd", (), here)
            return here

        def mkdir_(path: object, mode: int = 0o777, *, dir_fd: int | None = None) -> None:
            named = path_of(path) if dir_fd is None else None
            if dir_fd is not None:
                self.spoiled = True
            try:
                originals["mkdir"](path, mode, dir_fd=dir_fd)
            except FileExistsError:
                if named is not None:
                    note("mkdir", (named, mode), ("ok",))
                raise
            except OSError as exc:
                if named is not None:
                    note("mkdir", (named, mode), ("err", exc.errno))
                raise
            if named is not None:
                note("mkdir", (named, mode), ("ok",))

        patched = {"stat": stat_, "lstat": lstat_, "readlink": readlink_, "scandir": scandir_}
        patched |= {"listdir": listdir_, "access": access_, "getcwd": getcwd_, "mkdir": mkdir_}
        for name, replacement in patched.items():
            setattr(os, name, replacement)
        try:
            yield self
        finally:
            for name, original in originals.items():
                setattr(os, name, original)


class _Listed:
    """`os.scandir`'s entries, read whole, behind the same interface (iterated, used as a context)."""

    def __init__(self, entries: list[os.DirEntry[str]]) -> None:
        self._entries = entries

    def __iter__(self) -> Iterator[os.DirEntry[str]]:
        return iter(self._entries)

    def __enter__(self) -> _Listed:
        return self

    def __exit__(self, *_exc: object) -> None:
        return None

    def close(self) -> None:
        return None
