"""What the sandbox plan's code asked of the filesystem, noted so that a later start can ask it again.

While `FactLog.recording`, the questions the plan's code asks through `os` (posixpath, shutil, pathlib and
platformdirs ask through it) are noted with their answers, normalised to what a plan reads of them: a
path's type, mode and owner or why it is not there, where a link leads, the directories and links a
scanned directory holds, the names a listed directory holds, what the access check said, the working
directory, whether a directory was made or was there; the scans of transport/plan_scans.py as one
question each, its answer what the plan reads of it (`git_scan`, `files_beside`); and the code that made the
plan (`code_fact`: its files' stamps).
`facts_hold` asks them again in order, making directories as then.

The plan is a function of the policy, the environment, the command line and these answers: when every
answer reads the same, the same code makes the same plan (transport/start_record.py keeps them, and
transport/early_start.py asks them again before it spawns a server under a recorded plan).
"""

from __future__ import annotations

import contextlib
import errno
import os
from collections.abc import Callable, Iterable, Iterator, Sequence

from mcp_sampling_proxy.transport.plan_scans import beside, git_protected

TYPE_CHECKING = False  # (typing's costs an import the early start is lean without)
if TYPE_CHECKING:
    from typing import Any

Fact = tuple[str, tuple[object, ...], object]  # (operation, its arguments, what it gave, normalised)


def _entries(entries: Iterable[os.DirEntry[str]]) -> tuple[object, ...]:
    """A scan's directories and links, what a plan's walk of a tree reads: the files a server writes where a
    plan walks do not make the next start plan afresh."""
    seen = []
    for entry in entries:
        link = entry.is_symlink()
        if not link and not entry.is_dir(follow_symlinks=False):
            continue
        kind = (entry.is_dir(follow_symlinks=False), entry.is_file(follow_symlinks=False), link)
        followed = (entry.is_dir(), entry.is_file()) if link else ()
        seen.append((entry.name, kind, followed))
    return tuple(sorted(seen))


def _scanned(path: str) -> list[os.DirEntry[str]]:
    with os.scandir(path) as entries:
        return list(entries)


def stamps(paths: Sequence[str]) -> tuple[tuple[int, int], ...]:
    """Each file's modification time and size: a new release, a `git pull` or an edit changes them."""
    return tuple((found.st_mtime_ns, found.st_size) for found in map(os.stat, paths))


# each question: how a later start asks it again (from the fact's arguments), and how its answer is noted
_ASK: dict[str, Callable[..., Any]] = {
    "stat": lambda path, follow: os.stat(path, follow_symlinks=follow),
    "readlink": lambda path: os.readlink(path),
    "scandir": _scanned,
    "listdir": lambda path: os.listdir(path),
    "access": lambda path, mode: os.access(path, mode),
    "getcwd": lambda: os.getcwd(),
    "mkdir": lambda path, mode: os.mkdir(path, mode),
    "git_scan": lambda grants: git_protected(grants),
    "beside": lambda path: beside(path),
    "code": stamps,
}
_NOTED: dict[str, Callable[[Any], object]] = {
    "stat": lambda found: ("ok", found.st_mode, found.st_uid),
    "readlink": lambda target: ("ok", target),
    "scandir": lambda listed: ("ok", _entries(listed)),
    "listdir": lambda names: ("ok", tuple(sorted(names))),
    "access": bool,
    "getcwd": str,
    "mkdir": lambda _made: ("ok",),
    "git_scan": lambda found: ("ok", tuple(found)),
    # a folder of its own is hidden whole: the files in it are not what the plan reads, so not noted
    "beside": lambda found: ("ok", True) if found[0] else ("ok", False, tuple(found[1])),
    "code": lambda stamps: ("ok", stamps),
}


_NO_PARENT = ("err", errno.ENOENT)  # a mkdir's failure when a parent is missing


def _refused(operation: str, exc: OSError) -> object:
    """A question's failure, as noted: a directory that was there already counts as made."""
    return ("ok",) if operation == "mkdir" and isinstance(exc, FileExistsError) else ("err", exc.errno)


def _asked_again(operation: str, arguments: tuple[object, ...]) -> object:
    try:
        answer = _ASK[operation](*arguments)
    except OSError as exc:
        return _refused(operation, exc)
    return _NOTED[operation](answer)


def facts_hold(facts: Sequence[Fact]) -> bool:
    """Every fact, looked at again in order (directories made as then), reads as it did."""
    return all(operation in _ASK and _asked_again(operation, arguments) == seen for operation, arguments, seen in facts)


_RECORDING: list[FactLog] = []  # the log recording now (one start's plan at a time)


def _unless(odd: bool, *arguments: object) -> tuple[object, ...] | None:
    return None if odd else arguments


# the `os` functions noted while recording: the question each asks, and its arguments from the call's (None:
# one a later start could not ask again: a `dir_fd`, access by the effective ids; it spoils the log)
_QUESTIONS: dict[str, tuple[str, Callable[..., tuple[object, ...] | None]]] = {
    "stat": (
        "stat",
        lambda path, *, dir_fd=None, follow_symlinks=True: _unless(dir_fd is not None, path, follow_symlinks),
    ),
    "lstat": ("stat", lambda path, *, dir_fd=None: _unless(dir_fd is not None, path, False)),
    "readlink": ("readlink", lambda path, *, dir_fd=None: _unless(dir_fd is not None, path)),
    "scandir": ("scandir", lambda path=".": (path,)),
    "listdir": ("listdir", lambda path=".": (path,)),
    "access": (
        "access",
        lambda path, mode, *, dir_fd=None, effective_ids=False, follow_symlinks=True: _unless(
            dir_fd is not None or effective_ids or not follow_symlinks, path, mode
        ),
    ),
    "getcwd": ("getcwd", lambda: ()),
    "mkdir": ("mkdir", lambda path, mode=0o777, *, dir_fd=None: _unless(dir_fd is not None, path, mode)),
}


def git_scan(grants: Sequence[str]) -> list[str]:
    """`plan_scans.git_protected`, noted as one fact: what the plan reads of the scan is the repositories it
    found, so a directory made since in a write grant (a build's, a new package's) with no repository in it
    leaves the record holding."""
    found: list[str] = _as_one_fact("git_scan", tuple(grants))
    return found


def files_beside(path: str) -> tuple[bool, list[str]]:
    """`plan_scans.beside`, noted as one fact: whether `path` has its folder to itself, and the files named
    after it; another file made beside it (a state file beside an audit log, a file in the home beside a key)
    changes neither unless the folder was its own."""
    found: tuple[bool, list[str]] = _as_one_fact("beside", path)
    return found


def code_fact(files: Sequence[str]) -> Fact:
    """The code that made a plan, as a fact: its module `files` with their stamps now. A plan is a function
    of its code too: a start after an upgrade (a release of the same version installed from git, an edit)
    must plan afresh, not spawn a server under what older code planned (a looser sandbox, before a fix)."""
    paths = tuple(files)
    return ("code", (paths,), _asked_again("code", (paths,)))


def _as_one_fact(operation: str, argument: object) -> Any:
    """A scan's answer, noted by the log recording now (on its thread) as one fact; the questions the scan
    asks on its way are not facts of their own."""
    log = _RECORDING[-1] if _RECORDING else None
    if log is None or log.thread != _thread_id():
        return _ASK[operation](argument)
    log.quiet += 1
    try:
        answer = _ASK[operation](argument)
    finally:
        log.quiet -= 1
    log.facts.append((operation, (argument,), _NOTED[operation](answer)))
    return answer


def _thread_id() -> int:
    import threading  # start-up: loaded by then (the bwrap probe's subprocess)

    return threading.get_ident()


class FactLog:
    """What the plan's code asks of the filesystem while `recording`: each question and its answer, noted as
    `facts_hold` asks it again. Patches `os` for the while (posixpath, shutil, pathlib and platformdirs call
    through it); a question it cannot repeat (a file descriptor, a bytes path, `dir_fd`) spoils the log, and a
    spoiled log writes no record. Other threads' questions are not the plan's: they are not noted."""

    def __init__(self) -> None:
        self.facts: list[Fact] = []
        self.spoiled = False
        self.thread = 0  # the thread recording (the plan's)
        self.quiet = 0  # inside a scan noted as one fact (`_as_one_fact`): its own steps are not facts

    @contextlib.contextmanager
    def recording(self) -> Iterator[FactLog]:
        self.thread = _thread_id()
        originals = {name: getattr(os, name) for name in _QUESTIONS}

        def noting(name: str) -> Callable[..., Any]:
            operation, arguments_of = _QUESTIONS[name]
            original = originals[name]

            def asked(*args: Any, **kwargs: Any) -> Any:
                mine = not self.quiet and _thread_id() == self.thread
                arguments = self._arguments(arguments_of(*args, **kwargs)) if mine else None
                try:
                    answer = original(*args, **kwargs)
                    if operation == "scandir":  # read whole: noted, and still iterated and used as a context
                        answer = _Listed(list(answer))
                except OSError as exc:
                    if arguments is not None:
                        refused = _refused(operation, exc)
                        if refused == ("ok",):
                            self._made(arguments)
                        self.facts.append((operation, arguments, refused))
                    raise
                if arguments is not None:
                    if operation == "mkdir":
                        self._made(arguments)
                    self.facts.append((operation, arguments, _NOTED[operation](answer)))
                return answer

            return asked

        for name in _QUESTIONS:
            setattr(os, name, noting(name))
        _RECORDING.append(self)
        try:
            yield self
        finally:
            _RECORDING.remove(self)
            for name, original in originals.items():
                setattr(os, name, original)

    def _made(self, arguments: tuple[object, ...]) -> None:
        """A directory made (or there): its earlier attempts that failed for want of its parent go. That is
        `mkdir(parents=True)` making the parents and trying again; what the plan goes on from is the directory
        made, and a later start, asking in order, makes the parents first. (A first start would otherwise
        note a failure no later start sees again, and keep no record.)"""
        self.facts = [fact for fact in self.facts if fact[:2] != ("mkdir", arguments) or fact[2] != _NO_PARENT]

    def _arguments(self, arguments: tuple[object, ...] | None) -> tuple[object, ...] | None:
        """A fact's arguments, its path as a str; None, and the log spoiled, for a question a later start could
        not ask again (a `dir_fd`, a descriptor, a bytes path)."""
        if arguments == ():
            return arguments
        if arguments is not None and not isinstance(arguments[0], int):
            with contextlib.suppress(TypeError):
                path = os.fspath(arguments[0])  # type: ignore[call-overload]
                if isinstance(path, str):
                    return (path, *arguments[1:])
        self.spoiled = True
        return None


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
