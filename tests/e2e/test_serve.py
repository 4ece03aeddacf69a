"""`serve`: the proxy as a real process serving a stdio server over Streamable HTTP at /mcp.

Real parts only: the `mcp` SDK's Streamable HTTP client (what HTTP hosts are built on) with a
bearer token, the small server behind the proxy, a loopback OpenAI-compatible LLM that
answers the server's sampling, and the audit file the proxy writes. What needs the process is here: a
session's server started and reaped, the command's refusals and exit codes, what a signal to serve
leaves behind. What a session does (its calls, approvals, tool rules, idle expiry, the cap, a server
that ends, 2026-07-28 callers) is played in process: tests/unit/front/test_serve_*_played.py.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import suppress
from pathlib import Path

import anyio
import httpx
import pytest
from fakes.llm_server import FakeLLMServer
from helpers.serving import ALICE, BOB, Served, decisions, http_host, start_serve, stop, token_file, wait_until
from helpers.support import (
    PROXY,
    PY,
    SMALL_SERVER,
    alive,
    first_text,
    free_port,
    openai_policy,
    proxy_env,
    server_children,
    tool_json,
    write_policy,
)

pytestmark = pytest.mark.anyio

ACCEPT = "application/json, text/event-stream"
LEAVER = Path(__file__).parent.parent / "fixtures" / "leaver_server.py"
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}},
}


@pytest.fixture
def llm() -> Iterator[FakeLLMServer]:
    with FakeLLMServer("openai") as server:
        yield server


@pytest.fixture
def served(tmp_path: Path, llm: FakeLLMServer) -> Iterator[Served]:
    audit = tmp_path / "audit.jsonl"
    policy = write_policy(tmp_path, openai_policy(llm.base_url, extra=f"audit:\n  path: {audit}\n"))
    running = start_serve(tmp_path, policy=policy)
    yield running
    stop(running)


async def test_a_client_lists_calls_and_samples_through_the_endpoint(served: Served, llm: FakeLLMServer) -> None:
    llm.reply_text("four", model="fake-gpt-4o-mini")
    async with http_host(served.url, ALICE) as client:
        names = {tool.name for tool in (await client.list_tools()).tools}
        assert {"echo", "sample"} <= names
        assert first_text(await client.call_tool("echo", {"text": "over http"})) == "over http"
        answer = tool_json(await client.call_tool("sample", {"prompt": "2+2?"}))
    assert answer["content"]["text"] == "four"
    assert answer["model"] == "fake-gpt-4o-mini"
    assert "2+2?" in json.dumps(llm.last.body["messages"][-1])
    assert wait_until(lambda: len(decisions(served.audit)) == 1)
    (record,) = decisions(served.audit)
    assert record["client"] == "alice"
    assert record["decision"] == "allow"
    assert record["method"] == "sampling/createMessage"
    assert wait_until(lambda: server_children(served.process.pid) == [])  # the session's end ended its server


def test_listening_beyond_loopback_without_a_token_is_refused(tmp_path: Path) -> None:
    done = subprocess.run(
        [*PROXY, "serve", "--listen", f"0.0.0.0:{free_port()}", "--", PY, SMALL_SERVER],
        env=proxy_env(),
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 2
    assert "--token-file" in done.stderr and "127.0.0.1" in done.stderr


def test_a_server_command_that_cannot_run_is_refused_at_start(tmp_path: Path) -> None:
    done = subprocess.run(
        [*PROXY, "serve", "--listen", f"127.0.0.1:{free_port()}", "--", "no-such-mcp-server-here"],
        env=proxy_env(),
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 2
    assert "'no-such-mcp-server-here' not found on PATH" in done.stderr


def test_a_token_file_others_can_read_is_refused(tmp_path: Path) -> None:
    tokens = token_file(tmp_path)
    os.chmod(tokens, 0o644)
    done = subprocess.run(
        [*PROXY, "serve", "--token-file", tokens, "--", PY, SMALL_SERVER],
        env=proxy_env(),
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 2
    assert f"chmod 600 {tokens}" in done.stderr


@pytest.mark.parametrize("how", [signal.SIGTERM, signal.SIGKILL])
async def test_ending_serve_ends_every_server(tmp_path: Path, how: signal.Signals) -> None:
    served = start_serve(tmp_path)
    servers: list[int] = []
    with suppress(Exception):  # the clients see the endpoint go as they close: what matters is what is left
        async with http_host(served.url, ALICE) as alice, http_host(served.url, BOB) as bob:
            await alice.list_tools()
            await bob.list_tools()
            servers = server_children(served.process.pid)
            served.process.send_signal(how)
            await anyio.to_thread.run_sync(lambda: served.process.wait(15))
    assert len(servers) == 2
    assert served.process.returncode == (0 if how == signal.SIGTERM else -signal.SIGKILL)
    assert await anyio.to_thread.run_sync(lambda: wait_until(lambda: not any(map(alive, servers))))


def serve_leaver(tmp_path: Path) -> tuple[Served, Path]:
    """`serve`, unconfined, in front of tests/fixtures/leaver_server.py; and where that writes its pids."""
    out = tmp_path / "left"
    out.mkdir()
    policy = write_policy(tmp_path, "sandbox: off\n")
    return start_serve(tmp_path, policy=policy, upstream=["--", PY, str(LEAVER), str(out)]), out


async def test_what_a_sessions_server_leaves_behind_is_collected_and_ends_with_serve(tmp_path: Path) -> None:
    """Unconfined (no sandbox's PID namespace to end them), a server's orphans come to `serve` as their
    subreaper, as they come to the stdio proxy: one that exits is collected (no zombie piles up under a
    long-running `serve`), and one that left the server's process group ends when `serve` stops."""
    served, out = serve_leaver(tmp_path)
    try:
        async with http_host(served.url, ALICE) as client:
            assert first_text(await client.call_tool("leave", {})) == "left two behind"
            assert await anyio.to_thread.run_sync(lambda: wait_until(lambda: (out / "daemon").exists()))
            quick, daemon = int((out / "quick").read_text()), int((out / "daemon").read_text())
            assert await anyio.to_thread.run_sync(lambda: wait_until(lambda: not Path(f"/proc/{quick}").exists()))
            assert alive(daemon)  # while serve runs, a session's daemon is its server's business
    finally:
        assert stop(served) == 0
    assert await anyio.to_thread.run_sync(lambda: wait_until(lambda: not alive(daemon)))


async def test_a_session_whose_second_connection_ends_leaves_the_other_sessions_servers_alone(
    tmp_path: Path,
) -> None:
    """A session whose server asks for input only in the 2026 era gets a second connection (another
    process of the server) for such a call. When that session ends, both its processes end with it, and
    nothing else: the other sessions' servers are `serve`'s children too, and must not be taken for the
    one session's strays."""
    served, _ = serve_leaver(tmp_path)
    try:
        async with http_host(served.url, BOB) as bob:
            await bob.list_tools()
            bobs = server_children(served.process.pid)
            assert len(bobs) == 1, bobs
            async with http_host(served.url, ALICE) as alice:
                answer = first_text(await alice.call_tool("modern", {}))
                assert answer.startswith("answered by") and int(answer.split()[-1]) not in bobs  # a second process
            # alice's session ended (her client deleted it), with both its processes
            assert await anyio.to_thread.run_sync(
                lambda: wait_until(lambda: server_children(served.process.pid) == bobs)
            ), (server_children(served.process.pid), bobs, [alive(pid) for pid in bobs])
            await anyio.sleep(1.0)  # what ends at a session's end has ended
            assert all(map(alive, bobs))
            assert [tool.name for tool in (await bob.list_tools()).tools] == ["leave", "modern"]
    finally:
        assert stop(served) == 0


FLOOD = Path(__file__).parent.parent / "fixtures" / "flood_server.py"


def flood_call(served: Served, total: int) -> socket.socket:
    """A session whose client calls the flood tool for `total` requests through a socket that takes 4 KiB at
    a time, and reads nothing yet: the socket, the response's headers unread."""
    port = int(served.url.split(":")[2].split("/")[0])
    headers = {"Authorization": f"Bearer {ALICE}", "Accept": ACCEPT}
    with httpx.Client(timeout=15) as http:
        opened = http.post(served.url, json=INITIALIZE, headers=headers)
        session_headers = {
            **headers,
            "Mcp-Session-Id": opened.headers["mcp-session-id"],
            "Mcp-Protocol-Version": "2025-11-25",
        }
        done = http.post(
            served.url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=session_headers
        )
        assert done.status_code == 202
    arguments = {"name": "flood", "arguments": {"count": total}}
    call = json.dumps({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": arguments}).encode()
    request = (
        f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
        + "".join(f"{k}: {v}\r\n" for k, v in session_headers.items())
        + f"Content-Length: {len(call)}\r\n\r\n"
    ).encode() + call
    client = socket.socket()
    client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # a client that reads little at a time
    client.connect(("127.0.0.1", port))
    client.sendall(request)
    return client


def read_to_the_answer(client: socket.socket) -> bytes:
    received = bytearray()
    client.settimeout(15)
    while not received.endswith(b"\r\n\r\n0\r\n\r\n"):  # the chunked response's end: the answer came
        chunk = client.recv(1 << 20)
        assert chunk, "serve closed the stream before the answer"
        received += chunk
    return bytes(received)


def written_when_still(count_file: Path, total: int, *, held: bool) -> int:
    """How many requests the flood server wrote once its count has stood still for 1.5 s (`held`: it must
    never reach `total` meanwhile)."""

    def written() -> int:
        return int(count_file.read_text()) if count_file.exists() else 0

    last, still_since = -1, time.monotonic()
    while time.monotonic() - still_since < 1.5:
        now = written()
        if now != last:
            last, still_since = now, time.monotonic()
        assert not held or now < total, "the server wrote every request: serve held them all in memory"
        time.sleep(0.05)
    return last


def test_a_server_flooding_a_client_that_does_not_read_is_held_back_not_buffered(tmp_path: Path) -> None:
    """A hostile server sends its client requests faster than the client reads them (here: not at all, its
    socket's buffer made small). `serve` cannot drop a request, so it stops reading that server once it holds
    a few thousand for the client, as a full pipe holds a stdio server back: the server's writes wait,
    and `serve`'s memory does not grow with them. Once the client reads, every request and the answer come."""
    count_file, total = tmp_path / "written", 100_000
    policy = write_policy(tmp_path, "sandbox: off\n")
    served = start_serve(tmp_path, policy=policy, upstream=["--", PY, str(FLOOD), str(count_file)])
    try:
        with flood_call(served, total) as client:
            held_back = written_when_still(count_file, total, held=True)
            received = read_to_the_answer(client)
        assert written_when_still(count_file, total, held=False) == total and held_back < total
        assert received.count(b'"method": "roots/list"') == total and b'"flooded"' in received[-2000:]
    finally:
        assert stop(served) == 0
    log = served.errlog.read_text()
    assert "an HTTP client reads slower than its server sends: the server waits until it catches up" in log


def test_a_shared_server_flooding_one_client_is_refused_past_the_buffer_not_held_back(tmp_path: Path) -> None:
    """With --shared-upstream the server is every session's: holding it back for one client that reads
    nothing would stall them all. Past the buffer its requests for that client are refused (the server
    gets an error, as from the client) and dropped: the server writes them all, serve keeps a few thousand,
    and the client, once it reads, gets those and the answer."""
    count_file, total = tmp_path / "written", 100_000
    policy = write_policy(tmp_path, "sandbox: off\n")
    upstream = ["--", PY, str(FLOOD), str(count_file)]
    served = start_serve(tmp_path, "--shared-upstream", policy=policy, upstream=upstream)
    try:
        with flood_call(served, total) as client:
            assert written_when_still(count_file, total, held=False) == total  # not held back
            received = read_to_the_answer(client)
        delivered = received.count(b'"method": "roots/list"')
        assert 0 < delivered < total and b'"flooded"' in received[-2000:]
    finally:
        assert stop(served) == 0
    assert "an HTTP client reads slower than its server sends: notifications and requests dropped" in (
        served.errlog.read_text()
    )


def test_a_refusal_names_the_connections_peer_not_what_a_header_claims(tmp_path: Path) -> None:
    """A client cannot write its own peer into serve's log: the X-Forwarded-For or Forwarded it sends is not
    believed, not even over loopback (where uvicorn believes them by default)."""
    served = start_serve(tmp_path)
    try:
        claimed = {"X-Forwarded-For": "203.0.113.9", "Forwarded": "for=203.0.113.9", "X-Forwarded-Proto": "https"}
        headers = {"Accept": ACCEPT, "Authorization": "Bearer not-a-token", **claimed}
        answer = httpx.post(served.url, json=INITIALIZE, headers=headers, timeout=10)
    finally:
        stop(served)
    assert answer.status_code == 401
    said = [json.loads(line) for line in served.errlog.read_text().splitlines() if line.startswith("{")]
    peers = [line["peer"] for line in said if line["event"].startswith("refused an HTTP request")]
    assert peers and all(peer.startswith("127.0.0.1:") for peer in peers), peers
