"""`policy explain` and the relay agree, request by request, played in memory (tests/helpers/playbook.py).

50 sampling requests (model hints, priorities, maxTokens around the caps, images, secrets in the
text, three servers) go through the real relay and services under every shipped policy and a
clamp-vs-rule policy (the proxy once clamped first, so the rule about the asked size never matched),
with its providers pointed at loopback LLM servers speaking the OpenAI and Anthropic wire formats. The
same requests are explained, and for each the matched rule, the action, the maxTokens the LLM got and
the chosen model must be what `explain` printed. One policy through the proxy as a process:
tests/e2e/test_explain_agrees.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fakes.llm_server import FakeLLMServer
from helpers.explain_cases import POLICIES, SERVERS, explained, policy_for_test, requests
from helpers.playbook import Playbook

from mcp_sampling_proxy.config.settings import settings_from_environment

pytestmark = pytest.mark.anyio


async def played(
    policy: Path,
    env: dict[str, str],
    server: str,
    table: list[dict[str, Any]],
    tmp_path: Path,
    llms: dict[str, FakeLLMServer],
) -> list[dict[str, Any]]:
    """What the relay of a server named `server` did with each request: its audit record, what the LLM got."""
    outcomes = []
    play = Playbook(tmp_path, policy.read_text(), name=server)
    if not play.settings.providers:  # a policy without llm: the environment's providers, as the proxy takes them
        play.settings.providers = settings_from_environment(env).providers
    async with play:
        await play.handshake({})
        for params in table:
            seen = {kind: len(llm.requests) for kind, llm in llms.items()}
            done = len(play.audit())
            reply = await play.sample(params, tool="sample_raw")
            (record,) = [r for r in play.audit()[done:] if r.get("method") == "sampling/createMessage"]
            out: dict[str, Any] = {
                "rule": record["rule"],
                "max_tokens": None,
                "model": None,
                "action": {"allow": "allow", "deny": "deny"}.get(record["decision"], "prompt"),
            }
            called = [kind for kind, llm in llms.items() if len(llm.requests) > seen[kind]]
            if called:
                body = llms[called[0]].requests[-1].body
                out["max_tokens"] = body.get("max_tokens") or body.get("max_completion_tokens")
                out["model"] = (record["provider"], body["model"])
                assert "result" in reply, reply
            outcomes.append(out)
    return outcomes


@pytest.mark.parametrize("name", list(POLICIES))
async def test_explain_and_the_relay_agree_on_every_request(name: str, tmp_path: Path) -> None:
    with FakeLLMServer("openai") as openai, FakeLLMServer("anthropic") as anthropic:
        llms = {"openai": openai, "anthropic": anthropic}
        policy = policy_for_test(POLICIES[name], tmp_path, llms)
        env = {
            "OPENAI_API_KEY": "sk-Qx7Lm2Vr9Tz4",
            "ANTHROPIC_API_KEY": "sk-ant-Hw3Kp8Ny5Bd1",
            "OPENAI_BASE_URL": openai.base_url,
            "ANTHROPIC_BASE_URL": anthropic.base_url,
        }
        table = requests()
        disagreements = []
        compared = 0
        for server in SERVERS:
            mine = [params for s, params in table if s == server]
            for params, got in zip(mine, await played(policy, env, server, mine, tmp_path, llms), strict=True):
                expected = explained(policy, env, server, params)
                compared += 1
                if got != expected:
                    disagreements.append((server, params, expected, got))
    assert compared == 50
    assert not disagreements, "\n".join(f"{s} {p}\n  explain: {e}\n  proxy:   {g}" for s, p, e, g in disagreements)
