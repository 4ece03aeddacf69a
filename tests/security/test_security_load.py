"""Issue #10, the load slice: a hostile server (or a slow LLM) must not hang, freeze or overspend
the proxy, and every way a request can end leaves an audit record.

Each test runs the real proxy process in front of a hostile raw server
(tests/fixtures/hostile/sampling_flood.py) and the loopback fake LLM.
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fakes.llm_server import FakeLLMServer
from helpers.support import PROXY, PY, ROOT, RawHost, openai_policy, proxy_command, proxy_env, write_policy

FLOOD = str(ROOT / "tests" / "fixtures" / "hostile" / "sampling_flood.py")
HANG = 60.0  # only stops a hang; no test asserts a timing


@pytest.fixture
def llm() -> Iterator[FakeLLMServer]:
    with FakeLLMServer("openai") as server:
        yield server


def start(tmp_path: Path, policy: str, *, capabilities: dict[str, Any] | None = None, name: str = "proxy") -> RawHost:
    path = write_policy(tmp_path, policy, f"{name}.yaml")
    env = proxy_env(
        TEST_LLM_KEY="k",
        MCP_SAMPLING_PROXY_STATE_DIR=str(tmp_path / "state"),
        MCP_SAMPLING_PROXY_RUNTIME_DIR=str(tmp_path / "run"),
    )
    host = RawHost(proxy_command(path, upstream=[PY, FLOOD]), env, tmp_path / f"{name}.stderr.log")
    host.initialize(capabilities)
    return host


def call(host: RawHost, tool: str, arguments: dict[str, Any], timeout: float = HANG) -> Any:
    response = host.request("tools/call", {"name": tool, "arguments": arguments}, timeout=timeout)
    return json.loads(response["result"]["content"][0]["text"])


def records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def verify(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*PROXY, "audit", "verify", str(path)], capture_output=True, text=True, timeout=HANG)


SAMPLE = {"messages": [{"role": "user", "content": {"type": "text", "text": "hi"}}], "maxTokens": 20}


# -- every ending is audited ---------------------------------------------------------------------------


def test_requests_that_end_in_an_internal_error_are_audited(tmp_path: Path, llm: FakeLLMServer) -> None:
    audit = tmp_path / "audit.jsonl"
    host = start(tmp_path, openai_policy(llm.base_url, extra=f"audit:\n  path: {audit}\n"))
    with host:
        sampling = call(host, "raw", {"method": "sampling/createMessage", "params": "x"})
        elicitation = call(host, "raw", {"method": "elicitation/create", "params": "x"})
    assert "error" in sampling and "error" in elicitation
    written = records(audit)
    assert [(r["method"], r["decision"]) for r in written] == [
        ("sampling/createMessage", "error"),
        ("elicitation/create", "error"),
    ]
    assert all(r["reason"] for r in written)
    assert verify(audit).returncode == 0
    assert llm.requests == []


def test_a_host_approval_answer_of_the_wrong_type_is_audited(tmp_path: Path, llm: FakeLLMServer) -> None:
    audit = tmp_path / "audit.jsonl"
    policy = openai_policy(
        llm.base_url,
        extra=f"approval:\n  channels: [host]\naudit:\n  path: {audit}\n",
        rules="rules:\n  - name: ask\n    action: prompt\n",
    )
    host = start(tmp_path, policy, capabilities={"elicitation": {}})
    with host:
        host.send(
            {
                "jsonrpc": "2.0",
                "id": "c1",
                "method": "tools/call",
                "params": {"name": "raw", "arguments": {"method": "sampling/createMessage", "params": SAMPLE}},
            }
        )
        ask = host.wait_for(lambda m: m.get("method") == "elicitation/create", HANG)
        host.send({"jsonrpc": "2.0", "id": ask["id"], "error": "not an error object"})
        response = host.wait_for(lambda m: m.get("id") == "c1", HANG)
    answer = json.loads(response["result"]["content"][0]["text"])
    assert "error" in answer
    written = records(audit)
    assert len(written) == 1
    assert written[0]["decision"] in ("error", "rejected")
    assert written[0]["rule"] == "ask"
    assert verify(audit).returncode == 0
    assert llm.requests == []


# -- a slow LLM ---------------------------------------------------------------------------------------


def test_an_llm_that_drips_bytes_is_cut_off_at_the_deadline(tmp_path: Path, llm: FakeLLMServer) -> None:
    audit = tmp_path / "audit.jsonl"
    provider = "      timeout: {read: 5, total: 1}\n      max_attempts: 2\n"
    llm.reply_text("a long answer " * 20, drip=0.2)  # every read gets a byte well within 5 s
    host = start(tmp_path, openai_policy(llm.base_url, extra=provider + f"audit:\n  path: {audit}\n"))
    with host:
        answer = call(host, "raw", {"method": "sampling/createMessage", "params": SAMPLE}, timeout=30)
        error = answer["error"]
        assert "provider 'fake'" in error["message"]
        assert "1 s deadline" in error["message"]
        assert "timeout.total" in error["message"]
        # the proxy goes on serving: the next request is answered normally
        assert call(host, "raw", {"method": "sampling/createMessage", "params": SAMPLE})["result"]["content"]
    written = records(audit)
    assert "1 s deadline" in written[0]["error"]
    assert written[0]["provider"] == "fake"


# -- one server cannot freeze the relay ----------------------------------------------------------------


def flood_with_pings(host: RawHost, count: int, pings: int = 5) -> tuple[Any, list[dict[str, Any]]]:
    """Start a flood of `count` sampling requests, ping while it runs, return (summary, ping answers)."""
    host.send(
        {
            "jsonrpc": "2.0",
            "id": "flood",
            "method": "tools/call",
            "params": {"name": "flood", "arguments": {"count": count, "params": SAMPLE}},
        }
    )
    answers = []
    for n in range(pings):
        host.send({"jsonrpc": "2.0", "id": f"ping-{n}", "method": "ping"})
        answers.append(host.wait_for(lambda m, n=n: m.get("id") == f"ping-{n}", HANG))
    done = host.wait_for(lambda m: m.get("id") == "flood", HANG * 3)
    return json.loads(done["result"]["content"][0]["text"]), answers


def test_a_thousand_sampling_requests_run_at_most_max_concurrent_at_a_time(tmp_path: Path, llm: FakeLLMServer) -> None:
    llm.default_delay = 0.01
    # defaults: 8 at once, 256 queued; the flood is one tool call, over the per-call cap of 25 unless lifted
    host = start(tmp_path, openai_policy(llm.base_url, extra="sampling:\n  max_per_call: 1000\n"))
    with host:
        summary, pings = flood_with_pings(host, 1000)
        answered_during = summary  # the flood's answer came after the pings were answered
    assert all(p.get("result") == {} for p in pings)
    assert answered_during["ok"] + sum(answered_during["codes"].values()) == 1000
    assert set(answered_during["codes"]) <= {"-1"}
    assert all("sampling.max_queued" in m for m in answered_during["messages"])
    assert answered_during["ok"] >= 8 + 256  # what the queue holds always gets served
    assert 1 <= llm.max_open <= 8


def release_when_refused(gate: threading.Event, audit: Path, count: int) -> None:
    """Set `gate` once the audit log holds `count` refusals (whole lines), or at HANG."""
    deadline = time.monotonic() + HANG
    while time.monotonic() < deadline:
        text = audit.read_text() if audit.exists() else ""
        if sum(line.endswith("\n") and '"deny"' in line for line in text.splitlines(keepends=True)) >= count:
            break
        time.sleep(0.02)
    gate.set()


def test_past_the_queue_bound_requests_are_refused_and_audited(tmp_path: Path, llm: FakeLLMServer) -> None:
    audit = tmp_path / "audit.jsonl"
    gate = llm.held = threading.Event()  # the first call holds its slot until the four past the bound are refused
    extra = f"sampling:\n  max_concurrent: 1\n  max_queued: 1\naudit:\n  path: {audit}\n"
    host = start(tmp_path, openai_policy(llm.base_url, extra=extra))
    threading.Thread(target=release_when_refused, args=(gate, audit, 4), daemon=True).start()
    with host:
        summary, pings = flood_with_pings(host, 6, pings=2)
    assert all(p.get("result") == {} for p in pings)
    assert summary["ok"] == 2 and summary["codes"] == {"-1": 4}
    message = next(iter(summary["messages"]))
    assert "the proxy is busy" in message and "sampling.max_queued: 1" in message
    written = records(audit)
    assert len(written) == 6
    assert sorted(r["decision"] for r in written) == ["allow"] * 2 + ["deny"] * 4
    assert {r["limit"] for r in written if r["decision"] == "deny"} == {"queue"}
    assert verify(audit).returncode == 0
    assert llm.max_open == 1


# -- budgets hold under concurrent CJK requests --------------------------------------------------------


def test_concurrent_cjk_requests_never_settle_over_a_shared_budget(tmp_path: Path, llm: FakeLLMServer) -> None:
    llm.usage_mode = "chars"  # one token per CJK character (3 UTF-8 bytes): what real tokenizers do
    llm.default_delay = 0.3  # requests overlap, so their reservations are what keeps the budget
    budget = 1500
    rules = f"rules:\n  - name: shared\n    action: allow\n    budget: {{tokens: {budget}, per: 1d}}\n"
    params = {"messages": [{"role": "user", "content": {"type": "text", "text": "漢字" * 50}}], "maxTokens": 50}
    hosts = [start(tmp_path, openai_policy(llm.base_url, rules=rules), name=f"proxy{n}") for n in range(2)]
    try:
        for n, host in enumerate(hosts):
            host.send(
                {
                    "jsonrpc": "2.0",
                    "id": f"flood-{n}",
                    "method": "tools/call",
                    "params": {"name": "flood", "arguments": {"count": 12, "params": params}},
                }
            )
        summaries = [
            json.loads(
                host.wait_for(lambda m, n=n: m.get("id") == f"flood-{n}", HANG * 2)["result"]["content"][0]["text"]
            )
            for n, host in enumerate(hosts)
        ]
    finally:
        for host in hosts:
            host.close()
    served = sum(s["ok"] for s in summaries)
    assert served >= 1
    assert all("token budget of rule 'shared'" in m for s in summaries for m in s["messages"])
    from mcp_sampling_proxy.quotas.state import JsonStateFile

    state = JsonStateFile(tmp_path / "state" / "budgets.json", sealed="budgets").read()  # (checked as a proxy does)
    entry = state["budgets"]["shared@sampling_flood"]
    assert entry["reservations"] == {}
    assert entry["used"] == served * 150  # what the fake LLM reported: 100 characters + 50 output
    assert entry["used"] <= budget


def test_image_reservations_follow_the_size_in_the_header() -> None:
    import base64
    import struct

    from mcp_sampling_proxy.policy.token_bound import IMAGE_MAX_TOKENS, block_tokens

    def image(data: bytes) -> dict[str, Any]:
        return {"type": "image", "data": base64.b64encode(data).decode(), "mimeType": "image/x"}

    png = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + struct.pack(">II", 100, 100) + b"\x08\x06\x00\x00\x00"
    gif = b"GIF89a" + struct.pack("<HH", 640, 480) + b"\x00" * 8
    frame = b"\xff\xc0\x00\x11\x08" + struct.pack(">HH", 480, 640) + b"\x00" * 9  # SOF0: height, width
    jpeg = b"\xff\xd8\xff\xe0\x00\x10" + b"J" * 14 + frame
    assert block_tokens(image(png)) == 85 + 170  # one OpenAI tile beats Anthropic's 100*100/750 = 14
    assert block_tokens(image(gif)) == 85 + 170 * 2  # 2 x 1 tiles; Anthropic: 640*480/750 = 410
    assert block_tokens(image(jpeg)) == block_tokens(image(gif))  # the same 640x480, from a JPEG frame header
    assert block_tokens(image(b"not an image")) == IMAGE_MAX_TOKENS


def test_requests_waiting_for_approval_are_bounded_too(tmp_path: Path, llm: FakeLLMServer) -> None:
    """A flood under a `prompt` rule: every request waits for a human before the LLM gate, so the gate
    alone bounded nothing (each held a task, its params and an approval form at the host). The proxy
    holds at most twice (max_concurrent + max_queued) requests at once; the rest are refused at once
    and audited, and the host is shown only the forms of those it holds."""
    audit = tmp_path / "audit.jsonl"
    extra = (
        f"sampling:\n  max_concurrent: 1\n  max_queued: 1\n  max_per_call: 100\n"
        f"approval:\n  channels: [host]\naudit:\n  path: {audit}\n"
    )
    rules = "rules:\n  - name: ask\n    action: prompt\n"
    host = start(tmp_path, openai_policy(llm.base_url, extra=extra, rules=rules), capabilities={"elicitation": {}})
    with host:
        host.send(
            {
                "jsonrpc": "2.0",
                "id": "flood",
                "method": "tools/call",
                "params": {"name": "flood", "arguments": {"count": 50, "params": SAMPLE}},
            }
        )
        forms = [host.wait_for(lambda m: m.get("method") == "elicitation/create", HANG) for _ in range(4)]
        time.sleep(0.5)  # any form past the bound would have arrived by now
        host.send({"jsonrpc": "2.0", "id": "ping", "method": "ping"})
        assert host.wait_for(lambda m: m.get("id") == "ping", HANG).get("result") == {}
        shown = [m for m in map(json.loads, host.raw_received) if m.get("method") == "elicitation/create"]
        for form in forms:  # the human declines the four it was asked about
            host.send({"jsonrpc": "2.0", "id": form["id"], "result": {"action": "decline"}})
        done = host.wait_for(lambda m: m.get("id") == "flood", HANG)
    assert len(shown) == 4
    summary = json.loads(done["result"]["content"][0]["text"])
    assert summary["ok"] == 0 and sum(summary["codes"].values()) == 50
    assert any("it holds 4 requests of this server already" in m for m in summary["messages"])
    written = records(audit)
    assert len(written) == 50
    assert sum(1 for r in written if r.get("limit") == "queue") == 46
    assert sum(1 for r in written if r["decision"] == "rejected") == 4
    assert llm.requests == []
