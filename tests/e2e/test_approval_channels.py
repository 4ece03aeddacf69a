"""Approval when the host gives the proxy no terminal: the companion console and host elicitation,
through the real proxy. The remembered approvals' file alone, in process:
tests/unit/approval/test_approval_memory.py."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import anyio
import pytest
from fakes.llm_server import FakeLLMServer
from helpers.console import PROMPT_RULES, SocketConsole
from helpers.support import openai_policy, proxy_command, proxy_env, sdk_host, tool_json, write_policy


async def sample_with_console(
    tmp_path: Path, dirs: dict[str, str], policy_text: str, decide: Any, prompts: tuple[str, ...] = ("ask me",)
) -> list[Any]:
    policy = write_policy(tmp_path, policy_text)
    results: list[Any] = []
    async with sdk_host(proxy_command(policy), proxy_env(**dirs), tmp_path / "stderr.log") as client:
        console = await SocketConsole.attach(Path(dirs["MCP_SAMPLING_PROXY_RUNTIME_DIR"]))
        async with anyio.create_task_group() as tg:

            async def run_calls() -> None:
                for prompt in prompts:
                    results.append(await client.call_tool("sample", {"prompt": prompt}))
                tg.cancel_scope.cancel()

            tg.start_soon(run_calls)
            await decide(console)
            await anyio.sleep_forever()
    return results


@pytest.mark.anyio
async def test_console_approves(tmp_path: Path, dirs: dict[str, str], llm: FakeLLMServer) -> None:
    async def decide(console: SocketConsole) -> None:
        pending = await console.receive()
        assert pending["type"] == "pending"
        assert pending["server"] == "kitchen_sink_server"
        assert pending["tool"] == "sample"
        assert pending["params"]["messages"][0]["content"]["text"] == "ask me"
        await console.send({"type": "decision", "id": pending["id"], "approve": True, "scope": "once"})

    (result,) = await sample_with_console(tmp_path, dirs, openai_policy(llm.base_url, rules=PROMPT_RULES), decide)
    assert tool_json(result)["content"]["text"] == "echo: ask me"


@pytest.mark.anyio
async def test_console_denies(tmp_path: Path, dirs: dict[str, str], llm: FakeLLMServer) -> None:
    async def decide(console: SocketConsole) -> None:
        pending = await console.receive()
        await console.send({"type": "decision", "id": pending["id"], "approve": False})

    (result,) = await sample_with_console(tmp_path, dirs, openai_policy(llm.base_url, rules=PROMPT_RULES), decide)
    error = tool_json(result)["error"]
    assert error["code"] == -1
    assert "rejected at the companion console" in error["message"]
    assert llm.requests == []


@pytest.mark.anyio
async def test_console_edits_the_prompt(tmp_path: Path, dirs: dict[str, str], llm: FakeLLMServer) -> None:
    async def decide(console: SocketConsole) -> None:
        pending = await console.receive()
        params = pending["params"]
        params["messages"][0]["content"]["text"] = "edited by the operator"
        await console.send({"type": "decision", "id": pending["id"], "approve": True, "params": params})

    (result,) = await sample_with_console(tmp_path, dirs, openai_policy(llm.base_url, rules=PROMPT_RULES), decide)
    assert llm.requests[0].body["messages"][-1]["content"] == "edited by the operator"
    assert tool_json(result)["content"]["text"] == "echo: edited by the operator"


@pytest.mark.anyio
async def test_console_session_scope_is_remembered(tmp_path: Path, dirs: dict[str, str], llm: FakeLLMServer) -> None:
    async def decide(console: SocketConsole) -> None:
        pending = await console.receive()
        await console.send({"type": "decision", "id": pending["id"], "approve": True, "scope": "session"})
        assert (await console.receive())["type"] == "resolved"

    results = await sample_with_console(
        tmp_path, dirs, openai_policy(llm.base_url, rules=PROMPT_RULES), decide, prompts=("first", "second")
    )
    assert [tool_json(r)["content"]["text"] for r in results] == ["echo: first", "echo: second"]


@pytest.mark.anyio
async def test_console_timeout_denies_and_says_so(tmp_path: Path, dirs: dict[str, str], llm: FakeLLMServer) -> None:
    async def decide(console: SocketConsole) -> None:
        assert (await console.receive())["type"] == "pending"  # and never answer
        assert (await console.receive())["type"] == "resolved"

    policy = openai_policy(llm.base_url, rules=PROMPT_RULES) + "approval:\n  timeout: 1\n"
    (result,) = await sample_with_console(tmp_path, dirs, policy, decide)
    error = tool_json(result)["error"]
    assert error["code"] == -1
    assert "nobody answered" in error["message"]
    assert llm.requests == []


@pytest.mark.anyio
@pytest.mark.parametrize(("approve", "expected"), [(True, "echo: host ok"), (False, None)])
async def test_host_elicitation_approves_or_rejects(
    tmp_path: Path, dirs: dict[str, str], llm: FakeLLMServer, approve: bool, expected: str | None
) -> None:
    from mcp_types import ElicitResult

    asked: list[Any] = []

    async def host_elicitation(context: Any, params: Any) -> ElicitResult:
        asked.append(params)
        return ElicitResult(action="accept", content={"approve": approve})

    policy = write_policy(tmp_path, openai_policy(llm.base_url, rules=PROMPT_RULES))
    async with sdk_host(
        proxy_command(policy), proxy_env(**dirs), tmp_path / "stderr.log", elicitation_callback=host_elicitation
    ) as client:
        result = await client.call_tool("sample", {"prompt": "host ok"})
    assert "kitchen-sink" in asked[0].message
    assert "host ok" in asked[0].message
    if expected:
        assert tool_json(result)["content"]["text"] == expected
    else:
        assert tool_json(result)["error"]["code"] == -1
        assert llm.requests == []


@pytest.mark.anyio
async def test_always_approval_survives_a_restart(tmp_path: Path, dirs: dict[str, str], llm: FakeLLMServer) -> None:
    async def decide(console: SocketConsole) -> None:
        pending = await console.receive()
        await console.send({"type": "decision", "id": pending["id"], "approve": True, "scope": "always"})

    policy_text = openai_policy(llm.base_url, rules=PROMPT_RULES)
    await sample_with_console(tmp_path, dirs, policy_text, decide)
    # a new proxy, nobody to ask: the remembered approval lets it through
    policy = write_policy(tmp_path, policy_text)
    async with sdk_host(proxy_command(policy), proxy_env(**dirs), tmp_path / "stderr2.log") as client:
        result = await client.call_tool("sample", {"prompt": "again"})
    assert tool_json(result)["content"]["text"] == "echo: again"
    assert os.path.exists(Path(dirs["MCP_SAMPLING_PROXY_STATE_DIR"]) / "approvals.json")


@pytest.mark.anyio
@pytest.mark.parametrize("accept", [True, False])
async def test_console_reviews_and_edits_the_answer(
    tmp_path: Path, dirs: dict[str, str], llm: FakeLLMServer, accept: bool
) -> None:
    async def decide(console: SocketConsole) -> None:
        review = await console.receive()
        assert review["type"] == "review"
        assert review["result"]["content"]["text"] == "echo: ask me"
        edited = {**review["result"], "content": {"type": "text", "text": "reviewed answer"}}
        await console.send({"type": "review", "id": review["id"], "accept": accept, "result": edited})

    policy = openai_policy(llm.base_url) + "approval:\n  review_response: true\n"
    (result,) = await sample_with_console(tmp_path, dirs, policy, decide)
    if accept:
        assert tool_json(result)["content"]["text"] == "reviewed answer"
    else:
        assert tool_json(result)["error"]["code"] == -1
        assert "not approved" in tool_json(result)["error"]["message"]
