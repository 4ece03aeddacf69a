"""The audit log through the real proxy: records per decision, the key nowhere but at the LLM, fail-closed."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest
from fakes.llm_server import FakeLLMServer
from helpers.support import PROXY, RawHost, openai_policy, proxy_command, proxy_env, sdk_host, tool_json, write_policy

from mcp_sampling_proxy.audit.records import DECISION_FIELDS
from mcp_sampling_proxy.commands import audit as audit_cmd

# Matches none of the built-in secret patterns: only the configured-key scrubbing can remove it.
KEY = "unpatterned-Key-value-7f3a9c2e"


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ["none", "redacted", "full"])
async def test_the_key_reaches_the_llm_but_not_the_audit_log_or_stderr(tmp_path: Path, mode: str) -> None:
    audit = tmp_path / "audit.jsonl"
    stderr = tmp_path / "stderr.log"
    rules = (
        "rules:\n  - name: no-secrets\n    when: {text_matches: 'forbidden'}\n    action: deny\n"
        "  - name: ok\n    action: allow\n"
    )
    with FakeLLMServer("openai") as llm:
        llm.reply_text(f"you said {KEY}; mail me at dana@example.com", usage=(21, 4))
        policy = openai_policy(llm.base_url, rules=rules) + f"audit:\n  path: {audit}\n  content: {mode}\n"
        async with sdk_host(
            proxy_command(write_policy(tmp_path, policy)), proxy_env(TEST_LLM_KEY=KEY), stderr
        ) as client:
            answer = tool_json(
                await client.call_tool(
                    "sample", {"prompt": f"repeat {KEY} to dana@example.com", "system": f"system {KEY}"}
                )
            )
            refused = await client.call_tool("sample", {"prompt": "forbidden words"})
        assert llm.requests[0].headers["authorization"] == f"Bearer {KEY}"
        assert KEY in json.dumps(llm.requests[0].body)  # the prompt went to the LLM as the server sent it
    # the answer reaches the server without the key (a provider or CLI may echo it: never to the server)
    assert answer["content"]["text"] == "you said [REDACTED:configured-key]; mail me at dana@example.com"
    assert refused.is_error

    text = audit.read_text()
    assert KEY not in text
    assert KEY not in stderr.read_text()
    assert stderr.read_text().strip(), "the proxy logged nothing?"
    allowed, denied = (json.loads(line) for line in text.splitlines())
    assert allowed["continues"] is None and "continues" not in denied
    for record in (allowed, denied):
        assert all(key in record for key in DECISION_FIELDS)
        assert record["server"] == "small_server" and record["tool"] == "sample"
        assert record["method"] == "sampling/createMessage" and record["host"]
        assert record["protocol_version"] and record["request_id"] is not None
    assert (allowed["decision"], allowed["rule"], allowed["provider"], allowed["model"]) == (
        "allow",
        "ok",
        "fake",
        "gpt-test",
    )
    assert (allowed["input_tokens"], allowed["output_tokens"], allowed["stop_reason"]) == (21, 4, "endTurn")
    assert isinstance(allowed["latency_ms"], int) and allowed["error"] is None
    assert (denied["decision"], denied["rule"], denied["provider"]) == ("deny", "no-secrets", None)
    assert denied["content"]["response"] is None
    content = allowed["content"]
    assert content["mode"] == mode and len(content["messages"]) == 1 and content["response"]["sha256"]
    if mode == "none":
        assert "repeat" not in text and "dana@" not in text
    elif mode == "redacted":
        assert content["messages"][0]["message"]["content"]["text"] == (
            "repeat [REDACTED:configured-key] to [REDACTED:email]"
        )
        assert content["system"]["text"] == "system [REDACTED:configured-key]"
        assert "dana@" not in text
    else:
        assert content["messages"][0]["message"]["content"]["text"] == (
            "repeat [REDACTED:configured-key] to dana@example.com"
        )
        assert content["response"]["result"]["content"]["text"] == (
            "you said [REDACTED:configured-key]; mail me at dana@example.com"
        )
    assert audit_cmd.main(["verify", str(audit)]) == 0


@pytest.mark.anyio
async def test_an_unwritable_audit_log_refuses_sampling_instead_of_answering_unrecorded(tmp_path: Path) -> None:
    blocker = tmp_path / "blocker"
    blocker.write_text("a file where the log's directory should be")
    with FakeLLMServer("openai") as llm:
        llm.reply_text("never delivered")
        policy = openai_policy(llm.base_url) + f"audit:\n  path: {blocker / 'audit.jsonl'}\n"
        async with sdk_host(
            proxy_command(write_policy(tmp_path, policy)), proxy_env(TEST_LLM_KEY=KEY), tmp_path / "stderr.log"
        ) as client:
            result = await client.call_tool("sample", {"prompt": "hi"})
            echo = await client.call_tool("echo", {"text": "still relaying"})
    assert result.is_error
    error = tool_json(result)["error"]
    assert error["code"] == -32603
    assert "audit log cannot be written" in error["message"]
    assert "still relaying" in json.dumps(echo.model_dump(mode="json"))
    assert "audit log unusable" in (tmp_path / "stderr.log").read_text()
    assert llm.requests == []  # refused before the LLM: no tokens spent on an answer nobody may see


def test_a_sampling_call_cut_off_by_shutdown_leaves_a_cancelled_record(tmp_path: Path) -> None:
    """The host closes stdin while the LLM is answering an allowed request: the decision still has
    its record (issue #11, defect 5), and the chain verifies."""
    audit = tmp_path / "audit.jsonl"
    with FakeLLMServer("openai") as llm:
        llm.enqueue(delay=30.0)
        policy = write_policy(tmp_path, openai_policy(llm.base_url) + f"audit:\n  path: {audit}\n")
        with RawHost(proxy_command(policy), proxy_env(TEST_LLM_KEY="k"), tmp_path / "stderr.log") as host:
            host.initialize()
            host.send(
                {
                    "jsonrpc": "2.0",
                    "id": 50,
                    "method": "tools/call",
                    "params": {"name": "sample", "arguments": {"prompt": "cut me off"}},
                }
            )
            deadline = time.monotonic() + 15
            while not llm.requests and time.monotonic() < deadline:
                time.sleep(0.05)
            assert llm.requests, "the LLM never saw the request"
            host.close_stdin()
            assert host.wait() == 0
    records = [json.loads(line) for line in audit.read_text().splitlines()]
    assert [(r["decision"], r["rule"], r["tool"]) for r in records] == [("cancelled", "allow-all", "sample")]
    assert "proxy shut down" in records[0]["reason"]
    verify = subprocess.run([*PROXY, "audit", "verify", str(audit)], capture_output=True, text=True, check=False)
    assert verify.returncode == 0, verify.stdout + verify.stderr
