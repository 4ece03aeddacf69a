"""A sampling request served by our own LLM, played in memory (tests/helpers/playbook.py): the real relay
and services between a host without sampling and a server the test plays, against a loopback LLM speaking
the OpenAI or Anthropic wire format. What the LLM is sent, what the server gets back, and the errors a
malformed request or a failing LLM earn. The same road through the proxy as a process, an SDK host and
the kitchen-sink server, with every parameter, and a 401 whose key must stay out of the proxy's stderr:
tests/e2e/test_sampling.py.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from fakes.llm_server import FakeLLMServer
from helpers.playbook import Playbook
from helpers.support import anthropic_policy, openai_policy

pytestmark = pytest.mark.anyio
KEY = "sk-test-key-never-logged-0123456789"
PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="


@pytest.fixture(autouse=True)
def llm_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TEST_LLM_KEY", KEY)


@pytest.fixture
def anthropic_llm() -> Iterator[FakeLLMServer]:
    with FakeLLMServer("anthropic") as server:
        yield server


def prompt(text: str, max_tokens: int = 100, **params: Any) -> dict[str, Any]:
    """The request the kitchen-sink server's `sample` tool sends."""
    return {
        "messages": [{"role": "user", "content": {"type": "text", "text": text}}],
        "maxTokens": max_tokens,
        **params,
    }


async def sample(tmp_path: Path, policy: str, params: dict[str, Any]) -> dict[str, Any]:
    """What the server gets back for one request under `policy`: its `result` or its `error`."""
    async with Playbook(tmp_path, policy) as play:
        await play.handshake({})  # an SDK host without callbacks declares nothing
        return await play.sample(params)


@pytest.mark.parametrize(("finish", "stop_reason"), [("length", "maxTokens"), ("stop", "endTurn")])
async def test_openai_stop_reasons(tmp_path: Path, llm: FakeLLMServer, finish: str, stop_reason: str) -> None:
    llm.reply_text("cut", finish=finish)
    answer = await sample(tmp_path, openai_policy(llm.base_url), prompt("x"))
    assert answer["result"]["stopReason"] == stop_reason


async def test_openai_tools_multiblock_image_and_tool_results(tmp_path: Path, llm: FakeLLMServer) -> None:
    llm.reply_tool_call("get_weather", {"city": "Oslo"}, id="call_9")
    params = {
        "messages": [
            {
                "role": "user",
                "content": [{"type": "text", "text": "Look:"}, {"type": "image", "data": PNG, "mimeType": "image/png"}],
            },
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": "t1", "name": "get_weather", "input": {"city": "Paris"}}],
            },
            {
                "role": "user",
                "content": [{"type": "tool_result", "toolUseId": "t1", "content": [{"type": "text", "text": "sunny"}]}],
            },
        ],
        "maxTokens": 50,
        "tools": [
            {
                "name": "get_weather",
                "description": "Weather",
                "inputSchema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
            }
        ],
        "toolChoice": {"mode": "required"},
    }
    answer = await sample(tmp_path, openai_policy(llm.base_url), params)
    body = llm.last.body
    assert body["messages"][0] == {
        "role": "user",
        "content": [
            {"type": "text", "text": "Look:"},
            {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}},
        ],
    }
    assert body["messages"][1]["tool_calls"] == [
        {"id": "t1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}
    ]
    assert body["messages"][2] == {"role": "tool", "tool_call_id": "t1", "content": "sunny"}
    assert body["tools"][0]["function"]["name"] == "get_weather"
    assert body["tools"][0]["function"]["parameters"]["required"] == ["city"]
    assert body["tool_choice"] == "required"
    result = answer["result"]
    assert result["stopReason"] == "toolUse"
    assert result["content"] == [{"type": "tool_use", "id": "call_9", "name": "get_weather", "input": {"city": "Oslo"}}]


async def test_anthropic_round_trip(tmp_path: Path, anthropic_llm: FakeLLMServer) -> None:
    anthropic_llm.reply_text("Bonjour", model="claude-test-20260101", finish="stop_sequence")
    params = prompt("Say hi in French", max_tokens=64, systemPrompt="You are terse.", stopSequences=["END"])
    answer = await sample(tmp_path, anthropic_policy(anthropic_llm.base_url), params)
    request = anthropic_llm.last
    assert request.path == "/v1/messages"
    assert request.headers["x-api-key"] == KEY
    assert request.body["system"] == "You are terse."
    assert request.body["messages"] == [{"role": "user", "content": [{"type": "text", "text": "Say hi in French"}]}]
    assert (request.body["max_tokens"], request.body["stop_sequences"]) == (64, ["END"])
    assert answer["result"] == {
        "role": "assistant",
        "content": {"type": "text", "text": "Bonjour"},
        "model": "claude-test-20260101",
        "stopReason": "stopSequence",
    }


async def test_audio_the_provider_cannot_take_is_refused_naming_it(
    tmp_path: Path, anthropic_llm: FakeLLMServer
) -> None:
    params = {
        "messages": [{"role": "user", "content": {"type": "audio", "data": "UklGRg==", "mimeType": "audio/wav"}}],
        "maxTokens": 10,
    }
    error = (await sample(tmp_path, anthropic_policy(anthropic_llm.base_url), params))["error"]
    assert error["code"] == -32602
    assert "audio" in error["message"]
    assert anthropic_llm.requests == []


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"messages": [{"role": "user", "content": {"type": "text", "text": "hi"}}]}, "maxTokens"),
        ({"messages": [{"role": "user"}], "maxTokens": 5}, "messages.0.content"),
        ({"messages": [{"role": "robot", "content": {"type": "text", "text": "hi"}}], "maxTokens": 5}, "role"),
        (
            {
                "messages": [
                    {"role": "user", "content": {"type": "text", "text": "hi"}},
                    {"role": "assistant", "content": [{"type": "tool_use", "id": "a", "name": "x", "input": {}}]},
                    {"role": "user", "content": {"type": "text", "text": "and?"}},
                ],
                "maxTokens": 5,
            },
            "tool_use",
        ),
    ],
    ids=["no-maxTokens", "no-content", "bad-role", "unanswered-tool_use"],
)
async def test_invalid_params_get_32602_naming_the_field(
    tmp_path: Path, llm: FakeLLMServer, params: dict[str, Any], field: str
) -> None:
    error = (await sample(tmp_path, openai_policy(llm.base_url), params))["error"]
    assert error["code"] == -32602
    assert field in error["message"]
    assert llm.requests == []


def with_provider_settings(policy: str, settings: str) -> str:
    return policy.replace("models: [gpt-test]\n", "models: [gpt-test]\n" + settings)


async def test_llm_429_then_success_is_retried(tmp_path: Path, llm: FakeLLMServer) -> None:
    llm.reply_error(429, "slow down", retry_after=0)
    llm.reply_text("after retry")
    answer = await sample(tmp_path, openai_policy(llm.base_url), prompt("x"))
    assert answer["result"]["content"]["text"] == "after retry"
    assert len(llm.requests) == 2


async def test_llm_500s_become_an_error_naming_provider_and_status(tmp_path: Path, llm: FakeLLMServer) -> None:
    for _ in range(2):
        llm.reply_error(500, "boom")
    policy = with_provider_settings(openai_policy(llm.base_url), "      max_attempts: 2\n")
    error = (await sample(tmp_path, policy, prompt("x")))["error"]
    assert "fake" in error["message"]
    assert "500" in error["message"]
    assert len(llm.requests) == 2


async def test_llm_timeout_is_reported(tmp_path: Path, llm: FakeLLMServer) -> None:
    llm.enqueue(delay=3.0)
    policy = with_provider_settings(openai_policy(llm.base_url), "      timeout: {read: 0.3}\n      max_attempts: 1\n")
    error = (await sample(tmp_path, policy, prompt("x")))["error"]
    assert "timed out" in error["message"]


async def test_the_relay_goes_on_while_the_first_request_waits_for_its_llm_client(
    tmp_path: Path, llm: FakeLLMServer
) -> None:
    """The first sampling request may find its provider's client still being made (the start-up's warm-up
    imports the HTTP client and loads CA stores in a thread: ~200 ms). It waits for it off the event loop:
    meanwhile the relay passes the server's other messages on, instead of stalling every session's traffic."""
    llm.reply_text("made")
    async with Playbook(tmp_path, openai_policy(llm.base_url)) as play:
        await play.handshake({})
        held, release, let_go = threading.Event(), threading.Event(), threading.Event()

        def warm_up() -> None:  # the warm-up thread, making the adapter (what the test holds is its lock)
            with play._adapters._making:
                held.set()
                release.wait(3)
            let_go.set()

        threading.Thread(target=warm_up, daemon=True).start()
        await anyio.to_thread.run_sync(held.wait)
        try:
            async with anyio.create_task_group() as tg, play.call("sample") as call:
                answers: list[dict[str, Any]] = []

                async def ask() -> None:
                    answers.append(await call.sample(prompt("hi")))

                tg.start_soon(ask)
                await anyio.sleep(0.05)  # the request is at the adapter by now
                note = {"level": "info", "data": "still relayed"}
                play.server.says({"jsonrpc": "2.0", "method": "notifications/message", "params": note})
                with anyio.fail_after(2):
                    got = await play.host.next()
                assert got["params"] == note and not let_go.is_set()  # passed on while the client was being made
                release.set()
        finally:
            release.set()
    assert answers[0]["result"]["content"]["text"] == "made"
