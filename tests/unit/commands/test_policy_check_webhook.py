"""`mcp-sampling-proxy policy check` refuses an approval webhook in plain http off this machine: the
request it would be sent shows what will run, and its answer decides whether it runs."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers.support import run_subcommand, write_policy


@pytest.mark.parametrize(
    ("url", "ok"),
    [
        ("http://approvals.example.com/hook", False),
        ("http://10.0.0.5:8080/hook", False),
        ("http://127.0.0.1:9000/hook", True),
        ("http://[::1]:9000/hook", True),
        ("http://localhost:9000/hook", True),
        ("https://approvals.example.com/hook", True),
    ],
)
def test_policy_check_refuses_plain_http_off_this_machine(tmp_path: Path, url: str, ok: bool) -> None:
    policy = write_policy(
        tmp_path, f"approval:\n  webhook:\n    url: '{url}'\n    secret_env: HOOK\nrules:\n  - action: prompt\n"
    )
    result = run_subcommand(["policy", "check", policy])
    if ok:
        assert result.returncode == 0, result.stderr
    else:
        assert result.returncode != 0
        assert "policy.yaml:3:10: approval.webhook.url is plain http to" in result.stderr
        assert "use https://" in result.stderr
