"""The web console's HTTP side: an ASGI app that checks every request, serves the page and its API, and
carries a human's answers to the proxies.

It runs on the event loop that talks to the proxies (`ConsoleClient`: the same sockets, peer checks and
validated messages as the terminal console), served by uvicorn as `serve` is (front/http_server.py), so an
answer goes to its proxy without leaving the loop.

Who may use the page: whoever holds the URL. The server listens on 127.0.0.1 only, every request
(the page, its script, the event stream, the API) must carry the random token in its path
(compared in constant time), the Host header must be 127.0.0.1:PORT or localhost:PORT (a DNS
rebinding page has its own host name there), an Origin header, when sent, must be this server's,
nothing changes state on GET, and POSTs must be `application/json` (a cross-site form cannot send
that without a CORS preflight, which this server never grants). Responses carry a strict
Content-Security-Policy: scripts and styles from this origin only, images only as data: URLs.
"""

from __future__ import annotations

import contextlib
import hmac
import json
import secrets
from collections.abc import AsyncGenerator, Mapping
from importlib import resources
from typing import Any
from urllib.parse import parse_qs

import anyio
import anyio.to_thread
from starlette.types import Message, Receive, Scope, Send

from mcp_sampling_proxy.approval import edits
from mcp_sampling_proxy.approval.channels import person_of
from mcp_sampling_proxy.approval.console.client import ConsoleClient, decision_reply, elicit_reply, review_reply
from mcp_sampling_proxy.approval.console.messages import ConsoleMessage, ConsoleReply
from mcp_sampling_proxy.approval.forms import FormError, parse_form, validate_content
from mcp_sampling_proxy.approval.url_safety import analyze_url
from mcp_sampling_proxy.front.web_console.state import WebState, audit_view, usage_view
from mcp_sampling_proxy.protocol.wire_types import ElicitResult
from mcp_sampling_proxy.system.browser import open_url
from mcp_sampling_proxy.text.sanitize import one_line

STATIC = {
    "": ("index.html", "text/html; charset=utf-8"),
    "app.js": ("app.js", "text/javascript; charset=utf-8"),
    "style.css": ("style.css", "text/css; charset=utf-8"),
}
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src data:; connect-src 'self'; "
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
SECURITY_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
    "X-Frame-Options": "DENY",
    "Cross-Origin-Resource-Policy": "same-origin",
}
MAX_BODY = 4 * 1024 * 1024
EVENT_INTERVAL = 0.1  # s; the least time between two events to one page
KEEP_ALIVE = 15.0  # s between two comments on a quiet event stream
SOCKET_TIMEOUT = 60.0  # s a peer may take to send a request (or to read an event); longer than KEEP_ALIVE
SCOPES = ("once", "session", "always")
MAX_NAME = 64  # characters of the name a person gives on the page


class Refused(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


class WebConsole:
    """The page's server: checks every request, serves the page and the API, sends answers to proxies.
    An ASGI app (`__call__`) for a server listening on 127.0.0.1:`port`."""

    def __init__(
        self,
        state: WebState,
        client: ConsoleClient,
        port: int,
        token: str | None = None,
        socket_timeout: float = SOCKET_TIMEOUT,
    ):
        self.state = state
        self.client = client
        self.port = port
        self.token = token or secrets.token_urlsafe(32)
        self.socket_timeout = socket_timeout
        self.stopping = False  # the console quits: the event streams end

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/{self.token}/"

    async def stop(self) -> None:
        """End the event streams, so that the server's stop need not wait for them."""
        self.stopping = True
        self.state.wake()

    def check(self, method: str, path: str, headers: Mapping[str, str]) -> str:
        """The path below the token, when the request may be served; Refused otherwise. `headers` are
        looked up by their lower-case names."""
        host = headers.get("host", "")
        if host not in (f"127.0.0.1:{self.port}", f"localhost:{self.port}"):
            raise Refused(421, "wrong Host header: open the page at the URL `console --web` printed")
        origin = headers.get("origin")
        if origin is not None and origin not in (f"http://127.0.0.1:{self.port}", f"http://localhost:{self.port}"):
            raise Refused(403, "requests from other sites are refused")
        if headers.get("sec-fetch-site") not in (None, "same-origin", "none"):
            raise Refused(403, "requests from other sites are refused")
        parts = path.split("/", 2)  # "", TOKEN, rest
        given = parts[1] if len(parts) > 1 else ""
        if not hmac.compare_digest(given.encode(), self.token.encode()):
            raise Refused(403, "this page needs the token in the URL that `mcp-sampling-proxy console --web` printed")
        if len(parts) < 3:
            raise Refused(404, "not found")
        if method == "POST":
            media = headers.get("content-type", "").split(";")[0].strip().lower()
            if media != "application/json":
                raise Refused(415, "POST needs Content-Type: application/json")
        return parts[2]

    # -- answers -------------------------------------------------------------------------------------

    async def answer(self, body: dict[str, Any]) -> dict[str, Any]:
        """Apply a human's answer from the page to a pending question; Refused when it cannot be."""
        key = body.get("key")
        if not isinstance(key, str):
            raise Refused(400, "missing 'key'")
        found = self.state.questions.get(key)
        if found is None:
            raise Refused(409, "this request is no longer pending (answered elsewhere, withdrawn or timed out)")
        path, message = found
        reply = self._reply(message, body)  # checks the answer; no side effect yet
        # Claim the question once: of two answers racing (two tabs), only the first is sent.
        if self.client.is_resolved(path, message["id"]) or self.state.take(key) is None:
            raise Refused(409, "answered elsewhere or timed out meanwhile; your answer was not used")
        if message["type"] == "elicit" and message.get("mode") == "url" and reply.get("action") == "accept":
            # only for the answer that was used; an opener command may take its time
            await anyio.to_thread.run_sync(open_url, message.get("url") or "")
        if not await self.client.send(path, reply):
            raise Refused(410, "the proxy is gone")
        return {"ok": True}

    def _reply(self, message: ConsoleMessage, body: dict[str, Any]) -> ConsoleReply:
        action = body.get("action")
        text = body.get("text")
        if text is not None and not isinstance(text, str):
            raise Refused(400, "'text' must be a string")
        if message["type"] == "pending":
            approver = self._approver(message, body.get("approver"), action)
            if action == "deny":
                return decision_reply(message, None, None, approver)
            scope = body.get("scope", "once")
            if action != "approve" or scope not in SCOPES:
                raise Refused(400, "answer a request with action approve (scope once, session or always) or deny")
            if text is not None and message.get("quorum"):
                raise Refused(400, "under a quorum every approver must see what runs: approve it unedited, or deny it")
            if text is not None:
                why = edits.prompt_not_editable(message.get("params") or {})
                if why is not None:
                    raise Refused(400, f"this prompt cannot be edited: {why}")
                scope = "once"  # an edited prompt is approved once, as on the terminal
            return decision_reply(message, scope, text, approver)
        if message["type"] == "review":
            if action not in ("send", "reject"):
                raise Refused(400, "answer a review with action send or reject")
            return review_reply(message, action == "send", text if action == "send" else None)
        return elicit_reply(message, self._elicitation(message, action, body.get("content")))

    @staticmethod
    def _approver(message: ConsoleMessage, name: Any, action: Any) -> str | None:
        """The name the person gave on the page (kept per browser tab): a convenience that tells approvers
        apart under a quorum on a page only the URL's holder can open, not authentication."""
        if name is not None and (not isinstance(name, str) or len(name) > MAX_NAME):
            raise Refused(400, f"'approver' must be a name of at most {MAX_NAME} characters")
        given: str = one_line(name, MAX_NAME).strip() if isinstance(name, str) else ""
        quorum = message.get("quorum")
        if not isinstance(quorum, dict) or action != "approve":
            return given or None
        needed = quorum.get("needed")
        if not given:
            raise Refused(400, f"this request needs {needed} different approvers: enter your name at the top first")
        approved_by = quorum.get("approved_by")
        if isinstance(approved_by, list) and any(
            isinstance(who, str) and person_of(who) == person_of(f"console:{given}") for who in approved_by
        ):  # on this page or through another channel (a webhook approver of the same name)
            raise Refused(409, f"{given} approved this already; it needs an approval from someone else")
        return given

    @staticmethod
    def _elicitation(message: ConsoleMessage, action: Any, content: Any) -> ElicitResult:
        if action in ("decline", "cancel"):
            return {"action": action}
        if message["mode"] == "url":
            if action != "open":
                raise Refused(400, "answer a link with action open, decline or cancel")
            url = message.get("url") or ""
            if not analyze_url(url).ok:
                raise Refused(400, "this URL is not safe to open; decline it")
            return {"action": "accept"}  # opened by `answer` once the question is claimed
        if action != "accept":
            raise Refused(400, "answer a form with action accept (with content), decline or cancel")
        try:
            form = parse_form(message.get("schema") or {})
        except FormError as exc:
            raise Refused(400, f"this form cannot be answered: {exc}; decline it") from None
        if not isinstance(content, dict):
            raise Refused(400, "'content' must be an object")
        content = {k: v for k, v in content.items() if v is not None}
        problems = validate_content(form, content)
        if problems:
            raise Refused(422, "; ".join(problems))
        return {"action": "accept", "content": content}

    # -- the event stream ----------------------------------------------------------------------------

    async def events(self) -> AsyncGenerator[bytes, None]:
        """The event stream: a state event now and whenever something changes, keep-alives between;
        it ends when the console quits."""
        seen = -1
        audit = -1
        while not self.stopping:
            await self.state.changed((seen, audit), KEEP_ALIVE)
            if self.stopping:
                return
            version, count = self.state.version, self.state.audit_count
            if (version, count) == (seen, audit):
                yield b": keep-alive\n\n"
                continue
            if version != seen:
                snapshot = await self.state.snapshot()
                seen = snapshot["version"]
                yield b"event: state\ndata: " + json.dumps(snapshot).encode() + b"\n\n"
            if count != audit:
                audit = count
                yield b"event: audit\ndata: " + json.dumps({"count": count}).encode() + b"\n\n"
            await anyio.sleep(EVENT_INTERVAL)  # a burst of changes becomes one event per interval, not one per change

    # -- HTTP ----------------------------------------------------------------------------------------

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return  # no lifespan, no websockets
        method = scope["method"]
        if method not in ("GET", "POST"):
            return await _json(send, 405, {"error": "method not allowed"})
        # the first of a repeated header counts, as a browser sends it
        headers = {name.decode("latin-1").lower(): value.decode("latin-1") for name, value in scope["headers"][::-1]}
        try:
            route = self.check(method, scope.get("raw_path", scope["path"].encode()).decode("latin-1"), headers)
            if method == "POST":
                if route != "api/answer":
                    raise Refused(404, "not found")
                return await _json(send, 200, await self.answer(await self._body(headers, receive)))
        except Refused as exc:
            return await _json(send, exc.status, {"error": str(exc)})
        query = parse_qs(scope["query_string"].decode("latin-1"))
        if route in STATIC:
            name, content_type = STATIC[route]
            body = resources.files(__package__).joinpath("page", name).read_bytes()
            return await _respond(send, 200, body, content_type)
        if route == "api/state":
            return await _json(send, 200, await self.state.snapshot())
        if route == "api/audit":
            return await _json(send, 200, audit_view(self.state, query))
        if route == "api/usage":
            return await _json(send, 200, await usage_view(self.state, query))
        if route == "api/events":
            return await self._stream(receive, send)
        return await _json(send, 404, {"error": "not found"})

    async def _body(self, headers: Mapping[str, str], receive: Receive) -> dict[str, Any]:
        """The POST's JSON object, of the length it declared; Refused otherwise."""
        declared = headers.get("content-length") or "0"
        length = int(declared) if declared.isascii() and declared.isdigit() else -1
        if not 0 < length <= MAX_BODY:
            raise Refused(413, f"the body must be 1 to {MAX_BODY} bytes")
        chunks: list[bytes] = []
        with anyio.move_on_after(self.socket_timeout):
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    raise Refused(400, "the body did not arrive")
                chunks.append(message.get("body", b""))
                if not message.get("more_body"):
                    break
            try:
                body = json.loads(b"".join(chunks))
            except ValueError:
                raise Refused(400, "the body is not JSON") from None
            if not isinstance(body, dict):
                raise Refused(400, "the body must be a JSON object")
            return body
        raise Refused(408, f"the body did not arrive within {self.socket_timeout:g} s")

    async def _stream(self, receive: Receive, send: Send) -> None:
        """The event stream, until the page goes away, stops reading for `socket_timeout`, or the console quits."""
        await send({"type": "http.response.start", "status": 200, "headers": response_headers("text/event-stream")})
        async with anyio.create_task_group() as tg:

            async def gone() -> None:
                while (await receive())["type"] != "http.disconnect":
                    pass
                tg.cancel_scope.cancel()

            tg.start_soon(gone)
            async with contextlib.aclosing(self.events()) as chunks:
                async for chunk in chunks:
                    with anyio.move_on_after(self.socket_timeout) as waited:
                        await send({"type": "http.response.body", "body": chunk, "more_body": True})
                    if waited.cancelled_caught:  # the page stopped reading: its connection is dropped
                        tg.cancel_scope.cancel()
                        return
            await send({"type": "http.response.body", "body": b"", "more_body": False})
            tg.cancel_scope.cancel()


def response_headers(content_type: str, length: int | None = None) -> list[tuple[bytes, bytes]]:
    """Every response's headers: its type and length, and the security headers."""
    names = {"Server": "mcp-sampling-proxy", "Content-Type": content_type, **SECURITY_HEADERS}
    if length is not None:
        names["Content-Length"] = str(length)
    return [(name.lower().encode(), value.encode()) for name, value in names.items()]


async def _respond(send: Send, status: int, body: bytes, content_type: str) -> None:
    start: Message = {
        "type": "http.response.start",
        "status": status,
        "headers": response_headers(content_type, len(body)),
    }
    await send(start)
    await send({"type": "http.response.body", "body": body})


async def _json(send: Send, status: int, value: Any) -> None:
    await _respond(send, status, json.dumps(value).encode(), "application/json")
