"""`audit tail` tells how each elicitation ended; `audit verify` checks independent logs each on its own.

Issue #11 defect 9: a non-interactive elicitation decline under an allow rule showed as
"deny (rule all)", and `audit verify a.jsonl b.jsonl` of two independent logs said "a file is
missing in between". Files come from the real proxy; the commands are the real CLI's.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from helpers.support import proxy_command, proxy_env, sdk_host, tool_json, write_policy

from mcp_sampling_proxy.commands import audit as audit_cmd

FORM = json.dumps({"type": "object", "properties": {"age": {"type": "integer", "default": 30}}, "required": ["age"]})


async def run_proxy(
    tmp_path: Path,
    audit: Path,
    policy: str,
    calls: list[tuple[str, dict[str, Any]]],
    audit_extra: str = "",
    **client: Any,
) -> list[Any]:
    env = proxy_env(
        MCP_SAMPLING_PROXY_RUNTIME_DIR=str(tmp_path / "run"), MCP_SAMPLING_PROXY_STATE_DIR=str(tmp_path / "state")
    )
    path = write_policy(tmp_path, policy + f"audit:\n  path: {audit}\n{audit_extra}")
    async with sdk_host(proxy_command(path), env, tmp_path / "stderr.log", **client) as host:
        return [tool_json(await host.call_tool(tool, args)) for tool, args in calls]


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = audit_cmd.main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.anyio
async def test_tail_says_how_each_elicitation_ended(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from mcp_types import ElicitResult

    audit = tmp_path / "audit.jsonl"
    rules = (
        "rules:\n  - name: no-names\n    when: {tool: elicit_name}\n    action: deny\n"
        "  - name: all\n    action: allow\n"
    )
    # a host without elicitation and no console: nobody can be asked
    declined, denied = await run_proxy(
        tmp_path, audit, rules, [("elicit_form", {"schema_json": FORM}), ("elicit_name", {})]
    )
    assert declined["action"] == denied["action"] == "decline"
    (cancelled,) = await run_proxy(
        tmp_path, audit, "elicitation: {non_interactive: cancel}\n" + rules, [("elicit_form", {"schema_json": FORM})]
    )
    (defaults,) = await run_proxy(
        tmp_path,
        audit,
        "elicitation: {non_interactive: accept_defaults}\n" + rules,
        [("elicit_form", {"schema_json": FORM})],
    )
    assert (cancelled["action"], defaults["action"]) == ("cancel", "accept")

    async def host_declines(context: Any, params: Any) -> ElicitResult:
        return ElicitResult(action="decline")

    (by_host,) = await run_proxy(
        tmp_path, audit, rules, [("elicit_form", {"schema_json": FORM})], elicitation_callback=host_declines
    )
    assert by_host["action"] == "decline"

    code, out, _ = cli(capsys, "tail", "-n", "10", str(audit))
    assert code == 0
    lines = out.splitlines()
    assert len(lines) == 5, out
    nobody, rule, cancel, accept, host = lines
    assert "declined (nobody can be asked" in nobody and "rule all)" in nobody
    assert "deny" not in nobody  # the old line said "deny (rule all)": the allow rule did not deny it
    assert "declined (declined by policy rule 'no-names'; rule no-names)" in rule
    assert "cancelled (nobody can be asked" in cancel
    assert "accepted (nobody can be asked" in accept and "accepted the defaults" in accept
    assert "declined by host (rule all)" in host


@pytest.mark.anyio
async def test_verify_checks_two_independent_logs_each_on_its_own(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    first, second = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    for audit in (first, second):
        await run_proxy(
            tmp_path, audit, "rules:\n  - name: all\n    action: allow\n", [("elicit_form", {"schema_json": FORM})]
        )
    code, out, err = cli(capsys, "verify", str(first), str(second))
    assert code == 0, err
    assert "missing in between" not in err
    assert f"{first}: ok: 1 records" in out and f"{second}: ok: 1 records" in out
    assert "a new log: its chain starts here (genesis), independent of the file before it" in out


@pytest.mark.anyio
async def test_verify_still_refuses_a_rotated_file_that_does_not_follow(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # a rotated continuation after an unrelated log: the link is checked and fails
    first, other = tmp_path / "a.jsonl", tmp_path / "other.jsonl"
    policy = "rules:\n  - name: all\n    action: allow\n"
    await run_proxy(tmp_path, first, policy, [("elicit_form", {"schema_json": FORM})])
    await run_proxy(
        tmp_path, other, policy, [("elicit_form", {"schema_json": FORM})] * 2, audit_extra="  max_bytes: 1\n"
    )
    rotated = sorted(tmp_path.glob("other.jsonl*"))
    assert len(rotated) >= 2, rotated
    code, _, err = cli(capsys, "verify", str(first), str(other))
    assert code == 1
    assert "a file is missing in between" in err
