"""Where `login` keeps an OAuth remote's tokens and client registration, and where the proxy finds them.

One record per remote (keyed by its canonical resource URL): the tokens, when the access token
expires (absolute time: `expires_in` means nothing after a restart), the client registration, and
the authorization server's metadata (the proxy refreshes headless, without discovering it again).
The record is a secret: a file of mode 0600 in `oauth/` of the state dir (0700), or an entry in
the OS keyring when `keyring` is installed and has a working backend. Reads look in the file
first, then the keyring; a record is written back where it was found.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shlex
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit, urlunsplit

import anyio

from mcp_sampling_proxy.config.atomic import write_atomic
from mcp_sampling_proxy.quotas.state import state_dir
from mcp_sampling_proxy.system.shared_files import read_regular

KEYRING_SERVICE = "mcp-sampling-proxy-oauth"
MAX_LOGIN_BYTES = 1024 * 1024  # a stored login is a few KiB; anything past this is not read
StoreKind = Literal["file", "keyring"]


def canonical_url(url: str) -> str:
    """The resource URL tokens belong to (RFC 8707: lower-case scheme and host, no fragment). The
    SDK's function does the same; it is not used here because importing it loads the whole SDK."""
    parts = urlsplit(url)
    return urlunsplit(parts._replace(scheme=parts.scheme.lower(), netloc=parts.netloc.lower(), fragment=""))


def login_command(url: str, *, scope: str | None = None) -> str:
    """The command that logs in to `url`, quoted for a shell (a URL may hold `&`)."""
    return shlex.join(["mcp-sampling-proxy", "login", "--url", url, *(["--scope", scope] if scope else [])])


def _oauth_dir(create: bool) -> Path:
    directory = state_dir(create=create) / "oauth"
    if create and not directory.is_dir():
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    return directory


def file_path(url: str, *, create: bool = False) -> Path:
    digest = hashlib.sha256(canonical_url(url).encode()).hexdigest()[:32]
    return _oauth_dir(create) / f"{digest}.json"


REFRESH_TURN_WAIT = 30.0  # s a proxy waits for another one's refresh of the same login


@asynccontextmanager
async def refresh_turn(url: str) -> AsyncIterator[None]:
    """One proxy at a time refreshes a login: servers rotate refresh tokens (each works once), so
    two proxies refreshing at the same moment would leave one with a spent token. The turn is an
    exclusive lock on a file beside the login's; the one who waited reads the store again first.
    After `REFRESH_TURN_WAIT` without the turn the refresh goes ahead anyway (a stuck peer must not
    stop this proxy for good)."""
    path = file_path(url, create=True).with_suffix(".lock")
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        deadline = time.monotonic() + REFRESH_TURN_WAIT
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    break
                await anyio.sleep(0.05)
        yield
    finally:
        os.close(fd)  # releases the lock


def _keyring() -> Any | None:
    """The keyring module when it is installed and its backend can store secrets, else None."""
    try:
        # start-up: keyring costs ~110 ms, only stored logins need it
        import keyring
        from keyring.backends import fail
    except ImportError:
        return None
    try:
        backend = keyring.get_keyring()
        if isinstance(backend, fail.Keyring) or getattr(backend, "priority", 1) <= 0:
            return None
        backend.get_password(KEYRING_SERVICE, "probe")
    except Exception:  # any backend failure (no D-Bus, locked, ...) means: use the file
        return None
    return keyring


def keyring_usable() -> bool:
    return _keyring() is not None


def load(url: str) -> tuple[dict[str, Any], StoreKind] | None:
    """The stored record for `url` and where it lives, or None when nobody logged in."""
    path = file_path(url)
    try:
        record = json.loads(read_regular(path, MAX_LOGIN_BYTES).decode("utf-8"))
        if isinstance(record, dict):
            return record, "file"
    except FileNotFoundError:
        pass
    except (OSError, ValueError):
        return None
    kr = _keyring()
    if kr is not None:
        with contextlib.suppress(Exception):
            text = kr.get_password(KEYRING_SERVICE, canonical_url(url))
            if text:
                record = json.loads(text)
                if isinstance(record, dict):
                    return record, "keyring"
    return None


def save(url: str, record: dict[str, Any], kind: StoreKind) -> str:
    """Write the record (file: 0600, replaced atomically); returns where, for the user."""
    record = {**record, "url": canonical_url(url), "saved_at": time.time()}
    text = json.dumps(record, indent=1, sort_keys=True)
    if kind == "keyring":
        kr = _keyring()
        if kr is None:
            raise OSError("the OS keyring is not usable here (install `keyring` and a backend, or use --store file)")
        kr.set_password(KEYRING_SERVICE, canonical_url(url), text)
        with contextlib.suppress(FileNotFoundError):
            file_path(url).unlink()  # one copy only: a stale file would be read first
        return f"the OS keyring (service {KEYRING_SERVICE})"
    path = file_path(url, create=True)
    write_atomic(path, text.encode("utf-8"), mode=0o600)
    return str(path)


def delete(url: str) -> list[str]:
    """Remove every stored copy; returns where they were."""
    removed: list[str] = []
    path = file_path(url)
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
        removed.append(str(path))
    kr = _keyring()
    if kr is not None:
        with contextlib.suppress(Exception):
            if kr.get_password(KEYRING_SERVICE, canonical_url(url)):
                kr.delete_password(KEYRING_SERVICE, canonical_url(url))
                removed.append("the OS keyring")
    return removed


def login_state(url: str, now: float | None = None) -> tuple[str, str]:
    """("logged-in" | "refreshable" | "expired" | "none", a sentence for the user)."""
    found = load(url)
    if found is None:
        return "none", f"not logged in: run `{login_command(url)}`"
    record, kind = found
    tokens = record.get("tokens") or {}
    expires_at = record.get("expires_at")
    where = "keyring" if kind == "keyring" else "file"
    now = time.time() if now is None else now
    if not tokens.get("access_token"):
        return "none", f"not logged in: run `{login_command(url)}`"
    if expires_at is None or now < float(expires_at):
        left = "" if expires_at is None else f", token valid for {_span(float(expires_at) - now)}"
        return "logged-in", f"logged in ({where}{left})"
    if tokens.get("refresh_token"):
        return "refreshable", f"token expired but refreshable ({where}): the proxy refreshes it on its next request"
    return "expired", f"token expired and cannot be refreshed: run `{login_command(url)}`"


def _span(seconds: float) -> str:
    seconds = max(0, int(seconds))
    if seconds < 120:
        return f"{seconds} s"
    if seconds < 7200:
        return f"{seconds // 60} min"
    return f"{seconds // 3600} h"
