"""Seals on the proxy's state files, so what the governed server writes there is not believed.

Remembered approvals and token budgets live in files of the user's (quotas/state.py), which a
server running as the same user can write: it could approve its own requests or reset its budget.
Each remembered approval, and the budgets file as a whole, carries an HMAC-SHA256 made with a key
that only the proxy reads: `integrity.key` in the state directory, created on first use (0600). An
entry or a file whose seal does not verify was not written by a proxy: it is ignored (approvals) or
refused (budgets), and reported.

The proxy holds the key it found at start (`hold_key`, before the server runs): a key file that is
later replaced or removed (the state directory moved away and another put in its place) is tampering,
and what depends on the key is refused, never re-sealed with the new key.

What this defends depends on the sandbox (transport/sandbox.py): a sandboxed server cannot see the
state directory at all, so it can neither read the key nor write the files; an unconfined server
that finds and reads the key can still forge a seal (the key only raises the bar). An older sealed
file put back in place verifies (a budget could be rolled back that way); shared budgets in Redis
do not have that weakness.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import os
import secrets
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from msgspec import Struct

from mcp_sampling_proxy.system.shared_files import NotARegularFile, read_regular

KEY_FILE = "integrity.key"
LEDGER_FILE = "sealed.json"  # which sealed files a proxy has written: one of them gone was removed, not new
LEDGER_KIND = "ledger"
SEALED_FILES = ("budgets.json", "tools.json")  # what a ledger made for an older state directory names
KEY_BYTES = 32
MAC_FIELD = "mac"


class IntegrityKeyError(OSError):
    """The key file exists but cannot be used (not a regular file, wrong size, unreadable)."""


class KeyChanged(IntegrityKeyError):
    """The key file is not the one this proxy started with (replaced, or removed): tampering."""


_HELD: dict[str, bytes] = {}  # by directory (as named): the key this process found at its start


def hold_key(directory: Path) -> None:
    """Take the key as it is now (made when missing) as the only one this process trusts from here on."""
    _HELD[str(directory)] = load_key(directory)


def load_key(directory: Path) -> bytes:
    """The proxy's sealing key in `directory`, made (0600, exclusively) when there is none yet; when this
    process holds a key for `directory`, that one, after checking the file still has it (KeyChanged)."""
    path = directory / KEY_FILE
    held = _HELD.get(str(directory))
    if held is not None:
        try:
            now = read_regular(path, KEY_BYTES + 1)
        except FileNotFoundError:
            now = b""
        except (OSError, NotARegularFile) as exc:
            raise KeyChanged(f"{path} cannot be read ({exc})") from None
        if not hmac.compare_digest(now, held):
            raise KeyChanged(
                f"{path} is not the sealing key this proxy started with (it was {'replaced' if now else 'removed'} "
                "while the proxy ran, or its directory moved away): remembered approvals, budgets and tool pins are "
                "not trusted until the proxy restarts; `mcp-sampling-proxy doctor` checks the state"
            )
        return held
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    with contextlib.suppress(FileExistsError):
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
        try:
            os.write(fd, secrets.token_bytes(KEY_BYTES))
            os.fsync(fd)
        finally:
            os.close(fd)
    try:
        key = read_regular(path, KEY_BYTES + 1)
    except NotARegularFile as exc:
        raise IntegrityKeyError(f"{path} is not a regular file ({exc})") from None
    if len(key) != KEY_BYTES:
        raise IntegrityKeyError(
            f"{path} holds {len(key)} bytes, not {KEY_BYTES}; remove it to start anew "
            "(remembered approvals and budgets are then no longer trusted)"
        )
    return key


def canonical(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def mac(key: bytes, kind: str, value: Any) -> str:
    """The seal of `value` for its `kind` ("approval", "budgets"): a seal of one kind never fits another."""
    return hmac.new(key, kind.encode() + b"\0" + canonical(value), hashlib.sha256).hexdigest()


def sealed_entry(key: bytes, kind: str, entry: Mapping[str, object]) -> dict[str, object]:
    """`entry` with its seal in MAC_FIELD."""
    body = {k: v for k, v in entry.items() if k != MAC_FIELD}
    return {**body, MAC_FIELD: mac(key, kind, body)}


def entry_is_sealed(key: bytes, kind: str, entry: Any) -> bool:
    """True when `entry` carries a seal made with `key` over the rest of it."""
    if not isinstance(entry, dict) or not isinstance(entry.get(MAC_FIELD), str):
        return False
    body = {k: v for k, v in entry.items() if k != MAC_FIELD}
    return hmac.compare_digest(entry[MAC_FIELD], mac(key, kind, body))


def prepare(directory: Path) -> bool:
    """Make the key at start, before the server runs, when there is none; True when it was made now (then
    `adopt` what an older version wrote, once logging is set up). Logs nothing: it runs before logging is
    configured, when a log line would go to stdout, the host's protocol stream."""
    if (directory / KEY_FILE).exists():
        return False
    load_key(directory)
    return True


def start_anew(path: Path) -> str:
    """How a user starts a sealed state file anew: removing it alone is what a server would do (and is
    refused), so the ledger that names it goes too, and the proxies that saw it restart."""
    return f"remove {path} and {path.with_name(LEDGER_FILE)}, then restart the proxies"


def start_state(directory: Path) -> bool:
    """At start, before the server runs: the key made when missing and held from now on, and the ledger;
    True when the key was made now (then `state.adopt` seals what an older version wrote)."""
    made = prepare(directory)
    hold_key(directory)
    start_ledger(directory)
    return made


def start_ledger(directory: Path) -> None:
    """At start, before the server runs: a state directory with a key but no ledger (kept by a version
    without one) gets a ledger naming the sealed files there now (quotas/state.py keeps it after that)."""
    if (directory / LEDGER_FILE).exists() or not (directory / KEY_FILE).exists():
        return
    present = sorted(name for name in SEALED_FILES if (directory / name).exists())
    sealed = sealed_entry(load_key(directory), LEDGER_KIND, {"sealed": {"files": present}})
    fd, tmp = tempfile.mkstemp(prefix=LEDGER_FILE + ".", suffix=".tmp", dir=directory)  # 0600
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(json.dumps(sealed, sort_keys=True, separators=(",", ":"), ensure_ascii=False))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, directory / LEDGER_FILE)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


class StateReport(Struct, frozen=True):
    """What `doctor` says about the sealed state files (read only: it makes no key and seals nothing)."""

    key: str | None  # why the key is unusable or absent (None: it is there and usable)
    unsealed_approvals: tuple[tuple[str, str], ...] = ()  # (server, tool) of `always` entries a proxy ignores
    budgets: str | None = None  # why budgets.json is refused (None: sealed, or absent)


def report(directory: Path) -> StateReport:
    """Check the state files against the key without changing anything."""
    if not (directory / KEY_FILE).exists():
        return StateReport("no sealing key yet: the first proxy start makes it (and seals what is there then)")
    try:
        key = load_key(directory)
    except OSError as exc:
        return StateReport(str(exc))

    def parsed(name: str) -> Any:
        try:
            return json.loads(read_regular(directory / name, 16 * 1024 * 1024))
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            return exc

    approvals = parsed("approvals.json")
    unsealed: list[tuple[str, str]] = []
    if isinstance(approvals, dict) and isinstance(approvals.get("always"), list):
        for entry in approvals["always"]:
            if not entry_is_sealed(key, "approval", entry):
                server = entry.get("server") if isinstance(entry, dict) else None
                tool = entry.get("tool") if isinstance(entry, dict) else None
                unsealed.append((str(server), str(tool or "")))
    budgets = parsed("budgets.json")
    problem = None
    if isinstance(budgets, Exception):
        problem = f"budgets.json cannot be read ({budgets})"
    elif budgets is not None and not (
        isinstance(budgets, dict) and set(budgets) == {"sealed", MAC_FIELD} and entry_is_sealed(key, "budgets", budgets)
    ):
        problem = "budgets.json was not written by mcp-sampling-proxy (its seal does not match)"
    return StateReport(None, tuple(unsealed), problem)
