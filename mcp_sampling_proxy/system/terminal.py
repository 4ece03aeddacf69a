"""The controlling terminal (/dev/tty), the one console a stdio proxy can talk to.

stdin and stdout are the protocol, and a host such as Claude Desktop gives the proxy no
terminal at all, so this opens /dev/tty when it exists and reports plainly when it does not.
Reads are non-blocking and cancellable; one conversation at a time holds the terminal.
Everything shown here that came from a server must pass through `sanitize.strip_controls`.

A question waiting for its answer (`ask`) stays the last thing on screen. When the proxy's stderr is
this same terminal (a proxy started in a shell), lines written to stderr meanwhile (log lines, the
server's stderr passed through `write_stderr`) take the question's place, and the question is shown
again below them.
"""

from __future__ import annotations

import contextlib
import os
import sys
import termios
from typing import Any, TextIO

import anyio

from mcp_sampling_proxy.text.sanitize import strip_controls

DISABLE_ENV = "MCP_SAMPLING_PROXY_NO_TERMINAL"
# A terminal device to use instead of /dev/tty: `try` sets it, because the SDK starts the proxy
# in a new session, which has no controlling terminal.
DEVICE_ENV = "MCP_SAMPLING_PROXY_TTY"
_HANDED: list[int] = []  # the launch's terminal, handed to a proxy the warm start server forked (`ask_on`)


def ask_on(fd: int) -> None:
    """Ask on the terminal open at `fd` where /dev/tty would be asked: a proxy forked by the warm start server
    (system/warm_start.py) has no controlling terminal; its launch had one, and handed it over."""
    _HANDED[:] = [fd]


class Terminal:
    def __init__(self, fd: int):
        self._fd = fd
        self._buffer = b""
        self.lock = anyio.Lock()
        self._summary: str | None = None  # the request summary an approval just showed (see `note_shown`)
        self.waiting: str | None = None  # the question on screen waiting for its answer, if any

    @classmethod
    def open(cls) -> Terminal | None:
        """The controlling terminal, or None when there is none (or it is disabled)."""
        if os.environ.get(DISABLE_ENV):
            return None
        device = os.environ.get(DEVICE_ENV)
        try:
            if device is None and _HANDED:  # (opened by the launch, as /dev/tty: opened again here, it is none)
                fd = os.dup(_HANDED[0])
            else:
                fd = os.open(device or "/dev/tty", os.O_RDWR | os.O_NOCTTY)
        except OSError:
            return None
        if not os.isatty(fd):
            os.close(fd)
            return None
        os.set_blocking(fd, False)
        terminal = cls(fd)
        if _same_terminal(fd, 2):
            _keep_questions_below_stderr(terminal)
        return terminal

    def write(self, text: str) -> None:
        """Write text we composed (server text must already be sanitised by the caller)."""
        data = text.encode("utf-8", "replace")
        os.set_blocking(self._fd, True)
        try:
            os.write(self._fd, data)
        finally:
            os.set_blocking(self._fd, False)

    async def ask(self, prompt: str) -> str | None:
        """Show `prompt` and read the answer (None at the end of input); while it waits, lines of
        stderr on this terminal go above it (`interject`)."""
        self.write(prompt)
        self.waiting = prompt
        try:
            return await self.readline()
        except anyio.get_cancelled_exc_class():  # the question closed: its prompt (and what was typed) goes
            self.write(erase_question(prompt, self._fd))
            raise
        finally:
            self.waiting = None

    def announce_turn(self, what: str) -> None:
        """Say that `what` waits for this terminal, which another question holds (`lock`): it is asked
        when that one is done. Nothing to say when the terminal is free."""
        if self.lock.locked():
            self.interject(f"mcp-sampling-proxy: {what} waits: it is asked after the question on screen\n")

    def interject(self, lines: str) -> None:
        """Write whole `lines` (ending in a newline) we did not ask: in place of a waiting question,
        which is then shown again below them (what the user had typed of the answer still counts)."""
        if self.waiting is None:
            self.write(lines)
        else:
            self.write(erase_question(self.waiting, self._fd) + lines + self.waiting)

    def show(self, untrusted: str) -> None:
        """Write server-controlled text with escape and control sequences removed."""
        self.write(strip_controls(untrusted))

    async def readline(self) -> str | None:
        """One line typed by the user, without its newline; None on end of input (Ctrl-D)."""
        while b"\n" not in self._buffer:
            await anyio.wait_readable(self._fd)
            try:
                chunk = os.read(self._fd, 4096)
            except BlockingIOError:
                continue
            if not chunk:
                if self._buffer:
                    break
                return None
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line.decode("utf-8", "replace").rstrip("\r")

    def note_shown(self, summary: str) -> None:
        """A request's summary was just shown and approved here: the typed reply that follows need not
        show it again (`shown_just_now`)."""
        self._summary = summary

    def shown_just_now(self, summary: str) -> bool:
        """Whether `summary` is the one `note_shown` named last (once: the note is used up)."""
        shown, self._summary = self._summary, None
        return shown == summary

    def discard_typeahead(self) -> None:
        """Forget what was typed before a question was shown (it answered nothing the user saw)."""
        self._buffer = b""
        discard_typeahead(self._fd)

    def close(self) -> None:
        _release_stderr(self)
        with contextlib.suppress(OSError):
            os.close(self._fd)


def erase_question(prompt: str, fd: int) -> str:
    """What erases `prompt` from the screen when the cursor sits at its end: back to its first row (a long
    question wraps on a narrow terminal) and clear from there down (also what was typed after it)."""
    try:
        columns = os.get_terminal_size(fd).columns
    except OSError:
        columns = 80
    rows_above = max(len(prompt) - 1, 0) // max(columns, 1)
    return "\r" + (f"\x1b[{rows_above}A" if rows_above else "") + "\x1b[J"


def discard_typeahead(fd: int) -> None:
    """Drop input waiting on a terminal: keys typed while nothing was asked must not answer the
    next question (a `y` typed at an idle console would approve a request nobody saw)."""
    with contextlib.suppress(OSError, termios.error):
        if os.isatty(fd):
            termios.tcflush(fd, termios.TCIFLUSH)


_stderr_guard: _AboveQuestion | None = None


def write_stderr(data: bytes) -> None:
    """Write a line to stderr (fd 2) without burying a question waiting on the same terminal."""
    if _stderr_guard is None:
        os.write(2, data)
    else:
        _stderr_guard.write(data.decode("utf-8", "replace"))
        _stderr_guard.flush()


class _AboveQuestion:
    """sys.stderr while it is the terminal's device: while a question waits, whole lines go above it."""

    def __init__(self, stream: TextIO, terminal: Terminal):
        self.stream = stream
        self.terminal = terminal
        self._pending = ""

    def write(self, text: str) -> int:
        if self.terminal.waiting is None and not self._pending:
            return self.stream.write(text)
        self._pending += text
        if "\n" in self._pending:
            lines, _, self._pending = self._pending.rpartition("\n")
            self.stream.flush()
            self.terminal.interject(lines + "\n")
        return len(text)

    def flush(self) -> None:
        self.stream.flush()

    def release(self) -> None:
        """Write what is held back (a line not ended yet) as it is."""
        held, self._pending = self._pending, ""
        if held:
            self.stream.write(held)
            self.stream.flush()

    def __getattr__(self, name: str) -> Any:  # fileno, isatty, encoding ...: the stream's own
        return getattr(self.stream, name)


def _keep_questions_below_stderr(terminal: Terminal) -> None:
    global _stderr_guard
    _stderr_guard = _AboveQuestion(sys.stderr, terminal)
    sys.stderr = _stderr_guard


def _release_stderr(terminal: Terminal) -> None:
    """Give stderr back as it was, when it was kept for `terminal` (now closed)."""
    global _stderr_guard
    guard = _stderr_guard
    if guard is not None and guard.terminal is terminal:
        _stderr_guard = None
        guard.release()
        if sys.stderr is guard:
            sys.stderr = guard.stream


def _same_terminal(fd: int, other: int) -> bool:
    """Whether `other` (stderr) is the terminal `fd` is open on: the same device, or, for /dev/tty
    (an alias of the controlling terminal), the controlling terminal itself."""
    try:
        mine, theirs = os.fstat(fd), os.fstat(other)
        if not os.isatty(other):
            return False
        if mine.st_rdev == theirs.st_rdev:
            return True
        os.tcgetpgrp(other)  # fails (ENOTTY) unless `other` is this process's controlling terminal
    except OSError:
        return False
    return os.ttyname(fd) == "/dev/tty"
