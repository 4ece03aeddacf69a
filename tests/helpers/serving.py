"""`serve` as a real process for tests, in front of any upstream, and the SDK's HTTP client for it.

`start_serve` takes the upstream as serve's own words (`["--", PY, KITCHEN_SINK]`, `["--url", URL]`), so the
same helper starts per-session, shared and HTTP-fronting endpoints. `HttpMcpServer` runs the kitchen-sink
server over Streamable HTTP (tests/fixtures/http_server.py) for `--url`.
"""

from __future__ import annotations

import json
import selectors
import signal
import socket
import subprocess
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from helpers.support import KITCHEN_SINK, PROXY, PY, ROOT, free_port, proxy_env

ALICE = "alice-token-0123456789abcdef"
BOB = "bob-token-0123456789abcdef"
KITCHEN_SINK_COMMAND = ["--", PY, KITCHEN_SINK]
HTTP_SERVER = str(ROOT / "tests" / "fixtures" / "http_server.py")


@dataclass
class Served:
    process: subprocess.Popen[bytes]
    url: str
    errlog: Path
    audit: Path  # where a test's policy puts the audit log: beside the log, audit.jsonl


def token_file(directory: Path) -> str:
    path = directory / "tokens"
    path.write_text(f"# who may call\nalice:{ALICE}\nbob:{BOB}\n", encoding="utf-8")
    path.chmod(0o600)
    return str(path)


def start_serve(
    tmp_path: Path,
    *options: str,
    upstream: list[str] = KITCHEN_SINK_COMMAND,
    env: dict[str, str] | None = None,
    address: str = "127.0.0.1",
    tokens: bool = True,
    policy: str | None = None,
) -> Served:
    """`serve` on `address` with alice's and bob's tokens (unless not `tokens`), `options`, the policy and
    the upstream (the kitchen-sink server by default); returns once it listens."""
    port = free_port()
    errlog = tmp_path / "serve.log"
    command = [*PROXY, "serve", "--log-format", "json", "--listen", f"{address}:{port}"]
    command += ["--token-file", token_file(tmp_path)] if tokens else []
    command += [*options, *(["--policy", policy] if policy is not None else []), *upstream]
    with open(errlog, "ab") as err:
        environment = proxy_env(TEST_LLM_KEY="sk-test", **(env or {}))
        process = subprocess.Popen(command, env=environment, stderr=err, stdout=err)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and process.poll() is None:
        with socket.socket() as probe:
            if probe.connect_ex((address, port)) == 0:
                return Served(process, f"http://{address}:{port}/mcp", errlog, tmp_path / "audit.jsonl")
        time.sleep(0.05)
    raise AssertionError(f"serve did not listen: {errlog.read_text()}")


def stop(served: Served) -> int:
    if served.process.poll() is None:
        served.process.send_signal(signal.SIGTERM)
    return served.process.wait(15)


@asynccontextmanager
async def http_host(url: str, token: str, **client_kwargs: Any) -> AsyncIterator[Client]:
    """The SDK's Client over its Streamable HTTP transport (handshake era), with a bearer token."""
    async with (
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=30) as http,
        Client(streamable_http_client(url, http_client=http), mode="legacy", **client_kwargs) as client,
    ):
        yield client


def decisions(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [r for r in map(json.loads, path.read_text().splitlines()) if r.get("event") == "decision"]


def wait_until(condition: Callable[[], object], timeout: float = 15.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return False


class HttpMcpServer:
    """The kitchen-sink server over Streamable HTTP (tests/fixtures/http_server.py), in a subprocess; `url`
    is its MCP endpoint once the port accepts connections."""

    def __init__(self, log_path: Path):
        self._log = open(log_path, "wb")  # noqa: SIM115
        self.proc = subprocess.Popen(
            [PY, HTTP_SERVER], stdout=subprocess.PIPE, stderr=self._log, stdin=subprocess.DEVNULL
        )
        self.port = self._read_port(timeout=20)
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        deadline = time.monotonic() + 20
        while True:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def _read_port(self, timeout: float) -> int:
        assert self.proc.stdout
        with selectors.DefaultSelector() as selector:
            selector.register(self.proc.stdout, selectors.EVENT_READ)
            if not selector.select(timeout):
                self.close()
                raise TimeoutError("the HTTP fixture server did not print its port")
        line = self.proc.stdout.readline()
        if not line.strip():
            self.close()
            raise RuntimeError(f"the HTTP fixture server exited early ({self.proc.poll()})")
        return int(line)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)
        if self.proc.stdout:
            self.proc.stdout.close()
        self._log.close()
