"""Driving the proxy and its commands under a pseudo-terminal, as a person at a terminal would."""

from __future__ import annotations

import os
import pty
import select
import time
from pathlib import Path
from typing import Any

from helpers.support import PY, RawHost, openai_policy, proxy_command, proxy_env, write_policy


class PtySession:
    """Runs a command with a pseudo-terminal as its controlling terminal."""

    def __init__(self, argv: list[str], env: dict[str, str]):
        self.pid, self.fd = pty.fork()
        if self.pid == 0:  # child
            os.execve(argv[0], argv, env)
        self.output = b""

    def read_until(self, needle: bytes, timeout: float = 30.0, *, after: int = 0) -> bytes:
        """The terminal's output once `needle` is shown (at or past offset `after` of it)."""
        deadline = time.monotonic() + timeout
        while needle not in self.output[after:]:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise AssertionError(f"{needle!r} not shown; terminal so far:\n{self.output.decode(errors='replace')}")
            if not self._read(remaining):
                raise AssertionError(f"{needle!r} never shown:\n{self.output.decode(errors='replace')}")
        return self.output

    def _read(self, timeout: float) -> bool:
        ready, _, _ = select.select([self.fd], [], [], timeout)
        if not ready:
            return True
        try:
            chunk = os.read(self.fd, 65536)
        except OSError:
            return False
        self.output += chunk
        return bool(chunk)

    def type(self, text: str) -> None:
        os.write(self.fd, text.encode())

    def finish(self, timeout: float = 30.0) -> int:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self._read(0.2):
            done, status = os.waitpid(self.pid, os.WNOHANG)
            if done:
                while self._read(0.1):
                    pass
                return os.waitstatus_to_exitcode(status)
        _, status = os.waitpid(self.pid, 0)
        return os.waitstatus_to_exitcode(status)


def try_argv(*args: str) -> list[str]:
    return [PY, "-m", "mcp_sampling_proxy", "try", *args]


def terminal_env(**extra: str) -> dict[str, str]:
    env = proxy_env(**extra)
    env.pop("MCP_SAMPLING_PROXY_NO_TERMINAL")
    return env


def console_beside_a_proxy(tmp_path: Path, dirs: dict[str, str], llm_url: str) -> tuple[PtySession, Any]:
    """`mcp-sampling-proxy console` on a pty, and a proxy started as Claude Desktop starts it (no
    terminal, a policy that asks) for a raw host: the two share the runtime and state dirs."""
    rules = "rules:\n  - name: ask\n    action: prompt\n"
    policy = write_policy(tmp_path, openai_policy(llm_url, rules=rules))
    console = PtySession([PY, "-m", "mcp_sampling_proxy", "console"], terminal_env(**dirs))
    return console, RawHost(proxy_command(policy), proxy_env(**dirs), tmp_path / "stderr.log")
