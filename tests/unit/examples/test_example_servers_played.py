"""The example servers and the kitchen-sink fixture, driven by the SDK client in process (no proxy).

These pin down what the servers send and how an SDK client reacts, so proxy tests can tell a proxy bug
from a fixture bug. Each test loads its server's module afresh (its own counters) and connects the SDK's
real `Client` to its `MCPServer` over the SDK's memory streams, with ``mode="legacy"`` (the 2026-era
``auto`` mode would negotiate the modern protocol, which forbids server-to-client requests). The same
servers launched over stdio: tests/e2e/test_examples_direct.py (and behind the proxy,
tests/e2e/test_examples_proxied.py).
"""

from __future__ import annotations

import base64
import importlib.util
import itertools
import json
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
from mcp.client.session import ClientRequestContext, IncomingMessage
from mcp.server.mcpserver import MCPServer
from mcp.shared.exceptions import MCPDeprecationWarning
from pydantic import FileUrl

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[3]
SERVERS = ROOT / "examples" / "servers"
KITCHEN_SINK = ROOT / "tests" / "fixtures" / "kitchen_sink_server.py"
CANNED_MODEL = "canned-model-1"
TOOLS_CAPABILITY = types.SamplingCapability(tools=types.SamplingToolsCapability())


@pytest.fixture(autouse=True)
def _quiet_deprecations() -> None:
    """Sampling/roots/logging are deprecated at 2026-07-28; that's expected here, not a test failure."""
    warnings.filterwarnings("ignore", category=MCPDeprecationWarning)


LOADS = itertools.count()


def server_of(script: Path) -> MCPServer:
    """``script``'s ``mcp`` server, from a fresh load of its module under a name of its own (each test has its
    own counters; registered, as pydantic resolves a model's annotations in its module)."""
    name = f"played_{script.stem}_{next(LOADS)}"
    spec = importlib.util.spec_from_file_location(name, script)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    server = module.mcp
    assert isinstance(server, MCPServer)
    return server


@asynccontextmanager
async def connect(script: Path, **client_kwargs: Any) -> AsyncIterator[Client]:
    """``script``'s server in process, and a legacy-mode client connected to it."""
    with anyio.fail_after(30):
        async with Client(server_of(script), mode="legacy", read_timeout_seconds=20, **client_kwargs) as client:
            yield client


class Sampler:
    """A sampling callback that records every request and replays scripted results in order."""

    def __init__(self, *results: types.CreateMessageResult | types.CreateMessageResultWithTools) -> None:
        self.results = list(results)
        self.requests: list[types.CreateMessageRequestParams] = []

    async def __call__(
        self, context: ClientRequestContext, params: types.CreateMessageRequestParams
    ) -> types.CreateMessageResult | types.CreateMessageResultWithTools | types.ErrorData:
        self.requests.append(params)
        if not self.results:
            return types.ErrorData(code=types.INTERNAL_ERROR, message="no scripted result left")
        return self.results.pop(0)


def text_result(text: str, stop_reason: str = "endTurn") -> types.CreateMessageResult:
    """A plain assistant text answer."""
    return types.CreateMessageResult(
        role="assistant", content=types.TextContent(text=text), model=CANNED_MODEL, stop_reason=stop_reason
    )


def tool_use_result(*calls: tuple[str, str, dict[str, Any]]) -> types.CreateMessageResultWithTools:
    """An assistant turn asking for tool calls ``(id, name, input)``."""
    return types.CreateMessageResultWithTools(
        role="assistant",
        content=[types.ToolUseContent(id=call_id, name=name, input=args) for call_id, name, args in calls],
        model=CANNED_MODEL,
        stop_reason="toolUse",
    )


def only_text(result: types.CallToolResult) -> str:
    """The single text block of a tool result."""
    assert len(result.content) == 1
    block = result.content[0]
    assert isinstance(block, types.TextContent)
    return block.text


# --- examples ------------------------------------------------------------------------------------


async def test_summarizer_returns_sampled_text() -> None:
    sampler = Sampler(text_result("  A canned summary.  "))
    async with connect(SERVERS / "summarizer.py", sampling_callback=sampler) as client:
        assert client.server_info is not None and client.server_info.name == "summarizer"
        result = await client.call_tool("summarize", {"text": "Some long text. " * 20, "max_words": 10})
    assert not result.is_error
    assert only_text(result) == "A canned summary."
    [request] = sampler.requests
    assert request.max_tokens == 300
    assert request.system_prompt
    assert request.model_preferences is not None and request.model_preferences.hints
    assert [hint.name for hint in request.model_preferences.hints] == ["claude", "gpt"]
    [message] = request.messages
    assert message.role == "user"
    assert isinstance(message.content, types.TextContent)
    assert "at most 10 words" in message.content.text
    assert request.tools is None


async def test_tool_loop_executes_tools_then_finishes() -> None:
    sampler = Sampler(
        tool_use_result(("call-1", "get_weather", {"city": "Paris"}), ("call-2", "calculate", {"expression": "6*7"})),
        text_result("Paris is 14°C and the answer is 42."),
    )
    async with connect(
        SERVERS / "tool_loop.py", sampling_callback=sampler, sampling_capabilities=TOOLS_CAPABILITY
    ) as client:
        result = await client.call_tool("research", {"question": "Weather in Paris, and 6*7?"})
    text = only_text(result)
    assert text.startswith("Paris is 14°C and the answer is 42.")
    assert 'iterations: 2, tool calls: [get_weather(city="Paris"), calculate(expression="6*7")]' in text

    first, second = sampler.requests
    assert first.tools is not None and {tool.name for tool in first.tools} == {"get_weather", "calculate"}
    assert first.tool_choice is None
    assert [m.role for m in second.messages] == ["user", "assistant", "user"]
    assert [c.type for c in second.messages[1].content_as_list] == ["tool_use", "tool_use"]
    results = second.messages[2].content_as_list
    assert all(isinstance(block, types.ToolResultContent) for block in results)
    by_id = {block.tool_use_id: block for block in results if isinstance(block, types.ToolResultContent)}
    assert set(by_id) == {"call-1", "call-2"}
    weather, product = (by_id[key].content[0] for key in ("call-1", "call-2"))
    assert isinstance(weather, types.TextContent) and "Weather in Paris" in weather.text
    assert isinstance(product, types.TextContent) and product.text == "42"
    assert not by_id["call-1"].is_error


async def test_tool_loop_forces_tool_choice_none_on_last_iteration() -> None:
    sampler = Sampler(
        tool_use_result(("a", "calculate", {"expression": "import os"})),
        tool_use_result(("b", "calculate", {"expression": "1+1"})),
    )
    async with connect(
        SERVERS / "tool_loop.py", sampling_callback=sampler, sampling_capabilities=TOOLS_CAPABILITY
    ) as client:
        result = await client.call_tool("research", {"question": "?", "max_iterations": 2})
    text = only_text(result)
    assert "iterations: 2" in text
    assert "tool calls: [calculate(expression=" in text
    first, last = sampler.requests
    assert first.tool_choice is None
    assert last.tool_choice is not None and last.tool_choice.mode == "none"
    # The invalid expression was reported back to the model as an error result, not raised.
    [error_block] = last.messages[-1].content_as_list
    assert isinstance(error_block, types.ToolResultContent) and error_block.is_error


async def test_tool_loop_needs_sampling_tools_capability() -> None:
    """Without ``sampling.tools`` the SDK server refuses locally (-32602) and never sends the request;
    the example turns that into an ``isError`` result pointing at the proxy."""
    sampler = Sampler(text_result("unused"))
    async with connect(SERVERS / "tool_loop.py", sampling_callback=sampler) as client:
        result = await client.call_tool("research", {"question": "?"})
    assert result.is_error
    text = only_text(result)
    assert "-32602" in text and "sampling tools" in text and "mcp-sampling-proxy" in text
    assert sampler.requests == []


async def test_summarizer_without_client_sampling_is_a_tool_error() -> None:
    """A host without sampling gets a readable ``isError`` result, not a bare JSON-RPC error."""
    async with connect(SERVERS / "summarizer.py") as client:
        result = await client.call_tool("summarize", {"text": "hello"})
    assert result.is_error
    assert "Sampling not supported" in only_text(result)


@pytest.mark.parametrize(
    ("example", "tool", "arguments"),
    [
        ("summarizer.py", "summarize", {"text": "some text"}),
        ("image_describer.py", "describe_image", {}),
        ("tool_loop.py", "research", {"question": "Weather in Paris?"}),
    ],
)
async def test_a_refusal_from_a_sampling_client_is_not_told_to_run_behind_the_proxy(
    example: str, tool: str, arguments: dict[str, Any]
) -> None:
    """A client that samples (the proxy) and refuses, as a policy's deny rule does (code -1 and the rule's
    message), gets that message; the examples used to add "run it behind mcp-sampling-proxy", to a user who
    already does."""

    async def refuse(
        context: ClientRequestContext, params: types.CreateMessageRequestParams
    ) -> types.CreateMessageResult | types.CreateMessageResultWithTools | types.ErrorData:
        return types.ErrorData(code=-1, message="sampling is off for this server")

    async with connect(SERVERS / example, sampling_callback=refuse, sampling_capabilities=TOOLS_CAPABILITY) as client:
        result = await client.call_tool(tool, arguments)
    text = only_text(result)
    assert result.is_error and "(-1: sampling is off for this server)" in text, text
    assert "behind mcp-sampling-proxy" not in text


async def test_image_describer_sends_png_block() -> None:
    sampler = Sampler(text_result("A tiny red square."))
    async with connect(SERVERS / "image_describer.py", sampling_callback=sampler) as client:
        result = await client.call_tool("describe_image", {})
    assert only_text(result) == "A tiny red square."
    [request] = sampler.requests
    blocks = request.messages[0].content_as_list
    images = [block for block in blocks if isinstance(block, types.ImageContent)]
    assert len(images) == 1
    assert images[0].mime_type == "image/png"
    assert base64.b64decode(images[0].data).startswith(b"\x89PNG\r\n\x1a\n")
    assert any(isinstance(block, types.TextContent) for block in blocks)


# --- kitchen sink --------------------------------------------------------------------------------


async def test_kitchen_sink_basics_and_notifications() -> None:
    notifications: list[types.ServerNotification] = []
    logs: list[types.LoggingMessageNotificationParams] = []
    progress_seen: list[tuple[float, float | None, str | None]] = []

    async def on_message(message: IncomingMessage) -> None:
        if isinstance(message, types.ServerNotification):
            notifications.append(message)

    async def on_log(params: types.LoggingMessageNotificationParams) -> None:
        logs.append(params)

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        progress_seen.append((progress, total, message))

    async with connect(KITCHEN_SINK, message_handler=on_message, logging_callback=on_log) as client:
        assert client.server_info is not None and client.server_info.name == "kitchen-sink"
        tools = {tool.name for tool in (await client.list_tools()).tools}
        assert {"echo", "progress", "log", "notify_changes", "slow", "big", "crash", "caps"} <= tools
        assert {"sample", "sample_raw", "elicit_name", "list_roots", "slow_stats", "client_info"} <= tools

        assert only_text(await client.call_tool("echo", {"text": "héllo ✓"})) == "héllo ✓"
        assert only_text(await client.call_tool("progress", {"steps": 3}, progress_callback=on_progress))
        assert only_text(await client.call_tool("log", {"message": "hi there", "level": "warning"}))
        assert only_text(await client.call_tool("notify_changes", {})) == "notified"
        assert len(only_text(await client.call_tool("big", {"size": 5 * 1024 * 1024}))) == 5 * 1024 * 1024

        resource = await client.read_resource("test://hello")
        assert isinstance(resource.contents[0], types.TextResourceContents)
        assert resource.contents[0].text == "Hello from kitchen-sink!"
        prompt = await client.get_prompt("greet", {"name": "Ada"})
        assert isinstance(prompt.messages[0].content, types.TextContent)
        assert "Ada" in prompt.messages[0].content.text
        info = json.loads(only_text(await client.call_tool("client_info", {})))
        assert info["protocolVersion"] == "2025-11-25"

    assert progress_seen == [(i, 3, f"step {i}/3") for i in (1, 2, 3)]
    assert [(entry.level, entry.data, entry.logger) for entry in logs] == [("warning", "hi there", "kitchen-sink")]
    methods = [n.method for n in notifications if n.method != "notifications/message"]
    assert methods[-4:] == [
        "notifications/tools/list_changed",
        "notifications/resources/list_changed",
        "notifications/prompts/list_changed",
        "notifications/resources/updated",
    ]


async def test_kitchen_sink_caps_sample_and_server_requests() -> None:
    sampler = Sampler(text_result("sampled!", stop_reason="stopSequence"))

    async def on_elicit(context: ClientRequestContext, params: types.ElicitRequestParams) -> types.ElicitResult:
        assert isinstance(params, types.ElicitRequestFormParams)
        assert "name" in params.requested_schema["properties"]
        return types.ElicitResult(action="accept", content={"name": "Ada"})

    async def on_roots(context: ClientRequestContext) -> types.ListRootsResult:
        return types.ListRootsResult(roots=[types.Root(uri=FileUrl("file:///tmp/project"), name="project")])

    async with connect(
        KITCHEN_SINK,
        sampling_callback=sampler,
        sampling_capabilities=TOOLS_CAPABILITY,
        elicitation_callback=on_elicit,
        list_roots_callback=on_roots,
    ) as client:
        caps = json.loads(only_text(await client.call_tool("caps", {})))
        assert caps["sampling"] == {"tools": {}}
        assert "elicitation" in caps and caps["roots"] == {"listChanged": True}

        arguments = {
            "prompt": "Say hi",
            "max_tokens": 42,
            "system": "be brief",
            "stop": ["\n\n"],
            "temperature": 0.5,
            "hints": ["claude-3", "gpt"],
        }
        sampled = json.loads(only_text(await client.call_tool("sample", arguments)))
        assert sampled == {
            "content": {"type": "text", "text": "sampled!"},
            "model": CANNED_MODEL,
            "stopReason": "stopSequence",
        }
        [request] = sampler.requests
        assert (request.max_tokens, request.system_prompt, request.temperature) == (42, "be brief", 0.5)
        assert request.stop_sequences == ["\n\n"]
        assert request.model_preferences is not None and request.model_preferences.hints is not None
        assert [hint.name for hint in request.model_preferences.hints] == ["claude-3", "gpt"]

        elicited = json.loads(only_text(await client.call_tool("elicit_name", {})))
        assert elicited == {"action": "accept", "data": {"name": "Ada"}}
        roots = json.loads(only_text(await client.call_tool("list_roots", {})))
        assert roots == {"roots": [{"uri": "file:///tmp/project", "name": "project"}]}


async def test_kitchen_sink_sample_with_tools_returns_tool_use() -> None:
    sampler = Sampler(tool_use_result(("t1", "get_weather", {"city": "Oslo"})))
    async with connect(KITCHEN_SINK, sampling_callback=sampler, sampling_capabilities=TOOLS_CAPABILITY) as client:
        sampled = json.loads(only_text(await client.call_tool("sample", {"prompt": "weather?", "with_tools": True})))
    assert sampled["stopReason"] == "toolUse"
    assert sampled["content"] == [{"type": "tool_use", "id": "t1", "name": "get_weather", "input": {"city": "Oslo"}}]
    [request] = sampler.requests
    assert request.tools is not None and [tool.name for tool in request.tools] == ["get_weather"]


async def test_kitchen_sink_without_client_sampling() -> None:
    """No ``sampling`` declared: the SDK server still sends the request; the SDK client answers -32600."""
    async with connect(KITCHEN_SINK) as client:
        assert json.loads(only_text(await client.call_tool("caps", {}))) == {}
        result = await client.call_tool("sample", {"prompt": "hi"})
        assert result.is_error
        assert json.loads(only_text(result))["error"] == {
            "code": types.INVALID_REQUEST,
            "message": "Sampling not supported",
            "data": None,
        }
        # Tools-mode sampling is refused by the server itself before anything is sent.
        result = await client.call_tool("sample", {"prompt": "hi", "with_tools": True})
        assert result.is_error
        error = json.loads(only_text(result))["error"]
        assert error["code"] == types.INVALID_PARAMS and "sampling tools" in error["message"]


async def test_kitchen_sink_sample_raw() -> None:
    sampler = Sampler(text_result("raw ok"))
    async with connect(KITCHEN_SINK, sampling_callback=sampler) as client:
        valid = {"messages": [{"role": "user", "content": {"type": "text", "text": "hi"}}], "maxTokens": 5}
        ok = json.loads(only_text(await client.call_tool("sample_raw", {"params_json": json.dumps(valid)})))
        assert ok["result"]["content"] == {"type": "text", "text": "raw ok"}
        assert ok["result"]["model"] == CANNED_MODEL

        # Missing maxTokens: the SDK client rejects the params itself (-32602) without calling back.
        invalid = {"messages": [{"role": "user", "content": {"type": "text", "text": "hi"}}]}
        result = await client.call_tool("sample_raw", {"params_json": json.dumps(invalid)})
        assert result.is_error
        assert json.loads(only_text(result))["error"]["code"] == types.INVALID_PARAMS

        unknown = await client.call_tool("sample_raw", {"params_json": "{}", "method": "no/such/method"})
        assert json.loads(only_text(unknown))["error"]["code"] == types.METHOD_NOT_FOUND
    assert len(sampler.requests) == 1


async def test_kitchen_sink_cancellation_reaches_server() -> None:
    async with connect(KITCHEN_SINK) as client:
        with anyio.move_on_after(0.5) as scope:
            await client.call_tool("slow", {"seconds": 30})
        assert scope.cancelled_caught
        with anyio.fail_after(5):
            while json.loads(only_text(await client.call_tool("slow_stats", {})))["cancelled"] < 1:
                await anyio.sleep(0.05)
        assert only_text(await client.call_tool("slow", {"seconds": 0.01})) == "slept 0.01"
