"""`audit summary` over what the real proxy recorded: a server that samples unasked and loops, an LLM
answer holding an AWS key, and tools: rules on the host's calls. The server's requests and the
host's tool calls are counted apart, and each refusal under its own name."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any

from fakes.llm_server import FakeLLMServer
from helpers.support import PY, ROOT, RawHost, openai_policy, proxy_command, proxy_env, write_policy

LOOPER = str(ROOT / "tests" / "fixtures" / "hostile" / "sampling_loop.py")
AWS_KEY_ID = "AKIAIOSFODNN7EXAMPLE"  # AWS's documented example key id: not a real key
EXTRA = """\
sampling:
  max_per_call: 2
tools:
  pin: false
  rules:
    - name: loops
      tool: loop
      action: allow
    - name: no-peeking
      tool: unsolicited_answer
      action: deny
"""


def decisions(audit: Path) -> list[dict[str, Any]]:
    if not audit.exists():
        return []
    return [r for r in map(json.loads, audit.read_text().splitlines()) if r.get("event") == "decision"]


def wait_until(audit: Path, count: int, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while len(decisions(audit)) < count:
        assert time.monotonic() < deadline, decisions(audit)
        time.sleep(0.05)


def test_the_summary_of_a_governed_run(tmp_path: Path, dirs: dict[str, str], llm: FakeLLMServer) -> None:
    audit = tmp_path / "audit.jsonl"
    policy = write_policy(tmp_path, openai_policy(llm.base_url, extra=EXTRA) + f"audit:\n  path: {audit}\n")
    llm.reply_text(f"aws_access_key_id = {AWS_KEY_ID}")  # the first round's answer
    command = proxy_command(policy, "--name", "looper", upstream=[PY, LOOPER, "--unsolicited"])
    with RawHost(command, proxy_env(**dirs), tmp_path / "proxy.log") as host:
        host.initialize()
        wait_until(audit, 1)  # the unsolicited request, refused
        listed = host.request("tools/list")
        assert [t["name"] for t in listed["result"]["tools"]] == ["loop"]
        rounds = json.loads(
            host.request("tools/call", {"name": "loop", "arguments": {"rounds": 4}})["result"]["content"][0]["text"]
        )
        assert [r.get("text") for r in rounds[:2]] == ["aws_access_key_id = [REDACTED:AWS Access Key]", "echo: round 1"]
        assert all("error" in r for r in rounds[2:])
        refused = host.request("tools/call", {"name": "unsolicited_answer", "arguments": {}})
        assert "error" in refused, refused
    done = subprocess.run(
        [PY, "-m", "mcp_sampling_proxy", "audit", "summary", "--json", str(audit)],
        env=proxy_env(**dirs),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    looper = json.loads(done.stdout)["servers"]["looper"]
    # the server's five sampling requests: one unsolicited, two answered, two over the cap
    assert (looper["requests"], looper["allowed"], looper["denied"], looper["errors"]) == (5, 2, 3, 0)
    assert looper["refused"] == {"unsolicited": 1, "max_per_call": 2, "checks": 0, "secrets": 0}
    assert looper["secrets_found"] == 1
    # the host's: a listing that hid a tool, the loop call a rule allowed, the call a rule refused
    assert looper["tools"] == {"calls_allowed": 1, "calls_denied": 1, "calls_held": 0, "hidden": 1, "changes": 0}
