"""`serve --replica` as a process: a name it refuses (exit 2, what to give instead), and the replica in
the telemetry spans serve exports while it runs.

Real parts only: `serve` as a process with a token file, the `mcp` SDK's Streamable HTTP client, the
small server sampling behind it, a loopback LLM and OTLP receiver. The replica and `--audit` in the
audit records, its defaults and `/healthz` are played in process:
tests/unit/front/test_serve_replica_options_played.py.
"""

from __future__ import annotations

import signal
import socket
import subprocess
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx2
import pytest
from fakes.llm_server import FakeLLMServer
from helpers.support import (
    PROXY,
    PY,
    SMALL_SERVER,
    free_port,
    openai_policy,
    proxy_env,
    tool_json,
    write_policy,
)
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

pytestmark = pytest.mark.anyio

TOKEN = "alice-token-0123456789abcdef"


@pytest.fixture
def llm() -> Iterator[FakeLLMServer]:
    with FakeLLMServer("openai") as server:
        yield server


@asynccontextmanager
async def serving(tmp_path: Path, policy: str, *options: str, **env: str) -> AsyncIterator[str]:
    """`serve` on a free loopback port with alice's token; yields its base URL, stops it at the end."""
    tokens = tmp_path / "tokens"
    tokens.write_text(f"alice:{TOKEN}\n", encoding="utf-8")
    tokens.chmod(0o600)
    port = free_port()
    command = [*PROXY, "serve", "--listen", f"127.0.0.1:{port}", "--token-file", str(tokens), *options]
    errlog = tmp_path / "serve.log"
    with open(errlog, "ab") as err:
        process = subprocess.Popen(
            [*command, "--policy", policy, "--", PY, SMALL_SERVER],
            env=proxy_env(TEST_LLM_KEY="sk-test", **env),
            stderr=err,
            stdout=err,
        )
    try:
        deadline = time.monotonic() + 20
        while not _listening(port):
            assert process.poll() is None and time.monotonic() < deadline, errlog.read_text()
            time.sleep(0.05)
        yield f"http://127.0.0.1:{port}"
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(15)


def _listening(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0


async def sample_once(base: str) -> None:
    async with (
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30) as http,
        Client(streamable_http_client(f"{base}/mcp", http_client=http), mode="legacy") as client,
    ):
        assert "content" in tool_json(await client.call_tool("sample", {"prompt": "hi"}))


def test_a_replica_name_with_a_control_character_is_refused(tmp_path: Path) -> None:
    done = subprocess.run(
        [*PROXY, "serve", "--replica", "r1\x1b[2J", "--", PY, SMALL_SERVER],
        env=proxy_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "--replica (or MCP_SAMPLING_PROXY_REPLICA): give a name of visible characters" in done.stderr


async def test_the_replica_is_in_the_telemetry_spans(tmp_path: Path, llm: FakeLLMServer) -> None:
    pytest.importorskip("opentelemetry.exporter.otlp.proto.http", reason="the [otel] extra is not installed")
    from fakes.otlp_receiver import OTLPReceiver

    with OTLPReceiver() as receiver:
        extra = f"telemetry:\n  otlp_endpoint: {receiver.endpoint}\n"
        policy = write_policy(tmp_path, openai_policy(llm.base_url, extra=extra))
        async with serving(tmp_path, policy, "--replica", "eu-1") as base:
            await sample_once(base)
        (span,) = [s for s in receiver.spans if s["name"] == "sampling/createMessage"]
    assert span["attributes"]["mcp_sampling_proxy.replica"] == "eu-1"
    assert span["attributes"]["mcp_sampling_proxy.decision"] == "allow"
