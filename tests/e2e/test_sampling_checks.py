"""Sampling checks through the real proxy: unsolicited requests, the per-call cap, credentials in answers.

Real servers (a hand-written hostile one that samples unasked and loops, and the kitchen sink),
the proxy as a process, and a loopback LLM speaking the OpenAI wire format.
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
PEM_BODY = "MIIEpAIBAAKCAQEA3Tz2mr7SZiAMfQyuvBjM9OiZ1BjP5CE/Wm/Rr500PRK+Lh9x5eJPo5CAZ3\n/ANBE0sTKfQyuvB0sTK+Lh9x5e"
PEM = f"-----BEGIN RSA PRIVATE KEY-----\n{PEM_BODY}\n-----END RSA PRIVATE KEY-----"


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


def test_unsolicited_sampling_is_allowed_for_a_server_the_policy_names(tmp_path: Path, llm: FakeLLMServer) -> None:
    record, answer = unsolicited_run(tmp_path, llm, "  allow_unsolicited: [loop*]\n")
    assert answer == {"text": "echo: nobody asked"}
    assert record["decision"] == "allow"
    assert record["unsolicited"] is True
    assert len(llm.requests) == 1


def test_unsolicited_sampling_stays_refused_for_a_server_the_policy_does_not_name(
    tmp_path: Path, llm: FakeLLMServer
) -> None:
    record, answer = unsolicited_run(tmp_path, llm, "  allow_unsolicited: [summarizer]\n")
    assert record["reason"] == "unsolicited"
    assert answer["error"]["code"] == -1
    assert llm.requests == []


@pytest.mark.anyio
async def test_a_thirty_round_loop_in_one_tool_call_is_stopped_at_the_cap(tmp_path: Path, llm: FakeLLMServer) -> None:
    policy, audit = policy_file(tmp_path, llm)
    command = proxy_command(policy, "--name", "looper", upstream=[PY, LOOPER])
    async with sdk_host(command, env_for(tmp_path), tmp_path / "stderr.log") as client:
        rounds = tool_json(await client.call_tool("loop", {"rounds": 30}))
        again = tool_json(await client.call_tool("loop", {"rounds": 2}))  # the cap is per call
    assert [r.get("text") for r in rounds[:25]] == [f"echo: round {n}" for n in range(25)]
    for refused in rounds[25:]:  # rounds 26 to 30
        assert refused["error"]["code"] == -1
        assert "sampling.max_per_call: 25" in refused["error"]["message"]
        assert "tool call 'loop'" in refused["error"]["message"]
    assert again == [{"text": "echo: round 0"}, {"text": "echo: round 1"}]
    assert len(llm.requests) == 27
    written = records(audit)
    assert [r["decision"] for r in written] == ["allow"] * 25 + ["deny"] * 5 + ["allow"] * 2
    assert {r["limit"] for r in written[25:30]} == {"max_per_call"}
    assert all(r["tool"] == "loop" for r in written)


@pytest.mark.anyio
async def test_the_cap_is_the_policys(tmp_path: Path, llm: FakeLLMServer) -> None:
    policy, _audit = policy_file(tmp_path, llm, "  max_per_call: 3\n")
    command = proxy_command(policy, upstream=[PY, LOOPER])
    async with sdk_host(command, env_for(tmp_path), tmp_path / "stderr.log") as client:
        rounds = tool_json(await client.call_tool("loop", {"rounds": 5}))
    assert [("text" in r) for r in rounds] == [True, True, True, False, False]
    assert "sampling.max_per_call: 3" in rounds[3]["error"]["message"]


async def sample_through(tmp_path: Path, llm: FakeLLMServer, sampling: str, prompt: str = "keys?") -> Any:
    policy, _audit = policy_file(tmp_path, llm, sampling)
    async with sdk_host(proxy_command(policy), env_for(tmp_path), tmp_path / "stderr.log") as client:
        return tool_json(await client.call_tool("sample", {"prompt": prompt}))


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


@pytest.mark.anyio
async def test_on_secret_deny_withholds_the_answer(tmp_path: Path, llm: FakeLLMServer) -> None:
    llm.reply_text(AWS_ANSWER)
    result = await sample_through(tmp_path, llm, "  on_secret: deny\n")
    assert result["error"]["code"] == -1
    assert "held credentials (AWS Access Key)" in result["error"]["message"]
    assert "sampling.on_secret: deny" in result["error"]["message"]
    audit = tmp_path / "audit.jsonl"
    (record,) = records(audit)
    assert record["decision"] == "deny"
    assert record["answer_secrets"] == ["AWS Access Key"]
    assert record["model"]  # the LLM was called: its record says which
    assert AWS_SECRET not in audit.read_text()


@pytest.mark.anyio
async def test_on_secret_allow_passes_the_answer_and_names_what_it_held(tmp_path: Path, llm: FakeLLMServer) -> None:
    llm.reply_text(AWS_ANSWER)
    result = await sample_through(tmp_path, llm, "  on_secret: allow\n")
    assert result["content"]["text"] == AWS_ANSWER
    (record,) = records(tmp_path / "audit.jsonl")
    assert record["answer_secrets"] == ["AWS Access Key"]


@pytest.mark.anyio
async def test_a_pem_private_key_is_redacted_whole(tmp_path: Path, llm: FakeLLMServer) -> None:
    llm.reply_text(f"Here is the key:\n{PEM}\nKeep it safe.")
    result = await sample_through(tmp_path, llm, "")
    assert result["content"]["text"] == "Here is the key:\n[REDACTED:Private Key]\nKeep it safe."


@pytest.mark.anyio
async def test_scan_requests_masks_a_key_in_the_prompt_before_the_llm_sees_it(
    tmp_path: Path, llm: FakeLLMServer
) -> None:
    result = await sample_through(tmp_path, llm, "  scan_requests: true\n", prompt=f"store {AWS_KEY_ID} for me")
    assert result["content"]["text"] == "echo: store [REDACTED:AWS Access Key] for me"
    assert AWS_KEY_ID not in json.dumps(llm.last.body)
    (record,) = records(tmp_path / "audit.jsonl")
    assert record["prompt_secrets"] == ["AWS Access Key"]


@pytest.mark.anyio
async def test_prompts_are_not_scanned_unless_asked(tmp_path: Path, llm: FakeLLMServer) -> None:
    await sample_through(tmp_path, llm, "", prompt=f"store {AWS_KEY_ID} for me")
    assert AWS_KEY_ID in json.dumps(llm.last.body)
