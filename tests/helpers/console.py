"""A companion console written for the tests: it speaks the console protocol on the proxy's socket."""

from __future__ import annotations

import json
import stat
import time
from pathlib import Path
from typing import Any, cast

import anyio

PROMPT_RULES = "rules:\n  - name: ask\n    action: prompt\n"


def serving_pid(run_dir: Path, before: set[Path], timeout: float = 30.0) -> int:
    """The pid a newly started proxy's console names it by: its socket's, the one in `run_dir` not among
    `before` (the process the host started, or, forked by a warm start server, that fork)."""
    deadline = time.monotonic() + timeout
    while not set(run_dir.glob("*.sock")) - before:
        assert time.monotonic() < deadline, f"no new console socket in {run_dir}"
        time.sleep(0.02)
    (made,) = set(run_dir.glob("*.sock")) - before
    return int(made.stem)


class SocketConsole:
    """A test client speaking the companion console protocol on the proxy's socket."""

    def __init__(self, stream: Any):
        self.stream = stream
        self.buffer = b""

    @classmethod
    async def attach(cls, run_dir: Path) -> SocketConsole:
        with anyio.fail_after(20):
            while not list(run_dir.glob("*.sock")):
                await anyio.sleep(0.05)
        sock = next(run_dir.glob("*.sock"))
        assert stat.S_IMODE(sock.stat().st_mode) == 0o600
        assert stat.S_IMODE(run_dir.stat().st_mode) == 0o700
        console = cls(await anyio.connect_unix(sock))
        assert (await console.receive())["type"] == "hello"
        return console

    async def receive(self) -> dict[str, Any]:
        with anyio.fail_after(20):
            while b"\n" not in self.buffer:
                self.buffer += await self.stream.receive()
        line, self.buffer = self.buffer.split(b"\n", 1)
        return cast(dict[str, Any], json.loads(line))

    async def send(self, message: dict[str, Any]) -> None:
        await self.stream.send(json.dumps(message).encode() + b"\n")
