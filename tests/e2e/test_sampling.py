"""Sampling through the real proxy: a host without sampling, a server that samples, a loopback LLM."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from fakes.llm_server import FakeLLMServer
from helpers.support import (
    anthropic_policy,
    first_text,
    openai_policy,
    proxy_command,
    proxy_env,
    sdk_host,
    tool_json,
    write_policy,
)

KEY = "sk-test-key-never-logged-0123456789"
PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="


@pytest.fixture
def anthropic_llm() -> Iterator[FakeLLMServer]:
    with FakeLLMServer("anthropic") as server:
        yield server


async def call(
    tmp_path: Path, policy_text: str | None, tool: str, arguments: dict[str, Any], **client_kwargs: Any
) -> Any:
    policy = write_policy(tmp_path, policy_text) if policy_text is not None else None
    async with sdk_host(
        proxy_command(policy), proxy_env(TEST_LLM_KEY=KEY), tmp_path / "stderr.log", **client_kwargs
    ) as client:
        return await client.call_tool(tool, arguments)


def raw_params(**params: Any) -> dict[str, str]:
    return {"params_json": json.dumps(params)}


@pytest.mark.anyio
async def test_openai_text_round_trip_with_every_parameter(tmp_path: Path, openai_llm: FakeLLMServer) -> None:
    openai_llm.reply_text("Paris.", model="gpt-test-2026-01", finish="stop", usage=(12, 3))
    result = await call(
        tmp_path,
        openai_policy(openai_llm.base_url),
        "sample",
        {
            "prompt": "Capital of France?",
            "system": "Be brief.",
            "max_tokens": 42,
            "temperature": 0.25,
            "stop": ["\n\n"],
            "hints": ["gpt"],
        },
    )
    body = openai_llm.requests[-1].body
    assert body["model"] == "gpt-test"
    assert body["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Capital of France?"},
    ]
    assert body["max_tokens"] == 42
    assert body["temperature"] == 0.25
    assert body["stop"] == ["\n\n"]
    assert openai_llm.requests[-1].headers["authorization"] == f"Bearer {KEY}"
    answer = tool_json(result)
    assert answer == {
        "content": {"type": "text", "text": "Paris."},
        "model": "gpt-test-2026-01",
        "stopReason": "endTurn",
    }


@pytest.mark.anyio
@pytest.mark.parametrize(("finish", "stop_reason"), [("length", "maxTokens"), ("stop", "endTurn")])
async def test_openai_stop_reasons(tmp_path: Path, openai_llm: FakeLLMServer, finish: str, stop_reason: str) -> None:
    openai_llm.reply_text("cut", finish=finish)
    result = await call(tmp_path, openai_policy(openai_llm.base_url), "sample", {"prompt": "x"})
    assert tool_json(result)["stopReason"] == stop_reason


@pytest.mark.anyio
async def test_openai_tools_multiblock_image_and_tool_results(tmp_path: Path, openai_llm: FakeLLMServer) -> None:
    openai_llm.reply_tool_call("get_weather", {"city": "Oslo"}, id="call_9")
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
    result = await call(tmp_path, openai_policy(openai_llm.base_url), "sample_raw", raw_params(**params))
    body = openai_llm.requests[-1].body
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
    answer = tool_json(result)["result"]
    assert answer["stopReason"] == "toolUse"
    assert answer["content"] == [{"type": "tool_use", "id": "call_9", "name": "get_weather", "input": {"city": "Oslo"}}]


@pytest.mark.anyio
async def test_anthropic_round_trip(tmp_path: Path, anthropic_llm: FakeLLMServer) -> None:
    anthropic_llm.reply_text("Bonjour", model="claude-test-20260101", finish="stop_sequence")
    result = await call(
        tmp_path,
        anthropic_policy(anthropic_llm.base_url),
        "sample",
        {
            "prompt": "Say hi in French",
            "system": "You are terse.",
            "max_tokens": 64,
            "stop": ["END"],
        },
    )
    request = anthropic_llm.requests[-1]
    assert request.path == "/v1/messages"
    assert request.headers["x-api-key"] == KEY
    body = request.body
    assert body["system"] == "You are terse."
    assert body["messages"] == [{"role": "user", "content": [{"type": "text", "text": "Say hi in French"}]}]
    assert body["max_tokens"] == 64
    assert body["stop_sequences"] == ["END"]
    assert tool_json(result) == {
        "content": {"type": "text", "text": "Bonjour"},
        "model": "claude-test-20260101",
        "stopReason": "stopSequence",
    }


@pytest.mark.anyio
async def test_audio_the_provider_cannot_take_is_refused_naming_it(
    tmp_path: Path, anthropic_llm: FakeLLMServer
) -> None:
    params = {
        "messages": [{"role": "user", "content": {"type": "audio", "data": "UklGRg==", "mimeType": "audio/wav"}}],
        "maxTokens": 10,
    }
    result = await call(tmp_path, anthropic_policy(anthropic_llm.base_url), "sample_raw", raw_params(**params))
    error = tool_json(result)["error"]
    assert error["code"] == -32602
    assert "audio" in error["message"]
    assert anthropic_llm.requests == []


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"messages": [{"role": "user", "content": {"type": "text", "text": "hi"}}]}, "maxTokens"),
        ({"messages": [{"role": "user"}], "maxTokens": 5}, "messages.0.content"),
        ({"messages": [{"role": "robot", "content": {"type": "text", "text": "hi"}}], "maxTokens": 5}, "role"),
    ],
)
async def test_invalid_params_get_32602_naming_the_field(
    tmp_path: Path, openai_llm: FakeLLMServer, params: dict[str, Any], field: str
) -> None:
    result = await call(tmp_path, openai_policy(openai_llm.base_url), "sample_raw", raw_params(**params))
    error = tool_json(result)["error"]
    assert error["code"] == -32602
    assert field in error["message"]
    assert openai_llm.requests == []


@pytest.mark.anyio
async def test_unanswered_tool_use_is_invalid(tmp_path: Path, openai_llm: FakeLLMServer) -> None:
    params = {
        "messages": [
            {"role": "user", "content": {"type": "text", "text": "hi"}},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "a", "name": "x", "input": {}}]},
            {"role": "user", "content": {"type": "text", "text": "and?"}},
        ],
        "maxTokens": 5,
    }
    result = await call(tmp_path, openai_policy(openai_llm.base_url), "sample_raw", raw_params(**params))
    error = tool_json(result)["error"]
    assert error["code"] == -32602
    assert "tool_use" in error["message"]


@pytest.mark.anyio
async def test_deny_rule_refuses_with_code_minus_one_and_its_message(tmp_path: Path, openai_llm: FakeLLMServer) -> None:
    rules = (
        "rules:\n  - name: no-sinks\n    when: {server: kitchen*}\n    action: deny\n"
        "    message: kitchen servers may not sample\n  - name: rest\n    action: allow\n"
    )
    result = await call(tmp_path, openai_policy(openai_llm.base_url, rules=rules), "sample", {"prompt": "x"})
    error = tool_json(result)["error"]
    assert error == {"code": -1, "message": "kitchen servers may not sample", "data": None}
    assert openai_llm.requests == []


@pytest.mark.anyio
async def test_no_rule_and_no_terminal_denies_and_says_how_to_fix(tmp_path: Path, openai_llm: FakeLLMServer) -> None:
    result = await call(tmp_path, openai_policy(openai_llm.base_url, rules=""), "sample", {"prompt": "x"})
    error = tool_json(result)["error"]
    assert error["code"] == -1
    assert "no approval channel" in error["message"]
    assert "action: allow" in error["message"]
    assert openai_llm.requests == []


@pytest.mark.anyio
async def test_no_provider_and_no_terminal_says_how_to_configure(tmp_path: Path) -> None:
    result = await call(tmp_path, "rules: [{name: all, action: allow}]\n", "sample", {"prompt": "x"})
    error = tool_json(result)["error"]
    assert "OPENAI_API_KEY" in error["message"]
    assert "llm.providers" in error["message"]


@pytest.mark.anyio
async def test_llm_429_then_success_is_retried(tmp_path: Path, openai_llm: FakeLLMServer) -> None:
    openai_llm.reply_error(429, "slow down", retry_after=0)
    openai_llm.reply_text("after retry")
    result = await call(tmp_path, openai_policy(openai_llm.base_url), "sample", {"prompt": "x"})
    assert tool_json(result)["content"]["text"] == "after retry"
    assert len(openai_llm.requests) == 2


@pytest.mark.anyio
async def test_llm_500s_become_an_error_naming_provider_and_status(tmp_path: Path, openai_llm: FakeLLMServer) -> None:
    extra = "      max_attempts: 2\n"
    policy = openai_policy(openai_llm.base_url, extra="").replace(
        "models: [gpt-test]\n", "models: [gpt-test]\n" + extra
    )
    for _ in range(2):
        openai_llm.reply_error(500, "boom")
    result = await call(tmp_path, policy, "sample", {"prompt": "x"})
    error = tool_json(result)["error"]
    assert "fake" in error["message"]
    assert "500" in error["message"]
    assert len(openai_llm.requests) == 2


@pytest.mark.anyio
async def test_llm_timeout_is_reported(tmp_path: Path, openai_llm: FakeLLMServer) -> None:
    policy = openai_policy(openai_llm.base_url).replace(
        "models: [gpt-test]\n", "models: [gpt-test]\n      timeout: {read: 0.3}\n      max_attempts: 1\n"
    )
    openai_llm.enqueue(delay=3.0)
    result = await call(tmp_path, policy, "sample", {"prompt": "x"})
    error = tool_json(result)["error"]
    assert "timed out" in error["message"]


@pytest.mark.anyio
async def test_401_names_the_variable_and_never_the_key(tmp_path: Path, openai_llm: FakeLLMServer) -> None:
    openai_llm.reply_error(401, f"Incorrect API key provided: {KEY}")
    result = await call(tmp_path, openai_policy(openai_llm.base_url), "sample", {"prompt": "x"})
    error = tool_json(result)["error"]
    assert "401" in error["message"]
    assert "TEST_LLM_KEY" in error["message"]
    assert KEY not in error["message"]
    assert KEY not in (tmp_path / "stderr.log").read_text()


@pytest.mark.anyio
async def test_tools_capability_follows_the_policy(tmp_path: Path, openai_llm: FakeLLMServer) -> None:
    caps = tool_json(await call(tmp_path, openai_policy(openai_llm.base_url), "caps", {}))
    assert caps["sampling"] == {"tools": {}}
    no_tools = openai_policy(openai_llm.base_url, extra="sampling:\n  tools: false\n")
    caps = tool_json(await call(tmp_path, no_tools, "caps", {}))
    assert caps["sampling"] == {}


@pytest.mark.anyio
async def test_host_with_sampling_gets_the_request_and_the_llm_is_not_called(
    tmp_path: Path, openai_llm: FakeLLMServer
) -> None:
    from mcp_types import CreateMessageResult, TextContent

    seen: list[Any] = []

    async def host_sampling(context: Any, params: Any) -> CreateMessageResult:
        seen.append(params)
        return CreateMessageResult(
            role="assistant", content=TextContent(text="from host"), model="host-model", stop_reason="endTurn"
        )

    result = await call(
        tmp_path, openai_policy(openai_llm.base_url), "sample", {"prompt": "route me"}, sampling_callback=host_sampling
    )
    assert tool_json(result)["content"]["text"] == "from host"
    assert tool_json(result)["model"] == "host-model"
    assert seen[0].messages[0].content.text == "route me"
    assert openai_llm.requests == []


@pytest.mark.anyio
async def test_a_clamped_max_tokens_applies_when_the_host_samples_too(
    tmp_path: Path, openai_llm: FakeLLMServer
) -> None:
    """`max_tokens_action: clamp` lowers the request whoever answers it: the host is sent the
    clamped request, as our own LLM would be (it used to get the server's original maxTokens)."""
    from mcp_types import CreateMessageResult, TextContent

    seen: list[Any] = []

    async def host_sampling(context: Any, params: Any) -> CreateMessageResult:
        seen.append(params)
        return CreateMessageResult(role="assistant", content=TextContent(text="ok"), model="host-model")

    policy = openai_policy(openai_llm.base_url, extra="limits: {max_tokens: 1000, max_tokens_action: clamp}\n")
    await call(
        tmp_path, policy, "sample", {"prompt": "long please", "max_tokens": 6000}, sampling_callback=host_sampling
    )
    assert seen[0].max_tokens == 1000
    assert openai_llm.requests == []


@pytest.mark.anyio
async def test_route_proxy_and_fallback_on_host_error(tmp_path: Path, openai_llm: FakeLLMServer) -> None:
    from mcp_types import ErrorData

    async def refusing_host(context: Any, params: Any) -> ErrorData:
        return ErrorData(code=-1, message="user said no")

    result = await call(
        tmp_path, openai_policy(openai_llm.base_url), "sample", {"prompt": "x"}, sampling_callback=refusing_host
    )
    assert tool_json(result)["error"]["message"] == "user said no"
    assert openai_llm.requests == []

    fallback = openai_policy(openai_llm.base_url, extra="sampling:\n  fallback_on_host_error: true\n")
    result = await call(tmp_path, fallback, "sample", {"prompt": "x"}, sampling_callback=refusing_host)
    assert tool_json(result)["content"]["text"] == "echo: x"

    forced = openai_policy(openai_llm.base_url, extra="sampling:\n  route: proxy\n")
    result = await call(tmp_path, forced, "sample", {"prompt": "y"}, sampling_callback=refusing_host)
    assert tool_json(result)["content"]["text"] == "echo: y"
    assert len(openai_llm.requests) == 2


@pytest.mark.anyio
async def test_cancelled_tool_call_aborts_the_llm_request(tmp_path: Path, openai_llm: FakeLLMServer) -> None:
    openai_llm.enqueue(delay=20.0)
    policy = write_policy(tmp_path, openai_policy(openai_llm.base_url))
    stderr = tmp_path / "stderr.log"
    # debug: "sampling fulfilled" is logged at debug level, and must not appear
    async with sdk_host(proxy_command(policy, "--log-level", "debug"), proxy_env(TEST_LLM_KEY=KEY), stderr) as client:
        with anyio.move_on_after(2.0):
            await client.call_tool("sample", {"prompt": "never answered"})
        for _ in range(50):
            if "server cancelled a request the proxy was serving" in stderr.read_text():
                break
            await anyio.sleep(0.1)
        # the relay keeps working after the cancellation
        assert first_text(await client.call_tool("echo", {"text": "alive"})) == "alive"
    log = stderr.read_text()
    assert "server cancelled a request the proxy was serving" in log
    assert "sampling fulfilled" not in log
    assert len(openai_llm.requests) == 1


@pytest.mark.anyio
async def test_handshake_pin_serves_old_style_sampling_for_auto_mode_hosts(
    tmp_path: Path, openai_llm: FakeLLMServer
) -> None:
    """The kitchen sink samples the old way (a request of its own), which its SDK allows only in the
    handshake era. An auto host gets the 2026 era from it by default (as directly, where that tool
    fails); `upstream.era: handshake` keeps the server leg in the handshake era and bridges the
    host's 2026 requests to it, so the tool works."""
    default = await call(tmp_path, openai_policy(openai_llm.base_url), "sample", {"prompt": "auto host"}, mode="auto")
    assert "content" not in tool_json(default)  # the SDK refuses a server request in the 2026 era
    pinned = openai_policy(openai_llm.base_url) + "upstream:\n  era: handshake\n"
    result = await call(tmp_path, pinned, "sample", {"prompt": "auto host"}, mode="auto")
    assert tool_json(result)["content"]["text"] == "echo: auto host"


def test_a_handshake_pin_in_front_of_a_2026_only_server_says_which_setting_refuses(tmp_path: Path) -> None:
    """`upstream.era: handshake` keeps the proxy from bridging to a server that speaks only 2026-07-28: the
    host's initialize fails as the server refused it, and the error now names the setting to change."""
    from helpers.support import PY, ROOT, RawHost

    modern = str(ROOT / "tests" / "fixtures" / "modern_raw_server.py")
    policy = write_policy(tmp_path, "upstream:\n  era: handshake\n")
    with RawHost(proxy_command(policy, upstream=[PY, modern]), proxy_env(), tmp_path / "stderr.log") as host:
        answer = host.initialize()
        host.close_stdin()
        host.wait()
    message = answer["error"]["message"]
    assert message.startswith("Method not found (upstream.era is 'handshake' in the policy"), message
    assert "set upstream.era: auto" in message


@pytest.mark.anyio
async def test_audit_record_per_decision_without_the_key(tmp_path: Path, openai_llm: FakeLLMServer) -> None:
    audit = tmp_path / "audit.jsonl"
    rules = "rules:\n  - name: no-big\n    when: {server: nobody}\n    action: deny\n  - name: ok\n    action: allow\n"
    policy = openai_policy(openai_llm.base_url, rules=rules) + f"audit:\n  path: {audit}\n"
    openai_llm.reply_text("audited", usage=(21, 4))
    await call(tmp_path, policy, "sample", {"prompt": "x"})
    text = audit.read_text()
    assert KEY not in text
    (record,) = [json.loads(line) for line in text.splitlines()]
    assert record["decision"] == "allow"
    assert record["rule"] == "ok"
    assert record["server"] == "kitchen_sink_server"
    assert record["tool"] == "sample"
    assert record["provider"] == "fake"
    assert (record["input_tokens"], record["output_tokens"]) == (21, 4)
    assert record["stop_reason"] == "endTurn"
    assert oct(audit.stat().st_mode & 0o777) == "0o600"


@pytest.mark.anyio
async def test_resolve_sample_tool_works_for_an_auto_mode_host(tmp_path: Path, openai_llm: FakeLLMServer) -> None:
    from helpers.support import PY, ROOT

    server = [PY, str(ROOT / "tests" / "fixtures" / "resolve_server.py")]
    policy = write_policy(tmp_path, openai_policy(openai_llm.base_url))
    async with sdk_host(
        proxy_command(policy, upstream=server), proxy_env(TEST_LLM_KEY=KEY), tmp_path / "stderr.log", mode="auto"
    ) as client:
        result = await client.call_tool("one_liner", {"topic": "otters"})
    assert first_text(result) == "gpt-test: echo: One line about otters"


@pytest.mark.anyio
async def test_2026_host_gets_input_required_resolved_by_the_proxy(tmp_path: Path, openai_llm: FakeLLMServer) -> None:
    from helpers.support import PY, ROOT

    server = [PY, str(ROOT / "tests" / "fixtures" / "resolve_server.py")]
    openai_llm.reply_text("Otters hold hands while sleeping.")
    policy = write_policy(tmp_path, openai_policy(openai_llm.base_url) + "upstream:\n  era: any\n")
    stderr = tmp_path / "stderr.log"
    async with sdk_host(
        proxy_command(policy, upstream=server), proxy_env(TEST_LLM_KEY=KEY), stderr, mode="2026-07-28"
    ) as client:
        result = await client.call_tool("one_liner", {"topic": "otters"})
    assert first_text(result) == "gpt-test: Otters hold hands while sleeping."
    assert "retrying with input responses" in stderr.read_text()
    assert openai_llm.requests[0].body["messages"][-1]["content"] == "One line about otters"
