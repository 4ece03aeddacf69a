"""The real server as a child process over stdio.

Spawned before anything heavy is imported, so its start-up overlaps ours. It gets the host's
environment minus the proxy's own LLM keys, runs in its own process group (so a stuck server
and its children can be stopped together), and its stderr reaches ours line by line with a tag.
"""

from __future__ import annotations

import contextlib
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

import anyio

from mcp_sampling_proxy.system.hardening import GroupGuard
from mcp_sampling_proxy.system.terminal import write_stderr
from mcp_sampling_proxy.text.sanitize import terminal_line
from mcp_sampling_proxy.transport.launch import Launched, SandboxNotReady, launch

if TYPE_CHECKING:
    from mcp_sampling_proxy.transport.framing import LineReader, LineWriter
    from mcp_sampling_proxy.transport.sandbox import Plan
    from mcp_sampling_proxy.transport.sandbox_notes import SandboxNotes

STDERR_TAG_LIMIT = 32


class SpawnError(Exception):
    """The upstream command could not be started; the message says why and what to check."""

    def __init__(self, message: str, exit_code: int):
        super().__init__(message)
        self.exit_code = exit_code


def spawn(
    command: list[str], env: dict[str, str], cwd: str | None = None, sandbox: Plan | None = None
) -> subprocess.Popen[bytes]:
    """Start the upstream (under the `sandbox` plan, transport/sandbox.py, when it is active); raise
    SpawnError with a helpful message when that is impossible. A server whose way out is the proxy's
    relay starts only once the relay listens in its network namespace (`egress_listener`)."""
    executable = command[0]
    if os.sep not in executable and shutil.which(executable, path=env.get("PATH")) is None:
        raise SpawnError(
            f"cannot start upstream: command '{executable}' not found on PATH "
            f"({env.get('PATH', '')!r}); use an absolute path in the host config",
            127,
        )
    plan = sandbox if sandbox is not None and sandbox.active else None
    try:
        launched = launch(
            command,
            env,
            words=plan.prefix if plan else (),
            words_env=plan.env if plan else (),
            relayed=plan is not None and plan.relayed,
            cwd=cwd,
        )
    except FileNotFoundError:
        raise SpawnError(f"cannot start upstream: '{executable}' does not exist", 127) from None
    except PermissionError:
        raise SpawnError(f"cannot start upstream: '{executable}' is not executable", 126) from None
    except OSError as exc:
        raise SpawnError(f"cannot start upstream '{executable}': {exc.strerror}", 126) from None
    except SandboxNotReady as exc:
        if exc.relay:
            why = (
                f"the network relay could not be opened in its sandbox ({exc.reason}); "
                "set network: false or network: host for this server under sandbox.servers"
            )
        else:
            why = f"the sandbox could not be set up ({_ended_with(exc.process)})"
        stop_process(exc.process)
        raise SpawnError(f"cannot start upstream: {why}", 126) from None
    return keep(launched)


def keep(launched: Launched) -> subprocess.Popen[bytes]:
    """The server's process, kept with what its sandbox said of it (its pid outside the namespace, the
    relay's listener) and a guard of its group; for a server started here or early (transport/early_start.py)."""
    process = launched.process
    if launched.child_pid is not None:
        _SANDBOX_INFO_PID[process.pid] = launched.child_pid
    elif launched.info_read >= 0:
        _SANDBOX_INFO[process.pid] = launched.info_read
    if launched.listener is not None:
        _EGRESS[process.pid] = launched.listener
    _GUARDS[process.pid] = GroupGuard.start(process.pid)  # its group dies with us, however we die
    return process


_EGRESS: dict[int, socket.socket] = {}  # by bwrap's pid: the relay's listener in the server's namespace


def _read_child_pid(process: subprocess.Popen[bytes]) -> int | None:
    """Wait for bwrap's --info-fd (written as soon as the namespaces exist) and keep the pid it names."""
    from mcp_sampling_proxy.transport.netns import bwrap_child_pid  # start-up: only with a sandbox

    fd = _SANDBOX_INFO.pop(process.pid, None)
    if fd is None:
        return None
    pid = bwrap_child_pid(fd)
    if pid is None:
        return None
    _SANDBOX_INFO_PID[process.pid] = pid
    return pid


def _ended_with(process: subprocess.Popen[bytes]) -> str:
    """What bwrap said when it ended before the sandbox was ready."""
    try:
        process.wait(PROBE_WAIT)
        said = process.stderr.read(4096) if process.stderr is not None else b""
    except (subprocess.TimeoutExpired, OSError):
        return "bwrap did not say why"
    lines = said.decode("utf-8", "replace").strip().splitlines()
    return lines[-1] if lines else f"bwrap {describe_exit(process.returncode)}"


def egress_listener(process: subprocess.Popen[bytes]) -> socket.socket | None:
    """The relay's listener for this server (taken once), or None when its way out is not the relay."""
    return _EGRESS.pop(process.pid, None)


PROBE_WAIT = 2.0  # s for a bwrap that failed to end and say why


_SANDBOX_INFO: dict[int, int] = {}  # by bwrap's pid: the read end of its --info-fd


def sandboxed_pid(process: subprocess.Popen[bytes]) -> int | None:
    """The sandboxed server's pid outside its namespace (bwrap's `child-pid`), or None when the
    server is not sandboxed or bwrap has not said (it writes it once the sandbox is set up)."""
    fd = _SANDBOX_INFO.get(process.pid)
    if fd is None or not select.select([fd], [], [], 0)[0]:
        return None
    return _read_child_pid(process)  # bwrap writes it in parts, then closes the pipe: moments


_SANDBOX_INFO_PID: dict[int, int] = {}


def _inner_pid(process: subprocess.Popen[bytes]) -> int | None:
    return _SANDBOX_INFO_PID.get(process.pid) or sandboxed_pid(process)


_GUARDS: dict[int, GroupGuard | None] = {}  # by the server's pid (its process group's id)


def guard_pid(process: subprocess.Popen[bytes]) -> int | None:
    """The pid of the server's group guard (the orphan reaper must leave it to `stand_down`)."""
    guard = _GUARDS.get(process.pid)
    return guard.pid if guard is not None else None


def stand_down_guard(process: subprocess.Popen[bytes]) -> None:
    """The proxy has stopped the server's group itself: its guard need not (see GroupGuard)."""
    guard = _GUARDS.pop(process.pid, None)
    if guard is not None:
        guard.stand_down()


def stop_process(process: subprocess.Popen[bytes], grace: float = 2.0) -> None:
    """Stop a server the proxy started but will not use: end of input, then SIGTERM to its
    process group, then SIGKILL if it is still there after `grace` seconds."""
    for pipe in (process.stdin, process.stdout, process.stderr):
        with contextlib.suppress(OSError):
            if pipe is not None:
                pipe.close()
    for sig in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(OSError):
            os.killpg(process.pid, sig)
        try:
            process.wait(grace)
            break
        except subprocess.TimeoutExpired:
            continue
    with contextlib.suppress(OSError):  # leftovers in the group must not outlive it (as in StdioUpstream.stop)
        os.killpg(process.pid, signal.SIGKILL)
    stand_down_guard(process)


STDERR_MAX_LINE = 1024 * 1024  # a server's stderr line past this is passed on shortened (never held whole)


class StdioUpstream:
    """Async side of the child: line I/O on its pipes, exit status, and a graceful stop."""

    def __init__(self, process: subprocess.Popen[bytes], label: str, notes: SandboxNotes | None = None):
        self.process = process
        self.label = label
        self.notes = notes  # sandboxed: what its stderr says the sandbox refused it (transport/sandbox_notes.py)
        self._writer: LineWriter | None = None
        self.reader: LineReader | None = None

    async def attach(
        self,
        on_line: Callable[[bytes], None],
        on_eof: Callable[[], None],
        *,
        max_line: int | None = None,
        on_oversize: Callable[[int, bytes, bytes], None] | None = None,
    ) -> None:
        # start-up: cli spawns the server through this module before the relay loads
        from mcp_sampling_proxy.transport.framing import (
            DEFAULT_MAX_LINE,
            LineReader,
            open_line_reader,
            open_line_writer,
        )

        assert self.process.stdin and self.process.stdout and self.process.stderr
        self._writer = await open_line_writer(self.process.stdin.fileno())
        self.reader = reader = LineReader(
            on_line, on_eof, max_line=max_line or DEFAULT_MAX_LINE, on_oversize=on_oversize
        )
        await open_line_reader(self.process.stdout.fileno(), reader)
        await open_line_reader(
            self.process.stderr.fileno(),
            LineReader(self._stderr_line, lambda: None, max_line=STDERR_MAX_LINE, on_oversize=self._stderr_oversize),
        )

    @property
    def writer(self) -> LineWriter | None:
        return self._writer

    def send(self, line: bytes) -> None:
        if self._writer is not None:
            self._writer.write_line(line)

    def _stderr_oversize(self, size: int, head: bytes, _tail: bytes) -> None:
        """A stderr line over STDERR_MAX_LINE: its start, and its size (a log line, not a dump)."""
        self._stderr_line(head + f" ... (a line of {size:,} bytes, shortened)".encode())

    def _stderr_line(self, line: bytes) -> None:
        """A line of the server's stderr, tagged, on ours: without escape sequences and control
        characters (they would reach the terminal of whoever runs the proxy, or reads its log, with
        `try` or a host's log tail: a server could set the title, write the clipboard, hide text),
        and on one line (a carriage return or a Unicode line separator could forge a line of ours)."""
        text = terminal_line(line.decode("utf-8", "replace"))
        with contextlib.suppress(OSError):
            write_stderr(b"[upstream " + self.label.encode("utf-8", "replace") + b"] " + text.encode() + b"\n")
        if self.notes is not None:
            self.notes.stderr_line(text)

    @property
    def returncode(self) -> int | None:
        return self.process.poll()

    async def wait(self, timeout: float) -> int | None:
        """The exit code, or None if the child is still running after `timeout` seconds."""
        with anyio.move_on_after(timeout):
            while self.process.poll() is None:
                await anyio.sleep(0.01)
        return self.process.poll()

    def describe_end(self, code: int | None) -> str:
        return describe_exit(code)

    async def stop(self, grace: float, term_wait: float = 2.0) -> int | None:
        """Close stdin and wait `grace`; then SIGTERM the child's process group, wait `term_wait`, SIGKILL it."""
        if self._writer is not None:
            with anyio.move_on_after(min(grace, 1.0)):
                await self._writer.close()  # flushes what is buffered
        if self.process.stdin:
            self.process.stdin.close()  # the fd itself: EOF is the stdio "please exit"
        code = await self.wait(grace)
        for sig, wait_for in ((signal.SIGTERM, term_wait), (signal.SIGKILL, 2.0)):
            if code is not None:
                break
            inner = _inner_pid(self.process) if sig == signal.SIGTERM else None
            if inner is not None:  # sandboxed: bwrap would die of it, and the server be killed unwarned
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(inner, sig)
            else:
                self._signal_group(sig)
            code = await self.wait(wait_for)
        self._signal_group(signal.SIGKILL)  # leftovers in the group (grandchildren) must not outlive us
        stand_down_guard(self.process)
        return code

    def _signal_group(self, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, sig)


def describe_exit(code: int | None) -> str:
    if code is None:
        return "stopped responding"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"was killed by {name}"
    return f"exited with code {code}"


def exit_status_for(code: int | None) -> int:
    """The proxy's own exit status when the upstream ended on its own (never 0)."""
    if code is None:
        return 1
    if code < 0:
        return 128 - code
    return code or 1


if sys.platform == "win32":  # pragma: no cover
    raise ImportError("mcp-sampling-proxy's stdio upstream needs a POSIX system")
