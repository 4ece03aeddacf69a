"""`serve --shared-upstream` (one server for every caller) as a process: one server process serves both
callers' sessions and a 2026-07-28 caller, outlives their sessions and ends with serve.

Real parts only: `serve` as a process with alice's and bob's tokens, the `mcp` SDK's Streamable HTTP client
for each caller, the kitchen-sink server as a command. The rest of `--shared-upstream` and `--url` (sampling
routed to its caller, the refused ambiguous request, a server that exits, an HTTP server behind the endpoint)
is played in process: tests/unit/front/test_serve_upstreams_played.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from helpers.serving import ALICE, BOB, KITCHEN_SINK_COMMAND, http_host, start_serve, stop
from helpers.support import alive, first_text, server_children

pytestmark = pytest.mark.anyio

MODERN_META = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientInfo": {"name": "raw-2026", "version": "1"},
    "io.modelcontextprotocol/clientCapabilities": {},
}


async def modern_tools_list(url: str) -> httpx2.Response:
    """One 2026-07-28 request (no session) as alice."""
    async with httpx2.AsyncClient(timeout=20) as http:
        return await http.post(
            url,
            json={"jsonrpc": "2.0", "id": 7, "method": "tools/list", "params": {"_meta": MODERN_META}},
            headers={
                "Authorization": f"Bearer {ALICE}",
                "Accept": "application/json, text/event-stream",
                "MCP-Protocol-Version": "2026-07-28",
                "Mcp-Method": "tools/list",
            },
        )


# -- --shared-upstream ---------------------------------------------------------------------------------------


async def test_two_sessions_share_one_server_and_get_their_own_answers(tmp_path: Path) -> None:
    """Both SDK clients number their requests (and progress tokens) alike: the shared server sees them apart,
    and each caller gets its own answers and its own progress."""
    served = start_serve(tmp_path, "--shared-upstream", upstream=KITCHEN_SINK_COMMAND)
    answers: dict[str, list[str]] = {"alice": [], "bob": []}
    progress: dict[str, list[float]] = {"alice": [], "bob": []}
    try:
        async with http_host(served.url, ALICE) as alice, http_host(served.url, BOB) as bob:

            async def calls(name: str, client: Any) -> None:
                async def on_progress(done: float, total: float | None, message: str | None) -> None:
                    progress[name].append(done)

                for n in range(5):
                    answers[name].append(first_text(await client.call_tool("echo", {"text": f"{name} {n}"})))
                result = await client.call_tool("progress", {"steps": 3}, progress_callback=on_progress)
                answers[name].append(first_text(result))

            async with anyio.create_task_group() as tg:
                tg.start_soon(calls, "alice", alice)
                tg.start_soon(calls, "bob", bob)
            shared = server_children(served.process.pid)
        assert len(shared) == 1  # one server for both
        stateless = await modern_tools_list(served.url)  # a 2026-07-28 caller (no session): the same server
        assert server_children(served.process.pid) == shared  # both sessions ended: it still runs
    finally:
        stop(served)
    for name in ("alice", "bob"):
        assert answers[name] == [f"{name} {n}" for n in range(5)] + ["done 3 steps"]
        assert progress[name] == [1, 2, 3]
    assert stateless.status_code == 200 and stateless.json()["id"] == 7 and "tools" in stateless.json()["result"]
    assert not alive(shared[0])  # stopping serve stopped it
