"""`audit tail|verify|summary` without FILE read the log the policy names (audit.path), as the policy
file `init` writes tells the user, and say what to give when there is none. In process: the command
as the command line runs it (helpers.support.run_subcommand), a log written by the proxy's AuditLog."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from helpers.support import CommandRun, run_subcommand, write_policy

from mcp_sampling_proxy.audit.recorder import AuditLog

DENY_ALL = "rules:\n  - name: nothing\n    action: deny\n"


Audit = Callable[..., CommandRun]


@pytest.fixture
def audit(monkeypatch: pytest.MonkeyPatch) -> Audit:
    """`mcp-sampling-proxy audit ARGS...` with the default policy looked for in `config_dir`."""

    def run(*args: str, config_dir: Path) -> CommandRun:
        monkeypatch.setenv("MCP_SAMPLING_PROXY_CONFIG_DIR", str(config_dir))
        return run_subcommand(["audit", *args])

    return run


@pytest.fixture
def logged(tmp_path: Path) -> Path:
    """A default policy with an audit.path, and a log with one denied request in it, written as the proxy
    writes it."""
    log = tmp_path / "state" / "audit.jsonl"
    log.parent.mkdir()
    config = tmp_path / "config"
    config.mkdir()
    write_policy(config, DENY_ALL + f"audit:\n  path: {log}\n")
    writer = AuditLog(str(log), fsync=False, max_bytes=0)
    writer.record(server="kitchen_sink_server", method="sampling/createMessage", decision="deny", rule="nothing")
    writer.close()
    assert log.is_file()
    return config


def test_tail_verify_and_summary_read_the_default_policys_audit_path(logged: Path, audit: Audit) -> None:
    tail = audit("tail", config_dir=logged)
    assert tail.returncode == 0, tail.stderr
    assert "kitchen_sink_server" in tail.stdout and "nothing" in tail.stdout  # the server, the rule
    verify = audit("verify", config_dir=logged)
    assert verify.returncode == 0, verify.stderr
    summary = audit("summary", config_dir=logged)
    assert summary.returncode == 0, summary.stderr
    assert "kitchen_sink_server" in summary.stdout


def test_policy_names_the_policy_to_read(logged: Path, tmp_path: Path, audit: Audit) -> None:
    elsewhere = tmp_path / "no-config-here"
    done = audit("tail", "--policy", str(logged / "policy.yaml"), config_dir=elsewhere)
    assert done.returncode == 0, done.stderr
    assert "kitchen_sink_server" in done.stdout


@pytest.mark.parametrize("action", ["tail", "verify", "summary"])
def test_without_file_or_policy_it_says_what_to_give(tmp_path: Path, action: str, audit: Audit) -> None:
    done = audit(action, config_dir=tmp_path)
    assert done.returncode == 2
    assert done.stderr.strip() == (
        f"mcp-sampling-proxy audit {action}: error: no FILE given, and no policy at {tmp_path / 'policy.yaml'} "
        "to read audit.path from: give the audit log FILE, or --policy FILE"
    )


def test_a_policy_without_audit_path_is_named(tmp_path: Path, audit: Audit) -> None:
    policy = write_policy(tmp_path, DENY_ALL)
    done = audit("summary", config_dir=tmp_path)
    assert done.returncode == 2
    assert f"the policy {policy} has no audit.path" in done.stderr
    assert "give the audit log FILE, or add 'audit: {path: FILE}' to the policy" in done.stderr


def test_file_and_policy_together_are_refused(logged: Path, audit: Audit) -> None:
    done = audit("tail", "some.jsonl", "--policy", str(logged / "policy.yaml"), config_dir=logged)
    assert done.returncode == 2
    assert "give the audit log FILE or --policy FILE" in done.stderr


def test_the_help_says_where_file_comes_from(tmp_path: Path, audit: Audit) -> None:
    for action in ("tail", "verify", "summary"):
        shown = " ".join(audit(action, "--help", config_dir=tmp_path).stdout.split())
        assert "Without FILE: the policy's audit.path" in shown
        assert "--policy FILE" in shown
