"""Elicitation on a console: forms field by field, URLs with their host shown plainly.

Two consoles: the proxy's terminal, and the companion console (`mcp-sampling-proxy console`),
which renders the same form on its side and sends the content back; the proxy validates it
again. Accept, decline and cancel are always one keystroke away. Server text is sanitised.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any, Literal, Protocol, cast

import anyio

from mcp_sampling_proxy.approval.console.server import ConsoleGone
from mcp_sampling_proxy.protocol.wire_types import ElicitRequestParams, ElicitResult, ElicitValue
from mcp_sampling_proxy.text.sanitize import one_line, quote, strip_controls

if TYPE_CHECKING:
    from mcp_sampling_proxy.approval.console.server import ConsoleServer
    from mcp_sampling_proxy.system.terminal import Terminal

Origin = tuple[str, str | None]  # (the server as shown, quoted: Session.server_label; tool call)
Action = Literal["accept", "decline", "cancel"]
ACTIONS: dict[str, Action] = {"a": "accept", "d": "decline", "c": "cancel"}


class Elicitor(Protocol):
    name: str

    async def ask_form(self, params: ElicitRequestParams, form: Any, origin: Origin) -> ElicitResult: ...

    async def ask_url(
        self, params: ElicitRequestParams, origin: Origin, opener: Callable[[str], bool]
    ) -> ElicitResult: ...


def heading(message: str, origin: Origin) -> str:
    server, tool = origin
    call = f" during tool call '{one_line(tool, 120)}'" if tool else " (no host request in flight)"
    return f"\nServer {one_line(server, 300)} asks{call}:\n{quote(message)}"  # server: the label, quoted


def url_lines(url: str) -> list[str]:
    from mcp_sampling_proxy.approval.url_safety import analyze_url  # start-up: a few ms, only URL requests need it

    report = analyze_url(url)
    lines = [f"  URL:  {strip_controls(report.url)}", f"  host: >>> {strip_controls(report.host or '?')} <<<"]
    lines += [f"  WARNING: {strip_controls(w)}" for w in report.warnings]
    return lines


async def fill_form(
    form: Any, ask: Callable[[str], Any], say: Callable[[str], None]
) -> dict[str, ElicitValue] | Action:
    """Ask each field until its answer is valid; returns the content, or 'decline'/'cancel'.

    `ask(prompt)` returns the typed line (None at end of input). Typing `!d` or `!c` at any field
    declines or cancels the whole form."""
    # start-up: forms costs ~30 ms, only form requests need it
    from mcp_sampling_proxy.approval.forms import FieldError, parse_answer, prepare

    await anyio.to_thread.run_sync(prepare)  # the checks' first import, off the event loop
    content: dict[str, ElicitValue] = {}
    for field in form.fields:
        while True:
            line = await ask(field.prompt_text() + ": ")
            if line is None:
                return "cancel"
            if line.strip() in ("!d", "!c"):
                return ACTIONS[line.strip()[1]]
            try:
                value = parse_answer(field, line)
            except FieldError as exc:
                say(f"  ! {strip_controls(str(exc))}")
                continue
            if value is not None:
                content[field.name] = value
            break
    return content


async def converse(
    message: str,
    origin: Origin,
    *,
    form: Any = None,
    url: str | None = None,
    ask: Callable[[str], Any],
    say: Callable[[str], None],
    opener: Callable[[str], bool],
) -> ElicitResult:
    """The whole elicitation dialogue, wherever it runs (the proxy's terminal or the companion
    console): the question, then the form field by field, or the URL and consent to open it.

    `ask(prompt)` returns the typed line (None at end of input); `say(text)` shows one line."""
    say(heading(message, origin))
    if url is not None:
        from mcp_sampling_proxy.approval.url_safety import analyze_url  # start-up: a few ms, only URL requests need it

        for line in url_lines(url):
            say(line)
        choice = ((await ask("[o]pen it in your browser, [d]ecline, [c]ancel: ")) or "c").strip().lower()[:1]
        if choice != "o":
            return {"action": ACTIONS.get(choice, "cancel")}
        if not analyze_url(url).ok:
            say("(this URL is not safe to open; declined)")
            return {"action": "decline"}
        opener(url)
        return {"action": "accept"}
    choice = ((await ask("[a]nswer the form, [d]ecline, [c]ancel: ")) or "c").strip().lower()[:1]
    if choice != "a":
        return {"action": ACTIONS.get(choice, "cancel")}
    say("(press Enter for the default; !d declines, !c cancels)")
    content = await fill_form(form, ask, say)
    if isinstance(content, str):
        return {"action": content}
    return {"action": "accept", "content": content}


class TerminalElicitor:
    name = "terminal"

    def __init__(self, terminal: Terminal):
        self._terminal = terminal

    async def _ask(self, prompt: str) -> str | None:
        return await self._terminal.ask(prompt)  # stays the last thing on screen while it waits

    def _say(self, text: str) -> None:
        self._terminal.write(text + "\n")

    async def ask_form(self, params: ElicitRequestParams, form: Any, origin: Origin) -> ElicitResult:
        self._terminal.announce_turn(f"a form from server {one_line(origin[0], 300)}")
        async with self._terminal.lock, self._closing():
            return await converse(
                str(params.get("message", "")),
                origin,
                form=form,
                ask=self._ask,
                say=self._say,
                opener=lambda _url: False,
            )

    async def ask_url(self, params: ElicitRequestParams, origin: Origin, opener: Callable[[str], bool]) -> ElicitResult:
        self._terminal.announce_turn(f"a link from server {one_line(origin[0], 300)}")
        async with self._terminal.lock, self._closing():
            return await converse(
                str(params.get("message", "")),
                origin,
                url=str(params.get("url", "")),
                ask=self._ask,
                say=self._say,
                opener=opener,
            )

    @contextlib.asynccontextmanager
    async def _closing(self) -> AsyncIterator[None]:
        """Say so when the question is withdrawn while it is shown (the host cancelled the request)."""
        try:
            yield
        except anyio.get_cancelled_exc_class():
            self._say(
                "(question withdrawn: the host cancelled the request, or the proxy is stopping; "
                "this question is closed)"
            )
            raise


class CompanionElicitor:
    name = "console"

    def __init__(self, server: ConsoleServer):
        self._server = server

    async def ask_form(self, params: ElicitRequestParams, form: Any, origin: Origin) -> ElicitResult:
        # start-up: forms costs ~30 ms, only form requests need it
        from mcp_sampling_proxy.approval.forms import prepare, validate_content

        await anyio.to_thread.run_sync(prepare)  # the checks' first import, off the event loop
        try:
            answer = await self._server.ask(
                {
                    "type": "elicit",
                    "mode": "form",
                    "server": origin[0],
                    "host": self._server.host_name(),
                    "tool": origin[1],
                    "message": params.get("message"),
                    "schema": schema if isinstance(schema := params.get("requestedSchema"), dict) else None,
                }
            )
        except ConsoleGone:  # the user quit the console: as if the form was dismissed
            return {"action": "cancel"}
        action = _action(answer.get("action"))
        if action != "accept":
            return {"action": action}
        content = answer.get("content") if isinstance(answer.get("content"), dict) else {}
        if validate_content(form, content):
            return {"action": "decline"}  # the console validates per field; a bad answer here is refused
        return {"action": "accept", "content": cast(dict[str, ElicitValue], content)}  # validated: the form's values

    async def ask_url(self, params: ElicitRequestParams, origin: Origin, opener: Callable[[str], bool]) -> ElicitResult:
        # The companion console runs on the user's side and opens the URL there, after consent.
        try:
            answer = await self._server.ask(
                {
                    "type": "elicit",
                    "mode": "url",
                    "server": origin[0],
                    "host": self._server.host_name(),
                    "tool": origin[1],
                    "message": params.get("message"),
                    "url": url if isinstance(url := params.get("url"), str) else None,
                }
            )
        except ConsoleGone:
            return {"action": "cancel"}
        return {"action": _action(answer.get("action"))}


def _action(value: object) -> Action:
    """A console's elicitation action: accept, decline or cancel (anything else is a cancel)."""
    if value == "accept" or value == "decline":
        return value
    return "cancel"


class ElicitationConsoles:
    """The consoles in the order of `approval.channels` (terminal, console)."""

    def __init__(self, order: tuple[str, ...], terminal: Terminal | None, server: ConsoleServer | None):
        self._order = order
        self._terminal = TerminalElicitor(terminal) if terminal is not None else None
        self._server = server
        self._companion = CompanionElicitor(server) if server is not None else None

    def available(self) -> Elicitor | None:
        for name in self._order:
            if name == "terminal" and self._terminal is not None:
                return self._terminal
            if (
                name == "console"
                and self._companion is not None
                and self._server is not None
                and self._server.available
            ):
                return self._companion
        return None
