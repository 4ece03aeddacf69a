"""Approval when the host gives the proxy no terminal, played in memory (tests/helpers/playbook.py): the
companion console (the tests' SocketConsole on the proxy's real socket) denies, edits, remembers for the
session or always, times out and reviews the answer; a host with elicitation approves or rejects. The
real relay and services between a host and a server the test plays, a loopback LLM speaking the OpenAI
wire format. The console approving through the proxy as a process, an SDK host and the kitchen-sink
server: tests/e2e/test_approval_channels.py.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
from fakes.llm_server import FakeLLMServer
from helpers.console import PROMPT_RULES, SocketConsole
from helpers.playbook import Playbook
from helpers.support import openai_policy

pytestmark = pytest.mark.anyio
SERVER = "kitchen_sink_server"


@pytest.fixture(autouse=True)
def llm_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TEST_LLM_KEY", "k")


def prompt(text: str) -> dict[str, Any]:
    """The request the kitchen-sink server's `sample` tool sends."""
    return {"messages": [{"role": "user", "content": {"type": "text", "text": text}}], "maxTokens": 100}


async def sample_with_console(
    tmp_path: Path,
    policy: str,
    decide: Callable[[SocketConsole], Awaitable[None]],
    prompts: tuple[str, ...] = ("ask me",),
    *,
    state: bool = False,
) -> list[dict[str, Any]]:
    """What the server gets for each prompt (asked one after the other) while `decide` plays the console."""
    results: list[dict[str, Any]] = []
    async with Playbook(tmp_path, policy, name=SERVER, console=True, state=state) as play:
        await play.handshake({})
        console = await play.attach_console()
        async with anyio.create_task_group() as tg:

            async def run_calls() -> None:
                for text in prompts:
                    results.append(await play.sample(prompt(text)))

            tg.start_soon(run_calls)
            await decide(console)
    return results


async def test_console_denies(tmp_path: Path, llm: FakeLLMServer) -> None:
    async def decide(console: SocketConsole) -> None:
        pending = await console.receive()
        assert (pending["type"], pending["server"], pending["tool"]) == ("pending", SERVER, "sample")
        await console.send({"type": "decision", "id": pending["id"], "approve": False})

    (result,) = await sample_with_console(tmp_path, openai_policy(llm.base_url, rules=PROMPT_RULES), decide)
    assert result["error"]["code"] == -1
    assert "rejected at the companion console" in result["error"]["message"]
    assert llm.requests == []


async def test_console_edits_the_prompt(tmp_path: Path, llm: FakeLLMServer) -> None:
    async def decide(console: SocketConsole) -> None:
        pending = await console.receive()
        params = pending["params"]
        params["messages"][0]["content"]["text"] = "edited by the operator"
        await console.send({"type": "decision", "id": pending["id"], "approve": True, "params": params})

    (result,) = await sample_with_console(tmp_path, openai_policy(llm.base_url, rules=PROMPT_RULES), decide)
    assert llm.requests[0].body["messages"][-1]["content"] == "edited by the operator"
    assert result["result"]["content"]["text"] == "echo: edited by the operator"


async def test_console_session_scope_is_remembered(tmp_path: Path, llm: FakeLLMServer) -> None:
    async def decide(console: SocketConsole) -> None:
        pending = await console.receive()
        await console.send({"type": "decision", "id": pending["id"], "approve": True, "scope": "session"})
        assert (await console.receive())["type"] == "resolved"

    policy = openai_policy(llm.base_url, rules=PROMPT_RULES)
    results = await sample_with_console(tmp_path, policy, decide, prompts=("first", "second"))
    assert [r["result"]["content"]["text"] for r in results] == ["echo: first", "echo: second"]


async def test_console_timeout_denies_and_says_so(tmp_path: Path, llm: FakeLLMServer) -> None:
    async def decide(console: SocketConsole) -> None:
        assert (await console.receive())["type"] == "pending"  # and never answer
        assert (await console.receive())["type"] == "resolved"

    policy = openai_policy(llm.base_url, rules=PROMPT_RULES) + "approval:\n  timeout: 1\n"
    (result,) = await sample_with_console(tmp_path, policy, decide)
    assert result["error"]["code"] == -1
    assert "nobody answered" in result["error"]["message"]
    assert llm.requests == []


@pytest.mark.parametrize(("approve", "expected"), [(True, "echo: host ok"), (False, None)])
async def test_host_elicitation_approves_or_rejects(
    tmp_path: Path, llm: FakeLLMServer, approve: bool, expected: str | None
) -> None:
    async with Playbook(tmp_path, openai_policy(llm.base_url, rules=PROMPT_RULES), name=SERVER) as play:
        await play.handshake({"elicitation": {}})
        async with play.call("sample"):
            play.server.says(
                {"jsonrpc": "2.0", "id": "s-1", "method": "sampling/createMessage", "params": prompt("host ok")}
            )
            asked = await play.host.next()
            assert asked["method"] == "elicitation/create", asked
            answer = {"action": "accept", "content": {"approve": approve}}
            play.host.says({"jsonrpc": "2.0", "id": asked["id"], "result": answer})
            result = await play.server.next()
    assert SERVER in asked["params"]["message"] and "host ok" in asked["params"]["message"]
    if expected:
        assert result["result"]["content"]["text"] == expected
    else:
        assert result["error"]["code"] == -1
        assert llm.requests == []


async def test_always_approval_survives_a_restart(tmp_path: Path, llm: FakeLLMServer) -> None:
    async def decide(console: SocketConsole) -> None:
        pending = await console.receive()
        await console.send({"type": "decision", "id": pending["id"], "approve": True, "scope": "always"})

    policy = openai_policy(llm.base_url, rules=PROMPT_RULES)
    await sample_with_console(tmp_path, policy, decide, state=True)
    # the proxy again, nobody to ask: the remembered approval lets it through
    async with Playbook(tmp_path, policy, name=SERVER, state=True) as play:
        await play.handshake({})
        result = await play.sample(prompt("again"))
    assert result["result"]["content"]["text"] == "echo: again"


@pytest.mark.parametrize("accept", [True, False])
async def test_console_reviews_and_edits_the_answer(tmp_path: Path, llm: FakeLLMServer, accept: bool) -> None:
    async def decide(console: SocketConsole) -> None:
        review = await console.receive()
        assert review["type"] == "review"
        assert review["result"]["content"]["text"] == "echo: ask me"
        edited = {**review["result"], "content": {"type": "text", "text": "reviewed answer"}}
        await console.send({"type": "review", "id": review["id"], "accept": accept, "result": edited})

    policy = openai_policy(llm.base_url) + "approval:\n  review_response: true\n"
    (result,) = await sample_with_console(tmp_path, policy, decide)
    if accept:
        assert result["result"]["content"]["text"] == "reviewed answer"
    else:
        assert result["error"]["code"] == -1
        assert "not approved" in result["error"]["message"]
