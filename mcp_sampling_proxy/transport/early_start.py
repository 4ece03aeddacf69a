"""The early start: a sandboxed server spawned before the proxy's slow imports, from the record of its
last start.

A proxy reaches its server's spawn ~100 ms after it starts: the interpreter, msgspec and PyYAML load, the
policy is parsed, the sandbox planned. A byte relay spawns in ~20 ms. The server's own start (hundreds of
milliseconds for most) then adds to the proxy's instead of running beside it.

`attempt`, the first thing `entry.main` does for a server's command line, reads the record of this start
(transport/start_record.py): the seal is checked, the policy file read and digested, and every fact the
plan was made from asked again (transport/plan_facts.py). When all of them read as they did, the plan's
code would make the same plan: the server is spawned at once under it. Anything else, and nothing is
started here. The usual start then runs as always: it plans again, and `taken` gives it the early server
only when the plan it made is the record's (else the early server is stopped, unsent anything, and a new
one spawned under the plan made now).

Lean on purpose: this module imports only what a byte relay would, and marshal, hashlib and hmac.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from collections.abc import Iterable, Sequence

from mcp_sampling_proxy.config.child_env import child_environment
from mcp_sampling_proxy.transport.launch import Launched, SandboxNotReady, launch
from mcp_sampling_proxy.transport.plan_facts import facts_hold
from mcp_sampling_proxy.transport.start_record import (
    MAX_POLICY_BYTES,
    Record,
    forget_record,
    policy_digest,
    read_or_none,
    read_record,
    start_key,
    state_directory,
)

TYPE_CHECKING = False  # (typing's costs an import this module is lean without)
if TYPE_CHECKING:
    import subprocess


class Early:
    """A server started from its record, waiting for the usual start to take it (`taken`)."""

    __slots__ = ("launched", "record")

    def __init__(self, launched: Launched, record: Record) -> None:
        self.launched, self.record = launched, record


class _ThisStart:
    """This process's start: its key and state directory (once `attempt` named them), the server started
    early and not yet taken, and how it went ("early", or "stale": started, then stopped)."""

    __slots__ = ("directory", "early", "key", "outcome")

    def __init__(self) -> None:
        self.key: str | None = None
        self.directory: str | None = None
        self.early: Early | None = None
        self.outcome: str | None = None


_THIS = _ThisStart()


def attempt(argv: Sequence[str]) -> None:
    """Start the server now when the record of this start (its command line `argv`, a server's: entry.py
    tells) holds (see the module's docstring). Never raises: anything unexpected means the usual start."""
    try:
        _attempt(list(argv))
    except Exception:
        _THIS.early = None


def _attempt(argv: list[str]) -> None:
    if not sys.platform.startswith("linux"):
        return
    environ = dict(os.environ)
    if not environ.get("XDG_RUNTIME_DIR") and not environ.get("MCP_SAMPLING_PROXY_RUNTIME_DIR"):
        return  # the runtime directory would be found by trying to write in /tmp: not a fact looked at again
    directory = state_directory(environ)
    if directory is None:
        return
    key = start_key(argv, environ, os.getcwd())
    _THIS.key, _THIS.directory = key, directory
    record = read_record(directory, key)
    if record is None:
        return
    if record.policy is not None:
        text = read_or_none(record.policy, MAX_POLICY_BYTES)
        if text is None or policy_digest(text) != record.policy_digest:
            return
    if not facts_hold(record.facts):
        return
    _THIS.early = _spawn(record, environ)


def _spawn(record: Record, environ: dict[str, str]) -> Early:
    try:
        launched = launch(
            record.command,
            child_environment(environ, record.hidden),
            words=record.words,
            words_env=record.env,
            relayed=record.relayed,
        )
    except SandboxNotReady as exc:
        _stop(exc.process)
        raise
    return Early(launched, record)


def _stop(process: subprocess.Popen[bytes]) -> None:
    """End an early server nobody took: its process group, at once (it has been sent nothing)."""
    with contextlib.suppress(OSError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()


def taken(
    words: Sequence[str], env: Sequence[tuple[str, str]], command: Sequence[str], hidden: Iterable[str]
) -> Early | None:
    """The early server, for the usual start whose plan is its record's; an early server started from a
    record that no longer plans the same is stopped (the record is forgotten), and None is returned."""
    early, _THIS.early = _THIS.early, None
    if early is None:
        return None
    if early.record.plans(words, env, command, hidden) and early.launched.process.poll() is None:
        _THIS.outcome = "early"
        return early
    _drop(early)
    _THIS.outcome = "stale"
    if _THIS.directory is not None:
        forget_record(_THIS.directory, early.record.key)
    return None


def discard() -> None:
    """Stop an early server the usual start did not take (it failed before its spawn)."""
    early, _THIS.early = _THIS.early, None
    if early is not None:
        _drop(early)


def _drop(early: Early) -> None:
    launched = early.launched
    _stop(launched.process)
    if launched.listener is not None:
        launched.listener.close()
    if launched.info_read >= 0:
        os.close(launched.info_read)


def this_start() -> tuple[str, str] | None:
    """(key, state directory) of this process's start, when `attempt` named it (the entry point ran)."""
    key, directory = _THIS.key, _THIS.directory
    return (key, directory) if key is not None and directory is not None else None


def outcome() -> str | None:
    """How this start went: "early" (the server started from its record), "stale" (started, then stopped:
    the plan had changed), or None."""
    return _THIS.outcome
