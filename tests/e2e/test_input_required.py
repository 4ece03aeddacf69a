"""2026-07-28 era through the proxy: input_required rounds, state echo, limits, cancellation."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from fakes.llm_server import FakeLLMServer
from helpers.support import PY, ROOT, RawHost, openai_policy, proxy_command, proxy_env, write_policy

SERVER = [PY, str(ROOT / "tests" / "fixtures" / "modern_raw_server.py")]
META = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientCapabilities": {},
    "io.modelcontextprotocol/clientInfo": {"name": "modern-host", "version": "1"},
}


def host(tmp_path: Path, llm: FakeLLMServer, extra: str = "", rules: str | None = None) -> RawHost:
    policy = write_policy(
        tmp_path,
        openai_policy(llm.base_url, rules=rules)
        + "elicitation: {non_interactive: accept_defaults}\nupstream:\n  era: any\n"
        + extra,
    )
    return RawHost(proxy_command(policy, upstream=SERVER), proxy_env(TEST_LLM_KEY="k"), tmp_path / "stderr.log")


def call(name: str) -> dict[str, Any]:
    return {"name": name, "arguments": {}, "_meta": META}


def test_answers_are_sent_back_with_the_state_echoed_exactly(tmp_path: Path, llm: FakeLLMServer) -> None:
    llm.reply_text("sampled")
    params = call("echo_state")
    params["_meta"] = {**META, "progressToken": "p-1"}
    with host(tmp_path, llm) as h:
        response = h.request("tools/call", params)
    progress = [json.loads(line) for line in h.raw_received if b"notifications/progress" in line]
    assert progress and progress[0]["params"]["progressToken"] == "p-1"  # the token survives the retry
    assert response["id"] == 1  # the host's own id, though the server answered a retry
    body = json.loads(response["result"]["content"][0]["text"])
    assert body["state_ok"] is True
    assert body["answers"]["s"]["content"] == {"type": "text", "text": "sampled"}
    assert body["answers"]["s"]["model"] == "gpt-test"
    assert body["id"].startswith("mcp-sampling-proxy:")  # the retry used a private id


def test_a_server_that_keeps_asking_gets_stopped(tmp_path: Path, llm: FakeLLMServer) -> None:
    with host(tmp_path, llm, "  max_input_rounds: 3\n") as h:
        response = h.request("tools/call", call("forever"))
    assert "kept asking for input after 3 rounds" in response["error"]["message"]
    assert len(llm.requests) == 3


def test_mixed_requests_split_between_host_and_proxy_and_merged(tmp_path: Path, llm: FakeLLMServer) -> None:
    llm.reply_text("from the proxy")
    with host(tmp_path, llm) as h:
        first = h.request("tools/call", call("mixed"))
        # the host sees only what it must answer itself
        assert first["result"]["resultType"] == "input_required"
        assert set(first["result"]["inputRequests"]) == {"r"}
        retry = {
            **call("mixed"),
            "inputResponses": {"r": {"roots": []}},
            "requestState": first["result"]["requestState"],
        }
        final = h.request("tools/call", retry)
    answers = json.loads(final["result"]["content"][0]["text"])["answers"]
    assert answers["r"] == {"roots": []}
    assert answers["s"]["content"]["text"] == "from the proxy"
    assert answers["e"] == {"action": "accept", "content": {"name": "Ada"}}  # elicitation.non_interactive


def test_host_cancellation_reaches_the_retry(tmp_path: Path, llm: FakeLLMServer) -> None:
    with host(tmp_path, llm) as h:
        h.send({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": call("slow")})
        deadline = time.monotonic() + 15
        while not llm.requests and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.5)  # the retry is now at the server
        h.send({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 7}})
        stderr = tmp_path / "stderr.log"
        while "cancelled mcp-sampling-proxy:" not in stderr.read_text() and time.monotonic() < deadline:
            time.sleep(0.05)
        h.close_stdin()
        h.wait()
    assert "cancelled mcp-sampling-proxy:" in stderr.read_text()
    assert not any(json.loads(line).get("id") == 7 for line in h.raw_received)


SAMPLING_HOST_META = {**META, "io.modelcontextprotocol/clientCapabilities": {"sampling": {}}}
HOST_SAMPLING_ANSWER = {
    "role": "assistant",
    "content": {"type": "text", "text": "from the host"},
    "model": "host-model",
    "stopReason": "endTurn",
}


def audit_records(tmp_path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (tmp_path / "audit.jsonl").read_text().splitlines()]


def test_sampling_the_host_answers_is_audited_with_the_retried_tool(tmp_path: Path, llm: FakeLLMServer) -> None:
    # issue #11, defect 4: the shipped trusted-autoapprove has a `tool: none` rule; the round's
    # requests belong to the tools/call being retried, here `mixed`
    rules = (
        "audit: {path: %s, content: full}\nrules:\n  - name: stray\n    when: {tool: none}\n    action: deny\n"
        "  - name: mixed-ok\n    when: {tool: mixed}\n    action: allow\n" % (tmp_path / "audit.jsonl")
    )
    with host(tmp_path, llm, rules=rules) as h:
        first = h.request("tools/call", {**call("mixed"), "_meta": SAMPLING_HOST_META})
        assert set(first["result"]["inputRequests"]) == {"s", "r"}  # the host samples itself; e is the proxy's
        retry = {
            **call("mixed"),
            "_meta": SAMPLING_HOST_META,
            "requestState": first["result"]["requestState"],
            "inputResponses": {"s": HOST_SAMPLING_ANSWER, "r": {"roots": []}},
        }
        final = h.request("tools/call", retry)
    answers = json.loads(final["result"]["content"][0]["text"])["answers"]
    assert answers["s"]["content"]["text"] == "from the host"
    records = {r["method"]: r for r in audit_records(tmp_path) if r.get("method")}
    sampled = records["sampling/createMessage"]
    assert (sampled["tool"], sampled["rule"], sampled["provider"], sampled["model"]) == (
        "mixed",
        "mixed-ok",
        "host",
        "host-model",
    )
    assert sampled["decision"] == "allow"
    assert sampled["content"]["response"]["result"]["content"]["text"] == "from the host"
    assert (records["elicitation/create"]["tool"], records["elicitation/create"]["rule"]) == ("mixed", "mixed-ok")


def test_sampling_the_policy_denies_never_reaches_a_host_that_could_sample(tmp_path: Path, llm: FakeLLMServer) -> None:
    rules = (
        "audit: {path: %s}\nrules:\n  - name: no-mixed-sampling\n    when: {tool: mixed, method: sampling}\n"
        "    action: deny\n  - name: rest\n    action: allow\n" % (tmp_path / "audit.jsonl")
    )
    with host(tmp_path, llm, rules=rules) as h:
        first = h.request("tools/call", {**call("mixed"), "_meta": SAMPLING_HOST_META})
        assert set(first["result"]["inputRequests"]) == {"r"}  # the denied sampling is not shown to the host
        retry = {
            **call("mixed"),
            "_meta": SAMPLING_HOST_META,
            "requestState": first["result"]["requestState"],
            "inputResponses": {"r": {"roots": []}},
        }
        final = h.request("tools/call", retry)
    assert "sampling denied by policy rule 'no-mixed-sampling'" in final["error"]["message"]
    denied = [r for r in audit_records(tmp_path) if r.get("method") == "sampling/createMessage"]
    assert [(r["decision"], r["tool"], r["rule"]) for r in denied] == [("deny", "mixed", "no-mixed-sampling")]


def test_the_rate_limit_counts_sampling_the_host_answers(tmp_path: Path, llm: FakeLLMServer) -> None:
    """A rule's rate limit holds in the 2026-07-28 era too when the host does the sampling: past
    the limit the request is not shown to the host, and the proxy refuses it with the limit's error."""
    rules = (
        "audit: {path: %s}\nrules:\n  - name: two-a-minute\n    when: {tool: mixed, method: sampling}\n"
        "    action: allow\n    rate_limit: {requests: 2, per: 1m}\n  - name: rest\n    action: allow\n"
        % (tmp_path / "audit.jsonl")
    )
    with host(tmp_path, llm, rules=rules) as h:
        rounds = [h.request("tools/call", {**call("mixed"), "_meta": SAMPLING_HOST_META}) for _ in range(3)]
        shown = ["s" in r["result"]["inputRequests"] for r in rounds]
        assert shown == [True, True, False]  # the third is past 2 a minute: the host never sees it
        retry = {
            **call("mixed"),
            "_meta": SAMPLING_HOST_META,
            "requestState": rounds[2]["result"]["requestState"],
            "inputResponses": {"r": {"roots": []}},
        }
        final = h.request("tools/call", retry)
    assert "rate limit" in final["error"]["message"]
    refused = [r for r in audit_records(tmp_path) if r.get("method") == "sampling/createMessage"]
    assert [(r["decision"], r.get("limit")) for r in refused] == [("deny", "rate_limit")]


def test_sampling_the_policy_refuses_never_reaches_the_host_in_any_round(tmp_path: Path, llm: FakeLLMServer) -> None:
    """A round that mixes the host's requests with sampling the policy refuses: the host never sees
    the refused one, whether the round has no requestState to merge answers by (it was shown
    everything) or comes after a round the proxy answered alone (the later round was passed on whole)."""
    rules = "rules:\n  - name: no-sampling\n    when: {method: sampling}\n    action: deny\n"
    with host(tmp_path, llm, rules=rules) as h:
        stateless = h.request("tools/call", {**call("mixed_stateless"), "_meta": SAMPLING_HOST_META})
        late = h.request("tools/call", {**call("late_mixed"), "_meta": SAMPLING_HOST_META})
        retry = {
            **call("late_mixed"),
            "_meta": SAMPLING_HOST_META,
            "requestState": late["result"]["requestState"],
            "inputResponses": {"r": {"roots": []}},
        }
        final = h.request("tools/call", retry)
    assert set(stateless["result"]["inputRequests"]) == {"r"}
    assert late["result"]["requestState"] == "b" and set(late["result"]["inputRequests"]) == {"r"}
    assert "sampling denied by policy rule 'no-sampling'" in final["error"]["message"]
    assert llm.requests == []
