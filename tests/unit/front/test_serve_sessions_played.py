"""`serve`'s client sessions played in process (helpers/played_serve.py `played_sessions`): the SDK's real
Client and raw HTTP against the endpoint `serve` builds, each session's server played in memory."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from fakes.llm_server import FakeLLMServer
from helpers.played_serve import played_sessions
from helpers.serving import ALICE, token_file
from helpers.support import first_text, openai_policy, tool_json, write_policy

pytestmark = pytest.mark.anyio


@pytest.fixture
def llm(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeLLMServer]:
    monkeypatch.setenv("TEST_LLM_KEY", "sk-test")
    with FakeLLMServer("openai") as server:
        yield server


async def test_a_client_lists_calls_and_samples_through_the_endpoint(tmp_path: Path, llm: FakeLLMServer) -> None:
    llm.reply_text("four", model="fake-gpt-4o-mini")
    policy = write_policy(tmp_path, openai_policy(llm.base_url, extra=f"audit:\n  path: {tmp_path / 'audit.jsonl'}\n"))
    async with played_sessions("--token-file", token_file(tmp_path), policy=policy) as served:
        async with served.client(ALICE) as client:
            names = {tool.name for tool in (await client.list_tools()).tools}
            assert {"echo", "sample"} <= names
            assert first_text(await client.call_tool("echo", {"text": "over http"})) == "over http"
            answer = tool_json(await client.call_tool("sample", {"prompt": "2+2?"}))
        assert answer["content"]["text"] == "four"
        assert answer["model"] == "fake-gpt-4o-mini"
        assert "2+2?" in json.dumps(llm.last.body["messages"][-1])
        (record,) = served.audit()
        assert record["client"] == "alice"
        assert record["decision"] == "allow"
        assert record["method"] == "sampling/createMessage"
