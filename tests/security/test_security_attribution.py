"""Issue #10, tool attribution: a request is judged against every tool call that could own it.

The hostile server (tests/fixtures/hostile/sampler.py) fires from its `dangerous` tool only once
the host's `harmless` call is also in flight, hoping to be charged to the newest call. In the
2026 era an input_required round belongs to the request it answers, nothing else.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fakes.llm_server import FakeLLMServer
from helpers.support import PY, ROOT, RawHost, openai_policy, proxy_command, proxy_env, write_policy

HOSTILE = ROOT / "tests" / "fixtures" / "hostile" / "sampler.py"
MODERN = ROOT / "tests" / "fixtures" / "modern_raw_server.py"
DENY_DANGEROUS = (
    "rules:\n  - name: no-dangerous\n    when: {tool: dangerous}\n    action: deny\n"
    "  - name: rest-ok\n    action: allow\n"
)


@pytest.fixture
def llm() -> Iterator[FakeLLMServer]:
    with FakeLLMServer("openai") as server:
        yield server


def records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def dangerous_while_harmless(
    tmp_path: Path, llm: FakeLLMServer, kind: str
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Call `dangerous` then `harmless` concurrently; (what dangerous's request got, audit records)."""
    audit = tmp_path / "audit.jsonl"
    policy = write_policy(
        tmp_path,
        openai_policy(llm.base_url, rules=DENY_DANGEROUS)
        + "elicitation: {non_interactive: accept_defaults}\n"
        + f"audit:\n  path: {audit}\n",
    )
    command = proxy_command(policy, upstream=[PY, str(HOSTILE), "hostile"])
    with RawHost(command, proxy_env(TEST_LLM_KEY="k"), tmp_path / "stderr.log") as host:
        host.initialize()
        host.send(
            {
                "jsonrpc": "2.0",
                "id": 10,
                "method": "tools/call",
                "params": {"name": "dangerous", "arguments": {"kind": kind}},
            }
        )
        host.send({"jsonrpc": "2.0", "id": 11, "method": "tools/call", "params": {"name": "harmless", "arguments": {}}})
        response = host.wait_for(lambda m: m.get("id") == 10 and "method" not in m)
        host.wait_for(lambda m: m.get("id") == 11 and "method" not in m)
    return json.loads(response["result"]["content"][0]["text"]), records(audit)


def test_sampling_from_a_denied_tool_is_denied_while_a_harmless_call_is_in_flight(
    tmp_path: Path, llm: FakeLLMServer
) -> None:
    llm.reply_text("should not happen")
    answer, audit = dangerous_while_harmless(tmp_path, llm, "sampling")
    assert answer["error"]["code"] == -1
    assert "no-dangerous" in answer["error"]["message"]
    assert not llm.requests
    assert audit[-1]["rule"] == "no-dangerous"
    assert audit[-1]["tool"] == "dangerous"
    assert audit[-1]["tool_candidates"] == ["dangerous", "harmless"]


def test_elicitation_from_a_denied_tool_is_declined_while_a_harmless_call_is_in_flight(
    tmp_path: Path, llm: FakeLLMServer
) -> None:
    answer, audit = dangerous_while_harmless(tmp_path, llm, "elicitation")
    assert answer["result"]["action"] == "decline"
    assert audit[-1]["rule"] == "no-dangerous"
    assert audit[-1]["tool_candidates"] == ["dangerous", "harmless"]


def test_one_call_in_flight_is_judged_as_before(tmp_path: Path, llm: FakeLLMServer) -> None:
    audit = tmp_path / "audit.jsonl"
    policy = write_policy(tmp_path, openai_policy(llm.base_url, rules=DENY_DANGEROUS) + f"audit:\n  path: {audit}\n")
    llm.reply_text("ok")
    with RawHost(
        proxy_command(policy, upstream=[PY, str(HOSTILE)]), proxy_env(TEST_LLM_KEY="k"), tmp_path / "stderr.log"
    ) as host:
        host.initialize()
        response = host.request("tools/call", {"name": "sample", "arguments": {}})
    assert json.loads(response["result"]["content"][0]["text"])["result"]["content"]["text"] == "ok"
    assert records(audit)[-1]["tool"] == "sample"
    assert "tool_candidates" not in records(audit)[-1]


META = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientCapabilities": {},
    "io.modelcontextprotocol/clientInfo": {"name": "modern-host", "version": "1"},
}


def test_input_required_round_shared_with_the_host_is_charged_to_its_tool(tmp_path: Path, llm: FakeLLMServer) -> None:
    """`mixed` asks for sampling (the proxy's) and roots (the host's): the proxy's part is still `mixed`'s."""
    audit = tmp_path / "audit.jsonl"
    rules = (
        "rules:\n  - name: no-mixed\n    when: {tool: mixed}\n    action: deny\n  - name: rest-ok\n    action: allow\n"
    )
    policy = write_policy(
        tmp_path,
        openai_policy(llm.base_url, rules=rules)
        + "elicitation: {non_interactive: accept_defaults}\nupstream:\n  era: any\n"
        + f"audit:\n  path: {audit}\n",
    )
    llm.reply_text("should not happen")
    call = {"name": "mixed", "arguments": {}, "_meta": META}
    with RawHost(
        proxy_command(policy, upstream=[PY, str(MODERN)]), proxy_env(TEST_LLM_KEY="k"), tmp_path / "stderr.log"
    ) as host:
        first = host.request("tools/call", call)
        retry = {**call, "inputResponses": {"r": {"roots": []}}, "requestState": first["result"]["requestState"]}
        final = host.request("tools/call", retry)
    assert not llm.requests
    assert "no-mixed" in json.dumps(final)
    sampling = [r for r in records(audit) if r.get("method") == "sampling/createMessage"]
    assert sampling and sampling[-1]["rule"] == "no-mixed" and sampling[-1]["tool"] == "mixed"


def test_explain_with_several_candidate_tools_picks_the_strictest(tmp_path: Path) -> None:
    import subprocess

    from helpers.support import PROXY

    policy = write_policy(tmp_path, DENY_DANGEROUS)
    request = tmp_path / "request.json"
    request.write_text(
        json.dumps({"messages": [{"role": "user", "content": {"type": "text", "text": "x"}}], "maxTokens": 5})
    )
    done = subprocess.run(
        [
            *PROXY,
            "policy",
            "explain",
            policy,
            "--request",
            str(request),
            "--server",
            "s",
            "--tool",
            "harmless",
            "--tool",
            "dangerous",
        ],
        capture_output=True,
        text=True,
        timeout=30,
        env=proxy_env(),
    )
    assert done.returncode == 0, done.stderr
    assert "strictest outcome wins (deny > prompt > allow): deny, for tool 'dangerous'" in done.stdout
    assert "rule 'no-dangerous' (line 2): MATCHES -> deny" in done.stdout
