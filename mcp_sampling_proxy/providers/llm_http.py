"""The HTTP client the LLM adapters call their providers with: aiohttp's, behind a narrow seam (`LlmHttp.post`
and `get` give a `Reply`, or raise a `TransportFailure` that says what failed), so that retries, error
messages and `doctor` do not know the library.

Why aiohttp: one call to a provider on this machine costs about 160 us of CPU with its parser in C, against
about 600 us with httpx over httpcore and h11 (bench/README.md): more than everything else the proxy does for
a sampling request. The OpenAI and Anthropic SDKs offer it as their faster client for the same reason.

What httpx did for us by default is done here on purpose: the CA store is certifi's (or `SSL_CERT_FILE` /
`SSL_CERT_DIR`), an `HTTP(S)_PROXY` or `ALL_PROXY` of the environment is used unless `NO_PROXY` names the
host, no redirect is followed, and nothing is read from `~/.netrc` (aiohttp's `trust_env` would send its
passwords to a provider: it stays off).
"""

from __future__ import annotations

import asyncio
import errno
import json
import os
import socket
import ssl
import urllib.request
from collections.abc import Mapping
from typing import Any, Literal
from urllib.parse import urlsplit

import aiohttp
import certifi
from msgspec import Struct

from mcp_sampling_proxy.protocol import jsonrpc
from mcp_sampling_proxy.providers.base import MAX_ANSWER_BYTES
from mcp_sampling_proxy.text.sanitize import one_line

Failure = Literal["connect", "connect timeout", "read timeout", "network", "bad url", "refused to send", "too large"]


class Timeouts(Struct, frozen=True):
    """Seconds: to open a connection, and between two reads of an answer (a whole call's deadline is the
    adapter's, around its retries)."""

    connect: float
    read: float


class Reply(Struct, frozen=True):
    """A provider's whole HTTP answer, and what was asked (error messages name the URL and the model, and
    scrub the headers' secrets from what the provider echoed)."""

    status: int
    headers: Mapping[str, str]  # case-insensitive (aiohttp's)
    body: bytes
    url: str
    sent: bytes  # the request's body
    sent_headers: Mapping[str, str]

    @property
    def is_success(self) -> bool:
        return 200 <= self.status < 300

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", "replace")

    def json(self) -> Any:
        """The body as JSON; ValueError when it is not. Integers past 64 bits stay exact, and what strict JSON
        refuses but the standard library reads (NaN, another UTF) is read as before."""
        try:
            return jsonrpc.parse_keeping_integers(self.body)
        except ValueError:
            return json.loads(self.body)


class TransportFailure(Exception):
    """A call that got no HTTP answer. `kind` says what failed; `reason` is a few words a person can act on
    (`connection refused`, `host name not found`); neither holds a header, so neither holds the key."""

    def __init__(self, kind: Failure, reason: str):
        super().__init__(f"{kind}: {reason}")
        self.kind = kind
        self.reason = reason

    @property
    def retryable(self) -> bool:
        """False for what fails the same way every time: a URL that is not http(s), a request not sent, an
        answer past the cap."""
        return self.kind not in ("bad url", "refused to send", "too large")


class LlmHttp:
    """One provider's connections (at most `max_connections`, kept alive between calls), its fixed headers
    (the key among them: kept only here), and its timeouts. The aiohttp session is made at the first call, on
    the event loop that makes it (an adapter may be built on another thread, by the start-up's warm-up)."""

    def __init__(
        self,
        headers: Mapping[str, str],
        timeouts: Timeouts,
        *,
        tls: ssl.SSLContext | Literal[True],
        proxy_for: str,
        max_connections: int = 16,
        max_answer: int = MAX_ANSWER_BYTES,
    ):
        self.headers = dict(headers)
        self._timeout = aiohttp.ClientTimeout(total=None, sock_connect=timeouts.connect, sock_read=timeouts.read)
        self._tls = tls if isinstance(tls, ssl.SSLContext) else verified_tls()
        self._proxy = env_proxy(proxy_for)
        self._max_connections = max_connections
        self._max_answer = max_answer
        self._session: aiohttp.ClientSession | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.closed = False

    async def post(self, url: str, body: bytes) -> Reply:
        return await self._call("POST", url, body)

    async def get(self, url: str) -> Reply:
        return await self._call("GET", url, b"")

    async def aclose(self) -> None:
        self.closed = True
        if self._session is not None:
            await self._session.close()
            self._session = None

    def _client(self) -> aiohttp.ClientSession:
        loop = asyncio.get_running_loop()
        if self._session is None or self._loop is not loop:
            connector = aiohttp.TCPConnector(limit=self._max_connections, ssl=self._tls, keepalive_timeout=5)
            self._session = aiohttp.ClientSession(
                connector=connector, headers=self.headers, timeout=self._timeout, trust_env=False
            )
            self._loop = loop
        return self._session

    async def _call(self, method: str, url: str, body: bytes) -> Reply:
        if self.closed:
            raise TransportFailure("refused to send", "the client is closed (the proxy is stopping)")
        if self._proxy is not None and self._proxy.startswith("socks"):
            scheme = self._proxy.split(":")[0]
            why = f"the environment's {scheme} proxy cannot be used: name an HTTP one"
            raise TransportFailure("refused to send", why)
        try:
            async with self._client().request(
                method, url, data=body or None, allow_redirects=False, proxy=self._proxy
            ) as answer:
                received = await _bounded(answer, self._max_answer)
                if received is None:  # left unread: leaving the block closes the connection
                    raise TransportFailure(
                        "too large",
                        f"the answer is larger than {_size(self._max_answer)}; not read further (an LLM answers in "
                        "far less: is base_url the provider's API?)",
                    )
                return Reply(answer.status, answer.headers, received, url, body, self.headers)
        except aiohttp.ClientError as exc:
            failure = _failure(exc)
        except (ValueError, TypeError) as exc:  # a header or URL aiohttp will not put on the wire
            failure = TransportFailure("refused to send", f"a header or the URL cannot be sent ({type(exc).__name__})")
        except TimeoutError:
            failure = TransportFailure("read timeout", "no answer in time")
        except OSError as exc:  # one aiohttp did not wrap
            why = (exc.strerror or "a network error").lower()
            failure = TransportFailure("network", f"{why} ({type(exc).__name__})")
        # raised outside the handlers, so no traceback carries aiohttp's error as its context: its message and
        # its request's repr hold the URL's query and the request's headers, the key among them
        raise failure


async def _bounded(answer: aiohttp.ClientResponse, limit: int) -> bytes | None:
    """The answer's body as it arrives, unpacked; None as soon as it is longer than `limit` (at once when an
    uncompressed answer's Content-Length says so)."""
    announced = answer.content_length
    if announced is not None and announced > limit and not answer.headers.get("Content-Encoding"):
        return None
    parts: list[bytes] = []
    size = 0
    async for part in answer.content.iter_any():
        size += len(part)
        if size > limit:
            return None
        parts.append(part)
    return parts[0] if len(parts) == 1 else b"".join(parts)


def _size(count: int) -> str:
    return f"{count // (1024 * 1024)} MiB" if count >= 1024 * 1024 else f"{count // 1024} KiB"


def _failure(exc: aiohttp.ClientError) -> TransportFailure:
    """What an aiohttp error means for a provider call, in words that go to the server: never a URL's
    user-info or query, never a request header (aiohttp's own messages can hold both)."""
    if isinstance(exc, aiohttp.NonHttpUrlClientError):
        return TransportFailure("bad url", f"not an http:// or https:// URL: {shown_url(str(exc))}")
    if isinstance(exc, aiohttp.InvalidUrlClientError):
        return TransportFailure("bad url", f"not a URL: {shown_url(str(exc))}")
    if isinstance(exc, aiohttp.ConnectionTimeoutError):
        return TransportFailure("connect timeout", "no connection in time")
    if isinstance(exc, aiohttp.ServerTimeoutError):  # SocketTimeoutError: between two reads
        return TransportFailure("read timeout", "no answer in time")
    if isinstance(exc, aiohttp.ClientConnectorError):
        return TransportFailure("connect", connect_reason(exc))
    kind = type(exc).__name__
    if isinstance(exc, aiohttp.ServerDisconnectedError):
        return TransportFailure("network", f"the server closed the connection before its answer ({kind})")
    if isinstance(exc, aiohttp.ClientPayloadError):
        return TransportFailure("network", f"the answer's body was cut short or malformed ({kind})")
    if isinstance(exc, aiohttp.ClientResponseError):  # the answer's head could not be parsed
        return TransportFailure("network", f"a malformed HTTP answer: {one_line(exc.message, 100)} ({kind})")
    if isinstance(exc, OSError) and exc.strerror:
        return TransportFailure("network", f"{exc.strerror.lower()} ({kind})")
    return TransportFailure("network", kind)


def shown_url(url: str) -> str:
    """`url` as an error may show it, read as text (it may not parse): without user-info, query or fragment
    (either may hold a credential)."""
    head = url.split("#", 1)[0].split("?", 1)[0]
    scheme, sep, rest = head.partition("://")
    if not sep:
        scheme, rest = "", head
    netloc, slash, path = rest.partition("/")
    return one_line(f"{scheme}{sep}{netloc.rsplit('@', 1)[-1]}{slash}{path}", 120)


def connect_reason(exc: BaseException) -> str:
    """The cause of a failed connection in a few words, dug out of the errors that wrap it."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, ConnectionRefusedError) or getattr(seen, "errno", None) == errno.ECONNREFUSED:
            return "connection refused"
        if isinstance(seen, socket.gaierror):
            return "host name not found"
        os_error = getattr(seen, "os_error", None)  # aiohttp's connector errors keep the OS's
        if isinstance(os_error, OSError) and os_error is not seen:
            seen = os_error
            continue
        if isinstance(seen, OSError) and seen.strerror and not isinstance(seen, aiohttp.ClientError):
            return seen.strerror.lower()
        seen = seen.__cause__ or seen.__context__
    return _short(exc)


def _short(exc: BaseException) -> str:
    text = one_line(str(exc), 200)  # the error reaches the server: no control characters either
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def verified_tls() -> ssl.SSLContext:
    """The context an HTTPS provider is checked with: certifi's CA store, as httpx and the providers' SDKs
    use, or the store `SSL_CERT_FILE` / `SSL_CERT_DIR` name."""
    cafile, capath = os.environ.get("SSL_CERT_FILE"), os.environ.get("SSL_CERT_DIR")
    if not cafile and not capath:
        cafile = certifi.where()
    return ssl.create_default_context(cafile=cafile or None, capath=capath or None)


def env_proxy(url: str) -> str | None:
    """The proxy the environment names for `url` (`HTTPS_PROXY`, `HTTP_PROXY`, `ALL_PROXY`, any case), None
    when there is none or `NO_PROXY` names its host."""
    parts = urlsplit(url)
    proxies = urllib.request.getproxies()
    proxy = proxies.get(parts.scheme) or proxies.get("all")
    if not proxy or urllib.request.proxy_bypass_environment(parts.netloc.rsplit("@", 1)[-1], proxies):  # type: ignore[attr-defined]
        return None
    return proxy if "://" in proxy else f"http://{proxy}"
