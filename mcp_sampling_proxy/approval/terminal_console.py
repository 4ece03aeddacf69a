"""The terminal console's screen: the questions of every attached proxy, asked one at a time on this
terminal, in the order they arrived (`mcp-sampling-proxy console`, commands/console.py, runs it).

Everything shown came from a server, so it is validated (console messages), stripped of escape and
format characters, and shown quoted. A question that waits for an answer stays the last thing on screen:
a line that arrives meanwhile (a proxy attaching or leaving, another question waiting) is printed in its
place and the question is asked again below it. A question that closes elsewhere (another console
answered it, it timed out, it was withdrawn, its proxy left) is taken off the screen at once, saying so,
and the next one is asked.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections import deque
from pathlib import Path
from typing import Any

import anyio
import anyio.abc

from mcp_sampling_proxy.approval.console.client import ConsoleClient, Event, decision_reply, elicit_reply, review_reply
from mcp_sampling_proxy.approval.console.messages import ConsoleMessage, ConsoleReply
from mcp_sampling_proxy.approval.dialogues import approval_dialogue, review_dialogue
from mcp_sampling_proxy.approval.form_prompts import converse
from mcp_sampling_proxy.approval.forms import FormError, parse_form
from mcp_sampling_proxy.notation.vocabulary import TOOL_CALL_APPROVAL
from mcp_sampling_proxy.protocol.wire_types import ElicitResult
from mcp_sampling_proxy.system.browser import open_url
from mcp_sampling_proxy.system.terminal import discard_typeahead, erase_question
from mcp_sampling_proxy.text.sanitize import one_line, quote, strip_controls


class Console:
    """The terminal console: questions are asked one at a time, in the order they arrived. A question
    that closes while it is on screen (answered in another console, timed out, withdrawn, its proxy
    gone) is taken off at once and the next one is asked; one that arrives meanwhile is announced."""

    def __init__(self, directory: Path, out: Any = sys.stdout):
        self._dir = directory
        self._out = out
        self._keys = Keyboard(sys.stdin.fileno())
        self._client = ConsoleClient(directory, self._on_event)
        self._queue: deque[tuple[Path, ConsoleMessage]] = deque()
        self._ready = anyio.Event()
        self._waiting: str | None = None  # the question on screen waiting for its answer, if any
        self._current: tuple[Path, str] | None = None  # the question being asked: (its proxy, its id)
        self._current_scope: anyio.CancelScope | None = None
        self._closed_why: str | None = None  # why the question on screen was taken off
        self._tg: anyio.abc.TaskGroup | None = None  # where a word to a proxy is sent from (`_tell`)

    def say(self, text: str) -> None:
        self._out.write(text + "\n")
        self._out.flush()

    def notice(self, text: str) -> None:
        """A line about something else (a proxy attaching or leaving): said at once, and when a question
        waits, in its place, with the question shown again below it (it must not scroll away)."""
        if self._waiting is None:
            self.say(text)
            return
        self._out.write(self._erase(self._waiting) + text + "\n" + self._waiting)
        self._out.flush()

    def _erase(self, prompt: str) -> str:
        # on a terminal the question is erased (and asked again below); elsewhere (a pipe) a line ends it
        return erase_question(prompt, self._out.fileno()) if _isatty(self._out) else "\n"

    async def ask(self, prompt: str) -> str | None:
        """The answer to `prompt`, typed on stdin; None at the end of input. When the question closes
        meanwhile, the prompt (and what was typed of an answer) is erased."""
        self._out.write(prompt)
        self._out.flush()
        self._waiting = prompt
        try:
            line = await self._keys.readline()
        except anyio.get_cancelled_exc_class():
            self._out.write(self._erase(prompt))
            self._out.flush()
            raise
        finally:
            self._waiting = None
        return line.strip() if line is not None else None

    async def run(self, tg: anyio.abc.TaskGroup) -> None:
        self.say(f"mcp-sampling-proxy console: watching {self._dir} for proxies (Ctrl-C to quit)")
        self._tg = tg
        tg.start_soon(self._client.run)
        while True:
            while not self._queue:
                self._ready = anyio.Event()
                await self._ready.wait()
            path, message = self._queue.popleft()
            if self._client.is_resolved(path, message["id"]) or not self._client.attached(path):
                continue
            self._current, self._closed_why = (path, message["id"]), None
            try:
                with anyio.CancelScope() as scope:
                    self._current_scope = scope
                    await self._answer(path, message)
            finally:
                self._current = self._current_scope = None
            if scope.cancelled_caught:
                self.say(f"[proxy {path.stem}] {self._closed_why or 'closed'}: this question is closed")

    def _on_event(self, event: Event) -> None:
        if event.kind == "attached":
            message = event.message
            # a proxy found before its host's initialize does not know the host's name yet: none is shown
            self.notice(f"[proxy {message['pid']}] attached: server '{_clean(message.get('server'))}'{_host(message)}")
        elif event.kind == "question":
            self._queue.append((event.path, event.message))
            self._ready.set()
            if self._current is not None or len(self._queue) > 1:  # behind another: its proxy's approval.timeout
                self._tell(event.path, {"type": "waiting", "id": event.message["id"]})  # waits too, until `shown`
            if self._current is not None:  # every open question is reachable: say it is there
                self.notice(
                    f"[proxy {event.path.stem}] {_what(event.message)} from server {_server(event.message)} "
                    f"waits: asked in turn ({_waiting_count(len(self._queue))})"
                )
        elif event.kind == "resolved":
            self._close(event.path, event.message["id"], CLOSED.get(event.message.get("how"), CLOSED[None]))
        elif event.kind == "detached":
            self._close(event.path, None, "the proxy is gone")
            self.notice(f"[proxy {event.path.stem}] detached")
        elif event.kind == "refused":
            self.notice(f"[!] ignoring {one_line(str(event.path))}: {event.why}")  # a planted name is the attacker's

    def _tell(self, path: Path, reply: ConsoleReply) -> None:
        """Send `reply` to the proxy at `path` from an event callback (no await there): on the loop, soon."""
        if self._tg is not None:
            self._tg.start_soon(self._client.send, path, reply)

    def _close(self, path: Path, question_id: str | None, why: str) -> None:
        """Take a question that is no longer open off the screen (None: every question of `path`)."""
        current, scope = self._current, self._current_scope
        on_screen = current is not None and current[0] == path and question_id in (None, current[1])
        if on_screen and scope is not None and not scope.cancel_called:
            self._closed_why = why
            scope.cancel()
        left = [(p, m) for p, m in self._queue if not (p == path and question_id in (None, m["id"]))]
        if len(left) != len(self._queue):
            self._queue = deque(left)
            if question_id is not None:  # a proxy gone says so on its own line
                self.notice(f"[proxy {path.stem}] a waiting question is closed ({why})")

    async def _answer(self, path: Path, message: ConsoleMessage) -> None:
        self.say("")
        self._keys.discard()  # keys typed before the question was shown answer nothing
        # the proxy's approval.timeout counts from now, not from while it waited behind the one before
        await self._client.send(path, {"type": "shown", "id": message["id"]})
        reply: ConsoleReply
        if message["type"] == "elicit":
            self.say(f"[proxy {path.stem}] {_what(message)} from server {_server(message)}{_host(message)}:")
            reply = elicit_reply(message, await _elicit(message, self.ask, self.say))
        elif message["type"] == "review":
            self.say(f"[proxy {path.stem}] the LLM's answer for server {_server(message)} needs your review:")
            result = message.get("result") or {}
            accepted, text = await review_dialogue(
                result,
                self.ask,
                self.say,
                prompt=message.get("summary"),
                prompt_edited_by=message.get("prompt_edited_by"),
            )
            reply = review_reply(message, accepted, text)
        else:
            self.say(
                f"[proxy {path.stem}] {_what(message)} from server {_server(message)}{_host(message)} "
                f"(rule '{_clean(message.get('rule'))}'):"
            )
            self.say(quote(message["summary"]))
            quorum = message.get("quorum")
            if isinstance(quorum, dict):  # approval.quorum: this console's yes is one of several
                named = quorum.get("approved_by") if isinstance(quorum.get("approved_by"), list) else []
                so_far = f" (so far: {_clean(', '.join(str(n) for n in named))})" if named else ""
                self.say(
                    f"needs {_clean(quorum.get('needed'))} different approvers{so_far}; here you approve as 'console'"
                )
            params = message.get("params") or {}
            scope, text = await approval_dialogue(params, self.ask, self.say, self._keys.discard)
            reply = decision_reply(message, scope, text)
        if self._client.is_resolved(path, message["id"]):
            self.say("(answered elsewhere or timed out meanwhile; your answer was not used)")
            return
        self._current = None  # answered here: the proxy's "resolved" for it is ours, nothing to take off
        if not await self._client.send(path, reply):
            self.say("(the proxy is gone)")


# how a proxy says a question closed (the `how` of its `resolved` line) -> what the console says
CLOSED: dict[Any, str] = {
    "answered": "answered in another console",
    "expired": "timed out (approval.timeout)",
    "withdrawn": "withdrawn (answered on another channel, or the request was cancelled)",
    None: "answered elsewhere, withdrawn or timed out",
}


class Keyboard:
    """Lines typed on stdin, read on the event loop (no thread): a question taken off the screen leaves
    no reader behind that would take the answer meant for the next one."""

    def __init__(self, fd: int):
        self._fd = fd
        self._buffer = b""

    async def readline(self) -> str | None:
        """One line without its newline; None at the end of input (Ctrl-D)."""
        while b"\n" not in self._buffer:
            with contextlib.suppress(OSError):  # a file or /dev/null cannot be waited on: it never blocks
                await anyio.wait_readable(self._fd)
            chunk = os.read(self._fd, 65536)
            if not chunk:
                if not self._buffer:
                    return None
                break
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line.decode("utf-8", "replace").rstrip("\r")

    def discard(self) -> None:
        """Forget what was typed ahead: read already, or still waiting in the terminal."""
        self._buffer = b""
        discard_typeahead(self._fd)


def _what(message: ConsoleMessage) -> str:
    """What a question asks, in a few words."""
    if message["type"] == "elicit":
        return "link to open" if message.get("mode") == "url" else "form"
    if message["type"] == "review":
        return "answer to review"
    return "tool call" if str(message.get("tool") or "").startswith(TOOL_CALL_APPROVAL) else "sampling request"


def _server(message: ConsoleMessage) -> str:
    """The server a question names: an elicitation names it as the proxy shows it, quoted already."""
    if message["type"] == "elicit":
        return _clean(message.get("server"))
    return f"'{_clean(message.get('server'))}'"


def _host(message: ConsoleMessage) -> str:
    return f", host '{_clean(message.get('host'))}'" if message.get("host") else ""


def _waiting_count(n: int) -> str:
    return f"{n} question{'s' if n != 1 else ''} waiting"


async def _elicit(message: ConsoleMessage, ask: Any, say: Any) -> ElicitResult:
    """Render an elicitation (form or URL) on this terminal; the answer goes back to the proxy."""
    origin = (message.get("server") or "", message.get("tool"))
    text = message.get("message") or ""
    if message.get("mode") == "url":
        return await converse(text, origin, url=message.get("url") or "", ask=ask, say=say, opener=open_url)
    try:
        form = parse_form(message.get("schema") or {})
    except FormError as exc:
        say(f"(cannot show this form: {strip_controls(str(exc))}; declined)")
        return {"action": "decline"}
    return await converse(text, origin, form=form, ask=ask, say=say, opener=open_url)


def _clean(value: Any) -> str:
    """A name from a server, on one line (a newline could forge a line of ours)."""
    return one_line(str(value or ""), 120)


def _isatty(out: Any) -> bool:
    try:
        return bool(out.isatty())
    except (AttributeError, ValueError, OSError):
        return False
