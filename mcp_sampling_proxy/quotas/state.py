"""Per-user state on this machine, and a small JSON file that several proxies update safely.

Every proxy the user runs (one per MCP server, often several hosts at once) shares the same
state directory (`state_dir`, from `config.dirs`), so anything that must hold across proxies
and restarts (token budgets) lives in a `JsonStateFile` there.

Locking and atomicity: each update takes an exclusive `fcntl.flock` on a sidecar `NAME.lock`
file (created once, never removed), reads the JSON, lets the caller change it, writes the new
text to a temporary file in the same directory, fsyncs it and `os.replace`s it over the data
file, then releases the lock. The sidecar is what makes this correct: a lock on the data file
itself would be left on the old inode by `os.replace`, and a process already waiting on that
inode would then read stale data. With the lock on a file whose inode never changes,
read-modify-write is serialised across processes (and across threads of one process: every
update opens its own descriptor, and flock locks conflict between descriptions), while the
rename means a reader (or a proxy that crashes mid-write) only ever sees a complete old or a
complete new file. Truncate-and-write in place would be correct under the lock too, but a
crash between the truncate and the write would lose every budget.

Updates block the calling thread while another proxy holds the lock (well under a millisecond
of work per update, plus the fsync), so the proxy makes them in a worker thread, never on the
event loop that relays messages. Anyone running as the user (a governed server too) can hold the
lock or put something else at the file's path, so both are bounded: the lock is waited for at most
LOCK_WAIT seconds (then TimeoutError, an OSError), and only a regular file of at most
MAX_STATE_BYTES is read (a FIFO would block the read forever, /dev/zero would never end); anything
else is moved aside like a corrupt file.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Generic, TypeAlias, TypedDict, TypeVar, cast

from mcp_sampling_proxy.config.dirs import APP_DIR, STATE_DIR_ENV, state_dir
from mcp_sampling_proxy.log import get_logger
from mcp_sampling_proxy.quotas.integrity import (
    KEY_FILE,
    LEDGER_FILE,
    LEDGER_KIND,
    MAC_FIELD,
    entry_is_sealed,
    load_key,
    sealed_entry,
    start_anew,
)
from mcp_sampling_proxy.system.shared_files import NotARegularFile, lock_within, read_regular

log = get_logger("mcp_sampling_proxy.quotas.state")

__all__ = ["APP_DIR", "STATE_DIR_ENV", "JsonStateFile", "StateFile", "state_dir"]  # the directory itself: config.dirs

T = TypeVar("T")
# The document a state file holds: a TypedDict of the shape its owner writes (a plain JSON object for a
# file whose owner reads it as one).
D = TypeVar("D", bound=Mapping[str, object])

LOCK_WAIT = 5.0  # seconds an update waits for another process's lock before giving up
MAX_STATE_BYTES = 16 * 1024 * 1024  # a state file past this is not read (budgets and approvals are small)


class TamperedState(OSError):
    """A sealed state file whose seal does not verify: it was not written by a proxy (quotas/integrity.py)."""


class StateGone(TamperedState):
    """A sealed state file a proxy wrote (this one saw it, or the ledger names it) is not there: removed."""


class StateFile(Generic[D]):
    """A JSON object in a file, changed only through `update`, safe across processes; `D` is its shape.

    `sealed`: the file holds {"sealed": DATA, "mac": SEAL} with an HMAC of the proxy's key over DATA,
    and one whose seal does not verify is refused (TamperedState), never read as data; an unsealed
    file is adopted only when the key is new (the first run of a version that seals). The document is
    typed as `D` where it is read (`_read`): only a proxy writes it (a sealed one verifiably), but an older
    version's may lack a key or hold another type, so its owner still checks what it reads."""

    def __init__(
        self, path: str | os.PathLike[str], *, durable: bool = True, sealed: str | None = None, adopt: bool = False
    ):
        self.path = Path(path)
        self.lock_path = self.path.with_name(self.path.name + ".lock")
        self.durable = durable  # fsync the new file before the rename
        self.sealed = sealed  # the seal's kind ("budgets"), or None for a plain file
        self._adopt = adopt  # an unsealed file is an older version's: take it (integrity.prepare, at start)
        self._seen = False  # this process saw the file: if it goes, something removed it (tampering)
        self._listed = False  # the ledger names this file (known to this process)

    def update(self, fn: Callable[[D], T]) -> T:
        """Run fn(data) under the file's exclusive lock and store what it leaves in data.

        fn may mutate `data` (a plain dict decoded from the file; {} when the file is missing,
        empty or unreadable) and its return value is returned. When fn raises, nothing is written.
        The file is rewritten only when the data changed.
        """
        self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        lock_fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            lock_within(lock_fd, LOCK_WAIT, self.lock_path)
            data, before = self._read()
            result = fn(data)
            after = _encode(data)
            if after != before:
                self._write(self._sealed_text(data) if self.sealed is not None else after)
                self._seen = True
                if self.sealed is not None and self.sealed != LEDGER_KIND and not self._listed:
                    list_in_ledger(self.path)
                    self._listed = True
            return result
        finally:
            os.close(lock_fd)  # closing the last descriptor releases the flock

    def _sealed_text(self, data: D) -> str:
        assert self.sealed is not None
        return _encode(sealed_entry(self._seal_key(), self.sealed, {"sealed": data}))

    def read(self) -> D:
        """A snapshot of the data (under the lock, so never a half-applied update)."""
        return self.update(lambda data: cast(D, json.loads(_encode(data))))

    def _read(self) -> tuple[D, str]:
        """The data and its text as read ("" when it must be rewritten). Other OS errors
        (permissions, I/O) propagate: overwriting a file we could not read would lose it."""
        data, text = self._read_object()
        return cast(D, data), text

    def _read_object(self) -> tuple[dict[str, object], str]:
        try:
            raw = read_regular(self.path, MAX_STATE_BYTES)
        except FileNotFoundError:
            if self.sealed is not None and self.sealed != LEDGER_KIND and (self._seen or ledger_lists(self.path)):
                raise StateGone(
                    f"{self.path} is gone, though a proxy wrote it: something removed it (a server without a "
                    f"sandbox?). It is not taken as new; to start it anew yourself, {start_anew(self.path)}"
                ) from None
            return {}, _encode({})
        except NotARegularFile as exc:
            return self._set_aside(str(exc))
        self._seen = True
        if not raw.strip():
            if self.sealed is not None and not self._seal_key_is_new():
                raise TamperedState(f"{self.path} was emptied by something other than a proxy")
            if raw:
                log.warning("state file is blank; starting from empty state", path=str(self.path))
            return {}, ""
        try:
            text = raw.decode("utf-8")
            data = json.loads(text)
            problem = None if isinstance(data, dict) else f"holds a JSON {type(data).__name__}, not an object"
        except ValueError as exc:
            problem = f"is not valid JSON ({exc})"
        if problem is None:
            if self.sealed is None:
                return data, text
            unsealed = self._unseal(data)  # compared unsealed: an update that changes nothing writes nothing
            return unsealed, _encode(unsealed) if unsealed is not data else ""  # (adopted: sealed now)
        if self.sealed is not None and not self._seal_key_is_new():
            raise TamperedState(f"{self.path} {problem}, and a proxy writes it sealed: something else wrote it")
        return self._set_aside(problem)

    def _seal_key(self) -> bytes:
        """Read each time: a key replaced under this proxy is tampering (integrity.hold_key), never trusted."""
        return load_key(self.path.parent)

    def _seal_key_is_new(self) -> bool:
        self._seal_key()
        return self._adopt

    def _unseal(self, data: dict[str, object]) -> dict[str, object]:
        assert self.sealed is not None
        key = self._seal_key()
        if set(data) == {"sealed", MAC_FIELD} and isinstance(inside := data["sealed"], dict):
            if entry_is_sealed(key, self.sealed, {"sealed": inside, MAC_FIELD: data[MAC_FIELD]}):
                return inside
            raise TamperedState(f"{self.path} was changed by something other than a proxy (its seal does not match)")
        if self._adopt:  # written by a version that did not seal: taken once, sealed from now on
            log.info("state file adopted and sealed from now on", path=str(self.path))
            return data
        raise TamperedState(f"{self.path} is not sealed by a proxy: something else wrote it")

    def _set_aside(self, problem: str) -> tuple[dict[str, object], str]:
        saved = self.path.with_name(self.path.name + ".corrupt")
        with contextlib.suppress(OSError):
            os.replace(self.path, saved)
        log.warning(
            "state file unusable; starting from empty state (old content kept beside it)",
            path=str(self.path),
            problem=problem,
            kept=str(saved),
        )
        return {}, ""

    def _write(self, text: str) -> None:
        fd, tmp = tempfile.mkstemp(prefix=self.path.name + ".", suffix=".tmp", dir=self.path.parent)  # 0600
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(text)
                if self.durable:
                    f.flush()
                    os.fsync(f.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise


# A state file its owner reads as a plain JSON object.
JsonStateFile: TypeAlias = StateFile[dict[str, Any]]


class Ledger(TypedDict, total=False):
    """`ledger.json`: the sealed files a proxy wrote, by name (one gone is tampering, not a first run)."""

    files: list[str]


class Approvals(TypedDict, total=False):
    """`approvals.json`: the remembered `always` approvals (approval/memory.py). An entry is trusted only
    when its seal verifies: until then it is whatever the file held (an older version's [server, tool])."""

    always: list[object]


def approvals_file(path: Path) -> StateFile[Approvals]:
    return StateFile(path)


def _ledger(directory: Path) -> StateFile[Ledger]:
    return StateFile(directory / LEDGER_FILE, sealed=LEDGER_KIND)


def ledger_lists(path: Path) -> bool:
    """True when the ledger beside `path` names it (TamperedState when the ledger cannot be trusted)."""
    files = _ledger(path.parent).read().get("files")
    return isinstance(files, list) and path.name in files


def list_in_ledger(path: Path) -> None:
    """Name `path` in the ledger beside it: from now on its disappearance is tampering."""

    def add(data: Ledger) -> None:
        files = data.get("files")
        files = files if isinstance(files, list) else []
        if path.name not in files:
            data["files"] = sorted({*files, path.name})

    _ledger(path.parent).update(add)


def _encode(data: Mapping[str, object]) -> str:
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def adopt(directory: Path) -> None:
    """The first run of a version that seals: seal what an older version wrote (approvals, budgets), but
    only files older than the key: one written since (by a server of another of the user's proxies; this
    proxy's own starts after this) is not. Strictly older: the clock that stamps files is coarse, and a
    file an older version left cannot share the new key's tick."""
    key = load_key(directory)
    made = (directory / KEY_FILE).stat().st_mtime

    def older(path: Path) -> bool:
        try:
            return path.stat().st_mtime < made
        except OSError:
            return False

    approvals = approvals_file(directory / "approvals.json")
    if older(approvals.path):

        def seal_all(data: Approvals) -> None:
            entries = data.get("always")
            if isinstance(entries, list):
                data["always"] = [_sealed_approval(key, e) for e in entries]

        approvals.update(seal_all)
    budgets = directory / "budgets.json"
    if older(budgets):
        JsonStateFile(budgets, sealed="budgets", adopt=True).update(lambda data: None)


def _sealed_approval(key: bytes, entry: Any) -> Any:
    """An older version's remembered approval, sealed: {"server", "tool", ...}, or the oldest [server, tool]."""
    if isinstance(entry, list) and len(entry) == 2 and all(isinstance(part, str) for part in entry):
        entry = {"server": entry[0], "tool": entry[1], "rule": None, "channel": None, "at": None}
    if not isinstance(entry, dict) or entry_is_sealed(key, "approval", entry):
        return entry
    return sealed_entry(key, "approval", entry)
