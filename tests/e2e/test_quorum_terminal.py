"""A quorum of two met at the terminal and the companion console, as two people would meet it: the proxy
(run by `try`, with a terminal) asks both at once, each shows what it needs, the terminal's yes alone
leaves the request waiting, and the console's yes runs it."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from fakes.llm_server import FakeLLMServer
from helpers.support import PY, SMALL_SERVER, openai_policy, write_policy
from helpers.terminal import PtySession, terminal_env, try_argv

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="console sockets use SO_PEERCRED and /proc")


def test_the_terminal_and_the_console_make_a_quorum_of_two(
    tmp_path: Path, dirs: dict[str, str], llm: FakeLLMServer
) -> None:
    audit = tmp_path / "audit.jsonl"
    approval = "approval:\n  quorum: 2\n  channels: [terminal, console]\n  timeout: 60s\n"
    rules = "rules:\n  - name: two-people\n    action: prompt\n"
    policy = write_policy(tmp_path, openai_policy(llm.base_url, rules=rules) + approval + f"audit:\n  path: {audit}\n")
    console = PtySession([PY, "-m", "mcp_sampling_proxy", "console"], terminal_env(**dirs))
    proxy = PtySession(
        try_argv("--policy", policy, "--tool", "sample", "--args", '{"prompt": "deploy it"}', "--", PY, SMALL_SERVER),
        terminal_env(**dirs),
    )
    try:
        screen = proxy.read_until(b"Allow this request?")
        assert b"needs 2 different approvers (approved so far: nobody yet)" in screen
        console.read_until(b"Allow this request? [y]es once")
        assert b"needs 2 different approvers; here you approve as 'console'" in console.output
        proxy.type("y\n")
        with pytest.raises(AssertionError):  # the terminal's yes alone does not run it
            proxy.read_until(b"result:", timeout=2)
        assert llm.requests == []
        console.type("y\n")
        proxy.read_until(b"result:")
        assert proxy.finish() == 0
    finally:
        os.kill(console.pid, 2)
        console.finish()
    assert b"echo: deploy it" in proxy.output.split(b"result:")[1]
    [record] = [r for line in audit.read_text().splitlines() if (r := json.loads(line)).get("event") == "decision"]
    assert record["approved_by"] == ["terminal", "console"]
    assert record["approver"] == "terminal+console"
