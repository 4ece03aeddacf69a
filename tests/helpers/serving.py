"""`serve` as a real process for tests, in front of any upstream, and the SDK's HTTP client for it.

`start_serve` takes the upstream as serve's own words (`["--", PY, KITCHEN_SINK]`, `["--url", URL]`), so the
same helper starts per-session, shared and HTTP-fronting endpoints; by default each session's server is the
small server (the kitchen sink's echo, sample and elicitation tools, without the SDK's start-up).
`HttpMcpServer` runs the kitchen-sink server over Streamable HTTP (tests/fixtures/http_server.py) for `--url`;
`HttpMcpThread` serves the same from a thread of the test's process, for `--url` sessions played in process
(helpers/played_serve.py).
"""

from __future__ import annotations

import importlib.util
import json
import selectors
import signal
import socket
import subprocess
import threading
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2
import uvicorn
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from helpers.support import KITCHEN_SINK, PROXY, PY, ROOT, SMALL_SERVER, free_port, proxy_env

ALICE = "alice-token-0123456789abcdef"
BOB = "bob-token-0123456789abcdef"
KITCHEN_SINK_COMMAND = ["--", PY, KITCHEN_SINK]
SMALL_SERVER_COMMAND = ["--", PY, SMALL_SERVER]
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
    upstream: list[str] = SMALL_SERVER_COMMAND,
    env: dict[str, str] | None = None,
    address: str = "127.0.0.1",
    tokens: bool = True,
    policy: str | None = None,
) -> Served:
    """`serve` on `address` with alice's and bob's tokens (unless not `tokens`), `options`, the policy and
    the upstream (the small server by default); returns once it listens."""
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
    ended = f"exit {process.returncode}" if process.poll() is not None else "not listening after 20 s: killed"
    process.kill()  # not left running behind the failure (nor behind a later retry)
    process.wait(15)
    raise AssertionError(f"serve did not listen ({ended}): {errlog.read_text()}")


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


_http_fixture: list[Any] = []  # tests/fixtures/http_server.py, loaded once: its tools register on import


class HttpMcpThread:
    """The server of tests/fixtures/http_server.py (the kitchen-sink tools and `request_header`) served by
    uvicorn from a thread of this process on a loopback port; `url` is its MCP endpoint. No process is
    started: the unit tier can use it."""

    def __init__(self) -> None:
        if not _http_fixture:
            spec = importlib.util.spec_from_file_location("http_server_fixture", HTTP_SERVER)
            assert spec is not None and spec.loader is not None
            fixture = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(fixture)
            _http_fixture.append(fixture)
        self._socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._socket.bind(("127.0.0.1", 0))
        self._socket.listen(128)
        self.url = f"http://127.0.0.1:{self._socket.getsockname()[1]}/mcp"
        app = _http_fixture[0].mcp.streamable_http_app(host="127.0.0.1")
        self._server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [self._socket]}, name="http-fixture", daemon=True
        )
        self._thread.start()
        if not wait_until(lambda: self._server.started or not self._thread.is_alive(), 10) or not self._server.started:
            self.close()
            raise TimeoutError("the in-process HTTP fixture server did not start")

    def close(self) -> None:
        self._server.should_exit = True
        self._thread.join(10)
        self._socket.close()
