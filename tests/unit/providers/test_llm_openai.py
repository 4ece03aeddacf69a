"""OpenAIAdapter against a real loopback Chat Completions server: the exact wire mapping both ways."""

from __future__ import annotations

import os
import socket
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any, cast

import anyio
import pytest
from fakes.llm_server import FakeLLMServer
from helpers.llm_support import IMAGE, TOOL, fast_config, user

from mcp_sampling_proxy.config import child_env
from mcp_sampling_proxy.config.providers import ProviderConfig
from mcp_sampling_proxy.providers.base import LLMError, UnsupportedContentError
from mcp_sampling_proxy.providers.openai import OpenAIAdapter

pytestmark = pytest.mark.anyio

KEY = "sk-test-0123456789abcdef"
ENV = "FAKE_OPENAI_KEY"


def config(base_url: str, **overrides: Any) -> ProviderConfig:
    return fast_config(base_url, name="openai", kind="openai", env=ENV, model="gpt-test", **overrides)


@pytest.fixture
def server() -> Iterator[FakeLLMServer]:
    with FakeLLMServer("openai") as srv:
        yield srv


@pytest.fixture
async def adapter(server: FakeLLMServer, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[OpenAIAdapter]:
    monkeypatch.setenv(ENV, KEY)
    a = OpenAIAdapter(config(server.base_url))
    yield a
    await a.aclose()


def params(*messages: dict[str, Any], **extra: Any) -> Any:
    """A request as a server sends it, which the adapter takes as its `CreateMessageParams`."""
    return {"messages": list(messages), "maxTokens": 100, **extra}


# -- MCP -> OpenAI --------------------------------------------------------------------------------


async def test_text_request_and_response(server: FakeLLMServer, adapter: OpenAIAdapter) -> None:
    server.reply_text("Paris.", model="gpt-test-2024-07-18", usage=(12, 3))
    result = await adapter.complete(
        params(
            user({"type": "text", "text": "Capital of France?"}),
            systemPrompt="Be brief.",
            temperature=0.2,
            stopSequences=["\n\n", "END"],
            metadata={"trace": "abc"},
            includeContext="none",
        ),
        "gpt-test",
    )
    request = server.last
    assert (request.method, request.path) == ("POST", "/v1/chat/completions")
    assert request.headers["authorization"] == f"Bearer {KEY}"
    assert request.headers["content-type"] == "application/json"
    assert request.body == {
        "model": "gpt-test",
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Capital of France?"},
        ],
        "max_tokens": 100,
        "temperature": 0.2,
        "stop": ["\n\n", "END"],
    }
    assert result.content == [{"type": "text", "text": "Paris."}]
    assert result.model == "gpt-test-2024-07-18"
    assert result.stop_reason == "endTurn"
    assert (result.input_tokens, result.output_tokens) == (12, 3)


async def test_multimodal_user_message_uses_list_form(server: FakeLLMServer, adapter: OpenAIAdapter) -> None:
    blocks = [
        {"type": "text", "text": "Describe these"},
        IMAGE,
        {"type": "audio", "data": "UklGRg==", "mimeType": "audio/wav"},
        {"type": "audio", "data": "UklGRh==", "mimeType": "audio/x-wav"},
        {"type": "audio", "data": "SUQz", "mimeType": "audio/mpeg"},
        {"type": "audio", "data": "SUQ0", "mimeType": "audio/mp3"},
    ]
    await adapter.complete(params(user(blocks)), "gpt-test")
    assert server.last.body["messages"] == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "Describe these"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
                {"type": "input_audio", "input_audio": {"data": "UklGRg==", "format": "wav"}},
                {"type": "input_audio", "input_audio": {"data": "UklGRh==", "format": "wav"}},
                {"type": "input_audio", "input_audio": {"data": "SUQz", "format": "mp3"}},
                {"type": "input_audio", "input_audio": {"data": "SUQ0", "format": "mp3"}},
            ],
        }
    ]


async def test_several_text_blocks_become_one_string(server: FakeLLMServer, adapter: OpenAIAdapter) -> None:
    text = [{"type": "text", "text": "one"}, {"type": "text", "text": "two"}]
    await adapter.complete(params(user(text), {"role": "assistant", "content": text}), "gpt-test")
    assert server.last.body["messages"] == [
        {"role": "user", "content": "one\ntwo"},
        {"role": "assistant", "content": "one\ntwo"},
    ]


async def test_embedded_text_resource_becomes_text(server: FakeLLMServer, adapter: OpenAIAdapter) -> None:
    resource = {
        "type": "resource",
        "resource": {"uri": "file:///a.txt", "mimeType": "text/plain", "text": "A"},
    }
    await adapter.complete(params(user([resource, IMAGE])), "gpt-test")
    assert server.last.body["messages"][0]["content"][0] == {"type": "text", "text": "A"}


@pytest.mark.parametrize(
    ("block", "expected"),
    [
        (
            {"type": "audio", "data": "T2dn", "mimeType": "audio/ogg"},
            "provider 'openai' (openai) cannot take content type 'audio' in messages[0]: "
            "audio/ogg is not supported, use audio/wav or audio/mpeg",
        ),
        ({"type": "foo"}, "provider 'openai' (openai) cannot take content type 'foo' in messages[0]"),
        (
            {"type": "resource", "resource": {"uri": "file:///a.bin", "blob": "AAEC"}},
            "provider 'openai' (openai) cannot take content type 'resource' in messages[0]",
        ),
        (
            {"type": "resource_link", "uri": "file:///a.txt", "name": "a"},
            "provider 'openai' (openai) cannot take content type 'resource_link' in messages[0]",
        ),
    ],
)
async def test_unsupported_content_is_refused(
    server: FakeLLMServer, adapter: OpenAIAdapter, block: dict[str, Any], expected: str
) -> None:
    with pytest.raises(UnsupportedContentError) as info:
        await adapter.complete(params(user(block)), "gpt-test")
    assert info.value.message == expected
    assert info.value.code == -32602
    assert server.requests == []


async def test_unsupported_content_names_message_index(server: FakeLLMServer, adapter: OpenAIAdapter) -> None:
    messages = [
        user("a"),
        {"role": "assistant", "content": {"type": "text", "text": "b"}},
        user({"type": "foo"}),
    ]
    with pytest.raises(
        UnsupportedContentError,
        match=r"^provider 'openai' \(openai\) cannot take content type "
        r"'foo' in messages\[2\]$",
    ):
        await adapter.complete(params(*messages), "gpt-test")


async def test_image_in_assistant_message_is_refused(adapter: OpenAIAdapter) -> None:
    with pytest.raises(UnsupportedContentError, match=r"'image' in messages\[0\]"):
        await adapter.complete(params({"role": "assistant", "content": IMAGE}), "gpt-test")


async def test_tool_conversation_mapping(server: FakeLLMServer, adapter: OpenAIAdapter) -> None:
    server.reply_text("It is sunny in Paris.")
    messages = [
        user({"type": "text", "text": "Weather in Paris?"}),
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Let me check."},
                {"type": "tool_use", "id": "call_9", "name": "get_weather", "input": {"city": "Paris"}},
            ],
        },
        user(
            [
                {
                    "type": "tool_result",
                    "toolUseId": "call_9",
                    "content": [{"type": "text", "text": "sunny"}, {"type": "text", "text": "21C"}],
                },
                {"type": "text", "text": "Summarise."},
            ]
        ),
    ]
    result = await adapter.complete(params(*messages, tools=[TOOL], toolChoice={"mode": "auto"}), "gpt-test")
    body = server.last.body
    assert body["messages"] == [
        {"role": "user", "content": "Weather in Paris?"},
        {
            "role": "assistant",
            "content": "Let me check.",
            "tool_calls": [
                {
                    "id": "call_9",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_9", "content": "sunny\n21C"},
        {"role": "user", "content": "Summarise."},
    ]
    assert body["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "Current weather for a city",
                "parameters": TOOL["inputSchema"],
            },
        }
    ]
    assert body["tool_choice"] == "auto"
    assert result.content == [{"type": "text", "text": "It is sunny in Paris."}]


async def test_tool_only_assistant_message_and_error_result(server: FakeLLMServer, adapter: OpenAIAdapter) -> None:
    messages = [
        user("go"),
        {"role": "assistant", "content": {"type": "tool_use", "id": "c1", "name": "get_weather", "input": {}}},
        user(
            {"type": "tool_result", "toolUseId": "c1", "content": [{"type": "text", "text": "boom"}], "isError": True}
        ),
    ]
    await adapter.complete(params(*messages, tools=[TOOL]), "gpt-test")
    body = server.last.body
    assert body["messages"][1:] == [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "[tool error] boom"},
    ]
    assert "tool_choice" not in body


async def test_non_text_in_tool_result_is_refused(server: FakeLLMServer, adapter: OpenAIAdapter) -> None:
    block = {"type": "tool_result", "toolUseId": "c1", "content": [IMAGE]}
    with pytest.raises(UnsupportedContentError, match=r"'image' in a tool_result in messages\[0\]"):
        await adapter.complete(params(user(block), tools=[TOOL]), "gpt-test")
    assert server.requests == []


@pytest.mark.parametrize("mode", ["auto", "required", "none"])
async def test_tool_choice_modes(server: FakeLLMServer, adapter: OpenAIAdapter, mode: str) -> None:
    await adapter.complete(params(user("hi"), tools=[TOOL], toolChoice={"mode": mode}), "gpt-test")
    assert server.last.body["tool_choice"] == mode


async def test_tools_refused_when_provider_has_no_tool_support(
    server: FakeLLMServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    adapter = OpenAIAdapter(config(server.base_url, supports_tools=False))
    try:
        assert adapter.supports_tools is False
        with pytest.raises(UnsupportedContentError, match="'tools'"):
            await adapter.complete(params(user("hi"), tools=[TOOL]), "gpt-test")
        assert server.requests == []
    finally:
        await adapter.aclose()


# -- OpenAI -> MCP --------------------------------------------------------------------------------


async def test_tool_call_response(server: FakeLLMServer, adapter: OpenAIAdapter) -> None:
    server.reply_tool_call("get_weather", {"city": "Paris"}, id="call_42", text="Checking.")
    result = await adapter.complete(params(user("hi"), tools=[TOOL]), "gpt-test")
    assert result.content == [
        {"type": "text", "text": "Checking."},
        {"type": "tool_use", "id": "call_42", "name": "get_weather", "input": {"city": "Paris"}},
    ]
    assert result.stop_reason == "toolUse"
    assert (result.input_tokens, result.output_tokens) == (20, 9)


async def test_tool_calls_with_finish_stop_still_mean_tool_use(server: FakeLLMServer, adapter: OpenAIAdapter) -> None:
    server.reply_tool_call("get_weather", {"city": "Oslo"}, finish="stop")  # what Ollama sends
    result = await adapter.complete(params(user("hi"), tools=[TOOL]), "gpt-test")
    assert result.stop_reason == "toolUse"
    assert result.content == [{"type": "tool_use", "id": "call_1", "name": "get_weather", "input": {"city": "Oslo"}}]


async def test_bad_tool_arguments_are_an_error(server: FakeLLMServer, adapter: OpenAIAdapter) -> None:
    server.reply_tool_call("get_weather", '{"city": ')
    with pytest.raises(LLMError, match="tool 'get_weather' whose arguments are not valid JSON"):
        await adapter.complete(params(user("hi"), tools=[TOOL]), "gpt-test")


@pytest.mark.parametrize(
    ("finish", "expected"),
    [
        ("stop", "endTurn"),
        ("length", "maxTokens"),
        ("tool_calls", "toolUse"),
        ("function_call", "toolUse"),
        ("content_filter", "content_filter"),
        ("something_new", "something_new"),
    ],
)
async def test_finish_reasons(server: FakeLLMServer, adapter: OpenAIAdapter, finish: str, expected: str) -> None:
    server.reply_text("x", finish=finish)
    result = await adapter.complete(params(user("hi")), "gpt-test")
    assert result.stop_reason == expected


async def test_missing_model_usage_and_content(server: FakeLLMServer, adapter: OpenAIAdapter) -> None:
    server.enqueue(
        body={"choices": [{"index": 0, "message": {"role": "assistant", "content": None}, "finish_reason": "stop"}]}
    )
    result = await adapter.complete(params(user("hi")), "gpt-test")
    assert result.content == [{"type": "text", "text": ""}]
    assert result.model == "gpt-test"
    assert (result.input_tokens, result.output_tokens) == (None, None)


async def test_default_echo_reply(server: FakeLLMServer, adapter: OpenAIAdapter) -> None:
    result = await adapter.complete(params(user("ping")), "gpt-test")
    assert result.content == [{"type": "text", "text": "echo: ping"}]
    assert result.model == "gpt-test"


async def test_non_json_success_is_an_error(server: FakeLLMServer, adapter: OpenAIAdapter) -> None:
    server.enqueue(raw=b"not json")
    with pytest.raises(LLMError, match="answered 200 with a body that is not a JSON object"):
        await adapter.complete(params(user("hi")), "gpt-test")


# -- failures --------------------------------------------------------------------------------------


async def test_401_names_env_var_and_hides_key(server: FakeLLMServer, adapter: OpenAIAdapter) -> None:
    server.reply_error(401, f"Incorrect API key provided: {KEY}. You can find your API key at the dashboard.")
    with pytest.raises(LLMError) as info:
        await adapter.complete(params(user("hi")), "gpt-test")
    message = info.value.message
    assert message.startswith(f"provider 'openai' answered 401: check {ENV} (Incorrect API key provided: ")
    assert KEY not in message
    assert "[redacted]" in message
    assert info.value.status == 401
    assert len(server.requests) == 1  # 401 is not retried


async def test_missing_key_is_not_sent_and_named(server: FakeLLMServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV, raising=False)
    adapter = OpenAIAdapter(config(server.base_url))
    server.reply_error(401, "You didn't provide an API key.")
    try:
        with pytest.raises(LLMError, match=f"answered 401: {ENV} is not set"):
            await adapter.complete(params(user("hi")), "gpt-test")
    finally:
        await adapter.aclose()
    assert "authorization" not in server.last.headers


async def test_a_refused_key_the_proxy_withheld_from_its_environment_is_not_called_unset(
    server: FakeLLMServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """At start the proxy takes its key variables out of its environment (so nothing it starts inherits
    them) and keeps their values: a 401 then says to check the key, not that the variable is unset."""
    monkeypatch.setenv(ENV, KEY)
    monkeypatch.setattr(child_env, "_WITHHELD", {})
    child_env.withhold([ENV])
    assert ENV not in os.environ
    adapter = OpenAIAdapter(config(server.base_url))
    server.reply_error(401, "Incorrect API key provided.")
    try:
        with pytest.raises(LLMError) as info:
            await adapter.complete(params(user("hi")), "gpt-test")
    finally:
        await adapter.aclose()
    assert info.value.message.startswith(f"provider 'openai' answered 401: check {ENV} ("), info.value.message
    assert server.last.headers["authorization"] == f"Bearer {KEY}"


async def test_custom_headers_are_sent(server: FakeLLMServer, monkeypatch: pytest.MonkeyPatch) -> None:
    adapter = OpenAIAdapter(config(server.base_url, headers={"X-Title": "proxy"}))
    try:
        await adapter.complete(params(user("hi")), "gpt-test")
    finally:
        await adapter.aclose()
    assert server.last.headers["x-title"] == "proxy"


async def test_404_names_model_and_url(server: FakeLLMServer, adapter: OpenAIAdapter) -> None:
    server.reply_error(404, "The model `gpt-nope` does not exist")
    with pytest.raises(LLMError) as info:
        await adapter.complete(params(user("hi")), "gpt-nope")
    assert info.value.message == (
        f"provider 'openai' answered 404: model 'gpt-nope' or endpoint {server.base_url}/chat/completions "
        "not found, check the model name and base_url (The model `gpt-nope` does not exist)"
    )


async def test_500_exhausts_attempts(server: FakeLLMServer, adapter: OpenAIAdapter) -> None:
    for _ in range(3):
        server.reply_error(500, "The server had an error")
    with pytest.raises(LLMError) as info:
        await adapter.complete(params(user("hi")), "gpt-test")
    assert info.value.message == (
        "provider 'openai' answered 500: provider error, retries exhausted (The server had an error)"
    )
    assert len(server.requests) == 3


async def test_429_then_success(server: FakeLLMServer, adapter: OpenAIAdapter) -> None:
    server.reply_error(429, "Rate limit reached", retry_after=0.01)
    server.reply_text("ok")
    result = await adapter.complete(params(user("hi")), "gpt-test")
    assert result.content == [{"type": "text", "text": "ok"}]
    assert len(server.requests) == 2


async def test_read_timeout(server: FakeLLMServer, monkeypatch: pytest.MonkeyPatch) -> None:
    adapter = OpenAIAdapter(config(server.base_url, read_timeout=0.2, max_attempts=2))
    server.enqueue(delay=2.0)
    server.enqueue(delay=2.0)
    started = time.monotonic()
    try:
        with pytest.raises(LLMError) as info:
            await adapter.complete(params(user("hi")), "gpt-test")
    finally:
        await adapter.aclose()
    assert info.value.message == "provider 'openai' timed out after 2 attempts (read timeout 0.2s)"
    assert len(server.requests) == 2
    assert time.monotonic() - started < 1.5


async def test_connection_refused() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    adapter = OpenAIAdapter(config(f"http://127.0.0.1:{port}/v1", max_attempts=2))
    try:
        with pytest.raises(LLMError) as info:
            await adapter.complete(params(user("hi")), "gpt-test")
    finally:
        await adapter.aclose()
    assert info.value.message == (
        f"provider 'openai' unreachable at http://127.0.0.1:{port}/v1/chat/completions: "
        "connection refused after 2 attempts"
    )


async def test_cancellation_aborts_request(server: FakeLLMServer, adapter: OpenAIAdapter) -> None:
    server.enqueue(delay=5.0)
    started = time.monotonic()
    with anyio.move_on_after(0.2) as scope:
        await adapter.complete(params(user("hi")), "gpt-test")
    assert scope.cancelled_caught
    assert time.monotonic() - started < 1.0
    result = await adapter.complete(params(user("again")), "gpt-test")  # the client is still usable
    assert result.content == [{"type": "text", "text": "echo: again"}]


@pytest.mark.anyio
async def test_the_adapter_pool_closed_at_shutdown_makes_no_more_adapters() -> None:
    """The start-up warm-up makes adapters in a thread; one it made after the pool was closed was
    never closed (its HTTP client left open at exit). A closed pool closes what it has and makes none."""
    from mcp_sampling_proxy.services.sampling.adapters import AdapterPool

    pool = AdapterPool([fast_config("http://127.0.0.1:9/v1", name="fake", kind="openai", env="NO_KEY", model="m")])
    made = cast(OpenAIAdapter, pool.get("fake"))  # its HTTP client is what the test looks at
    await pool.aclose()
    assert made.http.closed
    with pytest.raises(RuntimeError, match="shutting down"):
        pool.get("fake")


async def test_a_tool_call_without_an_id_gets_one(server: FakeLLMServer, adapter: OpenAIAdapter) -> None:
    """The server answers each call with a tool_result naming its id: a call must carry one."""
    server.reply_tool_call("get_weather", {"city": "Oslo"}, id=None)
    result = await adapter.complete(params(user("hi"), tools=[TOOL]), "gpt-test")
    (block,) = result.content
    assert block["type"] == "tool_use"
    assert block["name"] == "get_weather" and isinstance(block["id"], str) and block["id"].startswith("call_")


async def test_a_tool_call_without_a_name_is_an_error(server: FakeLLMServer, adapter: OpenAIAdapter) -> None:
    server.reply_tool_call(None, {"city": "Oslo"})
    with pytest.raises(LLMError, match="returned a tool call without a tool name"):
        await adapter.complete(params(user("hi"), tools=[TOOL]), "gpt-test")
