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

import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from fakes.llm_server import FakeLLMServer
from helpers.playbook import Playbook
from helpers.support import ROOT

from mcp_sampling_proxy.commands.policy import explain
from mcp_sampling_proxy.config.settings import load_settings, settings_from_environment
from mcp_sampling_proxy.services.assess import Origin

pytestmark = pytest.mark.anyio

CLAMP_POLICY = """\
llm:
  providers:
    openai: {type: openai, models: [gpt-4o-mini, gpt-4o]}
limits: {max_tokens: 1000, max_tokens_action: clamp}
rules:
  - name: no-huge
    when: {max_tokens_over: 5000}
    action: deny
  - name: rest
    action: allow
"""
POLICIES = {p.stem: p.read_text() for p in sorted((ROOT / "policies").glob("*.yaml"))} | {"clamp": CLAMP_POLICY}
SERVERS = ("summarizer", "image-describer", "mail")
HINTS = (None, "gpt-4o", "gpt-4o-mini", "claude", "fast", "qwen", "sonnet")
MAX_TOKENS = (100, 1500, 2500, 6000, 800)
PRIORITIES = (None, {"intelligencePriority": 1.0}, {"costPriority": 1.0, "speedPriority": 0.5})
IMAGE = {"type": "image", "data": "iVBORw0KGgo=", "mimeType": "image/png"}


def requests() -> list[tuple[str, dict[str, Any]]]:
    """50 (server, params) pairs, spread over every value above."""
    table = []
    for i in range(50):
        text = "summarise these notes" if i % 7 else "the password is hunter2, summarise"
        content: Any = (
            [{"type": "text", "text": f"{text} #{i}"}, IMAGE]
            if i % 5 == 2
            else {"type": "text", "text": f"{text} #{i}"}
        )
        params: dict[str, Any] = {
            "messages": [{"role": "user", "content": content}],
            "maxTokens": MAX_TOKENS[i % len(MAX_TOKENS)],
        }
        preferences: dict[str, Any] = {}
        if HINTS[i % len(HINTS)]:
            preferences["hints"] = [{"name": HINTS[i % len(HINTS)]}]
        if priorities := PRIORITIES[i % len(PRIORITIES)]:
            preferences.update(priorities)
        if preferences:
            params["modelPreferences"] = preferences
        table.append((SERVERS[(i // 2) % len(SERVERS)], params))
    return table


def policy_for_test(text: str, tmp_path: Path, llms: dict[str, FakeLLMServer]) -> Path:
    """The policy with its providers pointed at the loopback LLMs and an audit log."""
    data = yaml.safe_load(text) or {}
    for provider in (data.get("llm") or {}).get("providers", {}).values():
        provider["base_url"] = llms[provider["type"]].base_url
    data["audit"] = {"path": str(tmp_path / "audit.jsonl"), "content": "none"}
    path = tmp_path / "policy.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def explained(policy: Path, env: dict[str, str], server: str, params: dict[str, Any]) -> dict[str, Any]:
    """What `policy explain` prints for the request, read back from its lines."""
    settings = load_settings(str(policy), environ={})
    if not settings.providers:
        settings.providers = settings_from_environment(env).providers
    lines = explain(settings, params, Origin(server, "mcp", ("sample_raw",)))
    out: dict[str, Any] = {"max_tokens": None, "model": None}
    for line in lines:
        if m := re.match(r"rule '(.+)' \(line \d+\): MATCHES -> (\w+)", line):
            out["rule"], out["action"] = m.groups()
        elif line == "no rule matched -> prompt (default)":
            out["rule"], out["action"] = "default", "prompt"
        elif m := re.match(r"  provider/model: ([\w.-]+)/([\w.-]+): ", line):
            out["model"] = m.groups()
        elif m := re.match(r"  the request goes on with maxTokens [\d,]+ lowered to ([\d,]+)", line):
            out["max_tokens"] = int(m.group(1).replace(",", ""))
    if out["action"] != "allow":
        out["model"] = None
    elif out["max_tokens"] is None:
        out["max_tokens"] = params["maxTokens"]
    return out


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
