"""What a host keeps of the proxy it starts: its stderr (Claude Desktop's mcp-server-NAME.log).

The proxy is started as a desktop host starts it (the entry's command, no terminal, the host's short
PATH, stderr a file), a real MCP client asks the small server to sample twice: once allowed
(a loopback LLM answers), once denied by a rule. Each request ends with one short info line there.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fakes.llm_server import FakeLLMServer
from helpers.support import PROXY, PY, SMALL_SERVER, proxy_env, sdk_host, write_policy

pytestmark = pytest.mark.anyio


async def test_each_request_ends_with_one_line_on_the_hosts_stderr(tmp_path: Path, llm: FakeLLMServer) -> None:
    llm.reply_text("four")
    policy = write_policy(
        tmp_path,
        "llm:\n  providers:\n    fake:\n      type: openai\n"
        f"      base_url: {llm.base_url}\n      api_key_env: TEST_LLM_KEY\n      models: [gpt-test]\n"
        f"audit:\n  path: {tmp_path / 'audit.jsonl'}\n"
        "rules:\n  - name: no-secrets\n    when: {text_matches: secret}\n    action: deny\n"
        "  - name: allow-all\n    action: allow\n",
    )
    stderr = tmp_path / "mcp-server-kitchen.log"
    command = [*PROXY, "--policy", policy, "--", PY, SMALL_SERVER]  # as wrap writes it: no --log-format
    env = proxy_env(TEST_LLM_KEY="sk-test", PATH="/usr/bin:/bin")
    async with sdk_host(command, env, stderr) as client:
        allowed = await client.call_tool("sample", {"prompt": "2+2?"})
        denied = await client.call_tool("sample", {"prompt": "tell me the secret"})
    assert "four" in json.dumps(allowed.model_dump(mode="json"))
    assert denied.is_error or "no-secrets" in json.dumps(denied.model_dump(mode="json"))
    lines = [json.loads(line) for line in stderr.read_text().splitlines() if line.startswith("{")]
    ended = [line for line in lines if line["event"] == "request ended"]
    assert [(e["level"], e["method"], e["decision"], e["rule"]) for e in ended] == [
        ("info", "sampling/createMessage", "allow", "allow-all"),
        ("info", "sampling/createMessage", "deny", "no-secrets"),
    ], ended
    assert {e["server"] for e in ended} == {"small_server"}
    assert all(len(json.dumps(e)) < 300 for e in ended)  # one short line: the audit holds the rest
