"""`client:` rules through `serve`: two callers with tokens of their own get the rules of their names.

Real parts only: `serve` as a process with a token file, the `mcp` SDK's Streamable HTTP client with
each caller's bearer token, the kitchen-sink server sampling behind the proxy, a loopback
OpenAI-compatible LLM, and the audit file the proxy writes.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from fakes.llm_server import FakeLLMServer
from helpers.serving import ALICE, BOB, KITCHEN_SINK_COMMAND, http_host, start_serve, stop
from helpers.support import openai_policy, tool_json, write_policy
from mcp.shared.exceptions import MCPError

pytestmark = pytest.mark.anyio

RULES = """\
rules:
  - name: alice
    when: {client: alice}
    action: allow
    budget: {tokens: 100000, per: 1d}
  - name: everyone-else
    action: deny
    message: ask for a token of your own
"""


@asynccontextmanager
async def serving(tmp_path: Path, policy: str) -> AsyncIterator[str]:
    """`serve` with alice's and bob's tokens; yields its URL and stops it at the end."""
    served = start_serve(tmp_path, "--policy", policy, upstream=KITCHEN_SINK_COMMAND)
    try:
        yield served.url
    finally:
        stop(served)


async def sample_as(url: str, token: str, prompt: str) -> dict[str, object]:
    """The kitchen-sink server's `sample` tool, called by the caller of `token` (the SDK's Client)."""
    async with http_host(url, token) as client:
        answer: dict[str, object] = tool_json(await client.call_tool("sample", {"prompt": prompt}))
        return answer


async def test_alice_is_answered_and_bob_is_refused_with_the_rules_reason(
    tmp_path: Path,
) -> None:
    audit = tmp_path / "audit.jsonl"
    with FakeLLMServer("openai") as llm:
        policy = write_policy(tmp_path, openai_policy(llm.base_url, rules=RULES, extra=f"audit:\n  path: {audit}\n"))
        llm.reply_text("hello alice", model="gpt-test")
        async with serving(tmp_path, policy) as url:
            alices = await sample_as(url, ALICE, "from alice")
            bobs = await sample_as(url, BOB, "from bob")
        asked = [json.dumps(request.body["messages"]) for request in llm.requests]
    assert alices["content"] == {"type": "text", "text": "hello alice"}
    assert bobs["error"] == {"code": -1, "message": "ask for a token of your own", "data": None}
    assert len(asked) == 1 and "from alice" in asked[0]  # bob's request never reached the LLM
    records = [r for r in map(json.loads, audit.read_text().splitlines()) if r.get("event") == "decision"]
    assert [(r["client"], r["rule"], r["decision"]) for r in records] == [
        ("alice", "alice", "allow"),
        ("bob", "everyone-else", "deny"),
    ]
    assert records[1]["reason"] == "ask for a token of your own"


TOOL_RULES = """\
rules:
  - name: allow-all
    action: allow
tools:
  rules:
    - name: only-alice-echoes
      tool: echo
      client: bob
      action: deny
      message: echo is alice's
"""


async def tools_as(url: str, token: str) -> tuple[list[str], str]:
    """The tools the caller of `token` sees, and what its call of `echo` answers."""
    async with http_host(url, token) as client:
        names = [tool.name for tool in (await client.list_tools()).tools]
        try:
            result = await client.call_tool("echo", {"text": "hi"})
        except MCPError as exc:  # refused by the proxy: a JSON-RPC error
            return names, exc.error.message
        return names, "".join(getattr(block, "text", "") for block in result.content)


async def test_a_tools_rule_can_name_the_caller(tmp_path: Path) -> None:
    """`tools.rules` with `client:`: bob neither sees nor calls the tool that the rule keeps for alice."""
    audit = tmp_path / "audit.jsonl"
    rules = TOOL_RULES
    with FakeLLMServer("openai") as llm:
        policy = write_policy(tmp_path, openai_policy(llm.base_url, rules=rules, extra=f"audit:\n  path: {audit}\n"))
        async with serving(tmp_path, policy) as url:
            alice_sees, alice_gets = await tools_as(url, ALICE)
            bob_sees, bob_gets = await tools_as(url, BOB)
    assert "echo" in alice_sees and "hi" in alice_gets
    assert "echo" not in bob_sees and "echo is alice's" in bob_gets
    records = [r for r in map(json.loads, audit.read_text().splitlines()) if r.get("rule") == "only-alice-echoes"]
    assert records and {r["client"] for r in records} == {"bob"}
