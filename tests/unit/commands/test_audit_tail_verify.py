"""`audit tail` tells how each elicitation ended; `audit verify` checks independent logs each on its own.

A non-interactive decline under an allow rule once showed as "deny (rule all)", and `audit verify a.jsonl
b.jsonl` of two independent logs said "a file is missing in between". The records come from the real
relay and services played in memory (tests/helpers/playbook.py), the commands are the real CLI's; the
proxy as a process writing a log `audit verify` reads: tests/e2e/test_audit_e2e.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from helpers.playbook import Playbook

from mcp_sampling_proxy.commands import audit as audit_cmd

pytestmark = pytest.mark.anyio
SERVER = "kitchen_sink_server"
FORM = {
    "mode": "form",
    "message": "Please fill in the form",
    "requestedSchema": {
        "type": "object",
        "properties": {"age": {"type": "integer", "default": 30}},
        "required": ["age"],
    },
}
ALLOW = "rules:\n  - name: all\n    action: allow\n"
RULES = (
    "rules:\n  - name: no-names\n    when: {tool: elicit_name}\n    action: deny\n  - name: all\n    action: allow\n"
)


async def elicit(
    tmp_path: Path,
    policy: str,
    tools: list[str],
    *,
    audit: Path,
    host_answers: dict[str, Any] | None = None,
    audit_extra: str = "",
) -> list[dict[str, Any]]:
    """What the server gets for each `tools` call's form, from a host with forms (answering `host_answers`)
    or without them, nobody else to ask; the records go to `audit`."""
    policy += f"audit:\n  path: {audit}\n  fsync: false\n{audit_extra}"
    async with Playbook(tmp_path, policy, name=SERVER) as play:
        await play.handshake({"elicitation": {}} if host_answers else {})
        answer = (lambda request: {"result": host_answers}) if host_answers else None
        return [(await play.elicit(FORM, tool=tool, host=answer))["result"] for tool in tools]


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = audit_cmd.main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


async def test_tail_says_how_each_elicitation_ended(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    audit = tmp_path / "audit.jsonl"
    declined, denied = await elicit(tmp_path, RULES, ["elicit_form", "elicit_name"], audit=audit)
    assert declined["action"] == denied["action"] == "decline"
    (cancelled,) = await elicit(
        tmp_path, "elicitation: {non_interactive: cancel}\n" + RULES, ["elicit_form"], audit=audit
    )
    (defaults,) = await elicit(
        tmp_path, "elicitation: {non_interactive: accept_defaults}\n" + RULES, ["f"], audit=audit
    )
    assert (cancelled["action"], defaults["action"]) == ("cancel", "accept")
    (by_host,) = await elicit(tmp_path, RULES, ["elicit_form"], audit=audit, host_answers={"action": "decline"})
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


async def test_verify_checks_two_independent_logs_each_on_its_own(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    first, second = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    for audit in (first, second):
        await elicit(tmp_path, ALLOW, ["elicit_form"], audit=audit)
    code, out, err = cli(capsys, "verify", str(first), str(second))
    assert code == 0, err
    assert "missing in between" not in err
    assert f"{first}: ok: 1 records" in out and f"{second}: ok: 1 records" in out
    assert "a new log: its chain starts here (genesis), independent of the file before it" in out


async def test_verify_still_refuses_a_rotated_file_that_does_not_follow(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # a rotated continuation after an unrelated log: the link is checked and fails
    first, other = tmp_path / "a.jsonl", tmp_path / "other.jsonl"
    await elicit(tmp_path, ALLOW, ["elicit_form"], audit=first)
    await elicit(tmp_path, ALLOW, ["elicit_form"] * 2, audit=other, audit_extra="  max_bytes: 1\n")
    rotated = sorted(tmp_path.glob("other.jsonl*"))
    assert len(rotated) >= 2, rotated
    code, _, err = cli(capsys, "verify", str(first), str(other))
    assert code == 1
    assert "a file is missing in between" in err
