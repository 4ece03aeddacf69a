"""The webhook approval channel through the real proxy: a receiver on 127.0.0.1 (tests/helpers/webhook_receiver.py)
is POSTed a signed request showing exactly what will run and answers it, signed, and the governed server
never sees the secret; `doctor` says when the secret is missing; the guide's receiver works as printed.
Denied, forged, replayed and unreachable answers, played in memory:
tests/unit/services/test_webhook_approval_played.py; a plain-http URL off this machine:
tests/unit/commands/test_policy_check_webhook.py."""

from __future__ import annotations

import hashlib
import json
import os
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fakes.llm_server import FakeLLMServer
from helpers.support import (
    PY,
    ROOT,
    SMALL_SERVER,
    RawHost,
    children_of,
    free_port,
    openai_policy,
    proxy_command,
    proxy_env,
    write_policy,
)
from helpers.webhook_receiver import Receiver, Reply, webhook_receiver

SECRET = "whsec-test-7f3a9c1e0b2d4e6f8a1c"
RULES = "rules:\n  - name: ask-first\n    action: prompt\n"


def webhook_policy(tmp_path: Path, llm: FakeLLMServer, url: str, extra: str = "") -> str:
    approval = (
        "approval:\n  channels: [webhook]\n"
        f"  webhook:\n    url: {url}\n    secret_env: APPROVAL_HOOK_SECRET\n    timeout: 20s\n{extra}"
    )
    audit = f"audit:\n  path: {tmp_path / 'audit.jsonl'}\n  content: full\n"
    return write_policy(tmp_path, openai_policy(llm.base_url, rules=RULES) + approval + audit)


@pytest.fixture
def env(dirs: dict[str, str]) -> dict[str, str]:
    return proxy_env(**dirs, APPROVAL_HOOK_SECRET=SECRET)


def call_sample(host: RawHost, request_id: int, prompt: str) -> dict[str, Any]:
    host.send(
        {
            "jsonrpc": "2.0",
            "id": request_id,
            "method": "tools/call",
            "params": {"name": "sample", "arguments": {"prompt": prompt}},
        }
    )
    response = host.wait_for(lambda m: m.get("id") == request_id and "method" not in m, 40)
    return dict(json.loads(response["result"]["content"][0]["text"]))


def decisions(tmp_path: Path) -> list[dict[str, Any]]:
    lines = (tmp_path / "audit.jsonl").read_text().splitlines()
    return [record for line in lines if (record := json.loads(line)).get("event") == "decision"]


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with webhook_receiver(SECRET.encode()) as made:
        yield made


def _server_environments(proxy: int) -> list[bytes]:
    """The environments of this proxy's server processes (bubblewrap's and the server's below it):
    another worker's small servers come and go meanwhile, and are not this proxy's."""
    found, below = [], children_of(proxy)
    while below:
        pid = below.pop()
        below.extend(children_of(pid))
        try:
            command = Path(f"/proc/{pid}/cmdline").read_bytes()
            if SMALL_SERVER.encode() in command and b"mcp_sampling_proxy" not in command:  # not the proxy's guard
                found.append(Path(f"/proc/{pid}/environ").read_bytes())
        except OSError:
            continue
    return found


def test_a_webhook_approval_runs_the_request_it_was_shown(
    tmp_path: Path, llm: FakeLLMServer, env: dict[str, str], receiver: Receiver
) -> None:
    receiver.replies = [Reply("approve", "alice")]
    policy = webhook_policy(tmp_path, llm, receiver.url)
    with RawHost(proxy_command(policy), env, tmp_path / "proxy.log") as host:
        host.initialize()
        answer = call_sample(host, 2, "summarise the incident report")
        # the governed server is not given the secret's variable
        server_environments = _server_environments(host.proc.pid)
    assert answer["content"]["text"] == "echo: summarise the incident report"
    assert server_environments and all(SECRET.encode() not in environ for environ in server_environments)
    [sent] = receiver.received
    assert sent.signature_ok  # signed with the shared secret over timestamp.body
    body = sent.body
    assert (body["server"], body["tool"], body["rule"]) == ("small_server", "sample", "ask-first")
    # the exact request that will run, and its digest
    assert body["params"]["messages"] == [
        {"role": "user", "content": {"type": "text", "text": "summarise the incident report"}}
    ]
    canonical = json.dumps(body["params"], sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
    assert body["request_sha256"] == hashlib.sha256(canonical).hexdigest()
    assert "summarise the incident report" in json.dumps(llm.last.body)
    [record] = decisions(tmp_path)
    assert record["decision"] == "approved" and record["approver"] == "webhook"
    assert record["approved_by"] == ["webhook:alice"]
    assert record["content"]["request"]["sha256"] == body["request_sha256"]  # the audit names what was approved
    # the secret is in neither the audit log, the proxy's log, nor what the receiver was sent
    for text in ((tmp_path / "audit.jsonl").read_text(), (tmp_path / "proxy.log").read_text(), sent.raw.decode()):
        assert SECRET not in text


def test_doctor_says_why_a_webhook_without_its_secret_asks_nobody(
    tmp_path: Path, llm: FakeLLMServer, dirs: dict[str, str], receiver: Receiver
) -> None:
    policy = webhook_policy(tmp_path, llm, receiver.url)
    doctor = subprocess.run(
        [PY, "-m", "mcp_sampling_proxy", "doctor", "--policy", policy],
        env=proxy_env(**dirs),
        capture_output=True,
        text=True,
        timeout=120,
    )
    out = doctor.stdout + doctor.stderr
    assert "webhook: its secret is not set (secret_env APPROVAL_HOOK_SECRET)" in out, out
    assert "set APPROVAL_HOOK_SECRET in the environment" in out


def test_the_receiver_in_the_guide_approves_a_request(tmp_path: Path, llm: FakeLLMServer, dirs: dict[str, str]) -> None:
    """The guide's receiver, run as it is printed, verifies the proxy's request and signs an answer the proxy
    takes: the person at its terminal types y."""
    guide = (ROOT / "docs" / "guides" / "approvals.md").read_text()
    section = guide.split("## Approvals through a webhook", 1)[1]
    code = section.split("```python\n", 1)[1].split("```", 1)[0]
    (tmp_path / "receiver.py").write_text(code)
    port = free_port()
    receiver = subprocess.Popen(
        [PY, str(tmp_path / "receiver.py")],
        env={**os.environ, "APPROVAL_WEBHOOK_SECRET": SECRET, "PORT": str(port), "USER": "docs-reader"},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    try:
        assert receiver.stdin is not None
        receiver.stdin.write(b"y\n")
        receiver.stdin.flush()
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            with socket.socket() as probe:
                if probe.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.1)
        policy = webhook_policy(tmp_path, llm, f"http://127.0.0.1:{port}/")
        with RawHost(proxy_command(policy), proxy_env(**dirs, APPROVAL_HOOK_SECRET=SECRET), tmp_path / "p.log") as host:
            host.initialize()
            answer = call_sample(host, 2, "as the guide shows")
    finally:
        receiver.kill()
        shown, _ = receiver.communicate(timeout=10)
    assert answer["content"]["text"] == "echo: as the guide shows"
    assert b'"text": "as the guide shows"' in shown  # it printed what would run
    assert decisions(tmp_path)[0]["approved_by"] == ["webhook:docs-reader"]
