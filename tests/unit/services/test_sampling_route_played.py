"""Who answers a sampling request, played in memory (tests/helpers/playbook.py): the capabilities the
server is shown, a host that samples itself (the request it is sent, its refusal, the fallback to our own
LLM) and `sampling.route: proxy`. The real relay and services between a host the test plays, with or
without sampling, and a server; a loopback LLM speaking the OpenAI wire format.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fakes.llm_server import FakeLLMServer
from helpers.playbook import Playbook
from helpers.support import openai_policy

pytestmark = pytest.mark.anyio
SAMPLING_HOST: dict[str, Any] = {"sampling": {}}


@pytest.fixture(autouse=True)
def llm_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TEST_LLM_KEY", "k")


def prompt(text: str, max_tokens: int = 100) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": {"type": "text", "text": text}}], "maxTokens": max_tokens}


def host_answers(text: str) -> dict[str, Any]:
    return {"result": {"role": "assistant", "content": {"type": "text", "text": text}, "model": "host-model"}}


def host_refuses(_request: dict[str, Any]) -> dict[str, Any]:
    return {"error": {"code": -1, "message": "user said no"}}


async def server_sees(tmp_path: Path, policy: str) -> dict[str, Any]:
    """The capabilities the server is offered for a host that declared none."""
    async with Playbook(tmp_path, policy) as play:
        initialize = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "h", "version": "1"}}
        play.host.says({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": initialize})
        caps: dict[str, Any] = (await play.server.next())["params"]["capabilities"]
        return caps


async def test_tools_capability_follows_the_policy(tmp_path: Path, llm: FakeLLMServer) -> None:
    assert (await server_sees(tmp_path, openai_policy(llm.base_url)))["sampling"] == {"tools": {}}
    no_tools = openai_policy(llm.base_url, extra="sampling:\n  tools: false\n")
    assert (await server_sees(tmp_path, no_tools))["sampling"] == {}


async def test_host_with_sampling_gets_the_request_and_the_llm_is_not_called(
    tmp_path: Path, llm: FakeLLMServer
) -> None:
    async with Playbook(tmp_path, openai_policy(llm.base_url)) as play:
        await play.handshake(SAMPLING_HOST)
        answer = await play.sample(prompt("route me"), host=lambda _: host_answers("from host"))
    assert answer["result"]["content"]["text"] == "from host"
    assert answer["result"]["model"] == "host-model"
    (asked,) = play.host_asked
    assert asked["params"]["messages"][0]["content"]["text"] == "route me"
    assert llm.requests == []


async def test_a_clamped_max_tokens_applies_when_the_host_samples_too(tmp_path: Path, llm: FakeLLMServer) -> None:
    """`max_tokens_action: clamp` lowers the request whoever answers it: the host is sent the clamped
    request, as our own LLM would be."""
    policy = openai_policy(llm.base_url, extra="limits: {max_tokens: 1000, max_tokens_action: clamp}\n")
    async with Playbook(tmp_path, policy) as play:
        await play.handshake(SAMPLING_HOST)
        await play.sample(prompt("long please", max_tokens=6000), host=lambda _: host_answers("ok"))
    assert play.host_asked[0]["params"]["maxTokens"] == 1000
    assert llm.requests == []


async def test_a_host_refusal_reaches_the_server(tmp_path: Path, llm: FakeLLMServer) -> None:
    async with Playbook(tmp_path, openai_policy(llm.base_url)) as play:
        await play.handshake(SAMPLING_HOST)
        answer = await play.sample(prompt("x"), host=host_refuses)
    assert answer["error"]["message"] == "user said no"
    assert llm.requests == []


async def test_fallback_on_host_error_asks_our_llm(tmp_path: Path, llm: FakeLLMServer) -> None:
    fallback = openai_policy(llm.base_url, extra="sampling:\n  fallback_on_host_error: true\n")
    async with Playbook(tmp_path, fallback) as play:
        await play.handshake(SAMPLING_HOST)
        answer = await play.sample(prompt("x"), host=host_refuses)
    assert answer["result"]["content"]["text"] == "echo: x"
    assert len(llm.requests) == 1


async def test_route_proxy_never_asks_a_host_that_samples(tmp_path: Path, llm: FakeLLMServer) -> None:
    forced = openai_policy(llm.base_url, extra="sampling:\n  route: proxy\n")
    async with Playbook(tmp_path, forced) as play:
        await play.handshake(SAMPLING_HOST)
        answer = await play.sample(prompt("y"))  # a request to the host would end the call's wait: it fails
    assert answer["result"]["content"]["text"] == "echo: y"
    assert len(llm.requests) == 1
