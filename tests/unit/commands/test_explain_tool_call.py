"""`policy explain --call`: which `tools:` rule decides a host's tool call, rule by rule, as the proxy
decides it (both go by config/tool_settings.py's `why_not`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from mcp_sampling_proxy.commands.policy import main

POLICY = """\
tools:
  on_change: deny
  rules:
    - name: only-files
      server: "files*"
      tool: "*"
      arguments: '"path":"/etc'
      action: prompt
    - {name: no-delete, tool: "delete_*", action: deny}
"""


def explain(tmp_path: Path, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    policy = tmp_path / "policy.yaml"
    policy.write_text(POLICY)
    code = main(["explain", str(policy), *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_each_rule_says_why_it_does_not_match(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = explain(tmp_path, capsys, "--call", "delete_file", "--server", "notes", "--arguments", '{"p": 1}')
    assert code == 0
    assert "tools rule 'only-files' (line 4): no: server 'notes' does not match 'files*'" in out
    assert "tools rule 'no-delete' (line 9): matches -> deny" in out
    assert "decision: deny: the call is refused, and the tool is hidden from tools/list" in out
    assert "pinning: on, on_change: deny" in out


def test_an_arguments_condition_is_read_in_canonical_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _, out, _ = explain(tmp_path, capsys, "--call", "read", "--server", "Files-1", "--arguments", '{"path": "/etc/x"}')
    assert "matches -> prompt" in out and "decision: prompt: a human is asked" in out
    _, out, _ = explain(tmp_path, capsys, "--call", "read", "--server", "files", "--arguments", '{"path": "/home"}')
    assert 'the arguments {"path":"/home"} do not match' in out
    assert "decision: allow: no tools rule matches" in out


def test_bad_arguments_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = explain(tmp_path, capsys, "--call", "read", "--arguments", "[1]")
    assert code == 2 and "--arguments must be a JSON object, got list" in err
    code, _, err = explain(tmp_path, capsys, "--call", "read", "--arguments", "{")
    assert code == 2 and "--arguments is not JSON" in err


def test_a_client_condition_names_the_caller(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text("tools:\n  rules:\n    - {name: ops-only, tool: deploy, client: 'ops-*', action: allow}\n")
    assert main(["explain", str(policy), "--call", "deploy", "--client", "ops-ann"]) == 0
    out = capsys.readouterr().out
    assert "by client 'ops-ann'" in out and "tools rule 'ops-only' (line 3): matches -> allow" in out
    main(["explain", str(policy), "--call", "deploy", "--client", "bob"])
    assert "client 'bob' does not match 'ops-*'" in capsys.readouterr().out
    main(["explain", str(policy), "--call", "deploy"])
    assert "no client name (only `serve` with tokens names its caller)" in capsys.readouterr().out
