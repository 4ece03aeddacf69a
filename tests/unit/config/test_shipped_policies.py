"""Every policy shipped in policies/ passes `policy check`, and a broken one fails it."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers.support import ROOT, CommandRun, run_subcommand

SHIPPED = sorted(str(p) for p in (ROOT / "policies").glob("*.yaml"))


def policy_check(*files: str) -> CommandRun:
    return run_subcommand(["policy", "check", *files])


def test_shipped_policies_pass_policy_check() -> None:
    assert len(SHIPPED) >= 4
    result = policy_check(*SHIPPED)
    assert result.returncode == 0, result.stderr
    assert result.stdout.count(": ok") == len(SHIPPED)


def test_policy_check_names_line_column_and_the_fix(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("rules:\n  - name: x\n    action: alow\n")
    result = policy_check(str(bad))
    assert result.returncode == 1
    assert (
        f"{bad}:3:13: rules[0].action 'alow' is not one of allow, deny, prompt (did you mean 'allow'?)" in result.stderr
    )


@pytest.mark.parametrize(
    ("document", "heading"), [("docs/reference/policy.md", "# Policy file"), ("README.md", "## A policy")]
)
def test_the_documented_policies_are_valid(tmp_path: Path, document: str, heading: str) -> None:
    text = (ROOT / document).read_text()
    block = text.split(heading, 1)[1].split("```yaml\n", 1)[1].split("```", 1)[0]
    policy = tmp_path / "documented.yaml"
    policy.write_text(block)
    result = policy_check(str(policy))
    assert result.returncode == 0, result.stderr
