"""`approval.quorum` through the real proxy: a request runs only once N different approvers said yes. The
approvers here answer through a webhook receiver on 127.0.0.1, each answer naming its approver (the web
console's named users are driven in Chromium in test_web_console_quorum.py)."""

from __future__ import annotations

import json
import queue
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from fakes.llm_server import FakeLLMServer
from helpers.console import SocketConsole
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


def test_the_same_approver_twice_counts_once(
    tmp_path: Path, llm: FakeLLMServer, dirs: dict[str, str], receiver: Receiver
) -> None:
    receiver.replies = [Reply("approve", "alice"), Reply("approve", "alice"), Reply("approve", "carol")]
    with start(tmp_path, llm, dirs, receiver.url) as host:
        ask(host, 2, "merge the release branch")
        answer = answer_of(host, 2)
    assert answer["content"]["text"] == "echo: merge the release branch"
    assert len(receiver.received) == 3  # alice's second yes did not count: a third answer was needed
    assert len(llm.requests) == 1
    assert the_decision(tmp_path)["approved_by"] == ["webhook:alice", "webhook:carol"]


def test_one_name_in_other_cases_or_widths_counts_once(
    tmp_path: Path, llm: FakeLLMServer, dirs: dict[str, str], receiver: Receiver
) -> None:
    """`Alice` and a fullwidth `ａｌｉｃｅ` are alice again (names compare NFKC-normalised and case-folded):
    they used to count as three people, so one person could meet a quorum of three alone."""
    receiver.replies = [Reply("approve", n) for n in ("alice", "Alice", "\uff41\uff4c\uff49\uff43\uff45", "carol")]
    with start(tmp_path, llm, dirs, receiver.url) as host:
        ask(host, 2, "merge the release branch")
        answer = answer_of(host, 2)
    assert answer["content"]["text"] == "echo: merge the release branch"
    assert len(receiver.received) == 4  # neither Alice nor ａｌｉｃｅ counted: carol was still needed
    assert the_decision(tmp_path)["approved_by"] == ["webhook:alice", "webhook:carol"]


def test_a_deny_ends_it(tmp_path: Path, llm: FakeLLMServer, dirs: dict[str, str], receiver: Receiver) -> None:
    receiver.replies = [Reply("approve", "alice"), Reply("deny", "bob"), Reply("approve", "carol")]
    with start(tmp_path, llm, dirs, receiver.url) as host:
        ask(host, 2, "drop the users table")
        answer = answer_of(host, 2)
    assert "denied through the webhook by bob" in answer["error"]["message"]
    assert llm.requests == []
    assert len(receiver.received) == 2  # nobody is asked after the deny
    record = the_decision(tmp_path)
    assert record["decision"] == "rejected"
    assert record["approved_by"] == ["webhook:alice"]  # who had approved before the deny


def test_one_name_on_two_channels_counts_once(
    tmp_path: Path, llm: FakeLLMServer, dirs: dict[str, str], receiver: Receiver
) -> None:
    """alice approving at a console and again as a webhook approver is one person: a second one is needed."""
    bob_decides = threading.Event()
    receiver.replies = [Reply("approve", "alice"), Reply("approve", "bob", hold=bob_decides)]
    approval = (
        "approval:\n  quorum: 2\n  timeout: 30s\n  channels: [console, webhook]\n"
        f"  webhook:\n    url: {receiver.url}\n    secret_env: QUORUM_HOOK_SECRET\n    timeout: 20s\n"
    )
    audit = f"audit:\n  path: {tmp_path / 'audit.jsonl'}\n"
    policy = write_policy(tmp_path, openai_policy(llm.base_url, rules=RULES) + approval + audit)
    env = proxy_env(**dirs, QUORUM_HOOK_SECRET=SECRET)

    async def console_alice() -> None:
        console = await SocketConsole.attach(Path(dirs["MCP_SAMPLING_PROXY_RUNTIME_DIR"]))
        pending = await console.receive()
        assert pending["type"] == "pending"
        await console.send({"type": "decision", "id": pending["id"], "approve": True, "approver": "alice"})
        with anyio.fail_after(15):  # the webhook's alice came first or comes next; bob is still needed
            while len(receiver.received) < 2:
                await anyio.sleep(0.05)
        bob_decides.set()

    with RawHost(proxy_command(policy), env, tmp_path / "proxy.log") as host:
        host.initialize()
        ask(host, 2, "drop the staging database")
        anyio.run(console_alice)
        answer = answer_of(host, 2)
    assert answer["content"]["text"] == "echo: drop the staging database"
    approved_by = the_decision(tmp_path)["approved_by"]
    assert len(approved_by) == 2 and approved_by[-1] == "webhook:bob", approved_by
    assert approved_by[0] in ("console:alice", "webhook:alice")
