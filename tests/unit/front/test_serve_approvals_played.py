"""What the policy decides in `serve`'s sessions, played in process (helpers/played_serve.py
`played_sessions`): an approval asked in the HTTP client's own UI or at the companion console, a tool rule;
each audit record names the client whose token opened the session."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest
from fakes.llm_server import FakeLLMServer
from helpers.console import PROMPT_RULES, SocketConsole
from helpers.played_serve import played_sessions
from helpers.serving import ALICE, BOB, token_file
from helpers.support import openai_policy, tool_json, write_policy
from mcp.shared.exceptions import MCPError
from mcp_types import ElicitResult

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("llm_key")]


@pytest.mark.parametrize("approve", [True, False])
async def test_an_approval_is_asked_in_the_http_hosts_own_ui(tmp_path: Path, llm: FakeLLMServer, approve: bool) -> None:
    """`action: prompt` with the host channel: the approval form reaches the HTTP client on the stream of
    the tool call it belongs to, and its answer decides."""
    rules = "rules:\n  - name: ask\n    action: prompt\napproval:\n  channels: [host]\n"
    extra = f"audit:\n  path: {tmp_path / 'audit.jsonl'}\n"
    policy = write_policy(tmp_path, openai_policy(llm.base_url, rules=rules, extra=extra))
    asked: list[str] = []

    async def approver(context: Any, params: Any) -> ElicitResult:
        asked.append(params.message)
        return ElicitResult(action="accept", content={"approve": approve})

    llm.reply_text("approved answer")
    async with played_sessions("--token-file", token_file(tmp_path), policy=policy) as served:
        async with served.client(BOB, elicitation_callback=approver) as client:
            result = await client.call_tool("sample", {"prompt": "may I?"})
        (record,) = served.audit()
    assert len(asked) == 1 and "asks to use an LLM" in asked[0]
    assert record["client"] == "bob"
    if approve:
        assert tool_json(result)["content"]["text"] == "approved answer"
        assert record["decision"] == "approved" and record["approver"] == "host"
    else:
        assert "error" in tool_json(result)
        assert record["decision"] == "rejected"
        assert llm.requests == []


async def test_a_tool_rule_holds_over_http_and_names_the_client(tmp_path: Path) -> None:
    rules = "tools:\n  rules:\n    - name: no-echo\n      tool: echo\n      action: deny\n      message: not today\n"
    policy = write_policy(tmp_path, f"audit:\n  path: {tmp_path / 'audit.jsonl'}\n{rules}")
    async with played_sessions("--token-file", token_file(tmp_path), policy=policy) as served:
        async with served.client(ALICE) as client:
            names = {tool.name for tool in (await client.list_tools()).tools}
            with pytest.raises(MCPError, match="tools rule 'no-echo': not today"):
                await client.call_tool("echo", {"text": "x"})
        records = served.audit()
        calls = [m for m in served.servers[0].got if m.get("method") == "tools/call"]
    assert "echo" not in names and "sample" in names
    assert records and all(record["client"] == "alice" for record in records)
    assert {record["decision"] for record in records} == {"deny"}
    assert calls == []  # the server never saw the call


async def test_a_served_request_is_approved_at_the_companion_console(tmp_path: Path, llm: FakeLLMServer) -> None:
    """No terminal is assumed: with the console channel, the question reaches `console` on serve's socket."""
    rules = f"{PROMPT_RULES}approval:\n  channels: [terminal, console]\naudit:\n  path: {tmp_path / 'audit.jsonl'}\n"
    policy = write_policy(tmp_path, openai_policy(llm.base_url, rules=rules))
    llm.reply_text("console-approved")
    results: list[Any] = []
    async with played_sessions("--token-file", token_file(tmp_path), policy=policy) as served:
        assert served.front.console.path is not None
        console = await SocketConsole.attach(served.front.console.path.parent)
        async with served.client(ALICE) as client, anyio.create_task_group() as tg:

            async def call() -> None:
                results.append(tool_json(await client.call_tool("sample", {"prompt": "ask a person"})))

            tg.start_soon(call)
            pending = await console.receive()
            assert pending["type"] == "pending"
            await console.send({"type": "decision", "id": pending["id"], "approve": True})
        (record,) = served.audit()
    assert results[0]["content"]["text"] == "console-approved"
    assert record["decision"] == "approved" and record["approver"] == "console" and record["client"] == "alice"
