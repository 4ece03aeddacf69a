"""`client:` in a tools rule through `serve`, played in process (helpers/played_serve.py `played_sessions`):
two callers with tokens of their own, each with the SDK's real Client, see and call the tools the rules give
their names. The sampling rules of `client:` through a real serve are tests/e2e/test_serve_client_rules.py's.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers.played_serve import PlayedSessions, played_sessions
from helpers.serving import ALICE, BOB, token_file
from helpers.support import write_policy
from mcp.shared.exceptions import MCPError

pytestmark = pytest.mark.anyio

TOOL_RULES = """\
rules:
  - name: allow-all
    action: allow
tools:
  rules:
    - name: only-alice-echoes
      tool: echo
      client: bob
      action: deny
      message: echo is alice's
"""


async def tools_as(served: PlayedSessions, token: str) -> tuple[list[str], str]:
    """The tools the caller of `token` sees, and what its call of `echo` answers."""
    async with served.client(token) as client:
        names = [tool.name for tool in (await client.list_tools()).tools]
        try:
            result = await client.call_tool("echo", {"text": "hi"})
        except MCPError as exc:  # refused by the proxy: a JSON-RPC error
            return names, exc.error.message
        return names, "".join(getattr(block, "text", "") for block in result.content)


async def test_a_tools_rule_can_name_the_caller(tmp_path: Path) -> None:
    """`tools.rules` with `client:`: bob neither sees nor calls the tool that the rule keeps for alice."""
    policy = write_policy(tmp_path, f"{TOOL_RULES}audit:\n  path: {tmp_path / 'audit.jsonl'}\n")
    async with played_sessions("--token-file", token_file(tmp_path), policy=policy) as served:
        alice_sees, alice_gets = await tools_as(served, ALICE)
        bob_sees, bob_gets = await tools_as(served, BOB)
        bobs_server_got = [m.get("method") for m in served.servers[1].got]
        records = [r for r in served.audit() if r.get("rule") == "only-alice-echoes"]
    assert "echo" in alice_sees and "hi" in alice_gets
    assert "echo" not in bob_sees and "echo is alice's" in bob_gets
    assert "tools/call" not in bobs_server_got  # refused at the proxy: it never reached bob's server
    assert records and {r["client"] for r in records} == {"bob"}
