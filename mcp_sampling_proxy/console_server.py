"""The proxy's end of the companion console: a Unix socket that `mcp-sampling-proxy console` joins.

A host like Claude Desktop gives the proxy no terminal, so the user runs the console in any
terminal; it attaches to every running proxy of the user. The socket lives in the user's runtime
dir (mode 0700 directory, 0600 socket) and speaks newline-delimited JSON:

proxy -> console   {"type": "hello", "pid", "server", "host"}
                   {"type": "pending", "id", "server", "tool", "host", "rule", "summary", "params"}
                   {"type": "review", "id", "server", "tool", "summary", "result"}
                   {"type": "elicit", "id", "mode": "form|url", "server", "tool", "message", "schema"|"url"}
                   {"type": "resolved", "id", "by"}           (another console or a timeout answered)
console -> proxy   {"type": "decision", "id", "approve": bool, "scope": "once|session|always",
                    "params": {...}?}                           (params: the edited request)
                   {"type": "review", "id", "accept": bool, "result": {...}?}   (result: edited answer)
                   {"type": "elicit", "id", "action": "accept|decline|cancel", "content": {...}?}
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import anyio.abc

from mcp_sampling_proxy.log import get_logger

log = get_logger("mcp_sampling_proxy.console")

RUNTIME_ENV = "MCP_SAMPLING_PROXY_RUNTIME_DIR"


def runtime_dir() -> Path:
    """Per-user directory for console sockets: private to the user, created 0700."""
    base = os.environ.get(RUNTIME_ENV)
    if base:
        path = Path(base)
    elif os.environ.get("XDG_RUNTIME_DIR"):
        path = Path(os.environ["XDG_RUNTIME_DIR"]) / "mcp-sampling-proxy"
    else:
        path = Path(tempfile.gettempdir()) / f"mcp-sampling-proxy-{os.getuid()}"
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    info = path.stat()
    if info.st_uid != os.getuid() or stat.S_IMODE(info.st_mode) & 0o077:
        raise PermissionError(f"{path} must be owned by you and private (chmod 700)")
    return path


@dataclass
class _Pending:
    message: dict[str, Any]
    done: anyio.Event = field(default_factory=anyio.Event)
    answer: dict[str, Any] | None = None


class ConsoleServer:
    """Accepts console connections and routes questions to them and answers back."""

    def __init__(self, server_name: Any, host_name: Any):
        self._server_name = server_name  # callables: the names are known only after initialize
        self._host_name = host_name
        self._clients: set[anyio.abc.SocketStream] = set()
        self._pending: dict[str, _Pending] = {}
        self._counter = 0
        self.path: Path | None = None

    @property
    def available(self) -> bool:
        return bool(self._clients)

    async def serve(self, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        try:
            self.path = runtime_dir() / f"{os.getpid()}.sock"
            with contextlib.suppress(FileNotFoundError):
                self.path.unlink()
            old_umask = os.umask(0o177)
            try:
                listener = await anyio.create_unix_listener(self.path)
            finally:
                os.umask(old_umask)
        except OSError as exc:
            log.warning("companion console unavailable", error=str(exc))
            task_status.started()
            return
        log.debug("companion console socket ready", path=str(self.path))
        task_status.started()
        try:
            async with listener:
                await listener.serve(self._handle)
        finally:
            with contextlib.suppress(OSError):
                self.path.unlink()

    async def _handle(self, stream: anyio.abc.SocketStream) -> None:
        self._clients.add(stream)
        try:
            await self._send(stream, {"type": "hello", "pid": os.getpid(), "server": self._server_name(),
                                      "host": self._host_name()})
            for pending in list(self._pending.values()):
                if not pending.done.is_set():
                    await self._send(stream, pending.message)
            buffer = b""
            async for chunk in stream:
                buffer += chunk
                while b"\n" in buffer:
                    line, buffer = buffer.split(b"\n", 1)
                    self._receive(line)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            pass
        finally:
            self._clients.discard(stream)

    def _receive(self, line: bytes) -> None:
        try:
            message = json.loads(line)
        except ValueError:
            return
        if not isinstance(message, dict):
            return
        pending = self._pending.get(str(message.get("id")))
        expected = {"pending": "decision"}.get(pending.message["type"], pending.message["type"]) if pending else ""
        if pending is None or pending.done.is_set() or message.get("type") != expected:
            return
        pending.answer = message
        pending.done.set()

    async def ask(self, message: dict[str, Any]) -> dict[str, Any]:
        """Send a question to every attached console; return the first answer."""
        self._counter += 1
        request_id = str(self._counter)
        pending = _Pending({**message, "id": request_id})
        self._pending[request_id] = pending
        try:
            await self._broadcast(pending.message)
            await pending.done.wait()
            assert pending.answer is not None
            return pending.answer
        finally:
            self._pending.pop(request_id, None)
            with anyio.CancelScope(shield=True):
                await self._broadcast({"type": "resolved", "id": request_id})

    async def _broadcast(self, message: dict[str, Any]) -> None:
        for client in list(self._clients):
            try:
                await self._send(client, message)
            except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
                self._clients.discard(client)

    @staticmethod
    async def _send(stream: anyio.abc.SocketStream, message: dict[str, Any]) -> None:
        await stream.send(json.dumps(message, ensure_ascii=False).encode("utf-8") + b"\n")
