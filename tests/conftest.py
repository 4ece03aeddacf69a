"""Shared pytest configuration and fixtures."""

from collections.abc import Iterator
from pathlib import Path

import pytest
from fakes.llm_server import FakeLLMServer


@pytest.fixture
def anyio_backend() -> str:
    """Run ``@pytest.mark.anyio`` tests on asyncio only (the proxy targets asyncio)."""
    return "asyncio"


@pytest.fixture
def llm() -> Iterator[FakeLLMServer]:
    """A loopback LLM server speaking the OpenAI wire format."""
    with FakeLLMServer("openai") as server:
        yield server


@pytest.fixture
def dirs(tmp_path: Path) -> dict[str, str]:
    """Private runtime (console sockets) and state (approvals, budgets) dirs, and a test key."""
    return {"MCP_SAMPLING_PROXY_RUNTIME_DIR": str(tmp_path / "run"),
            "MCP_SAMPLING_PROXY_STATE_DIR": str(tmp_path / "state"), "TEST_LLM_KEY": "k"}
