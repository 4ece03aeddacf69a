"""The sampling service's own checks, played in memory (tests/helpers/playbook.py): a request with no host
call in flight, the cap on requests per tool call, and credentials in the LLM's answer or in the prompt.
The real relay and services between a host without sampling and a server the test plays (as the hostile
`sampling_loop.py` and the kitchen-sink server would ask), against a loopback LLM speaking the OpenAI wire
format. Through the proxy as a process: tests/e2e/test_sampling_checks.py.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from fakes.llm_server import FakeLLMServer
from helpers.playbook import Playbook
from helpers.support import openai_policy

pytestmark = pytest.mark.anyio
# AWS's documented example key pair (docs.aws.amazon.com, "Managing access keys"): not a real key
AWS_KEY_ID = "AKIAIOSFODNN7EXAMPLE"
AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
AWS_ANSWER = (
    "Put this in ~/.aws/credentials:\n[default]\n"
    f"aws_access_key_id = {AWS_KEY_ID}\naws_secret_access_key = {AWS_SECRET}\nregion = eu-west-1\n"
)
PEM_BODY = "MIIEpAIBAAKCAQEA3Tz2mr7SZiAMfQyuvBjM9OiZ1BjP5CE/Wm/Rr500PRK+Lh9x5eJPo5CAZ3\n/ANBE0sTKfQyuvB0sTK+Lh9x5e"
PEM = f"-----BEGIN RSA PRIVATE KEY-----\n{PEM_BODY}\n-----END RSA PRIVATE KEY-----"
NO_CALLBACKS: dict[str, Any] = {}  # an SDK host without callbacks declares no capabilities


@pytest.fixture(autouse=True)
def llm_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TEST_LLM_KEY", "k")


def prompt(text: str) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": {"type": "text", "text": text}}], "maxTokens": 100}


def policy(llm: FakeLLMServer, sampling: str = "") -> str:
    return openai_policy(llm.base_url) + (f"sampling:\n{sampling}" if sampling else "")


def decisions(play: Playbook) -> list[dict[str, Any]]:
    return [record for record in play.audit() if record.get("event") == "decision"]


async def unsolicited(tmp_path: Path, llm: FakeLLMServer, sampling: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The server named `looper` samples right after `initialized`, with nothing of the host's in flight:
    its audit record, and what it got back."""
    async with Playbook(tmp_path, policy(llm, sampling), name="looper") as play:
        await play.handshake(NO_CALLBACKS)
        answer = await play.server_asks("sampling/createMessage", prompt("nobody asked"))
        (record,) = decisions(play)
    return record, answer


async def test_unsolicited_sampling_is_refused_by_default(tmp_path: Path, llm: FakeLLMServer) -> None:
    record, answer = await unsolicited(tmp_path, llm, "")
    assert (record["decision"], record["reason"], record["server"]) == ("deny", "unsolicited", "looper")
    error = answer["error"]
    assert error["code"] == -1
    assert "no host request was in flight" in error["message"]
    assert "sampling.allow_unsolicited" in error["message"]
    assert llm.requests == []  # the LLM was never called


async def test_unsolicited_sampling_is_allowed_for_a_server_the_policy_names(
    tmp_path: Path, llm: FakeLLMServer
) -> None:
    record, answer = await unsolicited(tmp_path, llm, "  allow_unsolicited: [loop*]\n")
    assert answer["result"]["content"] == {"type": "text", "text": "echo: nobody asked"}
    assert record["decision"] == "allow"
    assert record["unsolicited"] is True
    assert len(llm.requests) == 1


async def test_unsolicited_sampling_stays_refused_for_a_server_the_policy_does_not_name(
    tmp_path: Path, llm: FakeLLMServer
) -> None:
    record, answer = await unsolicited(tmp_path, llm, "  allow_unsolicited: [summarizer]\n")
    assert record["reason"] == "unsolicited"
    assert answer["error"]["code"] == -1
    assert llm.requests == []


async def rounds(play: Playbook, count: int) -> list[dict[str, Any]]:
    """What the server gets for `count` requests, one after another, inside one call of `loop`."""
    async with play.call("loop") as call:
        return [await call.sample(prompt(f"round {n}")) for n in range(count)]


async def test_a_thirty_round_loop_in_one_tool_call_is_stopped_at_the_cap(tmp_path: Path, llm: FakeLLMServer) -> None:
    async with Playbook(tmp_path, policy(llm), name="looper") as play:
        await play.handshake(NO_CALLBACKS)
        looped = await rounds(play, 30)
        again = await rounds(play, 2)  # the cap is per call
        written = decisions(play)
    assert [r["result"]["content"]["text"] for r in looped[:25]] == [f"echo: round {n}" for n in range(25)]
    for refused in looped[25:]:  # rounds 26 to 30
        assert refused["error"]["code"] == -1
        assert "sampling.max_per_call: 25" in refused["error"]["message"]
        assert "tool call 'loop'" in refused["error"]["message"]
    assert [r["result"]["content"]["text"] for r in again] == ["echo: round 0", "echo: round 1"]
    assert len(llm.requests) == 27
    assert [r["decision"] for r in written] == ["allow"] * 25 + ["deny"] * 5 + ["allow"] * 2
    assert {r["limit"] for r in written[25:30]} == {"max_per_call"}
    assert all(r["tool"] == "loop" for r in written)


async def test_the_cap_is_the_policys(tmp_path: Path, llm: FakeLLMServer) -> None:
    async with Playbook(tmp_path, policy(llm, "  max_per_call: 3\n")) as play:
        await play.handshake(NO_CALLBACKS)
        looped = await rounds(play, 5)
    assert [("result" in r) for r in looped] == [True, True, True, False, False]
    assert "sampling.max_per_call: 3" in looped[3]["error"]["message"]


async def sample_through(
    tmp_path: Path, llm: FakeLLMServer, sampling: str, text: str = "keys?"
) -> tuple[dict[str, Any], list[dict[str, Any]], str]:
    """What the server gets for one request, the decision records, and the audit file's text."""
    async with Playbook(tmp_path, policy(llm, sampling)) as play:
        await play.handshake(NO_CALLBACKS)
        answer = await play.sample(prompt(text))
        return answer, decisions(play), play.audit_path.read_text()


async def test_on_secret_deny_withholds_the_answer(tmp_path: Path, llm: FakeLLMServer) -> None:
    llm.reply_text(AWS_ANSWER)
    answer, (record,), audit = await sample_through(tmp_path, llm, "  on_secret: deny\n")
    assert answer["error"]["code"] == -1
    assert "held credentials (AWS Access Key)" in answer["error"]["message"]
    assert "sampling.on_secret: deny" in answer["error"]["message"]
    assert record["decision"] == "deny"
    assert record["answer_secrets"] == ["AWS Access Key"]
    assert record["model"]  # the LLM was called: its record says which
    assert AWS_SECRET not in audit


async def test_on_secret_allow_passes_the_answer_and_names_what_it_held(tmp_path: Path, llm: FakeLLMServer) -> None:
    llm.reply_text(AWS_ANSWER)
    answer, (record,), _audit = await sample_through(tmp_path, llm, "  on_secret: allow\n")
    assert answer["result"]["content"]["text"] == AWS_ANSWER
    assert record["answer_secrets"] == ["AWS Access Key"]


async def test_a_full_audit_holds_the_masked_answer_not_the_key(tmp_path: Path, llm: FakeLLMServer) -> None:
    """`audit.content: full` records the answer the server got: with `on_secret: redact` (the default),
    masked, and the key the LLM wrote never reaches the audit file."""
    llm.reply_text(AWS_ANSWER)
    full = f"audit:\n  path: {tmp_path / 'audit.jsonl'}\n  fsync: false\n  content: full\n"
    async with Playbook(tmp_path, openai_policy(llm.base_url, extra=full)) as play:
        await play.handshake(NO_CALLBACKS)
        answer = await play.sample(prompt("keys?"))
        (record,) = decisions(play)
        audit = play.audit_path.read_text()
    assert "[REDACTED:AWS Access Key]" in answer["result"]["content"]["text"]
    assert record["content"]["response"]["result"]["content"]["text"] == answer["result"]["content"]["text"]
    assert record["answer_secrets"] == ["AWS Access Key"] and record["original_answer_sha256"]
    assert AWS_KEY_ID not in audit


async def test_a_pem_private_key_is_redacted_whole(tmp_path: Path, llm: FakeLLMServer) -> None:
    llm.reply_text(f"Here is the key:\n{PEM}\nKeep it safe.")
    answer, _records, _audit = await sample_through(tmp_path, llm, "")
    assert answer["result"]["content"]["text"] == "Here is the key:\n[REDACTED:Private Key]\nKeep it safe."


async def test_scan_requests_masks_a_key_in_the_prompt_before_the_llm_sees_it(
    tmp_path: Path, llm: FakeLLMServer
) -> None:
    answer, (record,), _audit = await sample_through(
        tmp_path, llm, "  scan_requests: true\n", text=f"store {AWS_KEY_ID} for me"
    )
    assert answer["result"]["content"]["text"] == "echo: store [REDACTED:AWS Access Key] for me"
    assert AWS_KEY_ID not in json.dumps(llm.last.body)
    assert record["prompt_secrets"] == ["AWS Access Key"]


async def test_prompts_are_not_scanned_unless_asked(tmp_path: Path, llm: FakeLLMServer) -> None:
    await sample_through(tmp_path, llm, "", text=f"store {AWS_KEY_ID} for me")
    assert AWS_KEY_ID in json.dumps(llm.last.body)
