"""The secret-form guard end to end through the real proxy, on two real-world forms: an ordinary one
reaches the user, a password form gets the policy's sensitive_form action and the audit record says why.
The guard on many more forms, both ways, in process: tests/unit/approval/test_sensitive_forms.py.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from helpers.real_forms import EVERYTHING_MESSAGE, EVERYTHING_SCHEMA, FASTMCP_MESSAGE, FASTMCP_SCHEMA
from helpers.support import proxy_command, proxy_env, sdk_host, tool_json, write_policy


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return proxy_env(
        MCP_SAMPLING_PROXY_RUNTIME_DIR=str(tmp_path / "run"), MCP_SAMPLING_PROXY_STATE_DIR=str(tmp_path / "state")
    )


async def _elicit(tmp_path: Path, env: dict[str, str], message: str, schema: dict[str, Any]) -> Any:
    # No console, a host without elicitation: a form that is not secret goes to non_interactive
    # (accept_defaults here, so it visibly got through); a secret form gets sensitive_form (cancel).
    policy = (
        "elicitation: {route: console, sensitive_form: cancel, non_interactive: accept_defaults}\n"
        f"audit:\n  path: {tmp_path / 'audit.jsonl'}\n"
    )
    path = write_policy(tmp_path, policy)
    async with sdk_host(proxy_command(path), env, tmp_path / "stderr.log") as host:
        return tool_json(await host.call_tool("elicit_form", {"schema_json": json.dumps(schema), "message": message}))


@pytest.mark.anyio
async def test_server_everything_form_reaches_the_user(tmp_path: Path, env: dict[str, str]) -> None:
    result = await _elicit(tmp_path, env, EVERYTHING_MESSAGE, EVERYTHING_SCHEMA)
    # only "name" is required and it has no default: accept_defaults falls back to decline,
    # and the reason is that nobody could be asked, not that the form asks for secrets
    assert result["action"] == "decline"
    log = (tmp_path / "stderr.log").read_text()
    assert "forbids in form mode" not in log
    assert "nobody can be asked" in log


@pytest.mark.anyio
async def test_fastmcp_password_form_gets_the_sensitive_form_action(tmp_path: Path, env: dict[str, str]) -> None:
    result = await _elicit(tmp_path, env, FASTMCP_MESSAGE, FASTMCP_SCHEMA)
    assert result == {"action": "cancel", "data": None}
    log = (tmp_path / "stderr.log").read_text()
    assert "forbids in form mode" in log
    assert 'message: \\"password\\"' in log or 'message: "password"' in log
    records = [json.loads(line) for line in (tmp_path / "audit.jsonl").read_text().splitlines()]
    reasons = [record.get("reason", "") for record in records]
    assert any('asks for secrets (message: "password")' in reason for reason in reasons), reasons
