"""Provider API keys from a file or a command, so they never sit in the host config or any
environment a same-user server could read.

`resolve_keys` runs once at start, before the upstream is spawned; the values live only in the
returned `ProviderConfig.api_key` (never logged: the field has no repr) and in the scrubbers.
`policy check` never calls it, so checking a policy never runs `api_key_command`.
"""

from __future__ import annotations

import dataclasses
import os
import stat
import subprocess
import time
from collections.abc import Callable, Iterable
from urllib.parse import urlsplit

from mcp_sampling_proxy.config.child_env import withheld
from mcp_sampling_proxy.config.providers import ProviderConfig
from mcp_sampling_proxy.system.addresses import is_loopback

COMMAND_TIMEOUT = 30.0  # seconds; a password manager may ask to be unlocked
STOP_CHECK = 0.1  # seconds between looks at whether the proxy was asked to stop meanwhile


class KeySourceError(Exception):
    """A key source that did not give a key; the message says what to do, never the key."""


class KeyCommandStopped(KeySourceError):
    """The proxy was asked to stop (`signal`) while an `api_key_command` ran: the command was ended."""

    def __init__(self, message: str, signal: str):
        super().__init__(message)
        self.signal = signal


def provider_key(provider: ProviderConfig) -> str | None:
    """The key an adapter sends: from a file or command (resolved), else from `api_key_env`."""
    if provider.api_key is not None:
        return provider.api_key
    if provider.api_key_env:
        return os.environ.get(provider.api_key_env) or withheld(provider.api_key_env) or None
    return None


def missing_key(provider: ProviderConfig) -> str | None:
    """The variable a provider's key should come from when it is unset and the provider surely needs
    it (None otherwise): an HTTP provider with `api_key_env` whose endpoint is not on this machine. A
    local server (Ollama, LM Studio, vLLM on loopback) often takes no key, so one there is not missed."""
    if not provider.kind.http or not provider.api_key_env or provider_key(provider) is not None:
        return None
    host = urlsplit(provider.base_url).hostname if provider.base_url else None  # None: the vendor's API
    return None if host is not None and is_loopback(host) else provider.api_key_env


def key_source(provider: ProviderConfig) -> str:
    """Where the key comes from, for messages (never the value)."""
    if provider.api_key_file:
        return f"api_key_file {provider.api_key_file}"
    if provider.api_key_command:
        return f"api_key_command {' '.join(provider.api_key_command)}"
    if provider.api_key_env:
        return f"api_key_env {provider.api_key_env}"
    return "no key configured"


def read_key_file(provider: ProviderConfig) -> str:
    path = provider.api_key_file or ""
    where = f"provider '{provider.name}': api_key_file {path}"
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        raise KeySourceError(
            f"{where}: no such file; put the key in it (the key alone, on one line) and run: chmod 600 {path}"
        ) from None
    except OSError as exc:
        raise KeySourceError(
            f"{where}: cannot open it ({exc.strerror}); it must be a regular file, not a symlink"
        ) from None
    with os.fdopen(fd, "rb") as file:
        info = os.fstat(file.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise KeySourceError(f"{where}: not a regular file")
        if info.st_uid != os.getuid():
            raise KeySourceError(
                f"{where}: owned by uid {info.st_uid}, not by you (uid {os.getuid()}); "
                f"chown it to yourself and chmod 600 {path}"
            )
        if info.st_mode & 0o077:
            raise KeySourceError(
                f"{where}: readable by others (mode {stat.S_IMODE(info.st_mode):04o}); run: chmod 600 {path}"
            )
        data = file.read(64 * 1024 + 1)
    if len(data) > 64 * 1024:
        raise KeySourceError(f"{where}: larger than 64 KiB, that is not an API key")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise KeySourceError(f"{where}: not UTF-8 text") from None
    text = text.removesuffix("\n").removesuffix("\r")
    if not text.strip():
        raise KeySourceError(f"{where}: the file is empty")
    return text


def run_key_command(
    provider: ProviderConfig,
    timeout: float = COMMAND_TIMEOUT,
    hidden: Iterable[str] = (),
    stop: Callable[[], str | None] = lambda: None,
) -> str:
    """Run `api_key_command` without the `hidden` variables (the proxy's other keys) in its environment.
    `stop` names a stop signal the proxy received meanwhile (a host that gave up on a password manager
    waiting to be unlocked): the command is ended then, and KeyCommandStopped raised."""
    argv = list(provider.api_key_command or ())
    where = f"provider '{provider.name}': api_key_command {' '.join(argv)}"
    env = {k: v for k, v in os.environ.items() if k not in set(hidden)}
    try:
        process = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env
        )
    except FileNotFoundError:
        raise KeySourceError(f"{where}: command not found") from None
    except OSError as exc:
        raise KeySourceError(f"{where}: cannot run it ({exc.strerror})") from None
    deadline = time.monotonic() + timeout
    with process:
        while True:
            try:
                stdout, _stderr = process.communicate(timeout=min(STOP_CHECK, max(0.0, deadline - time.monotonic())))
                break
            except subprocess.TimeoutExpired:
                pass
            stopped = stop()
            if stopped is None and time.monotonic() < deadline:
                continue
            process.kill()
            process.communicate()
            if stopped is not None:
                raise KeyCommandStopped(f"{where} had not answered; it was ended", stopped)
            raise KeySourceError(f"{where}: no answer within {timeout:g} s")
    if process.returncode != 0:  # its output may hold the key or part of it: never shown
        raise KeySourceError(f"{where}: exited with status {process.returncode}; run it yourself to see why")
    key = stdout.decode("utf-8", "replace").strip()
    if not key:
        raise KeySourceError(f"{where}: printed nothing on stdout; it must print the key")
    return key


def resolve_key(
    provider: ProviderConfig, hidden: Iterable[str] = (), stop: Callable[[], str | None] = lambda: None
) -> ProviderConfig:
    """`provider` with the key from its file or command held in `api_key` (others unchanged)."""
    if provider.api_key_file:
        return dataclasses.replace(provider, api_key=read_key_file(provider))
    if provider.api_key_command:
        return dataclasses.replace(provider, api_key=run_key_command(provider, hidden=hidden, stop=stop))
    return provider


def resolve_keys(
    providers: list[ProviderConfig], hidden: Iterable[str] = (), stop: Callable[[], str | None] = lambda: None
) -> list[ProviderConfig]:
    """Keys from files and commands, read once (a command runs without the `hidden` variables, and is ended
    when `stop` names a stop signal received meanwhile)."""
    return [resolve_key(p, hidden, stop) for p in providers]
