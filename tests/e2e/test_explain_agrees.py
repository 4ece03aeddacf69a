"""`policy explain` and the running proxy agree, request by request (issue #11, defect 1).

50 sampling requests (model hints, priorities, maxTokens around the caps, images, secrets in the
text) go through one real proxy process under the clamp-vs-rule policy of the defect (which names no server),
with its providers pointed at loopback LLM servers speaking the OpenAI and Anthropic wire formats. The
same requests are explained, and for each the matched rule, the action, the maxTokens the LLM got and
the chosen model must be what `explain` printed. Every shipped policy, played in memory:
tests/unit/services/test_explain_agrees_played.py.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from fakes.llm_server import FakeLLMServer
from helpers.explain_cases import POLICIES, SERVERS, explained, policy_for_test, requests
from helpers.support import PY, SMALL_SERVER, proxy_command, proxy_env, sdk_host, tool_text

pytestmark = pytest.mark.anyio


async def proxied(
    policy: Path,
    env: dict[str, str],
    server: str,
    table: list[dict[str, Any]],
    tmp_path: Path,
    llms: dict[str, FakeLLMServer],
) -> list[dict[str, Any]]:
    """What one proxy (named `server`) did with each request: its audit record, what the LLM got."""
    audit = tmp_path / "audit.jsonl"
    outcomes = []
    command = proxy_command(str(policy), "--name", server, upstream=[PY, SMALL_SERVER])
    async with sdk_host(command, env, tmp_path / f"{server}.stderr.log") as client:
        for params in table:
            seen = {kind: len(llm.requests) for kind, llm in llms.items()}
            done = len(audit.read_text().splitlines()) if audit.exists() else 0
            reply = await client.call_tool("sample_raw", {"params_json": json.dumps(params)})
            records = [json.loads(line) for line in audit.read_text().splitlines()[done:]]
            (record,) = [r for r in records if r.get("method") == "sampling/createMessage"]
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
                assert not reply.is_error, tool_text(reply)
            outcomes.append(out)
    return outcomes


@pytest.mark.parametrize("name", ["clamp"])
async def test_explain_and_the_proxy_agree_on_every_request(name: str, tmp_path: Path) -> None:
    with FakeLLMServer("openai") as openai, FakeLLMServer("anthropic") as anthropic:
        llms = {"openai": openai, "anthropic": anthropic}
        policy = policy_for_test(POLICIES[name], tmp_path, llms)
        env = proxy_env(
            OPENAI_API_KEY="sk-Qx7Lm2Vr9Tz4",
            ANTHROPIC_API_KEY="sk-ant-Hw3Kp8Ny5Bd1",
            OPENAI_BASE_URL=openai.base_url,
            ANTHROPIC_BASE_URL=anthropic.base_url,
            XDG_RUNTIME_DIR=str(tmp_path / "run"),
            XDG_STATE_HOME=str(tmp_path / "state"),
            XDG_CONFIG_HOME=str(tmp_path / "config"),
        )
        (tmp_path / "run").mkdir(mode=0o700)
        # the clamp policy names no server: every request goes to one proxy (one start), named as the
        # first server is; the played test sends each to its own server's relay, under every policy
        assert "server" not in POLICIES[name]
        server = SERVERS[0]
        mine = [params for _, params in requests()]
        disagreements = []
        compared = 0
        for params, got in zip(mine, await proxied(policy, env, server, mine, tmp_path, llms), strict=True):
            expected = explained(policy, env, server, params)
            compared += 1
            if got != expected:
                disagreements.append((server, params, expected, got))
    assert compared == 50
    assert not disagreements, "\n".join(f"{s} {p}\n  explain: {e}\n  proxy:   {g}" for s, p, e, g in disagreements)
