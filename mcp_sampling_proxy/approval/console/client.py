"""The console's end of the proxy sockets, shared by the terminal console and the web console.

`ConsoleClient` watches the user's runtime dir, attaches to every proxy socket there (and to
proxies started later), refuses sockets that a governed server could have planted (the serving
process must have the pid the socket's name says and must not run below a proxy), validates
every line a proxy sends (console_messages) and hands each one on as an `Event`; `send` carries
an answer back. The answers themselves are built here too (`decision_reply`, `review_reply`,
`elicit_reply`) so both consoles speak the protocol of `console_server` the same way.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

import anyio
import anyio.abc
from msgspec import Struct, field

from mcp_sampling_proxy.approval.console.messages import MAX_LINE, BadMessage, ConsoleMessage, ConsoleReply, validate
from mcp_sampling_proxy.approval.console.server import is_stale
from mcp_sampling_proxy.approval.edits import with_prompt, with_text
from mcp_sampling_proxy.log import get_logger
from mcp_sampling_proxy.protocol.wire_types import ElicitResult
from mcp_sampling_proxy.system.hardening import peer_pid, refusal
from mcp_sampling_proxy.text.sanitize import one_line

log = get_logger("mcp_sampling_proxy.console")

EventKind = Literal["attached", "question", "resolved", "detached", "refused"]
QUESTIONS = ("pending", "review", "elicit")


class Event(Struct, frozen=True):
    """Something a proxy socket said or did. `message` is validated (hello, a question, resolved)."""

    kind: EventKind
    path: Path
    message: ConsoleMessage = field(default_factory=ConsoleMessage)
    why: str = ""  # for "refused": why the socket is not trusted (safe to show)


class ConsoleClient:
    """Connections to every proxy of this user; events go to `on_event` (called on the event loop)."""

    def __init__(self, directory: Path, on_event: Callable[[Event], None], *, poll: float = 0.5):
        self.directory = directory
        self._on_event = on_event
        self._poll = poll
        self._streams: dict[Path, anyio.abc.SocketStream] = {}
        self._resolved: set[tuple[Path, str]] = set()
        self._refused: set[tuple[Path, int]] = set()

    def is_resolved(self, path: Path, question_id: str) -> bool:
        """Whether another console or a timeout already ended this question."""
        return (path, question_id) in self._resolved

    def attached(self, path: Path) -> bool:
        return path in self._streams

    async def run(self) -> None:
        """Scan for proxies until cancelled; each attached proxy is listened to in its own task."""
        async with anyio.create_task_group() as tg:
            while True:
                await self._scan_once(tg)
                await anyio.sleep(self._poll)

    async def send(self, path: Path, reply: ConsoleReply) -> bool:
        """Send an answer to the proxy at `path`; False when that proxy is gone."""
        stream = self._streams.get(path)
        if stream is None:
            return False
        try:
            await stream.send(json.dumps(reply).encode() + b"\n")
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            return False
        return True

    async def _scan_once(self, tg: anyio.abc.TaskGroup) -> None:
        for sock in sorted(self.directory.glob("*.sock")):
            if sock in self._streams or self._known_refused(sock):
                continue
            try:
                stream = await anyio.connect_unix(sock)
            except OSError:
                if is_stale(sock):  # left by a proxy that was killed
                    with contextlib.suppress(OSError):
                        sock.unlink()
                continue  # a proxy that is gone (or not ready yet)
            why = _refusal(sock, stream)
            if why:
                self._refuse(sock, why)
                await stream.aclose()
                continue
            self._streams[sock] = stream
            tg.start_soon(self._listen, sock, stream)

    def _known_refused(self, sock: Path) -> bool:
        try:
            return (sock, sock.lstat().st_ino) in self._refused
        except OSError:
            return True

    def _refuse(self, sock: Path, why: str) -> None:
        with contextlib.suppress(OSError):
            self._refused.add((sock, sock.lstat().st_ino))
        log.warning("refused a console socket", path=one_line(str(sock)), reason=why)
        self._on_event(Event("refused", sock, why=why))

    async def _listen(self, path: Path, stream: anyio.abc.SocketStream) -> None:
        buffer = b""
        try:
            async for chunk in stream:
                buffer += chunk
                while b"\n" in buffer:
                    line, buffer = buffer.split(b"\n", 1)
                    try:
                        self._receive(path, validate(json.loads(line)))
                    except (ValueError, BadMessage) as exc:  # BadMessage is a ValueError too
                        log.warning(
                            "dropped a malformed message from a proxy", path=str(path), error=one_line(str(exc))
                        )
                if len(buffer) > MAX_LINE:
                    log.warning("a proxy sent an oversized message; disconnected", path=str(path))
                    break
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            pass
        self._streams.pop(path, None)
        with contextlib.suppress(OSError, anyio.BrokenResourceError):
            await stream.aclose()
        self._on_event(Event("detached", path))

    def _receive(self, path: Path, message: ConsoleMessage) -> None:
        kind = message["type"]
        if kind == "hello":
            if str(message["pid"]) != path.stem:
                raise BadMessage(f"hello names pid {message['pid']}, the socket is {path.name}")
            self._on_event(Event("attached", path, message))
        elif kind in QUESTIONS:
            self._on_event(Event("question", path, message))
        elif kind == "resolved":
            self._resolved.add((path, message["id"]))
            self._on_event(Event("resolved", path, message))


def decision_reply(
    message: ConsoleMessage, scope: str | None, text: str | None, approver: str | None = None
) -> ConsoleReply:
    """The answer to a `pending` question: approved with `scope` (None: denied), and the new text of
    the last user message when the human edited it (the proxy applies it; a proxy from before the
    `edit` key takes the whole edited request). `approver`: the name the person gave (the web console
    keeps one per tab), which tells approvers apart under `approval.quorum`."""
    reply: ConsoleReply = {
        "type": "decision",
        "id": message["id"],
        "approve": scope is not None,
        "scope": scope or "once",
    }
    if approver:
        reply["approver"] = approver
    if text is not None:
        asked: Any = message.get("params") or {}  # the proxy's JSON: with_prompt refuses what is not a request
        if message.get("edit") == "prompt":
            reply["prompt"] = text
        else:
            reply["params"] = with_prompt(asked, text)
    return reply


def review_reply(message: ConsoleMessage, accept: bool, text: str | None) -> ConsoleReply:
    """The answer to a `review` question: send the LLM's answer or not, with a replacement text."""
    reply: ConsoleReply = {"type": "review", "id": message["id"], "accept": accept}
    if text is not None and message.get("edit") == "text":
        reply["text"] = text
    elif text is not None:
        reply["result"] = with_text(message.get("result") or {}, text)
    return reply


def elicit_reply(message: ConsoleMessage, answer: ElicitResult) -> ConsoleReply:
    """The answer to an `elicit` question: {"action", "content"?} as the human gave it."""
    content = answer.get("content")
    if content is None:
        return {"action": answer["action"], "type": "elicit", "id": message["id"]}
    return {"action": answer["action"], "content": dict(content), "type": "elicit", "id": message["id"]}


def _refusal(sock: Path, stream: anyio.abc.SocketStream) -> str | None:
    """Why a socket must not be trusted: its server's pid is not the one in its name, or the
    server runs below a proxy (a governed server planting a fake proxy socket)."""
    try:
        pid = peer_pid(stream.extra(anyio.abc.SocketAttribute.raw_socket))
    except (OSError, anyio.TypedAttributeLookupError):
        pid = None
    if pid is None or str(pid) != sock.stem:
        return f"it is served by process {pid}, not by the proxy its name claims"
    return refusal(pid)
