"""What the sandbox refused a server, said where its user looks: the proxy's stderr and `doctor`.

A server that stops because it could not write a file or reach a host fails in its own words (an EROFS
in a Node stack trace, a 403 from a proxy it did not know it used). The proxy knows better: a refused
connection is its own decision (services/network.py), and a refused write shows in the server's stderr as
"Read-only file system". Each is said once per server and path or host, on stderr, naming the grant that
would allow it, and kept (the last few, in the state directory, which the server cannot see) for
`doctor` to show after the host has long closed the proxy's log.
"""

from __future__ import annotations

import os
import re
import threading
import time
from pathlib import Path
from typing import Any

from msgspec import Struct

from mcp_sampling_proxy.config.dirs import home_relative, state_dir
from mcp_sampling_proxy.log import get_logger
from mcp_sampling_proxy.quotas.state import JsonStateFile
from mcp_sampling_proxy.text.sanitize import one_line
from mcp_sampling_proxy.transport.grants import Guards

log = get_logger("mcp_sampling_proxy.sandbox")

NOTES_FILE = "sandbox-notes.json"
KEPT = 50  # notes kept in the file, newest last
MAX_PER_RUN = 20  # distinct refusals one proxy says and keeps (a server that retries forever says it once)

# how runtimes say EROFS, and where the path is in the line: Node, Python, Go, uv, and a bare path in quotes.
# The server writes the line: the patterns' runs between a word and the path are bounded ({0,40}), so that no
# line makes them scan it again from each place a word repeats, and they see its first LOOKED_AT characters
# only (a path is at most 4,096 bytes; a line may be 1 MB).
LOOKED_AT = 8192
_READ_ONLY = re.compile(r"read-only file system", re.IGNORECASE)
_PATH = re.compile(
    r"""(?:open|mkdir|rename|unlink|write|copyfile|symlink|rmdir|scandir|lstat|stat)\s+'(/[^']+)'"""
    r"""|(?:Read-only file system|EROFS)[^'"/]{0,40}['"]?(/[^'"\s,)]+)"""
    r"""|(?:create|write|open|remove)[a-z ]{0,40}`(/[^`]+)`:\s*read-only file system"""
    r"""|(?:open|mkdir|rename|remove|unlinkat|openat)\s+(/[^\s:]+):\s*read-only file system""",
    re.IGNORECASE,
)

# how runtimes say that no network is there (Node, Python, Go, curl), and the host, where the line names it
_NO_NETWORK = re.compile(
    r"EAI_AGAIN|ENOTFOUND|only-if-cached|ENETUNREACH|Temporary failure in name resolution|Name or service not known"
    r"|[Nn]etwork is unreachable|Could not resolve host|no such host|failed to lookup address",
)
_HOST = re.compile(
    r"(?:getaddrinfo|connect)\s+(?:EAI_AGAIN|ENOTFOUND|ENETUNREACH)\s+([A-Za-z0-9][A-Za-z0-9.-]*[A-Za-z0-9])"
    r"|Could not resolve host:\s*([A-Za-z0-9][A-Za-z0-9.-]*[A-Za-z0-9])"
    r"|lookup\s+([A-Za-z0-9][A-Za-z0-9.-]*[A-Za-z0-9])(?:\s+on\s+\S+)?:\s*no such host"
    r"|https?://([A-Za-z0-9][A-Za-z0-9.-]*[A-Za-z0-9])"
)


class Note(Struct, frozen=True):
    """One refusal: which server, a write or a connection, of what, and the grant that allows it."""

    server: str
    kind: str  # "write" | "connect"
    what: str  # a path, or HOST:PORT
    fix: str
    at: float


class SandboxNotes:
    """The refusals of one sandboxed server, said once each."""

    def __init__(self, server: str, where: str, *, offline: bool = False):
        self.server = server
        self.where = where  # "sandbox" or "sandbox.servers.NAME": where its grants are written
        self.offline = offline  # network: false, so no relay decides (and says) what it could not reach
        self._said: set[tuple[str, str]] = set()

    def stderr_line(self, line: str) -> None:
        """A line of the server's stderr: a write the sandbox refused, or with no network a host the server
        could not reach, is said and kept."""
        if len(self._said) >= MAX_PER_RUN:  # all this run says is said: nothing more to look for
            return
        line = line[:LOOKED_AT]
        if self.offline and _NO_NETWORK.search(line):
            self._unreachable(line)
        if not _READ_ONLY.search(line):
            return
        found = _PATH.search(line)
        path = next((group for group in found.groups() if group), None) if found else None
        if path is None:
            self.refused("write", "a file (its error names none)", f"{self.where}.write: [the directory it writes]")
        elif self._fresh("write", path):  # the advice walks the path: once per path, and not past the cap
            self.refused("write", path, _write_grant_for(path, self.where))

    def _unreachable(self, line: str) -> None:
        """With `network: false` the server fails its own way (npm: `getaddrinfo EAI_AGAIN
        registry.npmjs.org`, after a minute of retries); the note names the host where the line does."""
        found = _HOST.search(line)
        host = next((group for group in found.groups() if group), None) if found else None
        if host is None:
            self.refused(
                "connect", "the network (its error names no host)", f"{self.where}.network: [the hosts it needs]"
            )
        else:
            self.refused("connect", host, f"{self.where}.network: [{host}]")

    def _fresh(self, kind: str, what: str) -> bool:
        """Not said yet, and the run has not said all it says (a server that retries forever says it once)."""
        return (kind, what) not in self._said and len(self._said) < MAX_PER_RUN

    def refused(self, kind: str, what: str, fix: str) -> None:
        if not self._fresh(kind, what):
            return
        self._said.add((kind, what))
        shown = one_line(what, 300)
        log.warning(
            f"the sandbox refused the server {'a write to' if kind == 'write' else 'a connection to'} {shown}",
            server=self.server,
            fix=fix if fix.startswith(NO_GRANT) else f"if it needs it, grant it: {fix}",
        )
        # the notes file's lock may be held a while by another proxy: never on the caller's event loop
        note = Note(self.server, kind, shown, one_line(fix, 300), time.time())
        threading.Thread(target=keep, args=(note,), name="sandbox-note").start()


NO_GRANT = "no grant allows it"  # a write inside what runs as the user later (~/.npm, ~/.config/autostart)


MAX_ADVISED_DEPTH = 32  # a refused path deeper than this (the server names it) gets the plain advice


def _write_grant_for(path: str, where: str) -> str:
    """The grant that allows a refused write to `path`: the directory it is in (the deepest that exists);
    when that one may not be granted (`~/.cache` holds uv's cache, `~/.config` autostart entries), the first
    directory below it on the way to `path` that may, to be made first; NO_GRANT and why when none may (a
    write inside npm's cache, which runs as the user later). The server names `path`: one of more than
    MAX_ADVISED_DEPTH parts is not walked (each step is a look at the filesystem)."""
    path = os.path.normpath(path)
    if path.count(os.sep) > MAX_ADVISED_DEPTH:
        return f"{where}.write: [the directory it writes]"
    guards = Guards(os.environ)
    directory = os.path.dirname(path) or "/"
    while directory != "/" and not os.path.isdir(directory):
        directory = os.path.dirname(directory)
    if next(guards.clashes(directory), None) is None:
        return f"{where}.write: [{home_relative(Path(directory))}]"
    shown = "~" if directory == os.path.expanduser("~") else home_relative(Path(directory))
    candidate = directory
    for part in os.path.relpath(path, directory).split(os.sep):
        candidate = os.path.join(candidate, part)
        if candidate == path and os.path.splitext(part)[1]:  # a file's name: no folder of its own to grant
            break
        if next(guards.clashes(candidate), None) is None:
            own = home_relative(Path(candidate))
            return f"{where}.write: [{own}] (make it first: mkdir -p {own}; {shown} itself may not be granted)"
    inside = next((guard for guard, clash in guards.clashes(path) if clash == "inside"), None)
    if inside is not None:
        return (
            f"{NO_GRANT}: {home_relative(Path(path))} is inside {home_relative(Path(inside.path))} ({inside.what}): "
            "a server may not write there"
        )
    return f"{where}.write: [a directory of its own] ({shown} itself may not be granted)"


def keep(note: Note) -> None:
    """Add `note` to the state directory's notes (never fails the caller: a note is a courtesy)."""
    entry = {"server": note.server, "kind": note.kind, "what": note.what, "fix": note.fix, "at": note.at}

    def add(data: dict[str, Any]) -> None:
        notes = data.get("notes")
        notes = [n for n in notes if isinstance(n, dict)] if isinstance(notes, list) else []
        data["notes"] = [*notes, entry][-KEPT:]

    try:
        JsonStateFile(state_dir() / NOTES_FILE, durable=False).update(add)
    except OSError as exc:
        log.debug("could not keep the sandbox's note", error=str(exc))


def notes(directory: Path | None = None) -> list[Note]:
    """The kept notes, oldest first (none when there are none, or they cannot be read)."""
    path = (directory or state_dir(create=False)) / NOTES_FILE
    if not path.is_file():
        return []
    try:
        data = JsonStateFile(path).read()
    except OSError:
        return []
    found = []
    for raw in data.get("notes", []) if isinstance(data.get("notes"), list) else []:
        if isinstance(raw, dict) and all(isinstance(raw.get(k), str) for k in ("server", "kind", "what", "fix")):
            at = raw.get("at")
            when = float(at) if isinstance(at, int | float) else 0.0
            found.append(Note(raw["server"], raw["kind"], raw["what"], raw["fix"], when))
    return found
