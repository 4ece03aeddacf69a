"""Tool calls under the policy's `tools:` rules, played in memory (tests/helpers/playbook.py): a denied
tool disappears from tools/list (the rest of the list reaching the host exactly as the server wrote it)
and its calls are refused with the rule's message. The real relay and tool gate between a host and the
rug-pulling server's tools (tests/helpers/rugpull.py) the test plays. A `prompt` rule asking at the
companion console through the proxy as a process: tests/e2e/test_tool_rules.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers.playbook import Playbook
from helpers.rugpull import rugpull

pytestmark = pytest.mark.anyio
RULES = """\
tools:
  rules:
    - name: never-delete
      tool: delete_*
      action: deny
      message: deleting is done by hand
"""


async def test_a_denied_tool_is_hidden_and_refused(tmp_path: Path) -> None:
    async with Playbook(tmp_path, RULES, name="rules-test") as play:
        await play.handshake({})
        play.serve_with(rugpull())
        tools = (await play.host_asks("tools/list", {}))["result"]["tools"]
        assert [t["name"] for t in tools] == ["echo", "fetch"]
        huge = tools[0]["inputSchema"]["properties"]["n"]["maximum"]
        assert isinstance(huge, int) and huge == 2**70  # not a float
        refused = await play.host_asks("tools/call", {"name": "delete_file", "arguments": {"path": "/etc/passwd"}})
        assert refused["error"]["message"] == (
            "tool 'delete_file' is refused by the proxy's tools rule 'never-delete': deleting is done by hand"
        )
        fetched = await play.host_asks("tools/call", {"name": "fetch", "arguments": {"url": "https://a.example"}})
        assert json.loads(fetched["result"]["content"][0]["text"])["called"] == "fetch"
    decisions = [(r["method"], r["tool"], r["rule"], r["action"], r["decision"]) for r in play.audit()]
    assert ("tools/list", "delete_file", "never-delete", "deny", "deny") in decisions
    assert ("tools/call", "delete_file", "never-delete", "deny", "deny") in decisions
    assert not any(d[0] == "tools/call" and d[1] == "fetch" for d in decisions)  # no rule named that call
