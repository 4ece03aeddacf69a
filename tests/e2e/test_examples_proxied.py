"""The shipped example servers work behind the proxy for a host without sampling."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from fakes.llm_server import FakeLLMServer
from helpers.support import EXAMPLES, PY, openai_policy, proxy_command, proxy_env, sdk_host, tool_text, write_policy


@pytest.mark.anyio
async def test_tool_loop_runs_tools_through_sampling_with_tools(tmp_path: Path, llm: FakeLLMServer) -> None:
    llm.reply_tool_call("get_weather", {"city": "Paris"}, id="call_1")
    llm.reply_text("It is sunny in Paris.")
    policy = write_policy(tmp_path, openai_policy(llm.base_url))
    command = proxy_command(policy, upstream=[PY, str(EXAMPLES / "tool_loop.py")])
    async with sdk_host(command, proxy_env(TEST_LLM_KEY="k"), tmp_path / "stderr.log") as client:
        result = await client.call_tool("research", {"question": "Weather in Paris?"})
    text = tool_text(result)
    assert "It is sunny in Paris." in text
    assert "iterations: 2" in text
    first, second = (r.body for r in llm.requests)
    assert {t["function"]["name"] for t in first["tools"]} >= {"get_weather", "calculate"}
    assert second["messages"][-2]["tool_calls"][0]["id"] == "call_1"
    assert second["messages"][-1]["role"] == "tool"
    assert second["messages"][-1]["tool_call_id"] == "call_1"


@pytest.mark.anyio
async def test_image_describer_sends_the_image(tmp_path: Path, llm: FakeLLMServer) -> None:
    llm.reply_text("A red square.")
    policy = write_policy(tmp_path, openai_policy(llm.base_url))
    command = proxy_command(policy, upstream=[PY, str(EXAMPLES / "image_describer.py")])
    async with sdk_host(command, proxy_env(TEST_LLM_KEY="k"), tmp_path / "stderr.log") as client:
        result = await client.call_tool("describe_image", {})
    assert "A red square." in tool_text(result)
    parts = llm.requests[0].body["messages"][-1]["content"]
    assert any(p["type"] == "image_url" and p["image_url"]["url"].startswith("data:image/png;base64,") for p in parts)


def test_try_command_summarizes_with_a_local_openai_compatible_server(tmp_path: Path, llm: FakeLLMServer) -> None:
    llm.reply_text("MCP lets servers borrow the client's LLM.")
    policy = write_policy(tmp_path, "rules:\n  - name: all\n    action: allow\n")
    env = proxy_env(OPENAI_BASE_URL=llm.base_url, OPENAI_API_KEY="sk-local")
    result = subprocess.run(
        [
            PY,
            "-m",
            "mcp_sampling_proxy",
            "try",
            "--policy",
            policy,
            "--tool",
            "summarize",
            "--args",
            json.dumps({"text": "MCP sampling lets servers ask the client for completions."}),
            "--",
            PY,
            str(EXAMPLES / "summarizer.py"),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert "tools: summarize" in result.stdout
    assert "MCP lets servers borrow the client's LLM." in result.stdout
    assert "proxy: fulfilled" in result.stderr
    assert "sk-local" not in result.stdout + result.stderr
