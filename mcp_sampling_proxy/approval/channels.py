"""Human approval for `prompt` decisions, failing closed.

Channels are tried in the configured order (default: the controlling terminal, the companion
console, the host through `elicitation/create`); the first one that can reach a human asks.
When none can, or nobody answers within the timeout, the request is denied with a message that
says why and how to set up a channel. "Approve for this session" lasts as long as the proxy;
"always" is remembered per server and tool in the user's state directory.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Protocol

import anyio

from mcp_sampling_proxy.approval.console.server import ConsoleGone
from mcp_sampling_proxy.approval.edits import (
    kept_blocks,
    last_user,
    prompt_not_editable,
    result_text,
    text_of,
    with_prompt,
    with_text,
)
from mcp_sampling_proxy.identity import normalise
from mcp_sampling_proxy.log import get_logger
from mcp_sampling_proxy.protocol import jsonrpc
from mcp_sampling_proxy.sanitize import one_line, quote, strip_controls
from mcp_sampling_proxy.terminal import Terminal

if TYPE_CHECKING:
    from mcp_sampling_proxy.approval.console.server import ConsoleServer

log = get_logger("mcp_sampling_proxy.approval.channels")


class HostSession(Protocol):
    host_capabilities: dict[str, Any]


class Relay(Protocol):
    """What a channel needs of the relay (relay/core.py's Relay): the host's capabilities, and a way to
    put a request to the host. Approval sits below the relay and reaches it only through this."""

    @property
    def session(self) -> HostSession: ...

    async def request_host(self, method: str, params: dict[str, Any]) -> dict[str, Any]: ...


DEFAULT_TIMEOUT = 120.0
DEFAULT_CHANNELS = ("terminal", "console", "host")

NO_CHANNEL_HINT = (
    "no approval channel is available (the proxy has no terminal, no companion console is attached, and "
    "the host does not support elicitation). Run `mcp-sampling-proxy console` in a terminal to approve "
    "requests, or add a rule with 'action: allow' for this server to the policy file (--policy)"
)


@dataclass(frozen=True)
class ApprovalRequest:
    server: str
    host: str
    tool: str | None
    rule: str
    params: dict[str, Any]  # server-controlled: sanitise before showing
    summary: str  # already sanitised
    prompt_edited_by: str | None = None  # the channel whose human edited the prompt (for the review)


@dataclass(frozen=True)
class Approval:
    approved: bool
    channel: str | None  # terminal | console | host | remembered, or None when nobody was asked
    reason: str
    outcome: str = ""  # approved | rejected | timeout | unavailable (for the audit record)
    scope: str = "once"  # once | session | always
    params: dict[str, Any] | None = None  # the request as edited by the operator


@dataclass(frozen=True)
class Review:
    accepted: bool
    result: dict[str, Any]  # the (possibly edited) sampling result
    channel: str


class Channel(Protocol):
    name: str

    def available(self, relay: Relay) -> bool: ...

    async def ask(self, request: ApprovalRequest, relay: Relay) -> Approval: ...

    async def review(self, request: ApprovalRequest, result: dict[str, Any], relay: Relay) -> Review: ...


@dataclass
class ApprovalMemory:
    """Approvals that outlive one request: this session's, and `always` ones in a state file."""

    session: set[tuple[str, str]] = field(default_factory=set)
    store: Any = None  # a JsonStateFile, or None to keep `always` in memory only
    forged: set[tuple[str, str]] = field(default_factory=set)  # unsealed `always` entries found (ignored)
    _seal: bytes | None = field(default=None, repr=False)

    def remembers(self, server: str, tool: str | None) -> str | None:
        key = _key(server, tool)
        if key in self.session:
            return "session"
        if self.store is not None:  # read every time: `approvals revoke` takes effect in running proxies
            try:
                entries = always_entries(self.store.read())
                seal = self._seal_key()
            except OSError as exc:
                log.warning("cannot read remembered approvals", error=str(exc))
                return None
            matching = [entry for entry in entries if always_key(entry) == key]
            if any(entry_is_sealed(seal, APPROVAL, entry) for entry in matching):
                return "always"
            if matching and key not in self.forged:
                self.forged.add(key)
                log.warning(
                    "a remembered approval was not written by a proxy (its seal does not match): ignored",
                    server=key[0],
                    tool=key[1] or None,
                    file=str(self.store.path),
                    fix="`mcp-sampling-proxy approvals list` shows it; revoke it, and approve again if you meant it",
                )
        return None

    def ignored(self, server: str, tool: str | None) -> bool:
        """True when a remembered approval for this was found unsealed (and ignored)."""
        return _key(server, tool) in self.forged

    def _seal_key(self) -> bytes:
        """The proxy's sealing key (quotas/integrity.py; made at start, before the server runs)."""
        if self._seal is None:
            from mcp_sampling_proxy.quotas.integrity import load_key

            self._seal = load_key(self.store.path.parent)
        return self._seal

    async def recall(self, server: str, tool: str | None) -> str | None:
        """`remembers`, with the shared file read in a worker thread: its lock is shared with the
        user's other proxies (and within the server's reach), and the event loop must not wait on it."""
        if self.store is None or _key(server, tool) in self.session:
            return self.remembers(server, tool)
        return await anyio.to_thread.run_sync(self.remembers, server, tool)

    async def keep(
        self, server: str, tool: str | None, scope: str, rule: str | None = None, channel: str | None = None
    ) -> None:
        """`remember`, off the event loop when it writes the shared file."""
        if scope == "always" and self.store is not None:
            await anyio.to_thread.run_sync(self.remember, server, tool, scope, rule, channel)
        else:
            self.remember(server, tool, scope, rule, channel)

    def remember(
        self, server: str, tool: str | None, scope: str, rule: str | None = None, channel: str | None = None
    ) -> None:
        """`always` goes to the store only (so a revoke reaches this proxy too), with the rule that
        asked, when and on which channel, for `mcp-sampling-proxy approvals list`."""
        key = _key(server, tool)
        if scope == "always" and self.store is not None:
            try:
                from mcp_sampling_proxy.quotas.integrity import sealed_entry

                entry = sealed_entry(
                    self._seal_key(),
                    APPROVAL,
                    {
                        "server": key[0],
                        "tool": key[1],
                        "rule": rule,
                        "channel": channel,
                        "at": datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z"),
                    },
                )

                def add(data: dict[str, Any]) -> None:
                    entries = data["always"] = [
                        old
                        for old in always_entries(data)  # an unsealed one is replaced
                        if always_key(old) != key
                    ]
                    entries.append(entry)

                self.store.update(add)
                self.forged.discard(key)
                return
            except OSError as exc:
                log.warning("cannot remember the approval beyond this session", error=str(exc))
        self.session.add(key)


APPROVAL = "approval"  # the seal's kind for a remembered approval (quotas/integrity.py)


def entry_is_sealed(key: bytes, kind: str, entry: Any) -> bool:
    from mcp_sampling_proxy.quotas.integrity import entry_is_sealed as check

    return check(key, kind, entry)


def always_entries(data: dict[str, Any]) -> list[Any]:
    """The stored `always` approvals; none when the file holds something else there."""
    entries = data.get("always")
    return entries if isinstance(entries, list) else []


def always_key(entry: Any) -> tuple[str, str] | None:
    """(server, tool) of a stored `always` approval: {"server", "tool", ...}, or an older [server, tool]."""
    if isinstance(entry, dict):
        server, tool = entry.get("server"), entry.get("tool")
    elif isinstance(entry, list) and len(entry) == 2:
        server, tool = entry
    else:
        return None
    return (server, tool) if isinstance(server, str) and isinstance(tool, str) else None


def _key(server: str, tool: str | None) -> tuple[str, str]:
    """Remembered approvals are keyed by the operator's name for the server (never the name it
    reports, which it could borrow), normalised as `server:` rules compare it."""
    return normalise(server), tool or ""


class Approver:
    def __init__(
        self, channels: list[Channel], *, timeout: float = DEFAULT_TIMEOUT, memory: ApprovalMemory | None = None
    ):
        self._channels = channels
        self._timeout = timeout
        self._memory = memory or ApprovalMemory()

    def _channel(self, relay: Relay, skip: Sequence[str] = ()) -> Channel | None:
        return next((c for c in self._channels if c.name not in skip and c.available(relay)), None)

    async def ask(self, request: ApprovalRequest, relay: Relay) -> Approval:
        remembered = await self._memory.recall(request.server, request.tool)
        if remembered:
            return Approval(True, "remembered", f"approved earlier for this {remembered}", "approved", remembered)
        gone: list[str] = []  # channels whose human went away before answering (a console quit)
        with anyio.move_on_after(self._timeout):
            while (channel := self._channel(relay, skip=gone)) is not None:
                try:
                    answer = await channel.ask(request, relay)
                except ConsoleGone:
                    log.info("the companion console went away before answering; trying the next channel")
                    gone.append(channel.name)
                    continue
                if answer.approved and answer.scope in ("session", "always"):
                    await self._memory.keep(request.server, request.tool, answer.scope, request.rule, answer.channel)
                return self._noting_forgery(request, answer)
            why = (
                (
                    f"the {' and the '.join(gone)} went away before answering, and no other approval channel is "
                    "available; denied"
                )
                if gone
                else NO_CHANNEL_HINT
            )
            refused = Approval(
                False,
                gone[-1] if gone else None,
                f"approval required by policy rule '{request.rule}' but {why}",
                "rejected" if gone else "unavailable",
            )
            return self._noting_forgery(request, refused)
        channel = self._channel(relay, skip=gone) or next(c for c in self._channels if c.name == gone[-1])
        return Approval(
            False,
            channel.name,
            f"nobody answered the approval request on the {channel.name} within {self._timeout:g} s; "
            "denied (raise approval.timeout, or add an allow rule for this server)",
            "timeout",
        )

    def _noting_forgery(self, request: ApprovalRequest, approval: Approval) -> Approval:
        """The approval, its reason saying (for the audit record) when a forged remembered one was ignored."""
        if not self._memory.ignored(request.server, request.tool):
            return approval
        return replace(
            approval,
            reason=f"{approval.reason} (a remembered approval for this in approvals.json was "
            "not written by a proxy: ignored)",
        )

    async def review(self, request: ApprovalRequest, result: dict[str, Any], relay: Relay) -> Review:
        """Let a human check (and edit) the LLM's answer before the server gets it."""
        channel = self._channel(relay)
        if channel is None:
            return Review(False, result, "none")
        with anyio.move_on_after(self._timeout):
            try:
                return await channel.review(request, result, relay)
            except ConsoleGone:  # the reviewer went away: the answer was not approved for the server
                return Review(False, result, channel.name)
        return Review(False, result, channel.name)


SCOPES = {"y": "once", "yes": "once", "s": "session", "a": "always"}
APPROVE_PROMPT = "Allow this request? [y]es once, [s]ession, [a]lways for this server+tool, [e]dit prompt, [N]o: "


REFUSALS = ("", "n", "no")


async def approval_dialogue(
    params: dict[str, Any], ask: Any, say: Any, discard_typeahead: Any = None
) -> tuple[str | None, str | None]:
    """Ask yes/session/always/edit/no, wherever the human is (the proxy's terminal or the companion
    console). Returns (scope or None when refused, the new text of the last user message or None);
    the caller applies the text with `with_prompt`, which keeps the message's other blocks.

    Keys typed before the question was shown are thrown away first (`discard_typeahead`): a `y`
    typed while the console sat idle must not approve a request nobody has seen. An answer that is
    not one of the choices asks again instead of counting as No, and the outcome is said."""
    if discard_typeahead is not None:
        discard_typeahead()
    while True:
        answer = await ask(APPROVE_PROMPT)
        if answer is None:
            say("-> denied (end of input)")
            return None, None
        answer = answer.strip().lower()
        if answer == "e":
            why = prompt_not_editable(params)
            if why is not None:
                say(f"This prompt cannot be edited: {why}. Answer y, s, a or n")
                continue
            kept = kept_blocks(params)
            keeps = ""
            if kept:
                keeps = f" (its {', '.join(kept)} block{'s are' if len(kept) > 1 else ' is'} kept)"
            say(f"New text for the last user message{keeps}; end with a line holding only '.':")
            text = await read_block(ask)
            say("-> approved once, with your edited prompt")
            return "once", text
        if answer in SCOPES:
            say(f"-> approved ({SCOPE_WORDS[SCOPES[answer]]})")
            return SCOPES[answer], None
        if answer in REFUSALS:
            say("-> denied")
            return None, None
        say(f"'{strip_controls(answer)[:20]}' is not one of the choices: answer y, s, a, e or n")


SCOPE_WORDS = {"once": "once", "session": "for this session", "always": "always, for this server and tool"}


EDITORS = {"terminal": "at the terminal", "console": "at the companion console"}


async def review_dialogue(
    result: dict[str, Any], ask: Any, say: Any, *, prompt: str | None = None, prompt_edited_by: str | None = None
) -> tuple[bool, str | None]:
    """Show the prompt as it was sent to the LLM (`prompt`, a sanitised summary; marked when a human
    edited it) and the LLM's answer. Returns (send it?, the replacement text or None); the caller
    applies the text with `with_text`, which keeps the answer's other blocks."""
    if prompt:
        edited = ""
        if prompt_edited_by:
            edited = f" (edited {EDITORS.get(prompt_edited_by, 'by ' + one_line(prompt_edited_by, 40))})"
        say(f"The prompt as sent to the LLM{edited}:\n" + quote(prompt))
    say("The LLM answered:\n" + quote(result_text(result)))
    answer = ((await ask("Send this answer to the server? [Y]es, [e]dit, [n]o: ")) or "").strip().lower()
    if answer == "e":
        say("Replacement answer; end with a line holding only '.':")
        return True, await read_block(ask)
    return answer in ("", "y", "yes"), None


async def read_block(ask: Any) -> str:
    """Lines up to one holding only '.' (or the end of input)."""
    lines: list[str] = []
    while (line := await ask("")) not in (None, "."):
        lines.append(line)
    return "\n".join(lines)


class TerminalChannel:
    name = "terminal"

    def __init__(self, terminal: Terminal | None):
        self._terminal = terminal

    def available(self, relay: Relay) -> bool:
        return self._terminal is not None

    async def _ask(self, prompt: str) -> str | None:
        assert self._terminal is not None
        return await self._terminal.ask(prompt)  # stays the last thing on screen while it waits

    def _say(self, text: str) -> None:
        assert self._terminal is not None
        self._terminal.write(text + "\n")

    async def ask(self, request: ApprovalRequest, relay: Relay) -> Approval:
        terminal = self._terminal
        assert terminal is not None
        async with terminal.lock:
            try:
                terminal.write(
                    f"\nmcp-sampling-proxy: approval needed for server '{one_line(request.server, 120)}' "
                    f"(rule '{one_line(request.rule, 120)}'):\n" + quote(request.summary) + "\n"
                )
                scope, text = await approval_dialogue(request.params, self._ask, self._say, terminal.discard_typeahead)
            except BaseException:
                terminal.write("\n(request withdrawn or timed out: denied)\n")
                raise
        if scope is None:
            return Approval(False, self.name, "rejected at the terminal", "rejected")
        terminal.note_shown(request.summary)  # a typed reply right after need not repeat it
        if text is not None:
            return Approval(
                True,
                self.name,
                "approved with an edited prompt at the terminal",
                "approved",
                params=with_prompt(request.params, text),
            )
        return Approval(True, self.name, "approved at the terminal", "approved", scope)

    async def review(self, request: ApprovalRequest, result: dict[str, Any], relay: Relay) -> Review:
        assert self._terminal is not None
        async with self._terminal.lock:
            self._say("")
            accepted, text = await review_dialogue(
                result, self._ask, self._say, prompt=request.summary, prompt_edited_by=request.prompt_edited_by
            )
        return Review(accepted, result if text is None else with_text(result, text), self.name)


class ConsoleChannel:
    name = "console"

    def __init__(self, server: ConsoleServer):
        self._server = server

    def available(self, relay: Relay) -> bool:
        return self._server.available

    async def ask(self, request: ApprovalRequest, relay: Relay) -> Approval:
        # "edit": "prompt": answer an edit with the new text only (`prompt`); the proxy applies it.
        answer = await self._server.ask(
            {
                "type": "pending",
                "server": request.server,
                "host": request.host,
                "tool": request.tool,
                "rule": request.rule,
                "summary": request.summary,
                "params": request.params,
                "edit": "prompt",
            }
        )
        if answer.get("approve") is not True:  # a peer's "false" string must not approve
            return Approval(False, self.name, "rejected at the companion console", "rejected")
        scope = str(answer["scope"]) if answer.get("scope") in ("once", "session", "always") else "once"
        text = answer.get("prompt")
        if not isinstance(text, str) and isinstance(answer.get("params"), dict):
            # A console from before "edit": "prompt" sends the whole edited request: only its text is taken,
            # so a console can neither drop the request's images nor change anything else in it.
            index = last_user(answer["params"])
            text = None if index is None else text_of(answer["params"]["messages"][index].get("content"))
            if text is None:
                return Approval(
                    False, self.name, "the companion console sent an edited request without text; denied", "rejected"
                )
        if not isinstance(text, str):
            return Approval(True, self.name, "approved at the companion console", "approved", scope)
        try:
            edited = with_prompt(request.params, text)
        except ValueError as exc:
            return Approval(
                False, self.name, f"the companion console's edit was not applied ({exc}); denied", "rejected"
            )
        return Approval(
            True, self.name, "approved with an edited prompt at the companion console", "approved", scope, edited
        )

    async def review(self, request: ApprovalRequest, result: dict[str, Any], relay: Relay) -> Review:
        # "edit": "text": a replaced answer comes back as its new text only (`text`); the proxy applies it.
        answer = await self._server.ask(
            {
                "type": "review",
                "server": request.server,
                "tool": request.tool,
                "summary": request.summary,
                "prompt_edited_by": request.prompt_edited_by,
                "result": result,
                "edit": "text",
            }
        )
        text = answer.get("text")
        if not isinstance(text, str) and isinstance(answer.get("result"), dict):
            text = text_of(answer["result"].get("content"))  # a console from before "edit": "text"
        edited = with_text(result, text) if isinstance(text, str) else result
        return Review(answer.get("accept") is True, edited, self.name)


class HostChannel:
    """Ask the user through the host's own UI with a yes/no elicitation form."""

    name = "host"

    def available(self, relay: Relay) -> bool:
        caps = relay.session.host_capabilities.get("elicitation")
        return isinstance(caps, dict) and (not caps or "form" in caps)  # {} means form mode (2025-06-18)

    async def ask(self, request: ApprovalRequest, relay: Relay) -> Approval:
        tool = f" during tool call '{one_line(request.tool, 80)}'" if request.tool else ""
        response = await relay.request_host(
            "elicitation/create",
            {
                "message": f"mcp-sampling-proxy: server '{one_line(request.server, 80)}' asks to use an LLM{tool}. "
                f"What it sent (quoted):\n\n{quote(request.summary)}",
                "requestedSchema": {
                    "type": "object",
                    "properties": {
                        "approve": {"type": "boolean", "title": "Allow this LLM request?", "default": False},
                        "remember": {
                            "type": "boolean",
                            "title": "Allow this server's tool for the rest of the session",
                            "default": False,
                        },
                    },
                    "required": ["approve"],
                },
            },
        )
        result = jsonrpc.as_object(response.get("result"))
        content = jsonrpc.as_object(result.get("content"))
        if result.get("action") == "accept" and content.get("approve") is True:
            scope = "session" if content.get("remember") is True else "once"
            return Approval(True, self.name, "approved in the host", "approved", scope)
        error = response.get("error")
        why = (
            (jsonrpc.as_object(error).get("message") or one_line(str(error), 200))
            if "error" in response
            else result.get("action", "no answer")
        )
        return Approval(False, self.name, f"rejected in the host ({why})", "rejected")

    async def review(self, request: ApprovalRequest, result: dict[str, Any], relay: Relay) -> Review:
        response = await relay.request_host(
            "elicitation/create",
            {
                "message": f"mcp-sampling-proxy: the LLM answered server '{one_line(request.server, 80)}' "
                f"(quoted):\n\n{quote(result_text(result))}",
                "requestedSchema": {
                    "type": "object",
                    "properties": {
                        "send": {"type": "boolean", "title": "Send this answer to the server?", "default": True}
                    },
                    "required": ["send"],
                },
            },
        )
        answer = jsonrpc.as_object(response.get("result"))
        content = jsonrpc.as_object(answer.get("content"))
        return Review(answer.get("action") == "accept" and content.get("send") is True, result, self.name)


def build_channels(order: tuple[str, ...], terminal: Terminal | None, console: ConsoleServer | None) -> list[Channel]:
    by_name: dict[str, Channel] = {"terminal": TerminalChannel(terminal), "host": HostChannel()}
    if console is not None:
        by_name["console"] = ConsoleChannel(console)
    return [by_name[name] for name in order if name in by_name]
