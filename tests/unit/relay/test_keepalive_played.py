"""Progress keep-alive, played in memory: while the proxy serves a server's request (an LLM call, a human's
approval), the host's tool call gets a progress notification every `keepalive_seconds` on its progress
token, so a host whose timeout resets on progress keeps waiting; without a token, or with the keep-alive
off, it gets none. tests/e2e/test_keepalive.py keeps the end-to-end case (an SDK host whose 2 s timeout
survives a 6 s LLM call through the proxy process); the rest is here, with the real relay and services.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest
from fakes.llm_server import FakeLLMServer
from helpers.playbook import Peer, Playbook
from helpers.support import openai_policy

from mcp_sampling_proxy.relay.keepalive import Progress

pytestmark = pytest.mark.anyio

KEEPALIVE = "sampling:\n  keepalive_seconds: 0.05\n"
WAIT = 0.6  # s the LLM or the human takes: about 12 keep-alives


@pytest.fixture(autouse=True)
def key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TEST_LLM_KEY", "k")


async def call_that_samples(play: Playbook, token: str | None) -> None:
    """The host calls a tool (with `token` as its progress token); the server asks for a sample in it."""
    params: dict[str, Any] = {"name": "sample", "arguments": {}}
    if token is not None:
        params["_meta"] = {"progressToken": token}
    play.host.says({"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": params})
    assert (await play.server.next())["method"] == "tools/call"
    messages = [{"role": "user", "content": {"type": "text", "text": "take your time"}}]
    play.server.says(
        {
            "jsonrpc": "2.0",
            "id": 900,
            "method": "sampling/createMessage",
            "params": {"messages": messages, "maxTokens": 9},
        }
    )


async def progress_until_sampled(play: Playbook) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The progress the host gets until the server has its sample; the sampling answer."""
    seen: list[dict[str, Any]] = []
    async with anyio.create_task_group() as tg:

        async def watch(host: Peer) -> None:
            while True:
                message = await host.next(timeout=10)
                assert message.get("method") == "notifications/progress", message
                seen.append(message["params"])

        tg.start_soon(watch, play.host)
        answer = await play.server.next(timeout=10)
        tg.cancel_scope.cancel()
    return seen, answer


async def finish(play: Playbook) -> None:
    """The server answers the call; the host gets that answer, then nothing more."""
    play.server.says({"jsonrpc": "2.0", "id": 5, "result": {"content": [{"type": "text", "text": "done"}]}})
    assert (await play.host.next())["id"] == 5
    await anyio.sleep(0.2)
    assert play.host.nothing_yet(), "progress after the call ended"


async def test_a_slow_llm_keeps_the_call_alive_with_tiny_rising_steps(tmp_path: Path, llm: FakeLLMServer) -> None:
    llm.reply_text("finally", delay=WAIT)
    async with Playbook(tmp_path, openai_policy(llm.base_url, extra=KEEPALIVE)) as play:
        await play.handshake()
        await call_that_samples(play, "tok")
        seen, answer = await progress_until_sampled(play)
        assert answer["id"] == 900 and answer["result"]["content"]["text"] == "finally"
        await finish(play)
    assert len(seen) >= 6, seen  # about one every 0.05 s for 0.6 s, on a slow machine fewer
    assert {p["progressToken"] for p in seen} == {"tok"}
    values = [p["progress"] for p in seen]
    assert values == sorted(set(values)), "progress must increase"
    assert values[-1] < 0.001  # the host's bar does not move
    messages = [p["message"] for p in seen]  # the first tick may come before the LLM call starts
    assert set(messages) <= {"waiting for sampling", "waiting for the LLM"}
    assert messages.count("waiting for the LLM") >= 5


async def test_without_a_progress_token_nothing_is_sent(tmp_path: Path, llm: FakeLLMServer) -> None:
    llm.reply_text("late", delay=WAIT)
    async with Playbook(tmp_path, openai_policy(llm.base_url, extra=KEEPALIVE)) as play:
        await play.handshake()
        await call_that_samples(play, None)
        seen, answer = await progress_until_sampled(play)
        assert answer["result"]["content"]["text"] == "late"
        await finish(play)
    assert seen == []


async def test_keepalive_off_when_set_to_zero(tmp_path: Path, llm: FakeLLMServer) -> None:
    llm.reply_text("late", delay=WAIT)
    policy = openai_policy(llm.base_url, extra="sampling:\n  keepalive_seconds: 0\n")
    async with Playbook(tmp_path, policy) as play:
        await play.handshake()
        await call_that_samples(play, "tok")
        seen, _ = await progress_until_sampled(play)
        await finish(play)
    assert seen == []


async def test_a_slow_human_approving_in_the_hosts_form_keeps_the_call_alive(
    tmp_path: Path, llm: FakeLLMServer
) -> None:
    rules = "rules:\n  - name: ask\n    action: prompt\n"
    policy = openai_policy(llm.base_url, extra=KEEPALIVE + "approval:\n  channels: [host]\n", rules=rules)
    async with Playbook(tmp_path, policy) as play:
        await play.handshake({"elicitation": {}})
        await call_that_samples(play, "tok")
        form = await play.host.next()
        assert form["method"] == "elicitation/create"
        seen: list[dict[str, Any]] = []
        with anyio.move_on_after(WAIT):  # the human reads the form; the call is kept alive meanwhile
            while True:
                seen.append((await play.host.next(timeout=10))["params"])
        play.host.says(
            {"jsonrpc": "2.0", "id": form["id"], "result": {"action": "accept", "content": {"approve": True}}}
        )
        later, answer = await progress_until_sampled(play)
        assert "take your time" in answer["result"]["content"]["text"]  # the fake LLM echoes the prompt
        await finish(play)
    assert len([p for p in seen if p["message"] == "waiting for approval"]) >= 6, seen
    assert {p["message"] for p in seen + later} <= {
        "waiting for sampling",
        "waiting for approval",
        "waiting for the LLM",
    }


def test_server_progress_below_a_keepalive_is_raised_and_never_goes_back() -> None:
    """What the host sees on one token always increases, whoever sent it."""
    progress = Progress("tok")
    sent: list[float] = []
    assert progress.from_server({"progressToken": "tok", "progress": 0.5, "total": 10}) is None
    sent.append(0.5)
    for _ in range(3):
        params = progress.keepalive("waiting for the LLM")
        assert params["total"] == 10  # the server's total is kept, so a host's bar stays where it was
        sent.append(params["progress"])
    raised = progress.from_server({"progressToken": "tok", "progress": 0.5})  # the server repeats itself
    assert raised is not None
    sent.append(raised)
    assert progress.from_server({"progressToken": "tok", "progress": 1}) is None  # above: passed untouched
    sent.append(1.0)
    sent.append(progress.keepalive("waiting for the LLM")["progress"])
    assert sent == sorted(set(sent)), sent
    assert sent[-1] < 1.001
