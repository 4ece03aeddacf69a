"""Sampling checks through the real proxy: an unsolicited request, credentials in answers.

Real servers (a hand-written hostile one that samples unasked, and the kitchen sink), the proxy as a
process, and a loopback LLM speaking the OpenAI wire format. The checks' other cases (the servers the
policy lets sample unasked, the per-call cap, secrets in prompts and answers) are played in memory:
tests/unit/services/test_sampling_checks_played.py.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from fakes.llm_server import FakeLLMServer
from helpers.support import PY, ROOT, RawHost, openai_policy, proxy_command, proxy_env, sdk_host, tool_json

LOOPER = str(ROOT / "tests" / "fixtures" / "hostile" / "sampling_loop.py")
# AWS's documented example key pair (docs.aws.amazon.com, "Managing access keys"): not a real key
AWS_KEY_ID = "AKIAIOSFODNN7EXAMPLE"
AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
AWS_ANSWER = (
    "Put this in ~/.aws/credentials:\n[default]\n"
    f"aws_access_key_id = {AWS_KEY_ID}\naws_secret_access_key = {AWS_SECRET}\nregion = eu-west-1\n"
)


def env_for(tmp_path: Path) -> dict[str, str]:
    return proxy_env(
        TEST_LLM_KEY="k",
        MCP_SAMPLING_PROXY_STATE_DIR=str(tmp_path / "state"),
        MCP_SAMPLING_PROXY_RUNTIME_DIR=str(tmp_path / "run"),
    )


def policy_file(tmp_path: Path, llm: FakeLLMServer, sampling: str = "") -> tuple[str, Path]:
    audit = tmp_path / "audit.jsonl"
    text = openai_policy(llm.base_url) + (f"sampling:\n{sampling}" if sampling else "") + f"audit:\n  path: {audit}\n"
    path = tmp_path / "policy.yaml"
    path.write_text(text, encoding="utf-8")
    return str(path), audit


def records(audit: Path) -> list[dict[str, Any]]:
    if not audit.exists():
        return []
    return [r for r in map(json.loads, audit.read_text().splitlines()) if r.get("event") == "decision"]


def wait_for_record(audit: Path, timeout: float = 15.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = records(audit)
        if found:
            return found[0]
        time.sleep(0.05)
    raise TimeoutError("no audit record was written")


def unsolicited_run(tmp_path: Path, llm: FakeLLMServer, sampling: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The hostile server samples right after `initialized`, with nothing of the host's in flight:
    the audit record, then what the server got back (asked for only once the record is written)."""
    policy, audit = policy_file(tmp_path, llm, sampling)
    command = proxy_command(policy, "--name", "looper", upstream=[PY, LOOPER, "--unsolicited"])
    with RawHost(command, env_for(tmp_path), tmp_path / "stderr.log") as host:
        host.initialize()
        record = wait_for_record(audit)
        response = host.request("tools/call", {"name": "unsolicited_answer", "arguments": {}})
    return record, json.loads(response["result"]["content"][0]["text"])


def test_unsolicited_sampling_is_refused_by_default(tmp_path: Path, llm: FakeLLMServer) -> None:
    record, answer = unsolicited_run(tmp_path, llm, "")
    assert record["decision"] == "deny"
    assert record["reason"] == "unsolicited"
    assert record["server"] == "looper"
    error = answer["error"]
    assert error["code"] == -1
    assert "no host request was in flight" in error["message"]
    assert "sampling.allow_unsolicited" in error["message"]
    assert llm.requests == []  # the LLM was never called


async def sample_through(tmp_path: Path, llm: FakeLLMServer, sampling: str) -> Any:
    policy, _audit = policy_file(tmp_path, llm, sampling)
    async with sdk_host(proxy_command(policy), env_for(tmp_path), tmp_path / "stderr.log") as client:
        return tool_json(await client.call_tool("sample", {"prompt": "keys?"}))


@pytest.mark.anyio
async def test_an_aws_key_in_the_llms_answer_is_redacted_on_the_way_to_the_server(
    tmp_path: Path, llm: FakeLLMServer
) -> None:
    llm.reply_text(AWS_ANSWER)
    result = await sample_through(tmp_path, llm, "")
    text = result["content"]["text"]
    assert AWS_KEY_ID not in text and AWS_SECRET not in text
    assert "aws_access_key_id = [REDACTED:AWS Access Key]" in text
    assert "aws_secret_access_key = [REDACTED:AWS Access Key]" in text
    assert "region = eu-west-1" in text  # the rest of the answer is untouched
    audit = tmp_path / "audit.jsonl"
    (record,) = records(audit)
    assert record["decision"] == "allow"
    assert record["answer_secrets"] == ["AWS Access Key"]
    assert AWS_KEY_ID not in audit.read_text() and AWS_SECRET not in audit.read_text()
