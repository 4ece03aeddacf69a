"""The network relay a sandboxed server goes out through (transport/egress.py), in process, on 127.0.0.1:
HTTP CONNECT, plain HTTP and SOCKS5, the address check that keeps loopback and link-local out of reach
unless the grant names them, and the bound on open connections."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import anyio.abc
import pytest

from mcp_sampling_proxy.transport import egress
from mcp_sampling_proxy.transport.egress import Connect, Verdict, internal_address, serve_egress

pytestmark = pytest.mark.anyio


@asynccontextmanager
async def echo_server() -> AsyncIterator[int]:
    """An echo server on 127.0.0.1; its port."""
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1")

    async def echo(stream: anyio.abc.SocketStream) -> None:
        async with stream:
            try:
                while True:
                    await stream.send(await stream.receive())
            except (anyio.EndOfStream, anyio.BrokenResourceError):
                pass

    async with anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, echo)
        yield int(listener.extra(anyio.abc.SocketAttribute.local_port))
        tg.cancel_scope.cancel()


@asynccontextmanager
async def relay(verdict: Verdict) -> AsyncIterator[tuple[int, list[Connect], list[str]]]:
    """The relay on 127.0.0.1 with a judge that answers `verdict`; (its port, what was asked, refusals)."""
    asked: list[Connect] = []
    refused: list[str] = []

    async def judge(wanted: Connect) -> Verdict:
        asked.append(wanted)
        return verdict

    listener = socket.create_server(("127.0.0.1", 0))
    async with anyio.create_task_group() as tg:
        tg.start_soon(serve_egress, listener, judge, lambda wanted, why: refused.append(why))
        yield listener.getsockname()[1], asked, refused
        tg.cancel_scope.cancel()


async def exchange(port: int, request: bytes, *, then: bytes = b"") -> tuple[bytes, anyio.abc.SocketStream]:
    stream = await anyio.connect_tcp("127.0.0.1", port)
    await stream.send(request)
    answer = b""
    with anyio.fail_after(5):
        while b"\r\n\r\n" not in answer and not answer.startswith(b"\x05"):
            answer += await stream.receive()
        if then:
            await stream.send(then)
    return answer, stream


async def read_all(stream: anyio.abc.SocketStream) -> bytes:
    data = b""
    with anyio.fail_after(5):
        try:
            while True:
                data += await stream.receive()
        except (anyio.EndOfStream, anyio.BrokenResourceError):
            return data


async def test_connect_to_a_granted_host_carries_bytes_both_ways() -> None:
    async with echo_server() as target, relay(Verdict(True, internal=True)) as (port, asked, _):
        answer, stream = await exchange(port, f"CONNECT 127.0.0.1:{target} HTTP/1.1\r\n\r\n".encode())
        assert answer.startswith(b"HTTP/1.1 200")
        await stream.send(b"ping")
        with anyio.fail_after(5):
            assert await stream.receive() == b"ping"
        await stream.aclose()
    assert asked == [Connect("127.0.0.1", target, "connect")]


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "[::1]", "169.254.169.254"])
async def test_loopback_and_link_local_are_refused_unless_the_grant_names_them(host: str) -> None:
    """Public hosts are granted, but not this machine's loopback or cloud metadata, however it is named."""
    async with relay(Verdict(True)) as (port, _, refused):
        answer, stream = await exchange(port, f"CONNECT {host}:80 HTTP/1.1\r\n\r\n".encode())
        body = answer + await read_all(stream)
    assert body.startswith(b"HTTP/1.1 403"), body
    assert b"loopback, link-local" in body and refused


async def test_a_refusal_of_the_judge_is_said_with_its_reason() -> None:
    async with relay(Verdict(False, "not in the grant: add it to sandbox.servers.x.network")) as (port, _, refused):
        answer, stream = await exchange(port, b"CONNECT api.example.com:443 HTTP/1.1\r\n\r\n")
        body = answer + await read_all(stream)
    assert body.startswith(b"HTTP/1.1 403") and b"mcp-sampling-proxy: not in the grant" in body
    assert refused == ["not in the grant: add it to sandbox.servers.x.network"]


async def test_plain_http_goes_on_in_origin_form_and_closes() -> None:
    async with echo_server() as target, relay(Verdict(True, internal=True)) as (port, asked, _):
        request = (
            f"GET http://127.0.0.1:{target}/page?q=1 HTTP/1.1\r\nHost: other.example\r\nProxy-Authorization: x\r\n"
            "Connection: keep-alive\r\nAccept: */*\r\n\r\n"
        ).encode()
        stream = await anyio.connect_tcp("127.0.0.1", port)
        await stream.send(request)
        echoed = b""
        with anyio.fail_after(5):
            while b"\r\n\r\n" not in echoed:
                echoed += await stream.receive()
        await stream.aclose()
    # what the server got: its own name as the Host (not another site's the client wrote), and the rest
    assert echoed.startswith(f"GET /page?q=1 HTTP/1.1\r\nHost: 127.0.0.1:{target}\r\nAccept: */*\r\n".encode())
    assert b"other.example" not in echoed
    assert b"Proxy-Authorization" not in echoed and b"keep-alive" not in echoed and b"Connection: close" in echoed
    assert asked == [Connect("127.0.0.1", target, "http")]


async def test_socks5_connects_and_refuses_with_its_own_codes() -> None:
    async with echo_server() as target, relay(Verdict(True, internal=True)) as (port, asked, _):
        stream = await anyio.connect_tcp("127.0.0.1", port)
        await stream.send(b"\x05\x01\x00")
        with anyio.fail_after(5):
            assert await stream.receive() == b"\x05\x00"
            name = b"LocalHost"  # a name as the user typed it: judged as HTTP's is, in lower case
            await stream.send(b"\x05\x01\x00\x03" + bytes([len(name)]) + name + target.to_bytes(2, "big"))
            reply = await stream.receive()
            assert reply[:2] == b"\x05\x00", reply
            await stream.send(b"over socks")
            assert await stream.receive() == b"over socks"
        await stream.aclose()
    assert asked == [Connect("localhost", target, "socks5")]
    async with relay(Verdict(False, "no")) as (port, _, _):
        stream = await anyio.connect_tcp("127.0.0.1", port)
        await stream.send(b"\x05\x01\x00")
        with anyio.fail_after(5):
            assert await stream.receive() == b"\x05\x00"
            await stream.send(b"\x05\x01\x00\x01" + bytes([93, 184, 216, 34]) + (443).to_bytes(2, "big"))
            assert (await stream.receive())[:2] == b"\x05\x02"  # connection not allowed by ruleset
        await stream.aclose()


async def test_a_head_sent_a_few_bytes_at_a_time_is_read_whole() -> None:
    """The end of the head (CRLF CRLF) found across the pieces it arrives in, wherever they split it."""
    async with echo_server() as target, relay(Verdict(True, internal=True)) as (port, asked, _):
        request = f"CONNECT 127.0.0.1:{target} HTTP/1.1\r\nUser-Agent: slow\r\n\r\n".encode()
        stream = await anyio.connect_tcp("127.0.0.1", port)
        stream.extra(anyio.abc.SocketAttribute.raw_socket).setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for start in range(0, len(request), 3):
            await stream.send(request[start : start + 3])
            await anyio.sleep(0.005)
        answer = b""
        with anyio.fail_after(5):
            while b"\r\n\r\n" not in answer:
                answer += await stream.receive()
        assert answer.startswith(b"HTTP/1.1 200"), answer
        await stream.aclose()
    assert asked == [Connect("127.0.0.1", target, "connect")]


async def test_open_connections_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    """A server that opens connections and never speaks holds at most MAX_CONNECTIONS of them."""
    monkeypatch.setattr(egress, "MAX_CONNECTIONS", 3)
    async with relay(Verdict(True)) as (port, _, _):
        held = [await anyio.connect_tcp("127.0.0.1", port) for _ in range(3)]
        await anyio.sleep(0.1)
        extra = await anyio.connect_tcp("127.0.0.1", port)
        with anyio.fail_after(5), pytest.raises((anyio.EndOfStream, anyio.BrokenResourceError)):
            await extra.receive()  # closed at once
        for stream in [*held, extra]:
            await stream.aclose()


async def test_what_is_no_host_never_reaches_the_judge() -> None:
    """Escape sequences, punctuation or a name past 253 characters where a host should be are refused before the judge,
    so they never reach the console's question or the audit."""
    async with relay(Verdict(True)) as (port, asked, refused):
        for host in ("evil\x1b]0;approve\x07.example", "a!b.example", "x" * 300):
            answer, stream = await exchange(port, f"CONNECT {host}:443 HTTP/1.1\r\n\r\n".encode("latin-1"))
            body = answer + await read_all(stream)
            assert body.startswith(b"HTTP/1.1 403") and b"not a host name or an address" in body, body
    assert asked == [] and refused == []


def test_internal_addresses() -> None:
    for address in ("127.0.0.1", "127.8.9.10", "::1", "169.254.169.254", "fe80::1", "0.0.0.0", "::ffff:127.0.0.1"):
        assert internal_address(address), address
    for address in ("93.184.216.34", "10.0.0.5", "192.168.1.2", "2606:4700::1111"):
        assert not internal_address(address), address


async def test_garbage_ends_its_own_connection_never_the_relay() -> None:
    """A SOCKS5 name that is not a name, a header of nothing but bytes, a CONNECT to no port: each closes its
    connection; the relay goes on (an exception used to end the task group the proxy runs in)."""
    async with echo_server() as target, relay(Verdict(True, internal=True)) as (port, _, _):
        for garbage in (
            b"\x05\x01\x00\x05\x01\x00\x03\x04\xff\xfe\xfd\xfc\x01\xbb",
            b"\xff" * 70_000,
            b"CONNECT nowhere HTTP/1.1\r\n\r\n",
            b"GET https://x.example/ HTTP/1.1\r\n\r\n",
        ):
            stream = await anyio.connect_tcp("127.0.0.1", port)
            await stream.send(garbage)
            await read_all(stream)
        answer, stream = await exchange(port, f"CONNECT 127.0.0.1:{target} HTTP/1.1\r\n\r\n".encode())
        assert answer.startswith(b"HTTP/1.1 200")
        await stream.aclose()
