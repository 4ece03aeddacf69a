"""The client side of MCP's Streamable HTTP transport, on bytes.

Why not the SDK's client: importing it loads the whole `mcp` package and its pydantic models, about
0.5 s on every start of a proxy with `--url` (a host that opens one connection per call paid it per
call), and it re-serialised every message (unknown envelope keys were lost). This one moves the
messages as they are and parses nothing but the envelope it must route by.

What it does, per the transport's spec (2025-11-25 and 2026-07-28): each outgoing message is a POST
(requests concurrently, in their own task; the handshake, notifications and responses in order);
an answer is JSON or a server-sent event stream, which is resumed with `Last-Event-ID` when it ends
before the response; `Mcp-Session-Id` from the handshake is sent back; after `initialized` a GET
stream carries the server's own messages; at the end the session is deleted. A 2026-era
cancellation closes the request's POST instead of being sent (the era has no notifications from
the client over HTTP). A redirect within the endpoint's origin that keeps the method is followed.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any
from urllib.parse import urljoin, urlsplit

import anyio
import anyio.abc
import httpx2
import orjson
from msgspec import Struct, field

from mcp_sampling_proxy.log import get_logger
from mcp_sampling_proxy.protocol import jsonrpc
from mcp_sampling_proxy.text.sanitize import one_line

log = get_logger("mcp_sampling_proxy.upstream")

SESSION_HEADER = "mcp-session-id"
VERSION_HEADER = "MCP-Protocol-Version"
CONNECTION_CLOSED = -32000
MAX_RECONNECTIONS = 2  # resumptions of one response stream after failures in a row
DEFAULT_RETRY_MS = 1000
MAX_REDIRECTS = 5
MODERN_VERSIONS = ("2026-07-28",)

Deliver = Callable[[bytes], None]


class Unreachable(Exception):
    """The server could not be reached: the session is over (the relay tells the host)."""


class TooLarge(Exception):
    """An answer over the message limit: refused before it is held whole."""


class _Post(Struct):
    scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)
    modern: bool = False


class StreamableHttpClient:
    """One Streamable HTTP session with the server at `url`; server messages go to `deliver` as bytes."""

    def __init__(
        self,
        url: str,
        client: httpx2.AsyncClient,
        deliver: Deliver,
        *,
        max_message: int,
        tg: anyio.abc.TaskGroup,
        on_unreachable: Callable[[BaseException], None],
        on_error_response: Callable[[Any, dict[str, Any]], bytes | None] | None = None,
    ):
        self.url = url
        self._client = client
        self._deliver = deliver
        self._max = max_message
        self._tg = tg
        self._on_unreachable = on_unreachable
        self._error_hook = on_error_response  # may replace an error answer (the OAuth login hint)
        self.session_id: str | None = None
        self._version: str | None = None  # the negotiated version, for messages that carry none
        self._posts: dict[Any, _Post] = {}
        self.delivering_for: Any = None  # while a request's stream delivers a message of the server's: its id

    # -- sending -----------------------------------------------------------------------------------
    async def send(self, message: dict[str, Any], line: bytes, headers: dict[str, str] | None) -> None:
        """Send one message (in the order `send` is called; requests then run concurrently)."""
        method = message.get("method")
        if method == "notifications/cancelled" and self._cancel_modern(message):
            return
        if method == "initialize":
            self._version = None  # a probe's version must not leak onto the handshake
        elif headers and VERSION_HEADER in headers:
            self._version = headers[VERSION_HEADER]
        if method is not None and "id" in message:
            post = _Post(modern=self._version in MODERN_VERSIONS)
            superseded = self._posts.get(message["id"])
            if superseded is not None:  # a reused id: the old POST must not answer for the new request
                superseded.scope.cancel()
            self._posts[message["id"]] = post
            if method == "initialize":  # the session id comes with its answer: nothing may overtake it
                await self._run_post(message, line, headers, post)
            else:
                self._tg.start_soon(self._run_post, message, line, headers, post)
            return
        await self._post(message, line, headers)
        if method == "notifications/initialized" and self.session_id:
            self._tg.start_soon(self._listen)

    def _cancel_modern(self, message: dict[str, Any]) -> bool:
        """2026-07-28 over HTTP: closing a request's stream is its cancellation; True when handled so."""
        request_id = jsonrpc.as_object(message.get("params")).get("requestId")
        post = self._posts.get(request_id) if jsonrpc.usable_id(request_id) else None
        if post is not None:
            if not post.modern:
                return False
            post.scope.cancel()
            return True
        return self._version in MODERN_VERSIONS

    async def _run_post(
        self, message: dict[str, Any], line: bytes, headers: dict[str, str] | None, post: _Post
    ) -> None:
        try:
            with post.scope:
                await self._post(message, line, headers)
        finally:
            if self._posts.get(message["id"]) is post:
                del self._posts[message["id"]]

    def _headers(
        self, extra: dict[str, str] | None = None, *, accept: str = "application/json, text/event-stream"
    ) -> dict[str, str]:
        headers = {"Accept": accept, "Content-Type": "application/json"}
        if self.session_id:
            headers[SESSION_HEADER] = self.session_id
        if self._version:
            headers[VERSION_HEADER] = self._version
        if extra:
            headers.update(extra)
        return headers

    async def _post(self, message: dict[str, Any], line: bytes, headers: dict[str, str] | None) -> None:
        request_id = message.get("id") if "method" in message else None
        is_request = request_id is not None
        try:
            async with self._stream("POST", self._headers(headers), content=line) as response:
                await self._answer(message, request_id if is_request else None, response)
        except Unreachable as exc:
            self._on_unreachable(exc.__cause__ or exc)
        except TooLarge as exc:
            if is_request:
                self._fail(request_id, jsonrpc.INTERNAL_ERROR, str(exc))
        except httpx2.HTTPError as exc:
            if is_request:
                self._fail(request_id, CONNECTION_CLOSED, f"the HTTP exchange failed: {_describe(exc)}")
            else:
                log.warning("upstream HTTP exchange failed", error=_describe(exc))

    @contextlib.asynccontextmanager
    async def _stream(
        self, method: str, headers: dict[str, str], content: bytes | None = None
    ) -> AsyncIterator[httpx2.Response]:
        """A request whose redirects are followed only within the endpoint's origin, keeping the method."""
        url = self.url
        for _ in range(MAX_REDIRECTS + 1):
            try:
                request = self._client.build_request(method, url, headers=headers, content=content)
                response = await self._client.send(request, stream=True)
            except (httpx2.ConnectError, httpx2.ConnectTimeout, OSError) as exc:
                raise Unreachable(str(exc)) from exc
            location = response.headers.get("location")
            if response.status_code in (307, 308) and location and _same_origin(self.url, urljoin(url, location)):
                await response.aclose()
                url = urljoin(url, location)
                continue
            try:
                yield response
            finally:
                await response.aclose()
            return
        raise httpx2.TooManyRedirects(f"more than {MAX_REDIRECTS} redirects")

    async def _answer(self, message: dict[str, Any], request_id: Any, response: httpx2.Response) -> None:
        status = response.status_code
        if status == 202:
            if request_id is not None:
                self._fail(request_id, jsonrpc.INVALID_REQUEST, "the server answered a request with 202 Accepted")
            return
        if 300 <= status < 400:
            where = response.headers.get("location", "?")
            if request_id is not None:
                self._fail(
                    request_id,
                    jsonrpc.INVALID_REQUEST,
                    f"the server redirected the request to {one_line(where, 200)}, outside its origin "
                    "or changing the method; not followed (use that URL)",
                )
            return
        if status >= 400:
            if request_id is not None:
                await self._refused(message, request_id, response)
            return
        if message.get("method") == "initialize":
            self.session_id = response.headers.get(SESSION_HEADER) or self.session_id
        if request_id is None:
            return
        kind = response.headers.get("content-type", "").lower()
        _check_encoding(response)
        if kind.startswith("application/json"):
            await self._follow_json(response, request_id)
        elif kind.startswith("text/event-stream"):
            await self._follow_events(response, request_id)
        else:
            self._fail(request_id, jsonrpc.INVALID_REQUEST, f"unexpected content type {one_line(kind, 80)!r}")

    async def _refused(self, message: dict[str, Any], request_id: Any, response: httpx2.Response) -> None:
        """A request answered with an HTTP error: its JSON-RPC error when the body holds one, else one
        that names the status."""
        status = response.status_code
        if response.headers.get("content-type", "").lower().startswith("application/json"):
            try:
                parsed = orjson.loads(await _read_bounded(response, 1024 * 1024))
            except (ValueError, TooLarge, httpx2.HTTPError):
                parsed = None
            if isinstance(parsed, dict) and isinstance(parsed.get("error"), dict):
                self._fail_with(request_id, parsed["error"])
                return
        if status == 404:
            if self.session_id is None:
                self._fail(request_id, jsonrpc.METHOD_NOT_FOUND, "Not Found (HTTP 404)")
            else:
                self._fail(request_id, jsonrpc.INVALID_REQUEST, "the server ended the session (HTTP 404)")
            return
        self._fail(request_id, jsonrpc.INTERNAL_ERROR, f"the server answered HTTP {status}")

    async def _follow_json(self, response: httpx2.Response, request_id: Any) -> None:
        """An application/json answer: one JSON value, or one message a line as the server writes them
        (the conformance suite's reference server streams a call's notifications and a
        subscriptions/listen so, and the SDK clients read it): each passed on as it comes, the
        request's response last."""
        lines = _json_lines(response, self._max)
        first = await anext(lines, None)
        if first is None:
            self._fail(request_id, jsonrpc.PARSE_ERROR, "the server's answer is empty")
            return
        line, ended = first
        if not ended:  # the whole body: one value
            self._deliver_body(line, request_id)
            return
        try:
            one_per_line = isinstance(orjson.loads(line), dict)
        except ValueError:
            one_per_line = False
        if not one_per_line:  # one value written over several lines
            body = [line]
            size = len(line)
            async for rest, _ in lines:
                size += len(rest) + 1
                if size > self._max:
                    raise TooLarge(
                        f"the server's answer is over the proxy's limit of {self._max:,} bytes (--max-message-bytes)"
                    )
                body.append(rest)
            self._deliver_body(b"\n".join(body), request_id)
            return
        while True:
            if line.strip() and self._event(line, request_id):
                return
            following = await anext(lines, None)
            if following is None:
                break
            line = following[0]
        self._fail(request_id, CONNECTION_CLOSED, "the server's answer ended without a response")

    def _deliver_body(self, body: bytes, request_id: Any) -> None:
        try:
            parsed = orjson.loads(body)
        except ValueError as exc:
            self._fail(request_id, jsonrpc.PARSE_ERROR, f"the server's answer is not JSON ({exc})")
            return
        if isinstance(parsed, dict) and "method" not in parsed and parsed.get("id") is None and "error" in parsed:
            self._fail_with(request_id, parsed["error"])  # an error about an unreadable request: it is ours
            return
        self._deliver(body)

    # -- server-sent events --------------------------------------------------------------------------
    async def _follow_events(self, response: httpx2.Response, request_id: Any) -> None:
        """Pass on the events of a request's stream until its response; resume the stream when it ends first."""
        resume = _Resume()
        if await self._read_events(response, request_id, resume):
            return
        while True:
            if resume.last_id is None:
                self._fail(request_id, CONNECTION_CLOSED, "the server's event stream ended without a response")
                return
            if resume.failures > MAX_RECONNECTIONS:
                self._fail(request_id, CONNECTION_CLOSED, "the server's event stream ended and could not be resumed")
                return
            await anyio.sleep((resume.retry_ms if resume.retry_ms is not None else DEFAULT_RETRY_MS) / 1000)
            headers = self._headers({"Last-Event-ID": resume.last_id}, accept="text/event-stream")
            try:
                async with self._stream("GET", headers) as resumed:
                    if resumed.status_code >= 400 or not _is_event_stream(resumed):
                        resume.failures += 1
                        continue
                    if await self._read_events(resumed, request_id, resume):
                        return
            except httpx2.HTTPError as exc:
                resume.failures += 1
                log.debug("upstream event stream could not be resumed", error=_describe(exc))

    async def _read_events(self, response: httpx2.Response, request_id: Any, resume: _Resume) -> bool:
        """Read one event stream; True when the request is answered (or failed), False to resume."""
        try:
            async for event in _events(response, self._max):
                resume.last_id = event.id or resume.last_id
                resume.retry_ms = event.retry if event.retry is not None else resume.retry_ms
                if event.data and self._event(event.data, request_id):
                    return True
        except TooLarge as exc:
            self._fail(request_id, jsonrpc.INTERNAL_ERROR, str(exc))
            return True
        except httpx2.HTTPError as exc:
            resume.failures += 1
            log.debug("upstream event stream broke", error=_describe(exc))
            return False
        resume.failures = 0
        return False

    def _event(self, data: bytes, request_id: Any) -> bool:
        """One event's message, passed on; True when it is the response the stream was for."""
        try:
            parsed = orjson.loads(data)
        except ValueError:
            self._deliver(data)  # the relay answers what it cannot parse
            return False
        if isinstance(parsed, dict) and "method" not in parsed and ("result" in parsed or "error" in parsed):
            if request_id is not None and parsed.get("id") != request_id:
                parsed["id"] = request_id  # a response on a request's stream answers that request
                data = jsonrpc.dumps(parsed)
            self._deliver(data)
            return request_id is not None
        self.delivering_for = request_id  # whose request this belongs to (a shared upstream routes by it)
        try:
            self._deliver(data)
        finally:
            self.delivering_for = None
        return False

    async def _listen(self) -> None:
        """The GET stream for the server's own messages (handshake era), resumed when it ends."""
        last_id: str | None = None
        retry_ms: int | None = None
        failures = 0
        while failures <= MAX_RECONNECTIONS and self.session_id:
            headers = self._headers({"Last-Event-ID": last_id} if last_id else None, accept="text/event-stream")
            try:
                async with self._stream("GET", headers) as response:
                    if response.status_code >= 400 or not _is_event_stream(response):
                        return  # 405: the server offers no such stream
                    async for event in _events(response, self._max):
                        last_id = event.id or last_id
                        retry_ms = event.retry if event.retry is not None else retry_ms
                        if event.data:
                            self._event(event.data, None)
                    failures = 0
            except (httpx2.HTTPError, TooLarge, Unreachable) as exc:
                failures += 1
                log.debug("upstream GET stream broke", error=str(exc))
            await anyio.sleep((retry_ms if retry_ms is not None else DEFAULT_RETRY_MS) / 1000)

    # -- end ------------------------------------------------------------------------------------------
    async def close(self) -> None:
        """End the session at the server (handshake era), if it had one."""
        if not self.session_id:
            return
        try:
            with anyio.move_on_after(2.0):
                async with self._stream("DELETE", self._headers()) as response:
                    if response.status_code not in (200, 202, 204, 405):
                        log.debug("the server did not end the session", status=response.status_code)
        except (httpx2.HTTPError, Unreachable) as exc:
            log.debug("ending the session failed", error=str(exc))

    # -- errors for the request's waiter ---------------------------------------------------------------
    def _fail(self, request_id: Any, code: int, text: str) -> None:
        self._fail_with(request_id, {"code": code, "message": text})

    def _fail_with(self, request_id: Any, error: dict[str, Any]) -> None:
        replaced = self._error_hook(request_id, error) if self._error_hook is not None else None
        self._deliver(replaced or jsonrpc.dumps({"jsonrpc": "2.0", "id": request_id, "error": error}))


class _Resume(Struct):
    last_id: str | None = None  # the last event id seen: where a resumed stream starts
    retry_ms: int | None = None  # the server's reconnection delay
    failures: int = 0  # failed resumptions in a row


class Event(Struct):
    data: bytes
    id: str | None
    retry: int | None


async def _events(response: httpx2.Response, limit: int) -> AsyncIterator[Event]:
    """The server-sent events of a response (the `message` ones; others are ignored), each bounded by `limit`."""
    data: list[bytes] = []
    size = 0
    event_id: str | None = None
    retry: int | None = None
    kind = b""
    pending = b""
    async for chunk in response.aiter_bytes():
        pending += chunk
        lines = pending.replace(b"\r\n", b"\n").replace(b"\r", b"\n").split(b"\n")
        pending = lines.pop()
        if len(pending) > limit:
            raise TooLarge(
                f"an event from the server is over the proxy's limit of {limit:,} bytes (--max-message-bytes)"
            )
        for line in lines:
            if not line:  # the end of an event
                if data and kind in (b"", b"message"):
                    yield Event(b"\n".join(data), event_id, retry)
                elif not data and event_id is not None and kind in (b"", b"message"):
                    yield Event(b"", event_id, retry)  # a priming event: an id to resume from
                data, size, kind, retry = [], 0, b"", None
                continue
            if line.startswith(b":"):
                continue
            name, _, value = line.partition(b":")
            value = value[1:] if value.startswith(b" ") else value
            if name == b"data":
                size += len(value) + 1
                if size > limit:
                    raise TooLarge(
                        f"an event from the server is over the proxy's limit of {limit:,} bytes (--max-message-bytes)"
                    )
                data.append(value)
            elif name == b"event":
                kind = value
            elif name == b"id" and b"\0" not in value:
                event_id = value.decode("utf-8", "replace")
            elif name == b"retry" and value.isdigit():
                retry = int(value)


async def _json_lines(response: httpx2.Response, limit: int) -> AsyncIterator[tuple[bytes, bool]]:
    """The lines of a body as they arrive, each with whether a newline ended it (only the last may
    not), each bounded by `limit`."""
    parts: list[bytes] = []
    size = 0
    async for chunk in response.aiter_bytes():
        start = 0
        while True:
            end = chunk.find(b"\n", start)
            piece = chunk[start:] if end == -1 else chunk[start:end]
            size += len(piece)
            if size > limit:
                raise TooLarge(
                    f"a message from the server is over the proxy's limit of {limit:,} bytes (--max-message-bytes)"
                )
            parts.append(piece)
            if end == -1:
                break
            yield b"".join(parts), True
            parts, size, start = [], 0, end + 1
    if size:
        yield b"".join(parts), False


async def _read_bounded(response: httpx2.Response, limit: int) -> bytes:
    parts: list[bytes] = []
    size = 0
    async for chunk in response.aiter_bytes():
        size += len(chunk)
        if size > limit:
            raise TooLarge(f"the server's answer is over the proxy's limit of {limit:,} bytes (--max-message-bytes)")
        parts.append(chunk)
    return b"".join(parts)


def _check_encoding(response: httpx2.Response) -> None:
    """A compressed answer is refused before a byte is inflated (200 KB of gzip are 200 MB); the proxy asks for none."""
    encoding = response.headers.get("content-encoding", "").strip().lower()
    if encoding not in ("", "identity"):
        raise TooLarge(
            f"the server answered with content-encoding {one_line(encoding, 40)!r} although the proxy "
            "asks for none (a compressed body can inflate past --max-message-bytes)"
        )


def _is_event_stream(response: httpx2.Response) -> bool:
    return response.headers.get("content-type", "").lower().startswith("text/event-stream")


def _same_origin(a: str, b: str) -> bool:
    first, second = urlsplit(a), urlsplit(b)
    return (first.scheme, first.hostname, first.port) == (second.scheme, second.hostname, second.port)


def _describe(exc: BaseException) -> str:
    return str(exc) or type(exc).__name__
