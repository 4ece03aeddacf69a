"""`approval.quorum` through the real proxy: a request runs only once N different approvers said yes. The
approvers here answer through a webhook receiver on 127.0.0.1, each answer naming its approver (the web
console's named users are driven in Chromium in test_web_console_quorum.py). One approver twice, one name
in other cases or on two channels, and a deny, played in memory: tests/unit/services/test_quorum_played.py."""

from __future__ import annotations

import json
import queue
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fakes.llm_server import FakeLLMServer
from helpers.support import RawHost, openai_policy, proxy_command, proxy_env, write_policy
from helpers.webhook_receiver import Receiver, Reply, webhook_receiver

SECRET = "quorum-shared-secret-0c9d"
RULES = "rules:\n  - name: two-people\n    action: prompt\n"


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with webhook_receiver(SECRET.encode()) as made:
        yield made


def start(tmp_path: Path, llm: FakeLLMServer, dirs: dict[str, str], url: str) -> RawHost:
    approval = (
        "approval:\n  quorum: 2\n  timeout: 30s\n  channels: [webhook]\n"
        f"  webhook:\n    url: {url}\n    secret_env: QUORUM_HOOK_SECRET\n    timeout: 20s\n"
    )
    audit = f"audit:\n  path: {tmp_path / 'audit.jsonl'}\n"
    policy = write_policy(tmp_path, openai_policy(llm.base_url, rules=RULES) + approval + audit)
    host = RawHost(proxy_command(policy), proxy_env(**dirs, QUORUM_HOOK_SECRET=SECRET), tmp_path / "proxy.log")
    host.initialize()
    return host


def ask(host: RawHost, request_id: int, prompt: str) -> None:
    host.send(
        {
            "jsonrpc": "2.0",
            "id": request_id,
            "method": "tools/call",
            "params": {"name": "sample", "arguments": {"prompt": prompt}},
        }
    )


def answer_of(host: RawHost, request_id: int) -> dict[str, Any]:
    response = host.wait_for(lambda m: m.get("id") == request_id and "method" not in m, 40)
    return dict(json.loads(response["result"]["content"][0]["text"]))


def the_decision(tmp_path: Path) -> dict[str, Any]:
    lines = (tmp_path / "audit.jsonl").read_text().splitlines()
    [record] = [r for line in lines if (r := json.loads(line)).get("event") == "decision"]
    return dict(record)


def test_one_approval_is_not_enough_and_a_second_approver_runs_it(
    tmp_path: Path, llm: FakeLLMServer, dirs: dict[str, str], receiver: Receiver
) -> None:
    bob_decides = threading.Event()
    receiver.replies = [Reply("approve", "alice"), Reply("approve", "bob", hold=bob_decides)]
    with start(tmp_path, llm, dirs, receiver.url) as host:
        ask(host, 2, "rotate the production keys")
        deadline = time.monotonic() + 15
        while len(receiver.received) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(receiver.received) == 2  # alice approved; the proxy asks for another approver
        with pytest.raises((TimeoutError, queue.Empty)):  # one approval is not enough: the call still waits
            host.wait_for(lambda m: m.get("id") == 2 and "method" not in m, 1.5)
        assert llm.requests == []
        bob_decides.set()
        answer = answer_of(host, 2)
    assert answer["content"]["text"] == "echo: rotate the production keys"
    first, second = receiver.received
    assert first.body["quorum"] == {"needed": 2, "approved_by": []}
    assert second.body["quorum"] == {"needed": 2, "approved_by": ["webhook:alice"]}  # shown who approved so far
    record = the_decision(tmp_path)
    assert record["decision"] == "approved"
    assert record["approved_by"] == ["webhook:alice", "webhook:bob"]  # the audit names each approver
