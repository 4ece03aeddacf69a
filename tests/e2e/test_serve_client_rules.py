"""`client:` rules through `serve`: two callers with tokens of their own get the rules of their names.
A tools rule naming the caller is played in process: tests/unit/front/test_serve_client_rules_played.py.

Real parts only: `serve` as a process with a token file, the `mcp` SDK's Streamable HTTP client with
each caller's bearer token, the small server sampling behind the proxy, a loopback
OpenAI-compatible LLM, and the audit file the proxy writes.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from fakes.llm_server import FakeLLMServer
from helpers.serving import ALICE, BOB, http_host, start_serve, stop
from helpers.support import openai_policy, tool_json, write_policy

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
    served = start_serve(tmp_path, "--policy", policy)
    try:
        yield served.url
    finally:
        stop(served)


async def sample_as(url: str, token: str, prompt: str) -> dict[str, object]:
    """The small server's `sample` tool, called by the caller of `token` (the SDK's Client)."""
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
