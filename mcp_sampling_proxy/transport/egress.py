"""The sandboxed server's only way out: an HTTP and SOCKS5 relay that asks before it connects.

The server's network namespace holds nothing but its own loopback, where this relay listens
(transport/netns.py makes the socket; `HTTP_PROXY` and `HTTPS_PROXY` name it, transport/sandbox.py). One
port speaks both: a first byte of 5 is SOCKS5 (CONNECT, names resolved here: `socks5h`), anything else
HTTP (`CONNECT host:port` for TLS, an absolute `http://` URL for plain HTTP, sent on with
`Connection: close`). Each connection is judged before anything is sent: `judge` says whether the
server may reach that host and port (the policy's `network:` grant, an answer on the console), and then
the name is resolved here and every address checked: loopback, link-local (cloud metadata at
169.254.169.254), unspecified and multicast addresses are refused unless the grant named that host
itself. The relay connects to the address it checked, so a name that resolves to another address
later (DNS rebinding) gains nothing. A refusal says what was refused and which grant would allow it,
in the HTTP answer or the SOCKS reply, and to `on_refused` (the proxy's log and the audit).
"""

from __future__ import annotations

import contextlib
import ipaddress
import re
import socket
from collections.abc import Awaitable, Callable

import anyio
import anyio.abc
from msgspec import Struct

from mcp_sampling_proxy.log import get_logger

log = get_logger("mcp_sampling_proxy.egress")

HEAD_LIMIT = 64 * 1024  # an HTTP request head past this is refused
CONNECT_TIMEOUT = 15.0  # s to reach the host
HANDSHAKE_TIMEOUT = 30.0  # s for the server to say where it wants to go
MAX_CONNECTIONS = 256  # open at once for one server; past it a new one is closed at once (a flood holds no more)
CHUNK = 64 * 1024


class Connect(Struct, frozen=True):
    """Where the server wants to go, as it asked."""

    host: str  # a name, or an address (IPv6 without brackets)
    port: int
    via: str  # "connect" (HTTP CONNECT) | "http" (a plain HTTP request) | "socks5"


class Verdict(Struct, frozen=True):
    """The judge's answer: allowed or not, why (shown to the server and logged), and whether the grant
    named this host itself, so that an internal address (loopback, link-local) is allowed too."""

    allowed: bool
    reason: str = ""
    internal: bool = False


Judge = Callable[[Connect], Awaitable[Verdict]]
Refused = Callable[[Connect, str], None]


def internal_address(address: str) -> bool:
    """True for what a server must not reach unless its grant names it: the user's own loopback services,
    link-local (cloud metadata), unspecified and multicast addresses."""
    ip = ipaddress.ip_address(address)
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_loopback or ip.is_link_local or ip.is_unspecified or ip.is_multicast or ip.is_reserved


async def serve_egress(listener: socket.socket, judge: Judge, on_refused: Refused) -> None:
    """Accept and relay the sandboxed server's connections until cancelled."""
    listener.setblocking(False)
    accepting = await anyio.abc.SocketListener.from_socket(listener)
    open_now = [0]

    async def one(stream: anyio.abc.SocketStream) -> None:
        open_now[0] += 1
        try:
            await _one(stream, judge, on_refused)
        finally:
            open_now[0] -= 1

    async with accepting, anyio.create_task_group() as tg:
        while True:
            stream = await accepting.accept()
            if open_now[0] >= MAX_CONNECTIONS:
                await stream.aclose()
                continue
            tg.start_soon(one, stream)


async def _one(client: anyio.abc.SocketStream, judge: Judge, on_refused: Refused) -> None:
    """One connection of the server's; whatever it sends, only this connection ends (never the relay)."""
    async with client:
        try:
            await _relay(client, judge, on_refused)
        except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            pass  # it went away, timed out, or its host did not answer
        except Exception as exc:
            log.debug("a connection through the relay was dropped", error=f"{type(exc).__name__}: {exc}")


async def _relay(client: anyio.abc.SocketStream, judge: Judge, on_refused: Refused) -> None:
    """Where it wants to go (within HANDSHAKE_TIMEOUT), judged and opened; then both ways until the end."""
    with anyio.fail_after(HANDSHAKE_TIMEOUT):
        first = await client.receive(CHUNK)
        if first[:1] == b"\x05":
            opened = await _socks5(client, first, judge, on_refused)
        else:
            opened = await _http(client, first, judge, on_refused)
    if opened is not None:
        upstream, pending = opened
        async with upstream:
            if pending:
                await upstream.send(pending)
            await _pipe(client, upstream)


class _Failed(Struct, frozen=True):
    """Why there is no connection: refused (by the grant or the address check), or unreachable."""

    why: str
    refused: bool


_NAME = re.compile(r"[a-z0-9_](?:[a-z0-9_-]{0,62})(?:\.[a-z0-9_](?:[a-z0-9_-]{0,62}))*\.?")


def host_is_well_formed(host: str) -> bool:
    """A host name or an address: what a server sends in its place (control characters, spaces, escape
    sequences) never reaches the judge, the console's question or the audit."""
    if len(host) <= 253 and _NAME.fullmatch(host):
        return True
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


async def _decide(wanted: Connect, judge: Judge, on_refused: Refused) -> anyio.abc.SocketStream | _Failed:
    """The judged, resolved, checked connection; or why there is none."""
    if not host_is_well_formed(wanted.host):
        return _Failed("that is not a host name or an address", True)
    verdict = await judge(wanted)
    if not verdict.allowed:
        on_refused(wanted, verdict.reason)
        return _Failed(verdict.reason, True)
    try:
        found = await anyio.getaddrinfo(wanted.host, wanted.port, type=socket.SOCK_STREAM)
    except OSError as exc:
        return _Failed(f"{wanted.host} cannot be resolved ({exc.strerror or exc})", False)
    addresses = [str(info[4][0]) for info in found]
    usable = [a for a in dict.fromkeys(addresses) if verdict.internal or not internal_address(a)]
    if not usable:
        why = (
            f"{wanted.host} resolves to {', '.join(dict.fromkeys(addresses))}, an address of this machine or its "
            f"network's (loopback, link-local): a server reaches it only when its network grant names "
            f"{wanted.host}:{wanted.port} itself"
        )
        on_refused(wanted, why)
        return _Failed(why, True)
    last = ""
    for address in usable:
        try:
            with anyio.fail_after(CONNECT_TIMEOUT):
                return await anyio.connect_tcp(address, wanted.port)
        except (OSError, TimeoutError) as exc:
            detail = getattr(exc, "strerror", None) or "timed out"
            last = f"{wanted.host}:{wanted.port} ({address}) did not answer: {detail}"
    return _Failed(last, False)


# -- SOCKS5 (RFC 1928), CONNECT only, no authentication ------------------------------------------


async def _read_exactly(stream: anyio.abc.SocketStream, buffer: bytearray, size: int) -> bytes:
    while len(buffer) < size:
        buffer += await stream.receive(CHUNK)
    taken = bytes(buffer[:size])
    del buffer[:size]
    return taken


def _socks_reply(code: int) -> bytes:
    return bytes([5, code, 0, 1, 0, 0, 0, 0, 0, 0])


async def _socks5(
    client: anyio.abc.SocketStream, first: bytes, judge: Judge, on_refused: Refused
) -> tuple[anyio.abc.SocketStream, bytes] | None:
    buffer = bytearray(first)
    _version, count = await _read_exactly(client, buffer, 2)
    methods = await _read_exactly(client, buffer, count)
    if 0 not in methods:
        await client.send(b"\x05\xff")
        return None
    await client.send(b"\x05\x00")
    version, command, _reserved, kind = await _read_exactly(client, buffer, 4)
    if kind == 1:
        host = str(ipaddress.IPv4Address(await _read_exactly(client, buffer, 4)))
    elif kind == 4:
        host = str(ipaddress.IPv6Address(await _read_exactly(client, buffer, 16)))
    elif kind == 3:
        (size,) = await _read_exactly(client, buffer, 1)
        host = (await _read_exactly(client, buffer, size)).decode("ascii", "replace").lower()  # IDNA, as typed
    else:
        await client.send(_socks_reply(8))  # address type not supported
        return None
    port = int.from_bytes(await _read_exactly(client, buffer, 2), "big")
    if version != 5 or command != 1:
        await client.send(_socks_reply(7))  # command not supported (BIND, UDP ASSOCIATE)
        return None
    upstream = await _decide(Connect(host, port, "socks5"), judge, on_refused)
    if isinstance(upstream, _Failed):
        await client.send(_socks_reply(2 if upstream.refused else 4))  # not allowed by ruleset | unreachable
        return None
    await client.send(_socks_reply(0))
    return upstream, bytes(buffer)


# -- HTTP: CONNECT, and plain requests with an absolute URL --------------------------------------


async def _http(
    client: anyio.abc.SocketStream, first: bytes, judge: Judge, on_refused: Refused
) -> tuple[anyio.abc.SocketStream, bytes] | None:
    buffer = bytearray(first)
    searched = 0  # a head sent a byte at a time is searched once, not once per byte
    while (end := buffer.find(b"\r\n\r\n", searched)) < 0:
        if len(buffer) > HEAD_LIMIT:
            await _refuse(client, 431, "the request head is too large")
            return None
        searched = max(0, len(buffer) - 3)
        buffer += await client.receive(CHUNK)
    end += 4
    head, rest = bytes(buffer[:end]), bytes(buffer[end:])
    request_line, *header_lines = head[:-4].split(b"\r\n")
    try:
        method, target, version = request_line.decode("latin-1").split(" ")
    except ValueError:
        await _refuse(client, 400, "not an HTTP request")
        return None
    if method.upper() == "CONNECT":
        host, port = _host_port(target, 443)
        if host is None:
            await _refuse(client, 400, f"CONNECT {target!r}: give HOST:PORT")
            return None
        upstream = await _opened(client, Connect(host, port, "connect"), judge, on_refused)
        if upstream is None:
            return None
        await client.send(b"HTTP/1.1 200 Connection established\r\n\r\n")
        return upstream, rest
    if not target.lower().startswith("http://"):
        await _refuse(client, 400, "send https:// through CONNECT, and plain http:// as an absolute URL")
        return None
    authority, _, path = target[len("http://") :].partition("/")
    host, port = _host_port(authority.rpartition("@")[2], 80)
    if host is None:
        await _refuse(client, 400, f"{target!r}: no host")
        return None
    upstream = await _opened(client, Connect(host, port, "http"), judge, on_refused)
    if upstream is None:
        return None
    # the server is the host the relay judged (a Host header naming another would reach another site there)
    dropped = (b"proxy-", b"connection:", b"keep-alive:", b"host:")
    kept = [line for line in header_lines if not line.lower().startswith(dropped)]
    named = f"Host: {_target_of(host, port, 80)}".encode()
    head = b"\r\n".join([f"{method} /{path} {version}".encode("latin-1"), named, *kept, b"Connection: close", b"", b""])
    return upstream, head + rest


async def _opened(
    client: anyio.abc.SocketStream, wanted: Connect, judge: Judge, on_refused: Refused
) -> anyio.abc.SocketStream | None:
    """The connection for an HTTP client, or None once the client was told why not (403 refused, 502 not
    reached)."""
    upstream = await _decide(wanted, judge, on_refused)
    if isinstance(upstream, _Failed):
        await _refuse(client, 403 if upstream.refused else 502, upstream.why)
        return None
    return upstream


def _target_of(host: str, port: int, default: int) -> str:
    shown = f"[{host}]" if ":" in host else host
    return shown if port == default else f"{shown}:{port}"


def _host_port(authority: str, default: int) -> tuple[str | None, int]:
    """("example.com", 443) of "example.com:443"; IPv6 in brackets; (None, 0) when there is no host."""
    if authority.startswith("["):
        host, _, rest = authority[1:].partition("]")
        port_text = rest[1:] if rest.startswith(":") else ""
    else:
        host, _, port_text = authority.partition(":")
    if not host:
        return None, 0
    if port_text and (not port_text.isdigit() or not 0 < int(port_text) < 65536):
        return None, 0
    return host.lower(), int(port_text) if port_text else default


async def _refuse(client: anyio.abc.SocketStream, status: int, why: str) -> None:
    reasons = {400: "Bad Request", 403: "Forbidden", 431: "Request Header Fields Too Large", 502: "Bad Gateway"}
    body = f"mcp-sampling-proxy: {why}\n".encode()
    await client.send(
        f"HTTP/1.1 {status} {reasons.get(status, 'Refused')}\r\nContent-Type: text/plain; charset=utf-8\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
        + body
    )


async def _pipe(a: anyio.abc.SocketStream, b: anyio.abc.SocketStream) -> None:
    """Both directions until both have ended (an end in one direction is passed on as a half-close)."""

    async def copy(source: anyio.abc.SocketStream, sink: anyio.abc.SocketStream) -> None:
        with contextlib.suppress(anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            while True:
                await sink.send(await source.receive(CHUNK))
        with contextlib.suppress(OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
            await sink.send_eof()

    async with anyio.create_task_group() as tg:
        tg.start_soon(copy, a, b)
        tg.start_soon(copy, b, a)
