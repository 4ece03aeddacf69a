"""A call a handshake session cannot carry runs again over the server's 2026-era connection.

FastMCP 4 asks for sampling only by answering `input_required` (2026-07-28) and refuses the call on a
handshake connection with an error that says so; its `ctx.elicit` works only on a handshake connection.
The relay keeps the session in the handshake era and runs such a call again over a second connection,
answers its rounds through the policy and the proxy's LLM, and gives the host the final result under
its own id. In memory (tests/helpers/playbook.py): the real relay and services, the test playing the
host, the server and its second connection.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest
from fakes.llm_server import FakeLLMServer
from helpers.playbook import Playbook
from helpers.support import openai_policy

pytestmark = pytest.mark.anyio

REFUSAL = {
    "code": -32602,
    "message": "Tool 'summarize' returned an InputRequiredResult to request client input, but the multi-round-trip "
    "result type (SEP-2322) only exists at MCP 2026-07-28; this connection negotiated '2025-11-25'. Use "
    "ctx.elicit() for server-initiated input on handshake-era connections.",
}
SAMPLE = {
    "method": "sampling/createMessage",
    "params": {
        "messages": [{"role": "user", "content": {"type": "text", "text": "Summarize: the sea"}}],
        "maxTokens": 20,
    },
}


@pytest.fixture(autouse=True)
def key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TEST_LLM_KEY", "k")


def summarize(call_id: int = 5) -> dict[str, Any]:
    params = {"name": "summarize", "arguments": {"text": "the sea"}, "_meta": {"progressToken": "p1"}}
    return {"jsonrpc": "2.0", "id": call_id, "method": "tools/call", "params": params}


async def refused_on_the_handshake(play: Playbook, call_id: int = 5, error: dict[str, Any] = REFUSAL) -> None:
    play.host.says(summarize(call_id))
    forwarded = await play.server.next()
    assert forwarded["method"] == "tools/call"
    play.server.says({"jsonrpc": "2.0", "id": forwarded["id"], "error": error})


async def test_the_call_runs_again_in_2026_and_the_proxys_llm_answers_its_round(
    tmp_path: Path, llm: FakeLLMServer
) -> None:
    async with Playbook(tmp_path, openai_policy(llm.base_url), second_leg=True) as play:
        assert play.second_leg is not None
        await play.handshake()
        await refused_on_the_handshake(play)

        again = await play.second_leg.next()
        assert again["method"] == "tools/call" and again["id"] != 5  # a private id
        meta = again["params"]["_meta"]
        assert meta["io.modelcontextprotocol/protocolVersion"] == "2026-07-28"
        assert meta["io.modelcontextprotocol/clientInfo"] == {"name": "played-host", "version": "1"}
        assert "sampling" in meta["io.modelcontextprotocol/clientCapabilities"]  # the proxy answers it
        assert meta["progressToken"] == "p1" and again["params"]["arguments"] == {"text": "the sea"}
        round_ = {"resultType": "input_required", "inputRequests": {"s": SAMPLE}, "requestState": "state-1"}
        play.second_leg.says({"jsonrpc": "2.0", "id": again["id"], "result": round_})

        retried = await play.second_leg.next()
        assert retried["id"] not in (5, again["id"]) and retried["params"]["requestState"] == "state-1"
        answer = retried["params"]["inputResponses"]["s"]
        assert "Summarize: the sea" in answer["content"]["text"]  # the fake LLM echoes the prompt
        assert "Summarize: the sea" in str(llm.last.body["messages"])
        play.second_leg.says(
            {"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progressToken": "p1", "progress": 1}}
        )
        final = {"content": [{"type": "text", "text": "summary: done"}], "resultType": "complete"}
        play.second_leg.says({"jsonrpc": "2.0", "id": retried["id"], "result": final})

        assert (await play.host.next())["method"] == "notifications/progress"
        answered = await play.host.next()
        assert answered["id"] == 5 and answered["result"]["content"][0]["text"] == "summary: done"
        assert play.second_leg.opened == 1
        decisions = [r for r in play.audit() if r.get("method") == "sampling/createMessage"]
        assert [(r["tool"], r["decision"]) for r in decisions] == [("summarize", "allow")]


async def test_without_a_second_connection_the_host_gets_the_servers_refusal(
    tmp_path: Path, llm: FakeLLMServer
) -> None:
    async with Playbook(tmp_path, openai_policy(llm.base_url), second_leg=True) as play:
        assert play.second_leg is not None
        play.second_leg.refuse = True
        await play.handshake()
        await refused_on_the_handshake(play)
        answered = await play.host.next()
        assert answered["id"] == 5 and answered["error"] == REFUSAL
        assert play.second_leg.opened == 1


async def test_another_error_is_the_hosts_and_opens_nothing(tmp_path: Path, llm: FakeLLMServer) -> None:
    failed = {"code": -32602, "message": "Unknown tool: summarize"}
    async with Playbook(tmp_path, openai_policy(llm.base_url), second_leg=True) as play:
        assert play.second_leg is not None
        await play.handshake()
        await refused_on_the_handshake(play, error=failed)
        assert (await play.host.next())["error"] == failed
        assert play.second_leg.opened == 0


async def test_a_pinned_era_is_kept(tmp_path: Path, llm: FakeLLMServer) -> None:
    policy = openai_policy(llm.base_url) + "upstream:\n  era: handshake\n"
    async with Playbook(tmp_path, policy, second_leg=True) as play:
        assert play.second_leg is not None
        await play.handshake()
        await refused_on_the_handshake(play)
        assert (await play.host.next())["error"] == REFUSAL
        assert play.second_leg.opened == 0


async def test_the_hosts_cancellation_reaches_the_call_on_the_second_connection(
    tmp_path: Path, llm: FakeLLMServer
) -> None:
    async with Playbook(tmp_path, openai_policy(llm.base_url), second_leg=True) as play:
        assert play.second_leg is not None
        await play.handshake()
        await refused_on_the_handshake(play)
        again = await play.second_leg.next()
        play.host.says({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 5}})
        cancelled = await play.second_leg.next()
        assert cancelled["method"] == "notifications/cancelled"
        assert cancelled["params"]["requestId"] == again["id"]  # the id the second connection knows
        play.second_leg.says({"jsonrpc": "2.0", "id": again["id"], "result": {"content": []}})  # too late
        await anyio.sleep(0.1)
        assert play.host.nothing_yet()  # a cancelled request gets no answer


async def test_a_second_connection_that_closes_is_not_opened_again(tmp_path: Path, llm: FakeLLMServer) -> None:
    async with Playbook(tmp_path, openai_policy(llm.base_url), second_leg=True) as play:
        assert play.second_leg is not None and play.second_leg.end is None
        await play.handshake()
        await refused_on_the_handshake(play)
        await play.second_leg.next()
        assert play.second_leg.end is not None
        play.second_leg.end()  # the server's second process exits mid-call
        ended = await play.host.next()
        assert ended["id"] == 5 and "closed its 2026-07-28 connection" in ended["error"]["message"]
        await refused_on_the_handshake(play, call_id=6)
        assert (await play.host.next())["error"] == REFUSAL  # as directly: the server's refusal
        assert play.second_leg.opened == 1
