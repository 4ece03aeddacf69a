"""`policy explain` says who a prompt rule would ask when the policy asks more than the default way."""

from __future__ import annotations

from pathlib import Path

from helpers.support import run_subcommand, write_policy


def explain(policy: str) -> str:
    result = run_subcommand(["policy", "explain", policy, "--prompt", "hi"])
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_a_quorum_and_a_webhook_are_explained(tmp_path: Path) -> None:
    policy = write_policy(
        tmp_path,
        "approval:\n  quorum: 2\n  channels: [console, webhook]\n"
        "  webhook: {url: 'https://hooks.example/approve', secret_env: HOOK}\n"
        "rules:\n  - name: ask\n    action: prompt\n",
    )
    assert (
        "  asked on every channel at once (console, webhook (https://hooks.example/approve)): "
        "runs after 2 different approvers (approval.quorum); one deny ends it"
    ) in explain(policy)


def test_the_default_way_of_asking_adds_no_line(tmp_path: Path) -> None:
    policy = write_policy(tmp_path, "rules:\n  - name: ask\n    action: prompt\n")
    assert "asked on" not in explain(policy)
