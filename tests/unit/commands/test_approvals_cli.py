"""`mcp-sampling-proxy approvals list|revoke`, run in process, on the remembered approvals in the state
directory. Against a running proxy, whose console approved a request "always" and which asks again once
it is revoked: tests/e2e/test_approvals_cli_e2e.py."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from helpers.support import CommandRun, run_subcommand


@pytest.fixture
def approvals(dirs: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> Callable[..., CommandRun]:
    """`approvals ARGS...` run in process, with the test's state directory."""
    for name, value in dirs.items():
        monkeypatch.setenv(name, value)

    def run(*args: str) -> CommandRun:
        return run_subcommand(["approvals", *args], stdin="")

    return run


def test_revoke_by_server_all_and_bad_numbers(dirs: dict[str, str], approvals: Callable[..., CommandRun]) -> None:
    state = Path(dirs["MCP_SAMPLING_PROXY_STATE_DIR"])
    state.mkdir(mode=0o700)
    entries = [
        ["summarizer", "summarize"],  # written by an older proxy: no rule or time
        {"server": "summarizer", "tool": "", "rule": "ask", "at": "2026-01-05T10:04:11Z", "channel": "terminal"},
        {"server": "github", "tool": "search", "rule": "ask", "at": "2026-01-06T09:00:00Z", "channel": "console"},
    ]
    (state / "approvals.json").write_text(json.dumps({"always": entries}))
    listed = approvals("list").stdout
    assert "(before it was recorded)" in listed and "(no tool call)" in listed

    bad = approvals("revoke", "7")
    assert bad.returncode == 1 and "no approval numbered 7 (there are 3" in bad.stderr
    assert approvals("revoke").returncode == 2  # nothing chosen: says how

    by_server = approvals("revoke", "--server", "Summarizer", "--tool", "summarize")
    assert by_server.returncode == 0 and by_server.stdout.count("revoked:") == 1
    assert approvals("revoke", "--server", "summarizer").stdout.count("revoked:") == 1
    remaining = [json.loads(line)["server"] for line in approvals("list", "--json").stdout.splitlines()]
    assert remaining == ["github"]
    assert approvals("revoke", "--all").returncode == 0
    assert json.loads((state / "approvals.json").read_text()) == {"always": []}
    assert approvals("revoke", "--all").returncode == 1  # nothing left to match


def test_a_damaged_approvals_file_is_not_a_crash(tmp_path: Path) -> None:
    """`always` holding something other than a list (an edit by hand, another program) means no
    remembered approvals; remembering one replaces it. It used to raise TypeError on every request."""
    from mcp_sampling_proxy.approval.memory import ApprovalMemory
    from mcp_sampling_proxy.quotas.state import approvals_file

    path = tmp_path / "approvals.json"
    path.write_text(json.dumps({"always": {"server": "notes"}}))
    memory = ApprovalMemory(store=approvals_file(path))
    assert memory.remembers("notes", "summarize") is None
    memory.remember("notes", "summarize", "always", rule="ask", channel="console")
    assert memory.remembers("notes", "summarize") == "always"
    assert [e["server"] for e in json.loads(path.read_text())["always"]] == ["notes"]
