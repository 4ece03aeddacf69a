"""AnthropicAdapter against a real loopback Messages API server: the exact wire mapping both ways."""

from __future__ import annotations

import socket
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import anyio
import pytest
from fakes.llm_server import FakeLLMServer
from helpers.llm_support import IMAGE, TOOL, fast_config, user

from mcp_sampling_proxy.config.providers import ProviderConfig
from mcp_sampling_proxy.providers.anthropic import AnthropicAdapter
from mcp_sampling_proxy.providers.base import LLMError, UnsupportedContentError

pytestmark = pytest.mark.anyio

KEY = "sk-ant-api03-test-0123456789"
ENV = "FAKE_ANTHROPIC_KEY"


def config(base_url: str, **overrides: Any) -> ProviderConfig:
    return fast_config(base_url, name="claude", kind="anthropic", env=ENV, model="claude-test", **overrides)


@pytest.fixture
def server() -> Iterator[FakeLLMServer]:
    with FakeLLMServer("anthropic") as srv:
        yield srv


@pytest.fixture
async def adapter(server: FakeLLMServer, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[AnthropicAdapter]:
    monkeypatch.setenv(ENV, KEY)
    a = AnthropicAdapter(config(server.base_url))
    yield a
    await a.aclose()


def params(*messages: dict[str, Any], **extra: Any) -> Any:
    """A request as a server sends it, which the adapter takes as its `CreateMessageParams`."""
    return {"messages": list(messages), "maxTokens": 256, **extra}


ANTHROPIC_IMAGE = {
    "type": "image",
    "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="},
}


# -- MCP -> Anthropic -----------------------------------------------------------------------------


async def test_text_request_and_response(server: FakeLLMServer, adapter: AnthropicAdapter) -> None:
    server.reply_text("Paris.", model="claude-test-20250101", usage=(14, 4))
    result = await adapter.complete(
        params(
            user("Capital of France?"),
            systemPrompt="Be brief.",
            temperature=0.3,
            stopSequences=["END"],
            metadata={"user_id": "x"},
        ),
        "claude-test",
    )
    request = server.last
    assert (request.method, request.path) == ("POST", "/v1/messages")
    assert request.headers["x-api-key"] == KEY
    assert request.headers["anthropic-version"] == "2023-06-01"
    assert request.headers["content-type"] == "application/json"
    assert "authorization" not in request.headers
    assert request.body == {
        "model": "claude-test",
        "max_tokens": 256,
        "system": "Be brief.",
        "messages": [{"role": "user", "content": [{"type": "text", "text": "Capital of France?"}]}],
        "temperature": 0.3,
        "stop_sequences": ["END"],
    }
    assert result.content == [{"type": "text", "text": "Paris."}]
    assert result.model == "claude-test-20250101"
    assert result.stop_reason == "endTurn"
    assert (result.input_tokens, result.output_tokens) == (14, 4)


async def test_base_url_with_v1_is_tolerated(server: FakeLLMServer, monkeypatch: pytest.MonkeyPatch) -> None:
    adapter = AnthropicAdapter(config(server.base_url + "/v1/"))
    try:
        await adapter.complete(params(user("hi")), "claude-test")
    finally:
        await adapter.aclose()
    assert server.last.path == "/v1/messages"


async def test_multimodal_message(server: FakeLLMServer, adapter: AnthropicAdapter) -> None:
    await adapter.complete(params(user([{"type": "text", "text": "What is this?"}, IMAGE])), "claude-test")
    assert server.last.body["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "What is this?"}, ANTHROPIC_IMAGE]}
    ]


@pytest.mark.parametrize(
    ("block", "expected"),
    [
        (
            {"type": "audio", "data": "UklGRg==", "mimeType": "audio/wav"},
            "provider 'claude' (anthropic) cannot take content type 'audio' in messages[0]",
        ),
        ({"type": "foo"}, "provider 'claude' (anthropic) cannot take content type 'foo' in messages[0]"),
        (
            {"type": "resource", "resource": {"uri": "file:///a.bin", "blob": "AAEC"}},
            "provider 'claude' (anthropic) cannot take content type 'resource' in messages[0]",
        ),
    ],
)
async def test_unsupported_content_is_refused(
    server: FakeLLMServer, adapter: AnthropicAdapter, block: dict[str, Any], expected: str
) -> None:
    with pytest.raises(UnsupportedContentError) as info:
        await adapter.complete(params(user(block)), "claude-test")
    assert info.value.message == expected
    assert server.requests == []


async def test_embedded_text_resource_becomes_text(server: FakeLLMServer, adapter: AnthropicAdapter) -> None:
    resource = {"type": "resource", "resource": {"uri": "file:///a.txt", "text": "A"}}
    await adapter.complete(params(user(resource)), "claude-test")
    assert server.last.body["messages"][0]["content"] == [{"type": "text", "text": "A"}]


async def test_tool_conversation_mapping(server: FakeLLMServer, adapter: AnthropicAdapter) -> None:
    messages = [
        user("Weather in Paris?"),
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Let me check."},
                {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}},
            ],
        },
        user(
            [
                {"type": "text", "text": "Here you go."},
                {
                    "type": "tool_result",
                    "toolUseId": "toolu_1",
                    "content": [{"type": "text", "text": "sunny"}, IMAGE],
                    "isError": False,
                },
                {
                    "type": "tool_result",
                    "toolUseId": "toolu_2",
                    "content": [{"type": "text", "text": "no"}],
                    "isError": True,
                },
            ]
        ),
    ]
    await adapter.complete(params(*messages, tools=[TOOL], toolChoice={"mode": "required"}), "claude-test")
    body = server.last.body
    assert body["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "Weather in Paris?"}]},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Let me check."},
                {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}},
            ],
        },
        {
            "role": "user",
            "content": [  # tool results first, as the API requires
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_1",
                    "content": [{"type": "text", "text": "sunny"}, ANTHROPIC_IMAGE],
                    "is_error": False,
                },
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_2",
                    "content": [{"type": "text", "text": "no"}],
                    "is_error": True,
                },
                {"type": "text", "text": "Here you go."},
            ],
        },
    ]
    assert body["tools"] == [
        {
            "name": "get_weather",
            "description": "Current weather for a city",
            "input_schema": TOOL["inputSchema"],
        }
    ]
    assert body["tool_choice"] == {"type": "any"}


async def test_audio_in_tool_result_is_refused(server: FakeLLMServer, adapter: AnthropicAdapter) -> None:
    block = {
        "type": "tool_result",
        "toolUseId": "t",
        "content": [{"type": "audio", "data": "x", "mimeType": "audio/wav"}],
    }
    with pytest.raises(UnsupportedContentError, match=r"'audio' in a tool_result in messages\[0\]"):
        await adapter.complete(params(user(block), tools=[TOOL]), "claude-test")
    assert server.requests == []


@pytest.mark.parametrize(("mode", "expected"), [("auto", "auto"), ("required", "any"), ("none", "none")])
async def test_tool_choice_modes(server: FakeLLMServer, adapter: AnthropicAdapter, mode: str, expected: str) -> None:
    await adapter.complete(params(user("hi"), tools=[TOOL], toolChoice={"mode": mode}), "claude-test")
    assert server.last.body["tool_choice"] == {"type": expected}


async def test_no_tool_choice_without_mode(server: FakeLLMServer, adapter: AnthropicAdapter) -> None:
    await adapter.complete(params(user("hi"), tools=[TOOL]), "claude-test")
    assert "tool_choice" not in server.last.body


async def test_tools_refused_when_provider_has_no_tool_support(
    server: FakeLLMServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    adapter = AnthropicAdapter(config(server.base_url, supports_tools=False))
    try:
        assert adapter.supports_tools is False
        with pytest.raises(UnsupportedContentError, match="'tools'"):
            await adapter.complete(params(user("hi"), tools=[TOOL]), "claude-test")
    finally:
        await adapter.aclose()
    assert server.requests == []


# -- Anthropic -> MCP -----------------------------------------------------------------------------


async def test_tool_use_response(server: FakeLLMServer, adapter: AnthropicAdapter) -> None:
    server.reply_tool_call("get_weather", {"city": "Paris"}, id="toolu_9", text="Checking.")
    result = await adapter.complete(params(user("hi"), tools=[TOOL]), "claude-test")
    assert result.content == [
        {"type": "text", "text": "Checking."},
        {"type": "tool_use", "id": "toolu_9", "name": "get_weather", "input": {"city": "Paris"}},
    ]
    assert result.stop_reason == "toolUse"
    assert (result.input_tokens, result.output_tokens) == (20, 9)


@pytest.mark.parametrize(
    ("stop", "expected"),
    [
        ("end_turn", "endTurn"),
        ("max_tokens", "maxTokens"),
        ("stop_sequence", "stopSequence"),
        ("tool_use", "toolUse"),
        ("refusal", "refusal"),
        ("pause_turn", "pause_turn"),
    ],
)
async def test_stop_reasons(server: FakeLLMServer, adapter: AnthropicAdapter, stop: str, expected: str) -> None:
    server.reply_text("x", finish=stop)
    result = await adapter.complete(params(user("hi")), "claude-test")
    assert result.stop_reason == expected


async def test_thinking_blocks_dropped_and_empty_content(server: FakeLLMServer, adapter: AnthropicAdapter) -> None:
    server.enqueue(
        body={
            "type": "message",
            "role": "assistant",
            "stop_reason": "end_turn",
            "content": [{"type": "thinking", "thinking": "hmm", "signature": "s"}],
        }
    )
    result = await adapter.complete(params(user("hi")), "claude-test")
    assert result.content == [{"type": "text", "text": ""}]
    assert result.model == "claude-test"
    assert (result.input_tokens, result.output_tokens) == (None, None)


async def test_default_echo_reply(server: FakeLLMServer, adapter: AnthropicAdapter) -> None:
    result = await adapter.complete(params(user("ping")), "claude-test")
    assert result.content == [{"type": "text", "text": "echo: ping"}]


# -- failures --------------------------------------------------------------------------------------


async def test_401_names_env_var_and_hides_key(server: FakeLLMServer, adapter: AnthropicAdapter) -> None:
    server.reply_error(401, f"invalid x-api-key {KEY}")
    with pytest.raises(LLMError) as info:
        await adapter.complete(params(user("hi")), "claude-test")
    assert info.value.message == (
        f"provider 'claude' answered 401: check {ENV} (authentication_error: invalid x-api-key [redacted])"
    )
    assert KEY not in info.value.message


async def test_529_overloaded_exhausts_attempts(server: FakeLLMServer, adapter: AnthropicAdapter) -> None:
    for _ in range(3):
        server.reply_error(529, "Overloaded")
    with pytest.raises(LLMError) as info:
        await adapter.complete(params(user("hi")), "claude-test")
    assert info.value.message == (
        "provider 'claude' answered 529: overloaded, retries exhausted (overloaded_error: Overloaded)"
    )
    assert len(server.requests) == 3


async def test_429_then_success(server: FakeLLMServer, adapter: AnthropicAdapter) -> None:
    server.reply_error(429, "Number of request tokens has exceeded your rate limit", retry_after=0)
    result = await adapter.complete(params(user("hi")), "claude-test")
    assert result.content == [{"type": "text", "text": "echo: hi"}]
    assert len(server.requests) == 2


async def test_read_timeout(server: FakeLLMServer, monkeypatch: pytest.MonkeyPatch) -> None:
    adapter = AnthropicAdapter(config(server.base_url, read_timeout=0.2, max_attempts=1))
    server.enqueue(delay=2.0)
    try:
        with pytest.raises(LLMError) as info:
            await adapter.complete(params(user("hi")), "claude-test")
    finally:
        await adapter.aclose()
    assert info.value.message == "provider 'claude' timed out after 1 attempt (read timeout 0.2s)"


async def test_connection_refused() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    adapter = AnthropicAdapter(config(f"http://127.0.0.1:{port}", max_attempts=2))
    try:
        with pytest.raises(LLMError, match=rf"unreachable at http://127.0.0.1:{port}/v1/messages: connection refused"):
            await adapter.complete(params(user("hi")), "claude-test")
    finally:
        await adapter.aclose()


async def test_cancellation_aborts_request(server: FakeLLMServer, adapter: AnthropicAdapter) -> None:
    server.enqueue(delay=5.0)
    started = time.monotonic()
    with anyio.move_on_after(0.2) as scope:
        await adapter.complete(params(user("hi")), "claude-test")
    assert scope.cancelled_caught
    assert time.monotonic() - started < 1.0


async def test_a_tool_use_without_an_id_gets_one(server: FakeLLMServer, adapter: AnthropicAdapter) -> None:
    server.reply_tool_call("get_weather", {"city": "Oslo"}, id=None)
    result = await adapter.complete(params(user("hi"), tools=[TOOL]), "claude-test")
    (block,) = result.content
    assert block["type"] == "tool_use"
    assert block["name"] == "get_weather" and isinstance(block["id"], str) and block["id"]


async def test_a_tool_use_without_a_name_is_an_error(server: FakeLLMServer, adapter: AnthropicAdapter) -> None:
    server.reply_tool_call(None, {"city": "Oslo"})
    with pytest.raises(LLMError, match="returned a tool call without a tool name"):
        await adapter.complete(params(user("hi"), tools=[TOOL]), "claude-test")
