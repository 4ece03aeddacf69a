"""What a request to `serve` must pass before anything reads it: its size; a POST's Content-Type; what it
accepts; and, on loopback, a Host and an Origin that name this endpoint (no DNS rebinding: a web page's
script cannot reach it by a name it controls).

The answers are those of the `mcp` SDK's Streamable HTTP transport, which clients and tests know: 413,
400 `Invalid Content-Type header`, 421 `Invalid Host header`, 403 `Invalid Origin header`.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping

from msgspec import Struct
from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from mcp_sampling_proxy.protocol import jsonrpc

JSON = "application/json"
EVENT_STREAM = "text/event-stream"


class RequestChecks(Struct, frozen=True):
    """Host and Origin values that name this endpoint; `rebinding` False checks neither (not on loopback)."""

    allowed_hosts: tuple[str, ...] = ()
    allowed_origins: tuple[str, ...] = ()
    rebinding: bool = False

    def refusal(self, headers: Mapping[str, str], *, is_post: bool) -> Response | None:
        """The answer that refuses the request, or None when it passes."""
        if is_post and not headers.get("content-type", "").lower().startswith(JSON):
            return Response("Invalid Content-Type header", status_code=400)
        if not self.rebinding:
            return None
        if headers.get("host") not in self.allowed_hosts:
            return Response("Invalid Host header", status_code=421)
        origin = headers.get("origin")
        if origin and origin not in self.allowed_origins:  # a request of no page has none
            return Response("Invalid Origin header", status_code=403)
        return None


def json_error(status: int, message: str, code: int = jsonrpc.INVALID_REQUEST) -> JSONResponse:
    """A JSON-RPC error body without an id, with the HTTP status that says what happened: how the endpoint
    and a session refuse a request they cannot take."""
    return JSONResponse({"jsonrpc": "2.0", "id": None, "error": {"code": code, "message": message}}, status_code=status)


def accepts(headers: Mapping[str, str]) -> tuple[bool, bool]:
    """(JSON, an event stream): what the Accept header takes, wildcards (RFC 9110) included."""
    types = {part.split(";")[0].strip().lower() for part in headers.get("accept", "").split(",")}
    anything = "*/*" in types
    return anything or bool(types & {JSON, "application/*"}), anything or bool(types & {EVENT_STREAM, "text/*"})


HEAD = "mcp_sampling_proxy.head"  # the scope's key for its headers by name (`head_of`)


def head_of(scope: Scope) -> dict[str, str]:
    """The request's headers by (lowercase) name, the first of each as Starlette's `Headers.get` finds it,
    read once for the checks and the endpoint: each Headers lookup walks and decodes the whole list again
    (eight of them were a twentieth of a 2026-07-28 call's CPU in `serve`)."""
    head: dict[str, str] | None = scope.get(HEAD)
    if head is None:
        pairs = reversed(scope["headers"])
        head = scope[HEAD] = {name.decode("latin-1"): value.decode("latin-1") for name, value in pairs}
    return head


BODY = "mcp_sampling_proxy.body"  # the scope's key for the request's whole body, read by `limit_body`


def body_of(scope: Scope) -> bytes:
    """The request's whole body, as `limit_body` read it (no second pass through Starlette's stream, a
    tenth of a stateless call's own work; its `receive` still gives it once, for an app that reads it so)."""
    body: bytes = scope[BODY]
    return body


def limit_body(app: ASGIApp, max_bytes: int) -> ASGIApp:
    """`app`, behind a 413 for a body over `max_bytes` (declared or sent): the body is read whole first, and
    kept in the scope under BODY (`body_of`) as well as replayed to `app`'s `receive`."""

    async def limited(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await app(scope, receive, send)
            return
        declared = head_of(scope).get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > max_bytes:
            await Response("Request body too large", status_code=413)(scope, receive, send)
            return
        body = bytearray()
        held: deque[Message] = deque()
        while True:
            message = await receive()
            if message["type"] != "http.request":
                held.append(message)  # the client went away before the end of its body
                break
            body += message.get("body", b"")
            if len(body) > max_bytes:
                await Response("Request body too large", status_code=413)(scope, receive, send)
                return
            if not message.get("more_body", False):
                break
        whole = scope[BODY] = bytes(body)
        held.appendleft({"type": "http.request", "body": whole, "more_body": False})

        async def replay() -> Message:
            return held.popleft() if held else await receive()

        await app(scope, replay, send)

    return limited
