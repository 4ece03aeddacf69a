"""The approvals a proxy remembers ("always"), in the sealed state file: what an older version left is
taken once, and what was written later without the key is not believed. Remembered approvals asked of a
running proxy's console and host: tests/e2e/test_approval_channels.py."""

from __future__ import annotations

import json
import os
from pathlib import Path


def test_approvals_of_an_older_version_are_taken_once_and_later_unsealed_ones_are_not(tmp_path: Path) -> None:
    """The first run of a version that seals (its key is new) seals what an older one remembered; an entry
    written after that without the key (a same-user server's) is not believed, and `ignored` says so."""
    from mcp_sampling_proxy.approval.memory import ApprovalMemory
    from mcp_sampling_proxy.quotas.integrity import prepare
    from mcp_sampling_proxy.quotas.state import adopt, approvals_file

    state = tmp_path / "state"
    state.mkdir()
    path = state / "approvals.json"
    path.write_text(json.dumps({"always": [{"server": "old", "tool": "t"}]}))
    os.utime(path, (1_000_000, 1_000_000))  # written long before this version ran
    assert prepare(state) is True and prepare(state) is False
    adopt(state)
    memory = ApprovalMemory(store=approvals_file(path))
    assert memory.remembers("old", "t") == "always"
    data = json.loads(path.read_text())
    data["always"].append({"server": "evil", "tool": "go"})
    path.write_text(json.dumps(data))
    assert memory.remembers("evil", "go") is None and memory.ignored("evil", "go")
    assert memory.remembers("old", "t") == "always"  # the rest of the file is still believed


def test_a_file_stamped_in_the_keys_own_tick_is_not_sealed_as_an_older_versions(tmp_path: Path) -> None:
    """Files are stamped by a coarse clock: a forgery a same-user server wrote just after the key was made
    can carry the key's very mtime. Only a file strictly older than the key is an older version's."""
    from mcp_sampling_proxy.approval.memory import ApprovalMemory
    from mcp_sampling_proxy.quotas.integrity import KEY_FILE, prepare
    from mcp_sampling_proxy.quotas.state import adopt, approvals_file

    state = tmp_path / "state"
    state.mkdir()
    assert prepare(state) is True
    path = state / "approvals.json"
    path.write_text(json.dumps({"always": [{"server": "evil", "tool": "go"}]}))
    made = (state / KEY_FILE).stat().st_mtime_ns
    os.utime(path, ns=(made, made))  # the same tick as the key
    adopt(state)
    memory = ApprovalMemory(store=approvals_file(path))
    assert memory.remembers("evil", "go") is None and memory.ignored("evil", "go")


def test_an_approval_covers_its_server_and_tool_only(tmp_path: Path) -> None:
    """An "always" or "session" approval is per server and tool: approving `read` does not approve `delete`, nor the
    same tool of another server; the server's name is compared as `server:` rules compare it."""
    from mcp_sampling_proxy.approval.memory import ApprovalMemory
    from mcp_sampling_proxy.quotas.integrity import prepare
    from mcp_sampling_proxy.quotas.state import adopt, approvals_file

    state = tmp_path / "state"
    state.mkdir()
    prepare(state)
    adopt(state)
    memory = ApprovalMemory(store=approvals_file(state / "approvals.json"))
    memory.remember("notes", "read", "always")
    memory.remember("notes", "search", "session")
    assert memory.remembers("Notes", "read") == "always"
    assert memory.remembers("notes", "search") == "session"
    assert memory.remembers("notes", "delete") is None
    assert memory.remembers("notes", None) is None  # a request with no tool call in flight
    assert memory.remembers("mail", "read") is None and memory.remembers("mail", "search") is None
    assert ApprovalMemory(store=approvals_file(state / "approvals.json")).remembers("notes", "delete") is None
