"""`serve` resumes a dropped SSE stream (`Last-Event-ID`): the `mcp` SDK's own client through a real
`serve` process in front of the kitchen-sink server, its connection cut by a TCP relay in between as a
network would. The tool that pauses (`gated_progress`) waits for a file the test creates, so the connection
is cut between two known events, not after a sleep. The wire of resumption (event ids, the priming event,
what is kept, the statuses, MCP-Protocol-Version) is played in process:
tests/unit/front/test_serve_resume_played.py.
"""

from __future__ import annotations

import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import anyio
import anyio.abc
import httpx2
import pytest
from helpers.support import KITCHEN_SINK, PROXY, PY, first_text, free_port, proxy_env
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

pytestmark = pytest.mark.anyio

ALICE = "alice-token-0123456789abcdef"
BOB = "bob-token-0123456789abcdef"
VERSION = "2025-11-25"


@dataclass
class Serve:
    process: subprocess.Popen[bytes]
    port: int
    errlog: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"


@pytest.fixture(scope="module")
def serve(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Serve]:
    """One `serve` for the module: every test opens sessions of its own, which share nothing."""
    tmp_path = tmp_path_factory.mktemp("serve")
    tokens = tmp_path / "tokens"
    tokens.write_text(f"alice:{ALICE}\nbob:{BOB}\n", encoding="utf-8")
    tokens.chmod(0o600)
    port = free_port()
    errlog = tmp_path / "serve.log"
    (tmp_path / "gates").mkdir()  # where the server may write: the gates' `done` files (test_sandbox: by grant)
    policy = tmp_path / "policy.yaml"
    policy.write_text(f"rules: []\nsandbox:\n  write: [{tmp_path / 'gates'}]\n", encoding="utf-8")
    command = [*PROXY, "serve", "--listen", f"127.0.0.1:{port}", "--token-file", str(tokens), "--policy", str(policy)]
    command += ["--", PY, KITCHEN_SINK]
    # started before the autouse fixture isolates each test's directories: it gets its own (a short path:
    # the console's socket lives in the runtime one)
    own = Path(tempfile.mkdtemp(prefix="msp-"))
    dirs = {
        variable: own / name
        for variable, name in (("XDG_CONFIG_HOME", "c"), ("XDG_STATE_HOME", "s"), ("XDG_RUNTIME_DIR", "r"))
    }
    for path in dirs.values():
        path.mkdir(mode=0o700)
    env = proxy_env(**{variable: str(path) for variable, path in dirs.items()})
    with open(errlog, "ab") as err:
        # in tmp_path: a sandboxed server sees its working directory (the gates), not the rest of /tmp
        process = subprocess.Popen(command, env=env, stdout=err, stderr=err, cwd=tmp_path)
    running = Serve(process, port, errlog)
    deadline = time.monotonic() + 20
    while process.poll() is None and time.monotonic() < deadline:
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                break
        time.sleep(0.05)
    else:
        raise AssertionError(f"serve did not listen: {errlog.read_text()}")
    try:
        yield running
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(15)
        shutil.rmtree(own, ignore_errors=True)


@pytest.fixture
def gates(serve: Serve, request: pytest.FixtureRequest) -> Path:
    """Where a test's gate files go: below serve's working directory, which a sandboxed server sees, in the
    directory its policy lets it write."""
    name: str = request.node.name
    path = serve.errlog.parent / "gates" / name.replace("/", "_")
    path.mkdir()
    return path


# -- the SDK's client ------------------------------------------------------------------------------


class CuttingRelay:
    """A TCP relay between a client and `serve` that can cut every connection open through it, as a
    network does; new connections go through again."""

    def __init__(self, target: int):
        self.target = target
        self.port = 0
        self.cuts = 0
        self._open: set[anyio.CancelScope] = set()

    async def run(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
        self.port = listener.extra(anyio.abc.SocketAttribute.local_port)
        task_status.started()
        await listener.serve(self._link)

    async def _link(self, client: anyio.abc.SocketStream) -> None:
        with anyio.CancelScope() as scope:
            self._open.add(scope)
            try:
                async with (
                    client,
                    await anyio.connect_tcp("127.0.0.1", self.target) as upstream,
                    anyio.create_task_group() as tg,
                ):
                    tg.start_soon(_pump, client, upstream)
                    tg.start_soon(_pump, upstream, client)
            finally:
                self._open.discard(scope)

    def cut(self) -> None:
        self.cuts += 1
        for scope in list(self._open):
            scope.cancel()


async def _pump(source: anyio.abc.SocketStream, sink: anyio.abc.SocketStream) -> None:
    try:
        async for chunk in source:
            await sink.send(chunk)
    except (anyio.BrokenResourceError, anyio.ClosedResourceError, anyio.EndOfStream):
        pass
    finally:
        await sink.send_eof()


async def test_the_sdk_client_survives_a_dropped_connection_and_gets_its_result(serve: Serve, gates: Path) -> None:
    gate = gates / "gate"
    seen: list[float] = []
    async with anyio.create_task_group() as tg:
        relay = CuttingRelay(serve.port)
        await tg.start(relay.run)

        async def on_progress(progress: float, total: float | None, message: str | None) -> None:
            seen.append(progress)
            if progress == 1:
                relay.cut()
                gate.touch()

        headers = {"Authorization": f"Bearer {ALICE}", "Host": f"127.0.0.1:{serve.port}"}  # serve's own name
        async with (
            httpx2.AsyncClient(headers=headers, timeout=30) as http,
            Client(
                streamable_http_client(f"http://127.0.0.1:{relay.port}/mcp", http_client=http), mode="legacy"
            ) as client,
        ):
            result = await client.call_tool(
                "gated_progress", {"steps": 3, "gate": str(gate)}, progress_callback=on_progress
            )
        tg.cancel_scope.cancel()
    assert relay.cuts == 1
    assert first_text(result) == "done 3 steps"
    assert seen == [1, 2, 3]
