"""The record of a sandboxed start: what it decided and what it decided from, sealed in the state directory.

After a start that sandboxed its server, the proxy writes a record (`starts/` in the state directory, one
file per start key): the bwrap words and variables the plan gave, the server's command, the names of the
variables withheld from it, the policy file's digest, and the facts the plan was made from
(transport/plan_facts.py). The start key covers everything else the plan depends on: the command line,
the environment (but the values of variables set anew for each launch, which no plan reads), the working
directory, the user, the interpreter and the proxy's version. The
record is sealed with the state key (quotas/integrity.py's `integrity.key`), as remembered approvals
are: a sandboxed server cannot see the state directory; one that ran unconfined could forge a seal
(docs/security.md). transport/early_start.py reads it before anything heavy is loaded: so does this
module import nothing heavy.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import marshal
import os
import sys
from collections.abc import Iterable, Sequence

from mcp_sampling_proxy import __version__
from mcp_sampling_proxy.system.shared_files import read_regular
from mcp_sampling_proxy.transport.plan_facts import Fact

RECORD_FORMAT = 2  # 2: the code that planned is a fact
RECORDS_DIR = "starts"
KEEP_RECORDS = 64  # the most recently written; older ones are removed
MAX_RECORD_BYTES = 4 * 1024 * 1024
SEAL_KIND = b"start-record\0"  # (an approval's seal starts with another kind: neither passes for the other)
STATE_KEY_FILE = "integrity.key"  # quotas/integrity.py's KEY_FILE (that module loads msgspec)
STATE_KEY_BYTES = 32  # and its KEY_BYTES
MAX_POLICY_BYTES = 16 * 1024 * 1024  # config/policy_file.py's (that module loads PyYAML)


# Variables a host or a terminal sets anew for each launch and no plan reads (a test holds the package to
# that): a start is named by whether they are set, not by their values, and the server gets them as this
# launch gives them. Claude Code gives every stdio server its session's id (CLAUDE_CODE_SESSION_ID), and VS
# Code (and its forks, Cursor among them) its extension host's whole environment, with that launch's pids,
# sockets and log folder: with their values in the key, no start under either would find the record of the
# one before.
PER_LAUNCH = frozenset(
    {
        "CLAUDE_CODE_SESSION_ID",  # Claude Code: each session's id
        "VSCODE_PID",  # VS Code: the window's process ...
        "VSCODE_PARENT_PID",
        "VSCODE_IPC_HOOK",  # ... its sockets (in the runtime directory or /tmp: out of a sandboxed server's sight)
        "VSCODE_IPC_HOOK_EXTHOST",
        "VSCODE_IPC_HOOK_CLI",
        "VSCODE_GIT_IPC_HANDLE",
        "VSCODE_NONCE",
        "VSCODE_LOGS",  # ... and this launch's log folder
        "OLDPWD",  # the shell's last directory, before it launched the host
        "WINDOWID",  # X11 terminals: the window's id
        "TMUX_PANE",  # tmux: the pane
        "GNOME_TERMINAL_SCREEN",  # GNOME Terminal: the tab
        "KITTY_WINDOW_ID",
        "WEZTERM_PANE",
        "ALACRITTY_WINDOW_ID",
        "DESKTOP_STARTUP_ID",  # a desktop launcher's startup notice (X11), with the launch's time in it ...
        "XDG_ACTIVATION_TOKEN",  # ... and Wayland's: an app that does not unset it passes it to its children
        "INVOCATION_ID",  # systemd: each run of a unit (a host run as a user service) ...
        "JOURNAL_STREAM",  # ... and the journal stream it writes to
    }
)


def start_key(argv: Sequence[str], environ: dict[str, str], cwd: str) -> str:
    """What names a start: its command line, environment (of the PER_LAUNCH variables, only which are set),
    working directory, user, interpreter and the proxy's version (a digest: the environment holds secrets)."""
    inputs = (
        RECORD_FORMAT,
        __version__,
        sys.executable,
        tuple(argv),
        cwd,
        os.geteuid(),
        tuple(sorted((name, None if name in PER_LAUNCH else value) for name, value in environ.items())),
    )
    return hashlib.sha256(marshal.dumps(inputs)).hexdigest()


def state_directory(environ: dict[str, str]) -> str | None:
    """The state directory as config/dirs.py finds it on Linux (None when it would take a way this does not
    follow: then there is no early start)."""
    explicit = environ.get("MCP_SAMPLING_PROXY_STATE_DIR")
    if explicit:
        found = os.path.expanduser(explicit)
        return found if os.path.isabs(found) else None
    home = environ.get("HOME")
    if not home or not os.path.isabs(home):
        return None
    xdg = environ.get("XDG_STATE_HOME", "").strip()
    base = xdg if xdg else os.path.join(home, ".local", "state")
    return os.path.join(base, "mcp-sampling-proxy") if os.path.isabs(base) else None


def read_or_none(path: str, limit: int) -> bytes | None:
    """The regular file at `path` (at most `limit` bytes, read as the proxy reads its state and policy:
    system/shared_files.py), or None when there is none such."""
    try:
        return read_regular(path, limit)
    except OSError:
        return None


def _seal(key: bytes, payload: bytes) -> bytes:
    return hmac.new(key, SEAL_KIND + payload, hashlib.sha256).digest()


def policy_digest(data: bytes) -> str:
    """The policy file's digest, of its bytes (the text the usual start read, encoded again, is the same)."""
    return hashlib.sha256(data).hexdigest()


class Record:
    """What a sandboxed start decided, and what it was decided from."""

    __slots__ = ("command", "env", "facts", "hidden", "key", "policy", "policy_digest", "relayed", "words")

    def __init__(
        self,
        *,
        key: str,
        policy: str | None,
        policy_digest: str | None,
        facts: Sequence[Fact],
        words: Sequence[str],
        env: Sequence[tuple[str, str]],
        command: Sequence[str],
        hidden: Iterable[str],
        relayed: bool,
    ) -> None:
        self.key, self.policy, self.policy_digest = key, policy, policy_digest
        self.facts = tuple(facts)
        self.words, self.env, self.command = tuple(words), tuple(env), tuple(command)
        self.hidden = tuple(sorted(set(hidden)))
        self.relayed = relayed

    def payload(self) -> bytes:
        fields = {name: getattr(self, name) for name in self.__slots__}
        return marshal.dumps((RECORD_FORMAT, fields))

    def plans(
        self, words: Sequence[str], env: Sequence[tuple[str, str]], command: Sequence[str], hidden: Iterable[str]
    ) -> bool:
        """The plan made now is the one this record holds."""
        now = (tuple(words), tuple(env), tuple(command), tuple(sorted(set(hidden))))
        return now == (self.words, self.env, self.command, self.hidden)


def _load(payload: bytes) -> Record | None:
    """The record a sealed payload holds (its shape checked), else None."""
    try:
        found = marshal.loads(payload)  # sealed by a proxy: marshal is not for untrusted bytes
    except (EOFError, ValueError, TypeError):
        return None
    if not (isinstance(found, tuple) and len(found) == 2 and found[0] == RECORD_FORMAT and isinstance(found[1], dict)):
        return None
    fields = found[1]
    try:
        record = Record(**fields)
    except TypeError:
        return None
    strings = all(isinstance(w, str) for w in (*record.words, *record.command, *record.hidden))
    pairs = all(isinstance(p, tuple) and len(p) == 2 and all(isinstance(v, str) for v in p) for p in record.env)
    facts = all(isinstance(f, tuple) and len(f) == 3 and isinstance(f[1], tuple) for f in record.facts)
    if not (strings and pairs and facts and record.words and record.command and isinstance(record.relayed, bool)):
        return None
    return record


def read_record(directory: str, key: str) -> Record | None:
    """The sealed record for `key` in the state directory, else None (none, unsealed, or another shape)."""
    state_key = read_or_none(os.path.join(directory, STATE_KEY_FILE), STATE_KEY_BYTES)
    if state_key is None or len(state_key) != STATE_KEY_BYTES:
        return None
    blob = read_or_none(os.path.join(directory, RECORDS_DIR, key), MAX_RECORD_BYTES)
    if blob is None or len(blob) <= 32:
        return None
    seal, payload = blob[:32], blob[32:]
    if not hmac.compare_digest(seal, _seal(state_key, payload)):
        return None
    record = _load(payload)
    return record if record is not None and record.key == key else None


def write_record(directory: str, state_key: bytes, record: Record) -> None:
    """Keep `record` (sealed, 0600, replaced whole), and only the KEEP_RECORDS most recent ones."""
    import tempfile  # start-up: after the server is spawned

    folder = os.path.join(directory, RECORDS_DIR)
    with contextlib.suppress(FileExistsError):
        os.mkdir(folder, 0o700)
    payload = record.payload()
    fd, temporary = tempfile.mkstemp(dir=folder, prefix=".new-")
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(_seal(state_key, payload) + payload)
        os.replace(temporary, os.path.join(folder, record.key))
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
    _prune(folder)


def forget_record(directory: str, key: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(os.path.join(directory, RECORDS_DIR, key))


def _prune(folder: str) -> None:
    with contextlib.suppress(OSError):
        kept = []
        with os.scandir(folder) as entries:
            for entry in entries:
                if entry.is_file(follow_symlinks=False) and not entry.name.startswith("."):
                    kept.append((entry.stat(follow_symlinks=False).st_mtime, entry.path))
        for _when, path in sorted(kept)[: max(0, len(kept) - KEEP_RECORDS)]:
            os.unlink(path)
