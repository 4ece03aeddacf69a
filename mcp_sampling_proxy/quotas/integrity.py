"""Seals on the proxy's state files, so what the governed server writes there is not believed.

Remembered approvals and token budgets live in files of the user's (quotas/state.py), which a
server running as the same user can write: it could approve its own requests or reset its budget.
Each remembered approval, and the budgets file as a whole, carries an HMAC-SHA256 made with a key
that only the proxy reads: `integrity.key` in the state directory, created on first use (0600). An
entry or a file whose seal does not verify was not written by a proxy: it is ignored (approvals) or
refused (budgets), and reported.

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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mcp_sampling_proxy.shared_files import NotARegularFile, read_regular

KEY_FILE = "integrity.key"
KEY_BYTES = 32
MAC_FIELD = "mac"


class IntegrityKeyError(OSError):
    """The key file exists but cannot be used (not a regular file, wrong size, unreadable)."""


def load_key(directory: Path) -> bytes:
    """The proxy's sealing key in `directory`, made (0600, exclusively) when there is none yet."""
    path = directory / KEY_FILE
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


def sealed_entry(key: bytes, kind: str, entry: dict[str, Any]) -> dict[str, Any]:
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


@dataclass(frozen=True)
class StateReport:
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
