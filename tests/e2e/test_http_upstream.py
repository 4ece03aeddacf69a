"""`--url`: the proxy in front of a Streamable HTTP server, end to end.

The kitchen-sink server runs over Streamable HTTP in a subprocess (tests/fixtures/http_server.py, on a
free loopback port); the proxy is a real process started by the SDK's `Client` (or by `RawHost` where
exit codes and raw errors matter); sampling is fulfilled by the loopback `FakeLLMServer`.
"""

from __future__ import annotations

import contextlib
import json
import socket
import subprocess
import time
import warnings
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest
from fakes.llm_server import FakeLLMServer
from helpers.serving import HttpMcpServer
from helpers.support import (
    PROXY,
    PY,
    ROOT,
    RawHost,
    openai_policy,
    proxy_env,
    sdk_host,
    tool_json,
    tool_text,
    write_policy,
)
from mcp.shared.exceptions import MCPDeprecationWarning


@pytest.fixture(autouse=True)
def _quiet_deprecations() -> None:
    warnings.filterwarnings("ignore", category=MCPDeprecationWarning)


def _free_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def http_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HttpMcpServer]:
    server = HttpMcpServer(tmp_path_factory.mktemp("http") / "server.log")
    try:
        yield server
    finally:
        server.close()


def url_command(url: str, policy: str | None = None, *options: str) -> list[str]:
    cmd = [*PROXY, "--log-format", "json"]
    if policy:
        cmd += ["--policy", policy]
    return [*cmd, "--url", url, *options]


@pytest.mark.anyio
async def test_tools_list_and_echo_through_the_proxy(http_server: HttpMcpServer, tmp_path: Path) -> None:
    with anyio.fail_after(30):
        async with sdk_host(url_command(http_server.url), proxy_env(), tmp_path / "proxy.log") as client:
            assert client.server_info is not None and client.server_info.name == "kitchen-sink"
            names = {tool.name for tool in (await client.list_tools()).tools}
            assert {"echo", "sample", "caps", "request_header"} <= names
            result = await client.call_tool("echo", {"text": "héllo over HTTP \u2028 ✓"})
            assert tool_text(result) == "héllo over HTTP \u2028 ✓"
            # the proxy added sampling to the host's capabilities on the way upstream
            assert "sampling" in tool_json(await client.call_tool("caps", {}))
            # every request after initialize carries the negotiated version as a header
            version = await client.call_tool("request_header", {"name": "MCP-Protocol-Version"})
            assert tool_text(version) == tool_json(await client.call_tool("client_info", {}))["protocolVersion"]


@pytest.mark.anyio
async def test_sampling_is_fulfilled_by_the_proxy_llm(http_server: HttpMcpServer, tmp_path: Path) -> None:
    with FakeLLMServer("openai") as llm:
        llm.reply_text("The exact text, with ünïcode and\nnewlines.")
        policy = write_policy(tmp_path, openai_policy(llm.base_url, model="gpt-http"))
        env = proxy_env(TEST_LLM_KEY="sk-test-key")
        with anyio.fail_after(30):
            async with sdk_host(url_command(http_server.url, policy), env, tmp_path / "proxy.log") as client:
                result = await client.call_tool("sample", {"prompt": "Say the thing", "max_tokens": 42})
        [request] = [r for r in llm.requests if r.path == "/v1/chat/completions"]
    answer = tool_json(result)
    assert not result.is_error
    assert answer == {
        "content": {"type": "text", "text": "The exact text, with ünïcode and\nnewlines."},
        "model": "gpt-http",
        "stopReason": "endTurn",
    }
    assert request.body["model"] == "gpt-http"
    assert request.body["max_tokens"] == 42
    assert request.body["messages"] == [{"role": "user", "content": "Say the thing"}]
    assert request.headers["authorization"] == "Bearer sk-test-key"


@pytest.mark.anyio
async def test_header_values_are_expanded_from_the_environment(http_server: HttpMcpServer, tmp_path: Path) -> None:
    command = url_command(
        http_server.url,
        None,
        "--header",
        "X-Test: ${SOME_ENV}",
        "--header",
        "Authorization: Bearer ${TEST_TOKEN}-suffix",
    )
    env = proxy_env(SOME_ENV="value from env", TEST_TOKEN="tok123")
    with anyio.fail_after(30):
        async with sdk_host(command, env, tmp_path / "proxy.log") as client:
            assert tool_text(await client.call_tool("request_header", {"name": "X-Test"})) == "value from env"
            auth = await client.call_tool("request_header", {"name": "authorization"})
            assert tool_text(auth) == "Bearer tok123-suffix"
            absent = await client.call_tool("request_header", {"name": "X-Not-Sent"})
            assert tool_text(absent) == "<absent>"


def test_header_with_an_unset_variable_exits_2_naming_it() -> None:
    command = url_command("http://127.0.0.1:9/mcp", None, "--header", "X-Test: ${MCP_TEST_UNSET_VAR}")
    result = subprocess.run(
        command, env=proxy_env(), capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL
    )
    assert result.returncode == 2
    assert result.stdout == ""
    assert "${MCP_TEST_UNSET_VAR}" in result.stderr
    assert "'X-Test'" in result.stderr
    assert "not set in the environment" in result.stderr


def test_malformed_header_exits_2() -> None:
    result = subprocess.run(
        url_command("http://127.0.0.1:9/mcp", None, "--header", "no colon here"),
        env=proxy_env(),
        capture_output=True,
        text=True,
        timeout=30,
        stdin=subprocess.DEVNULL,
    )
    assert result.returncode == 2
    assert "'no colon here' is not 'Name: value'" in result.stderr


def test_url_and_command_together_are_refused() -> None:
    result = subprocess.run(
        [*url_command("http://127.0.0.1:9/mcp"), "--", PY, "x.py"],
        env=proxy_env(),
        capture_output=True,
        text=True,
        timeout=30,
        stdin=subprocess.DEVNULL,
    )
    assert result.returncode == 2
    assert "either as '-- COMMAND [ARGS...]' or with --url URL" in result.stderr


def test_unreachable_url_answers_the_host_and_exits_nonzero(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{_free_port()}/mcp"
    with RawHost(url_command(url), proxy_env(), tmp_path / "stderr.log") as host:
        response = host.request(
            "initialize",
            {
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "clientInfo": {"name": "raw", "version": "1"},
            },
        )
        assert host.wait() == 1
        assert host.recv() is None
    error = response["error"]
    assert error["code"] == -32000
    assert f"could not be reached at {url}" in error["message"]
    assert "before answering initialize" in error["message"]
    stderr = (tmp_path / "stderr.log").read_text()
    records = [json.loads(line) for line in stderr.splitlines() if line.startswith("{")]
    assert any(r["event"] == "upstream HTTP server unreachable" and r["url"] == url for r in records)
    assert "Traceback" not in stderr


def test_server_going_away_mid_session_fails_requests_and_exits_nonzero(tmp_path: Path) -> None:
    server = HttpMcpServer(tmp_path / "server.log")
    try:
        with RawHost(url_command(server.url), proxy_env(), tmp_path / "stderr.log") as host:
            host.initialize()
            assert host.request("tools/call", {"name": "echo", "arguments": {"text": "up"}})["result"]
            server.close()
            response = host.request("tools/call", {"name": "echo", "arguments": {"text": "down"}})
            assert response["error"]["code"] == -32000
            assert "could not be reached" in response["error"]["message"]
            assert host.wait() == 1
    finally:
        server.close()


def test_host_eof_ends_the_http_session_promptly(http_server: HttpMcpServer, tmp_path: Path) -> None:
    with RawHost(url_command(http_server.url), proxy_env(), tmp_path / "stderr.log") as host:
        host.initialize()
        assert host.request("tools/call", {"name": "echo", "arguments": {"text": "x"}})["result"]
        started = time.monotonic()
        host.close_stdin()
        assert host.wait() == 0
        assert time.monotonic() - started < 4  # not the 5 s shutdown grace: the session is closed at once
    assert "Traceback" not in (tmp_path / "stderr.log").read_text()


@pytest.mark.anyio
async def test_2026_host_over_http_gets_the_per_request_headers(http_server: HttpMcpServer, tmp_path: Path) -> None:
    """A 2026-07-28 host: the server rejects requests whose Mcp-Method/Mcp-Name headers do not match."""
    policy = tmp_path / "policy.yaml"
    policy.write_text("upstream:\n  era: any\n")
    with anyio.fail_after(30):
        async with sdk_host(
            url_command(http_server.url, str(policy)), proxy_env(), tmp_path / "proxy.log", mode="2026-07-28"
        ) as client:
            result = await client.call_tool("echo", {"text": "modern"})
            assert tool_text(result) == "modern"
            method = await client.call_tool("request_header", {"name": "Mcp-Method"})
            assert tool_text(method) == "tools/call"
            name = await client.call_tool("request_header", {"name": "Mcp-Name"})
            assert tool_text(name) == "request_header"


@pytest.mark.anyio
async def test_a_server_that_needs_no_login_costs_no_login_lookups_per_message(
    http_server: HttpMcpServer, tmp_path: Path
) -> None:
    """The OAuth store (a file, then the OS keyring) is read when the proxy starts and after the
    server refuses it, not before every message: with a real keyring that is a D-Bus call each."""
    lookups = tmp_path / "lookups.log"
    env = proxy_env(
        MCP_SAMPLING_PROXY_STATE_DIR=str(tmp_path / "state"),
        PYTHON_KEYRING_BACKEND="file_keyring.FileKeyring",
        TEST_KEYRING_FILE=str(tmp_path / "kr.json"),
        TEST_KEYRING_LOG=str(lookups),
        PYTHONPATH=str(ROOT / "tests" / "fixtures"),
    )
    async with sdk_host(url_command(http_server.url), env, tmp_path / "proxy.log") as client:
        for _ in range(20):
            await client.list_tools()
    # one read of the store at start: the backend's probe and the lookup (it was 2 per message)
    assert len(lookups.read_text().splitlines()) <= 2


@pytest.mark.anyio
async def test_a_5_mb_result_over_sse_arrives_whole(http_server: HttpMcpServer, tmp_path: Path) -> None:
    """The SDK's HTTP client refuses SSE events over 1 MiB unless told otherwise; the proxy's limit
    for a message is --max-message-bytes (64 MiB), over HTTP as over stdio, so a 5 MB tool result
    (the fixture server answers in SSE) reaches the host as it does directly."""
    with anyio.fail_after(60):
        async with sdk_host(url_command(http_server.url), proxy_env(), tmp_path / "proxy.log") as client:
            result = await client.call_tool("big", {"size": 5_000_000})
            assert not result.is_error, tool_text(result)[:300]
            assert len(tool_text(result)) == 5_000_000


class _HugeJsonServer:
    """A hostile Streamable HTTP server (raw http.server, in a thread): it answers tools/call with a
    JSON body of `size` bytes, streamed, so it costs the server nothing and the client everything."""

    def __init__(self, size: int, *, gzipped: bool = False):
        import http.server
        import threading

        outer = self
        self.size = size
        self.gzipped = gzipped  # the body compressed (Content-Encoding: gzip): a few hundred KB on the wire

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def _json(self, payload: dict[str, object]) -> None:
                body = json.dumps(payload).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Mcp-Session-Id", "s1")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _gzip_bomb(self, head: bytes, tail: bytes) -> None:
                import zlib

                packer = zlib.compressobj(9, zlib.DEFLATED, 31)  # 31: the gzip format
                parts = [packer.compress(head)]
                chunk = b"x" * (1 << 20)
                parts += [packer.compress(chunk) for _ in range(outer.size >> 20)]
                body = b"".join([*parts, packer.compress(tail), packer.flush()])
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Encoding", "gzip")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                with contextlib.suppress(OSError):
                    self.wfile.write(body)

            def do_GET(self) -> None:
                self.send_response(405)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def do_DELETE(self) -> None:
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def do_POST(self) -> None:
                message = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                method, request_id = message.get("method"), message.get("id")
                if request_id is None:
                    self.send_response(202)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                elif method == "initialize":
                    self._json(
                        {
                            "jsonrpc": "2.0",
                            "id": request_id,
                            "result": {
                                "protocolVersion": message["params"]["protocolVersion"],
                                "capabilities": {"tools": {}},
                                "serverInfo": {"name": "huge", "version": "1"},
                            },
                        }
                    )
                elif method == "tools/call":
                    head = b'{"jsonrpc":"2.0","id":%s,"result":{"content":[{"type":"text","text":"' % (
                        json.dumps(request_id).encode()
                    )
                    tail = b'"}]}}'
                    if outer.gzipped:
                        self._gzip_bomb(head, tail)
                        return
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(head) + outer.size + len(tail)))
                    self.end_headers()
                    chunk = b"x" * (1 << 20)
                    try:
                        self.wfile.write(head)
                        for _ in range(outer.size >> 20):
                            self.wfile.write(chunk)
                        self.wfile.write(tail)
                    except OSError:  # the client stopped reading: as it should
                        pass
                else:
                    self._json(
                        {
                            "jsonrpc": "2.0",
                            "id": request_id,
                            "result": {"tools": [{"name": "huge", "inputSchema": {"type": "object"}}]}
                            if method == "tools/list"
                            else {},
                        }
                    )

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/mcp"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def _proxy_peak_mb() -> float:
    """VmHWM of the proxy this test process started (its child running mcp_sampling_proxy)."""
    import os

    from helpers.support import children_of

    for pid in children_of(os.getpid()):
        try:
            if b"mcp_sampling_proxy" in Path(f"/proc/{pid}/cmdline").read_bytes():
                status = Path(f"/proc/{pid}/status").read_text()
                return next(int(line.split()[1]) for line in status.splitlines() if line.startswith("VmHWM:")) / 1024
        except OSError:
            continue
    raise AssertionError("the proxy process was not found")


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("gzipped", "refusal"),
    [
        (False, r"over the proxy's limit of 8,388,608 bytes \(--max-message-bytes\)"),
        (True, "content-encoding 'gzip'"),
    ],
)
async def test_an_answer_over_the_message_limit_is_refused_and_the_session_goes_on(
    tmp_path: Path, gzipped: bool, refusal: str
) -> None:
    """A server answering with a 200 MB JSON body: the SDK reads a JSON body whole, so the proxy
    cuts it off at --max-message-bytes (here 8 MiB) and the host's request gets an error naming the
    limit, as a line over the limit does over stdio; the session goes on. The body used to be read,
    parsed and passed on whole. Gzipped, the same answer is 200 KB on the wire, under any count of
    the bytes that arrive, and the HTTP client inflates it whole: the proxy asks for no compression
    and refuses a compressed answer before inflating it."""
    from mcp.shared.exceptions import MCPError

    server = _HugeJsonServer(200 << 20, gzipped=gzipped)
    try:
        with anyio.fail_after(60):
            command = url_command(server.url, None, "--max-message-bytes", str(8 << 20))
            async with sdk_host(command, proxy_env(), tmp_path / "proxy.log") as client:
                with pytest.raises(MCPError, match=refusal):
                    await client.call_tool("huge", {})
                assert [tool.name for tool in (await client.list_tools()).tools] == ["huge"]
                peak = _proxy_peak_mb()
    finally:
        server.close()
    assert peak < 120, f"the proxy held {peak:.0f} MB for a 200 MB answer"


def test_a_url_proxy_without_login_does_not_load_the_sdk(http_server: HttpMcpServer, tmp_path: Path) -> None:
    """The SDK's HTTP client loads the whole `mcp` package (about half a second on every start, paid per
    call by hosts that open a connection per call); the proxy's own client and a lazy OAuth load none of it."""
    env = proxy_env(PYTHONPROFILEIMPORTTIME="1", MCP_SAMPLING_PROXY_STATE_DIR=str(tmp_path / "state"))
    with RawHost(url_command(http_server.url), env, tmp_path / "stderr.log") as host:
        host.initialize()
        assert host.request("tools/call", {"name": "echo", "arguments": {"text": "x"}})["result"]
        host.close_stdin()
        assert host.wait() == 0
    imported = [
        line.rsplit("|", 1)[1].strip()
        for line in (tmp_path / "stderr.log").read_text().splitlines()
        if line.startswith("import time:")
    ]
    assert imported, "no import times were printed"
    assert [name for name in imported if name in ("mcp", "mcp_types") or name.startswith(("mcp.", "mcp_types."))] == []
