"""`mcp-sampling-proxy console`: approve sampling requests of every running proxy from one terminal.

Attaches to each proxy's socket in the user's runtime dir (and to proxies started later), shows
each pending request (server, tool call, messages, system prompt, preferences, tools) and asks:
approve once, for this session, always for this server and tool, edit the prompt, or deny.
Everything shown came from a server, so it is validated (console_messages), stripped of escape
and format characters, and shown quoted. A socket is used only when the process serving it has
the pid its name says and does not run below a proxy: a governed server could plant a socket of
its own to phish the user.

A question that waits for an answer stays the last thing on screen: a line that arrives meanwhile
(a proxy attaching or leaving) is printed in its place and the question is asked again below it.
"""

from __future__ import annotations

import os
import sys
from collections import deque
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio
import anyio.abc

from mcp_sampling_proxy.approval.console.client import ConsoleClient, Event, decision_reply, elicit_reply, review_reply
from mcp_sampling_proxy.approval.console.server import RuntimeDirError, runtime_dir
from mcp_sampling_proxy.approval.dialogues import approval_dialogue, review_dialogue
from mcp_sampling_proxy.approval.form_prompts import converse
from mcp_sampling_proxy.approval.forms import FormError, parse_form
from mcp_sampling_proxy.commands.parsing import Parser
from mcp_sampling_proxy.commands.web_console import serve
from mcp_sampling_proxy.log import configure, get_logger
from mcp_sampling_proxy.notation.vocabulary import TOOL_CALL_APPROVAL
from mcp_sampling_proxy.services.elicitation import open_url
from mcp_sampling_proxy.system.terminal import discard_typeahead, erase_question
from mcp_sampling_proxy.text.sanitize import one_line, quote, strip_controls

log = get_logger("mcp_sampling_proxy.console")


class Console:
    """The terminal console: questions are asked one at a time, in the order they arrived."""

    def __init__(self, directory: Path, out: Any = sys.stdout):
        self._dir = directory
        self._out = out
        self._client = ConsoleClient(directory, self._on_event)
        self._queue: deque[tuple[Path, dict[str, Any]]] = deque()
        self._ready = anyio.Event()
        self._waiting: str | None = None  # the question on screen waiting for its answer, if any

    def say(self, text: str) -> None:
        self._out.write(text + "\n")
        self._out.flush()

    def notice(self, text: str) -> None:
        """A line about something else (a proxy attaching or leaving): said at once, and when a question
        waits, in its place, with the question shown again below it (it must not scroll away)."""
        if self._waiting is None:
            self.say(text)
            return
        # on a terminal the question is erased and asked again below the line; elsewhere (a pipe) the
        # line goes below it
        erase = erase_question(self._waiting, self._out.fileno()) if _isatty(self._out) else "\n"
        self._out.write(erase + text + "\n" + self._waiting)
        self._out.flush()

    async def ask(self, prompt: str) -> str | None:
        """The answer to `prompt`, typed on stdin; None at the end of input."""
        self._out.write(prompt)
        self._out.flush()
        self._waiting = prompt
        try:
            line = await anyio.to_thread.run_sync(sys.stdin.readline, abandon_on_cancel=True)
        finally:
            self._waiting = None
        return str(line).strip() if line else None

    async def run(self, tg: anyio.abc.TaskGroup) -> None:
        self.say(f"mcp-sampling-proxy console: watching {self._dir} for proxies (Ctrl-C to quit)")
        tg.start_soon(self._client.run)
        while True:
            while not self._queue:
                self._ready = anyio.Event()
                await self._ready.wait()
            path, message = self._queue.popleft()
            if self._client.is_resolved(path, message["id"]):
                continue
            await self._answer(path, message)

    def _on_event(self, event: Event) -> None:
        if event.kind == "attached":
            message = event.message
            self.notice(
                f"[proxy {message['pid']}] attached: server '{_clean(message.get('server'))}', "
                f"host '{_clean(message.get('host'))}'"
            )
        elif event.kind == "question":
            self._queue.append((event.path, event.message))
            self._ready.set()
        elif event.kind == "detached":
            self.notice(f"[proxy {event.path.stem}] detached")
        elif event.kind == "refused":
            self.notice(f"[!] ignoring {one_line(str(event.path))}: {event.why}")  # a planted name is the attacker's

    async def _answer(self, path: Path, message: dict[str, Any]) -> None:
        if not self._client.attached(path):
            return
        self.say("")
        reply: dict[str, Any]
        if message["type"] == "elicit":
            reply = elicit_reply(message, await _elicit(message, self.ask, self.say))
        elif message["type"] == "review":
            self.say(
                f"[proxy {path.stem}] the LLM's answer for server '{_clean(message.get('server'))}' needs your review:"
            )
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
            host = f", host '{_clean(message.get('host'))}'" if message.get("host") else ""
            kind = "tool call" if str(message.get("tool") or "").startswith(TOOL_CALL_APPROVAL) else "sampling request"
            self.say(
                f"[proxy {path.stem}] {kind} from server '{_clean(message.get('server'))}'{host} "
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
            scope, text = await approval_dialogue(
                params, self.ask, self.say, lambda: discard_typeahead(sys.stdin.fileno())
            )
            reply = decision_reply(message, scope, text)
        if self._client.is_resolved(path, message["id"]):
            self.say("(answered elsewhere or timed out meanwhile; your answer was not used)")
            return
        if not await self._client.send(path, reply):
            self.say("(the proxy is gone)")


async def _elicit(message: dict[str, Any], ask: Any, say: Any) -> dict[str, Any]:
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


def main(argv: Sequence[str]) -> int:
    configure("warning", "console")  # stdout is the conversation with the user; logs go to stderr

    parser = Parser(
        prog="mcp-sampling-proxy console",
        meant={"--listen": "--web --port PORT (the console's page listens on 127.0.0.1 only)"},
        description="Approve the sampling requests of every running mcp-sampling-proxy of this user from this "
        "terminal (for hosts such as Claude Desktop that start the proxy without one).",
    )
    web = parser.add_argument_group("in a browser")
    web.add_argument(
        "--web",
        action="store_true",
        help="serve the console as a page on 127.0.0.1 instead: the first line printed is its URL, with a secret token",
    )
    web.add_argument("--port", type=int, default=0, help="port for --web (default: a free one)")
    web.add_argument("--no-open", action="store_true", help="with --web: print the URL, do not open a browser")
    web.add_argument(
        "--audit", metavar="FILE", help="with --web: the audit log to tail (default: the policy's audit.path)"
    )
    web.add_argument(
        "--policy",
        metavar="FILE",
        help="with --web: the policy whose budgets and limits to show "
        "(default: ~/.config/mcp-sampling-proxy/policy.yaml when it exists)",
    )
    args = parser.parse_args(list(argv))
    if not args.web and (args.port or args.no_open or args.audit or args.policy):
        parser.error("--port, --no-open, --audit and --policy go with --web")
    try:
        directory = runtime_dir()
    except RuntimeDirError as exc:
        print(f"mcp-sampling-proxy console: error: {exc}", file=sys.stderr)
        return 1
    if args.web:
        return serve(directory, port=args.port, open_browser=not args.no_open, policy=args.policy, audit=args.audit)

    async def run() -> None:
        async with anyio.create_task_group() as tg:
            await Console(directory).run(tg)

    try:
        anyio.run(run)
    except (KeyboardInterrupt, EOFError):
        # one Ctrl-C (or Ctrl-D) quits, also at a prompt: each proxy sees its console go and sends the
        # question to its next approval channel, or denies it
        print("\nconsole closed: pending requests go to each proxy's next approval channel, or are denied", flush=True)
        sys.stderr.flush()
        # A prompt's reader thread may still be blocked in stdin.readline(), holding stdin's lock, and
        # the interpreter's shutdown would wait for that lock (a second Ctrl-C): leave at once instead.
        os._exit(0)
    return 0
