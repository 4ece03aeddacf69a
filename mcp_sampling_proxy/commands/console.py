"""`mcp-sampling-proxy console`: approve sampling requests of every running proxy from one terminal.

Attaches to each proxy's socket in the user's runtime dir (and to proxies started later), shows
each pending request (server, tool call, messages, system prompt, preferences, tools) and asks:
approve once, for this session, always for this server and tool, edit the prompt, or deny.
Everything shown came from a server, so it is validated (console_messages), stripped of escape
and format characters, and shown quoted. A socket is used only when the process serving it has
the pid its name says and does not run below a proxy: a governed server could plant a socket of
its own to phish the user.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from collections import deque
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio
import anyio.abc

from mcp_sampling_proxy.approval.channels import approval_dialogue, review_dialogue, with_prompt, with_text
from mcp_sampling_proxy.approval.console_messages import MAX_LINE, BadMessage, validate
from mcp_sampling_proxy.approval.terminal import discard_typeahead
from mcp_sampling_proxy.log import get_logger
from mcp_sampling_proxy.sanitize import one_line, quote, strip_controls

log = get_logger("mcp_sampling_proxy.console")


class Console:
    def __init__(self, directory: Path, out: Any = sys.stdout):
        self._dir = directory
        self._out = out
        self._streams: dict[Path, anyio.abc.SocketStream] = {}
        self._queue: deque[tuple[Path, dict[str, Any]]] = deque()
        self._ready = anyio.Event()
        self._resolved: set[tuple[Path, str]] = set()
        self._refused: set[tuple[Path, int]] = set()

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
        from mcp_sampling_proxy.approval.console_server import is_stale

        while True:
            for sock in sorted(self._dir.glob("*.sock")):
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
            await anyio.sleep(0.5)

    def _known_refused(self, sock: Path) -> bool:
        try:
            return (sock, sock.lstat().st_ino) in self._refused
        except OSError:
            return True

    def _refuse(self, sock: Path, why: str) -> None:
        with contextlib.suppress(OSError):
            self._refused.add((sock, sock.lstat().st_ino))
        shown = one_line(str(sock))  # a planted file's name is chosen by the attacker
        log.warning("refused a console socket", path=shown, reason=why)
        self.say(f"[!] ignoring {shown}: {why}")

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
                        log.warning("dropped a malformed message from a proxy", path=str(path),
                                    error=one_line(str(exc)))
                if len(buffer) > MAX_LINE:
                    log.warning("a proxy sent an oversized message; disconnected", path=str(path))
                    break
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            pass
        self._streams.pop(path, None)
        with contextlib.suppress(OSError, anyio.BrokenResourceError):
            await stream.aclose()
        self.say(f"[proxy {path.stem}] detached")

    def _receive(self, path: Path, message: dict[str, Any]) -> None:
        kind = message["type"]
        if kind == "hello":
            if str(message["pid"]) != path.stem:
                raise BadMessage(f"hello names pid {message['pid']}, the socket is {path.name}")
            self.say(f"[proxy {message['pid']}] attached: server '{_clean(message.get('server'))}', "
                     f"host '{_clean(message.get('host'))}'")
        elif kind in ("pending", "review", "elicit"):
            self._queue.append((path, message))
            self._ready.set()
        elif kind == "resolved":
            self._resolved.add((path, message["id"]))

    async def _answer(self, path: Path, message: dict[str, Any]) -> None:
        stream = self._streams.get(path)
        if stream is None:
            return
        self.say("")
        reply: dict[str, Any]
        if message["type"] == "elicit":
            reply = {**await _elicit(message, self.say), "type": "elicit", "id": message["id"]}
        elif message["type"] == "review":
            self.say(f"[proxy {path.stem}] the LLM's answer for server '{_clean(message.get('server'))}' "
                     "needs your review:")
            result = message.get("result") or {}
            accepted, text = await review_dialogue(result, _ask_or_none, self.say, prompt=message.get("summary"),
                                                   prompt_edited_by=message.get("prompt_edited_by"))
            reply = {"type": "review", "id": message["id"], "accept": accepted}
            if text is not None:  # the new text only, which the proxy applies; a proxy before "edit" takes `result`
                reply.update({"text": text} if message.get("edit") == "text" else {"result": with_text(result, text)})
        else:
            host = f", host '{_clean(message.get('host'))}'" if message.get("host") else ""
            self.say(f"[proxy {path.stem}] sampling request from server '{_clean(message.get('server'))}'{host} "
                     f"(rule '{_clean(message.get('rule'))}'):")
            self.say(quote(message["summary"]))
            params = message.get("params") or {}
            scope, text = await approval_dialogue(params, _ask_or_none, self.say,
                                                  lambda: discard_typeahead(sys.stdin.fileno()))
            reply = {"type": "decision", "id": message["id"], "approve": scope is not None, "scope": scope or "once"}
            if text is not None:  # the new text only, which the proxy applies; a proxy before "edit" takes `params`
                reply.update({"prompt": text} if message.get("edit") == "prompt"
                             else {"params": with_prompt(params, text)})
        if (path, message["id"]) in self._resolved:
            self.say("(answered elsewhere or timed out meanwhile; your answer was not used)")
            return
        try:
            await stream.send(json.dumps(reply).encode() + b"\n")
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            self.say("(the proxy is gone)")


async def _elicit(message: dict[str, Any], say: Any) -> dict[str, Any]:
    """Render an elicitation (form or URL) on this terminal; the answer goes back to the proxy."""
    from mcp_sampling_proxy.approval.elicitation_console import converse
    from mcp_sampling_proxy.approval.forms import FormError, parse_form
    from mcp_sampling_proxy.serve.elicitation import open_url

    origin = (message.get("server") or "", message.get("tool"))
    text = message.get("message") or ""
    if message.get("mode") == "url":
        return await converse(text, origin, url=message.get("url") or "", ask=_ask_or_none, say=say,
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
    """A name from a server, on one line (a newline could forge a line of ours)."""
    return one_line(str(value or ""), 120)


def _refusal(sock: Path, stream: anyio.abc.SocketStream) -> str | None:
    """Why a socket must not be trusted: its server's pid is not the one in its name, or the
    server runs below a proxy (a governed server planting a fake proxy socket)."""
    from mcp_sampling_proxy.hardening import peer_pid, refusal

    try:
        pid = peer_pid(stream.extra(anyio.abc.SocketAttribute.raw_socket))
    except (OSError, anyio.TypedAttributeLookupError):
        pid = None
    if pid is None or str(pid) != sock.stem:
        return f"it is served by process {pid}, not by the proxy its name claims"
    return refusal(pid)


async def _ask(prompt: str) -> str:
    sys.stdout.write(prompt)
    sys.stdout.flush()
    line = await anyio.to_thread.run_sync(sys.stdin.readline, abandon_on_cancel=True)
    if not line:
        raise EOFError
    return line.strip()


def main(argv: Sequence[str]) -> int:
    from mcp_sampling_proxy.approval.console_server import RuntimeDirError, runtime_dir
    from mcp_sampling_proxy.log import configure

    configure("warning", "console")  # stdout is the conversation with the user; logs go to stderr

    parser = argparse.ArgumentParser(
        prog="mcp-sampling-proxy console",
        description="Approve the sampling requests of every running mcp-sampling-proxy of this user from this "
        "terminal (for hosts such as Claude Desktop that start the proxy without one).")
    parser.parse_args(list(argv))
    try:
        directory = runtime_dir()
    except RuntimeDirError as exc:
        print(f"mcp-sampling-proxy console: error: {exc}", file=sys.stderr)
        return 1

    async def run() -> None:
        async with anyio.create_task_group() as tg:
            await Console(directory).run(tg)

    try:
        anyio.run(run)
    except (KeyboardInterrupt, EOFError):
        # one Ctrl-C (or Ctrl-D) quits, also at a prompt: each proxy sees its console go and sends the
        # question to its next approval channel, or denies it
        print("\nconsole closed: pending requests go to each proxy's next approval channel, or are denied",
              flush=True)
        sys.stderr.flush()
        # A prompt's reader thread may still be blocked in stdin.readline(), holding stdin's lock, and
        # the interpreter's shutdown would wait for that lock (a second Ctrl-C): leave at once instead.
        os._exit(0)
    return 0
