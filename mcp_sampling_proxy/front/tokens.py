"""The bearer tokens that may call `serve`'s HTTP endpoint, and who each one is.

A token file holds one token per line, optionally named: `alice:TOKEN` (the name goes into the
audit record as `client`). Blank lines and lines starting with `#` are skipped. The file must be
readable by its owner only (0600 or stricter): a token anyone on the machine can read protects
nothing. `MCP_SAMPLING_PROXY_TOKEN` adds one unnamed token (named `token`). Tokens are compared in
constant time, against every known token, so neither a match's position nor its length shows in
the timing.
"""

from __future__ import annotations

import hmac
import os
import stat
from collections.abc import Mapping

from msgspec import Struct

TOKEN_ENV = "MCP_SAMPLING_PROXY_TOKEN"
UNNAMED = "token"  # the client name of a token given without one
MIN_TOKEN_LENGTH = 16


class TokenError(Exception):
    """The token file cannot be used; the message says why and what to do."""


class Caller(Struct, frozen=True):
    """One accepted token and the name its holder is audited under."""

    name: str
    token: bytes
    named: bool = True  # False for a token given without a name (a bare line, the environment's)


class Tokens(Struct, frozen=True):
    callers: tuple[Caller, ...] = ()

    @property
    def required(self) -> bool:
        return bool(self.callers)

    def identify(self, presented: str) -> str | None:
        """The client name of a presented bearer token, or None when it is not one of ours."""
        given = presented.encode("utf-8", "surrogateescape")
        found: str | None = None
        for caller in self.callers:  # every one compared: the time does not say which matched
            if hmac.compare_digest(given, caller.token) and found is None:
                found = caller.name
        return found

    def is_whole_line(self, presented: str) -> bool:
        """Whether `presented` is a named token's whole `name:token` line rather than the token: the
        usual slip when copying from the token file, worth naming in the 401. (Constant time, as above.)"""
        given = presented.encode("utf-8", "surrogateescape")
        found = False
        for caller in (caller for caller in self.callers if caller.named):
            line = caller.name.encode("utf-8", "surrogateescape") + b":" + caller.token
            found = hmac.compare_digest(given, line) or found
        return found


def load_tokens(path: str | None, environ: Mapping[str, str]) -> Tokens:
    """The tokens of `path` (TokenError when it is unsafe or malformed) and of the environment."""
    callers: list[Caller] = []
    if path is not None:
        callers.extend(_read_file(path))
    env_token = environ.get(TOKEN_ENV, "").strip()
    if env_token:
        callers.append(_caller(UNNAMED, env_token, TOKEN_ENV, named=False))
    return Tokens(tuple(callers))


def read_private(path: str, option: str) -> str:
    """The text of a file of secrets that only its owner may read (TokenError says what is wrong)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError as exc:
        raise TokenError(f"{option} {path}: cannot open it ({exc.strerror})") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise TokenError(f"{option} {path}: not a regular file")
        if info.st_mode & 0o077:
            raise TokenError(
                f"{option} {path}: readable by others (mode {stat.S_IMODE(info.st_mode):04o}); run `chmod 600 {path}`"
            )
        with os.fdopen(os.dup(fd), "r", encoding="utf-8") as handle:
            return handle.read()
    finally:
        os.close(fd)


def _read_file(path: str) -> list[Caller]:
    text = read_private(path, "--token-file")
    callers = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        name, sep, token = line.rpartition(":")
        where = f"--token-file {path}:{number}"
        callers.append(_caller(name.strip() if sep else UNNAMED, token.strip(), where, named=bool(sep)))
    if not callers:
        raise TokenError(f"--token-file {path}: no tokens in it (one a line, `name:token` or `token`)")
    return callers


def _caller(name: str, token: str, where: str, named: bool = True) -> Caller:
    if not name or not name.isprintable():
        raise TokenError(f"{where}: the client name before ':' is empty or holds control characters")
    if len(token) < MIN_TOKEN_LENGTH or not token.isascii() or not token.isprintable() or " " in token:
        raise TokenError(
            f"{where}: a token must be at least {MIN_TOKEN_LENGTH} printable ASCII characters without spaces "
            "(make one with `python3 -c 'import secrets; print(secrets.token_urlsafe(32))'`)"
        )
    return Caller(name, token.encode(), named)
