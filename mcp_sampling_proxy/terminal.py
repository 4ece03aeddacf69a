"""The controlling terminal (/dev/tty), the one console a stdio proxy can talk to.

stdin and stdout are the protocol, and a host such as Claude Desktop gives the proxy no
terminal at all, so this opens /dev/tty when it exists and reports plainly when it does not.
Reads are non-blocking and cancellable; one conversation at a time holds the terminal.
Everything shown here that came from a server must pass through `sanitize.strip_controls`.
"""

from __future__ import annotations

import contextlib
import os

import anyio

from mcp_sampling_proxy.sanitize import strip_controls

DISABLE_ENV = "MCP_SAMPLING_PROXY_NO_TERMINAL"
# A terminal device to use instead of /dev/tty: `try` sets it, because the SDK starts the proxy
# in a new session, which has no controlling terminal.
DEVICE_ENV = "MCP_SAMPLING_PROXY_TTY"


class Terminal:
    def __init__(self, fd: int):
        self._fd = fd
        self._buffer = b""
        self.lock = anyio.Lock()

    @classmethod
    def open(cls) -> Terminal | None:
        """The controlling terminal, or None when there is none (or it is disabled)."""
        if os.environ.get(DISABLE_ENV):
            return None
        device = os.environ.get(DEVICE_ENV) or "/dev/tty"
        try:
            fd = os.open(device, os.O_RDWR | os.O_NOCTTY)
        except OSError:
            return None
        if not os.isatty(fd):
            os.close(fd)
            return None
        os.set_blocking(fd, False)
        return cls(fd)

    def write(self, text: str) -> None:
        """Write text we composed (server text must already be sanitised by the caller)."""
        data = text.encode("utf-8", "replace")
        os.set_blocking(self._fd, True)
        try:
            os.write(self._fd, data)
        finally:
            os.set_blocking(self._fd, False)

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

    def discard_typeahead(self) -> None:
        """Forget what was typed before a question was shown (it answered nothing the user saw)."""
        self._buffer = b""
        discard_typeahead(self._fd)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self._fd)


def discard_typeahead(fd: int) -> None:
    """Drop input waiting on a terminal: keys typed while nothing was asked must not answer the
    next question (a `y` typed at an idle console would approve a request nobody saw)."""
    import termios

    with contextlib.suppress(OSError, termios.error):
        if os.isatty(fd):
            termios.tcflush(fd, termios.TCIFLUSH)
