"""Tool calls under the policy's `tools:` rules, through the real proxy: a `prompt` rule asks a human at
the companion console first. A denied tool hidden and refused, played in memory:
tests/unit/services/test_tool_rules_played.py."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import anyio
import anyio.from_thread
import pytest
from helpers.console import SocketConsole
from helpers.support import PY, RawHost, proxy_command, proxy_env, write_policy

ROOT = Path(__file__).resolve().parents[2]
RUGPULL = str(ROOT / "tests" / "fixtures" / "rugpull_server.py")

RULES = """\
approval:
  channels: [console]
  timeout: 20s
tools:
  rules:
    - name: never-delete
      tool: delete_*
      action: deny
      message: deleting is done by hand
    - name: ask-for-secrets
      server: rules-*
      tool: fetch
      arguments: '"url":"[^"]*secret'
      action: prompt
"""


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return proxy_env(
        MCP_SAMPLING_PROXY_RUNTIME_DIR=str(tmp_path / "run"), MCP_SAMPLING_PROXY_STATE_DIR=str(tmp_path / "state")
    )


def ruled_proxy(tmp_path: Path) -> list[str]:
    path = write_policy(tmp_path, f"audit:\n  path: {tmp_path / 'audit.jsonl'}\n{RULES}")
    return proxy_command(path, "--name", "rules-test", upstream=[PY, RUGPULL])


def called(response: dict[str, Any]) -> Any:
    return json.loads(response["result"]["content"][0]["text"])["called"]


def ended(host: RawHost) -> None:
    """End the session as a host does (EOF), so the proxy writes its last audit records and exits."""
    host.close_stdin()
    assert host.wait() == 0


def audit_records(tmp_path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (tmp_path / "audit.jsonl").read_text().splitlines()]


def test_a_prompt_rule_asks_at_the_console(tmp_path: Path, env: dict[str, str]) -> None:
    attached = threading.Event()
    asked: list[dict[str, Any]] = []

    async def console_answers() -> None:
        console = await SocketConsole.attach(tmp_path / "run")
        attached.set()
        for approve in (True, False):
            pending = await console.receive()
            asked.append(pending)
            await console.send({"type": "decision", "id": pending["id"], "approve": approve})
            assert (await console.receive())["type"] == "resolved"

    with RawHost(ruled_proxy(tmp_path), env, tmp_path / "stderr.log") as host:
        host.initialize()
        with anyio.from_thread.start_blocking_portal() as portal:
            future = portal.start_task_soon(console_answers)
            assert attached.wait(30), "the console never attached"
            plain = host.request("tools/call", {"name": "fetch", "arguments": {"url": "https://a.example"}})
            approved = host.request("tools/call", {"name": "fetch", "arguments": {"url": "https://secret.example"}})
            refused = host.request("tools/call", {"name": "fetch", "arguments": {"url": "https://secret.example/2"}})
            future.result(timeout=30)
        ended(host)
    assert called(plain) == "fetch"  # the arguments did not match: nobody was asked
    assert called(approved) == "fetch"
    assert "not approved" in refused["error"]["message"]
    assert [a["type"] for a in asked] == ["pending", "pending"]
    assert asked[0]["rule"] == "ask-for-secrets"
    assert "tool 'fetch'" in asked[0]["summary"] and "https://secret.example" in asked[0]["summary"]
    outcomes = [(r["decision"], r["approver"]) for r in audit_records(tmp_path) if r["rule"] == "ask-for-secrets"]
    assert outcomes == [("approved", "console"), ("rejected", "console")]
