"""`mcp-sampling-proxy console`: approve sampling requests of every running proxy from one terminal.

Attaches to each proxy's socket in the user's runtime dir (and to proxies started later), shows
each pending request (server, tool call, messages, system prompt, preferences, tools) and asks:
approve once, for this session, always for this server and tool, edit the prompt, or deny.
Everything shown came from a server, so it is stripped of escape sequences first.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import deque
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio
import anyio.abc

from mcp_sampling_proxy.approval import approval_dialogue, review_dialogue
from mcp_sampling_proxy.sanitize import strip_controls


class Console:
    def __init__(self, directory: Path, out: Any = sys.stdout):
        self._dir = directory
        self._out = out
        self._streams: dict[Path, anyio.abc.SocketStream] = {}
        self._queue: deque[tuple[Path, dict[str, Any]]] = deque()
        self._ready = anyio.Event()
        self._resolved: set[tuple[Path, str]] = set()

    def say(self, text: str) -> None:
        self._out.write(text + "\n")
        self._out.flush()

    async def run(self, tg: anyio.abc.TaskGroup) -> None:
        self.say(f"mcp-sampling-proxy console: watching {self._dir} for proxies (Ctrl-C to quit)")
        tg.start_soon(self._scan, tg)
        while True:
            while not self._queue:
                self._ready = anyio.Event()
                await self._ready.wait()
            path, message = self._queue.popleft()
            if (path, message["id"]) in self._resolved:
                continue
            await self._answer(path, message)

    async def _scan(self, tg: anyio.abc.TaskGroup) -> None:
        while True:
            for sock in sorted(self._dir.glob("*.sock")):
                if sock not in self._streams:
                    try:
                        stream = await anyio.connect_unix(sock)
                    except OSError:
                        continue  # a proxy that is gone (or not ready yet)
                    self._streams[sock] = stream
                    tg.start_soon(self._listen, sock, stream)
            await anyio.sleep(0.5)

    async def _listen(self, path: Path, stream: anyio.abc.SocketStream) -> None:
        buffer = b""
        try:
            async for chunk in stream:
                buffer += chunk
                while b"\n" in buffer:
                    line, buffer = buffer.split(b"\n", 1)
                    self._receive(path, json.loads(line))
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError, ValueError):
            pass
        self._streams.pop(path, None)
        self.say(f"[proxy {path.stem}] detached")

    def _receive(self, path: Path, message: dict[str, Any]) -> None:
        kind = message.get("type")
        if kind == "hello":
            self.say(f"[proxy {message.get('pid')}] attached: server '{_clean(message.get('server'))}', "
                     f"host '{_clean(message.get('host'))}'")
        elif kind in ("pending", "review", "elicit"):
            self._queue.append((path, message))
            self._ready.set()
        elif kind == "resolved":
            self._resolved.add((path, str(message.get("id"))))

    async def _answer(self, path: Path, message: dict[str, Any]) -> None:
        stream = self._streams.get(path)
        if stream is None:
            return
        self.say("")
        reply: dict[str, Any]
        if message["type"] == "elicit":
            reply = {**await _elicit(message, self.say), "type": "elicit", "id": message["id"]}
        elif message["type"] == "review":
            self.say(f"[proxy {path.stem}] " + strip_controls(str(message.get("summary", ""))))
            accepted, reviewed = await review_dialogue(message.get("result") or {}, _ask_or_none, self.say)
            reply = {"type": "review", "id": message["id"], "accept": accepted}
            if reviewed != message.get("result"):
                reply["result"] = reviewed
        else:
            self.say(f"[proxy {path.stem}] " + strip_controls(str(message.get("summary", ""))))
            self.say(f"(rule '{_clean(message.get('rule'))}')")
            scope, edited = await approval_dialogue(message.get("params") or {}, _ask_or_none, self.say)
            reply = {"type": "decision", "id": message["id"], "approve": scope is not None, "scope": scope or "once"}
            if edited is not None:
                reply["params"] = edited
        if (path, message["id"]) in self._resolved:
            self.say("(answered elsewhere or timed out meanwhile; your answer was not used)")
            return
        try:
            await stream.send(json.dumps(reply).encode() + b"\n")
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            self.say("(the proxy is gone)")


async def _elicit(message: dict[str, Any], say: Any) -> dict[str, Any]:
    """Render an elicitation (form or URL) on this terminal; the answer goes back to the proxy."""
    from mcp_sampling_proxy.elicitation import open_url
    from mcp_sampling_proxy.elicitation_console import converse
    from mcp_sampling_proxy.forms import FormError, parse_form

    origin = (str(message.get("server", "")), message.get("tool"))
    text = str(message.get("message", ""))
    if message.get("mode") == "url":
        return await converse(text, origin, url=str(message.get("url", "")), ask=_ask_or_none, say=say,
                              opener=open_url)
    try:
        form = parse_form(message.get("schema") or {})
    except FormError as exc:
        say(f"(cannot show this form: {strip_controls(str(exc))}; declined)")
        return {"action": "decline"}
    return await converse(text, origin, form=form, ask=_ask_or_none, say=say, opener=open_url)


async def _ask_or_none(prompt: str) -> str | None:
    try:
        return await _ask(prompt)
    except EOFError:
        return None


def _clean(value: Any) -> str:
    return strip_controls(str(value or ""))


async def _ask(prompt: str) -> str:
    sys.stdout.write(prompt)
    sys.stdout.flush()
    line = await anyio.to_thread.run_sync(sys.stdin.readline, abandon_on_cancel=True)
    if not line:
        raise EOFError
    return line.strip()


def main(argv: Sequence[str]) -> int:
    from mcp_sampling_proxy.console_server import runtime_dir
    from mcp_sampling_proxy.log import configure

    configure("warning", "console")  # stdout is the conversation with the user; logs go to stderr

    parser = argparse.ArgumentParser(
        prog="mcp-sampling-proxy console",
        description="Approve the sampling requests of every running mcp-sampling-proxy of this user from this "
        "terminal (for hosts such as Claude Desktop that start the proxy without one).")
    parser.parse_args(list(argv))
    directory = runtime_dir()

    async def run() -> None:
        async with anyio.create_task_group() as tg:
            await Console(directory).run(tg)

    try:
        anyio.run(run)
    except (KeyboardInterrupt, EOFError):
        return 0
    return 0
