"""The server's process, started under its sandbox's words: the one start both the usual spawn
(transport/stdio.py) and the early one (transport/early_start.py) make.

Under bubblewrap, bwrap says on its `--info-fd` which pid the server has outside its namespace; a server
whose way out is the proxy's relay is held by `--block-fd` until the relay's listener is made in its
network namespace (transport/netns.py), so its first connection finds it. Lean on purpose: the early
start runs this before anything heavy is loaded.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Sequence

from mcp_sampling_proxy.system.hardening import die_with_parent

TYPE_CHECKING = False  # (typing's costs an import the early start is lean without)
if TYPE_CHECKING:
    import socket


class Launched:
    """A server's process and what its sandbox said of it: the read end of bwrap's --info-fd (-1 when there
    is none, or it was read), the server's pid outside its namespace (once read), and the relay's listener
    in its network namespace (a relayed sandbox only)."""

    __slots__ = ("child_pid", "info_read", "listener", "process")

    def __init__(self, process: subprocess.Popen[bytes], info_read: int) -> None:
        self.process, self.info_read = process, info_read
        self.child_pid: int | None = None
        self.listener: socket.socket | None = None


class SandboxNotReady(Exception):
    """bwrap started but the sandbox did not come up for the server: it never named the server's pid
    (`relay` False), or the relay's listener could not be made in its namespace (`relay` True, `reason`
    says why). `process` is still to be stopped."""

    def __init__(self, process: subprocess.Popen[bytes], relay: bool, reason: str = ""):
        super().__init__(reason)
        self.process, self.relay, self.reason = process, relay, reason


def launch(
    command: Sequence[str],
    env: dict[str, str],
    *,
    words: Sequence[str] = (),
    words_env: Sequence[tuple[str, str]] = (),
    relayed: bool = False,
    cwd: str | None = None,
) -> Launched:
    """Start `command` in a session of its own, with pipes for its stdio, killed when the proxy dies; under
    bwrap's `words` (its sandbox plan's prefix, ending in '--') and their variables when given. OSError
    when it cannot be started; SandboxNotReady when its sandbox did not come up."""
    info_read = info_write = block_read = block_write = -1
    argv = list(command)
    if words:  # bwrap says which pid the server has outside its namespace
        info_read, info_write = os.pipe()
        extra = ["--info-fd", str(info_write)]
        if relayed:  # and holds the server's command until the relay listens there
            block_read, block_write = os.pipe()
            extra += ["--block-fd", str(block_read)]
        argv = [*words[:-1], *extra, words[-1], *command]
        env = {**env, **dict(words_env)}
    passed = tuple(fd for fd in (info_write, block_read) if fd >= 0)
    try:
        process = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            cwd=cwd,
            start_new_session=True,
            bufsize=0,
            preexec_fn=die_with_parent(),  # spawned before any thread exists
            pass_fds=passed,
        )
    except BaseException:
        for fd in (info_read, block_write):
            if fd >= 0:
                os.close(fd)
        raise
    finally:
        for fd in passed:
            os.close(fd)
    launched = Launched(process, info_read)
    if block_write >= 0:
        try:
            _open_relay(launched, block_write)
        finally:
            os.close(block_write)
    return launched


def _open_relay(launched: Launched, block_write: int) -> None:
    """The relay's listener in the sandbox's network namespace, made while bwrap holds the server's command;
    then the command runs."""
    from mcp_sampling_proxy.transport.netns import EGRESS_PORT, bwrap_child_pid, listener_in  # start-up: relayed

    pid = bwrap_child_pid(launched.info_read)
    launched.info_read = -1
    if pid is None:
        raise SandboxNotReady(launched.process, relay=False)
    launched.child_pid = pid
    try:
        listener = listener_in(pid, EGRESS_PORT)
    except OSError as exc:
        raise SandboxNotReady(launched.process, relay=True, reason=str(exc)) from None
    listener.set_inheritable(False)
    launched.listener = listener
    os.write(block_write, b"1")
