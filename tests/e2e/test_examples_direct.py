"""An example server and the kitchen-sink fixture launched over stdio as a host launches them, driven by the
SDK client directly (no proxy): what needs their process. What they send and how a client reacts is played
in process: tests/unit/examples/test_example_servers_played.py.
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest
from mcp import Client
from mcp.client.session import ClientRequestContext
from mcp.client.stdio import StdioServerParameters
from mcp.shared.exceptions import MCPDeprecationWarning, MCPError

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[2]
KITCHEN_SINK = ROOT / "tests" / "fixtures" / "kitchen_sink_server.py"


@pytest.fixture(autouse=True)
def _quiet_deprecations() -> None:
    """Sampling is deprecated at 2026-07-28; that's expected here, not a test failure."""
    warnings.filterwarnings("ignore", category=MCPDeprecationWarning)


@asynccontextmanager
async def connect(script: Path, **client_kwargs: Any) -> AsyncIterator[Client]:
    """Launch ``script`` as a stdio MCP server and yield a legacy-mode client connected to it."""
    params = StdioServerParameters(command=sys.executable, args=[str(script)], cwd=str(ROOT))
    with anyio.fail_after(30):
        async with Client(params, mode="legacy", read_timeout_seconds=20, **client_kwargs) as client:
            yield client


async def test_the_summarizer_runs_as_a_script_and_samples() -> None:
    async def answer(
        context: ClientRequestContext, params: types.CreateMessageRequestParams
    ) -> types.CreateMessageResult:
        return types.CreateMessageResult(
            role="assistant", content=types.TextContent(text="  A canned summary.  "), model="canned-model-1"
        )

    async with connect(ROOT / "examples" / "servers" / "summarizer.py", sampling_callback=answer) as client:
        assert client.server_info is not None and client.server_info.name == "summarizer"
        result = await client.call_tool("summarize", {"text": "Some long text. " * 20, "max_words": 10})
    assert not result.is_error
    assert [block.text for block in result.content if isinstance(block, types.TextContent)] == ["A canned summary."]


async def test_kitchen_sink_crash_fails_in_flight_request() -> None:
    async with connect(KITCHEN_SINK) as client:
        with pytest.raises(MCPError) as excinfo:
            await client.call_tool("crash", {"code": 3})
    assert excinfo.value.code == types.CONNECTION_CLOSED
