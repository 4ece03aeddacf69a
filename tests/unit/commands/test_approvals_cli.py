"""`mcp-sampling-proxy approvals list|revoke` through the CLI process, against a running proxy whose
console approved a request "always": once revoked, the same running proxy asks again."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import anyio
import pytest
from fakes.llm_server import FakeLLMServer
from helpers.console import PROMPT_RULES, SocketConsole
from helpers.support import PROXY, openai_policy, proxy_command, proxy_env, sdk_host, tool_json, write_policy


def approvals(dirs: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*PROXY, "approvals", *args], env=proxy_env(**dirs), capture_output=True, text=True, timeout=60
    )


async def call(client: Any, console: SocketConsole, prompt: str, decision: dict[str, Any] | None) -> Any:
    """Call `sample`; when `decision` is given, the console must be asked and answers with it."""
    results: list[Any] = []
    async with anyio.create_task_group() as tg:

        async def run() -> None:
            results.append(await client.call_tool("sample", {"prompt": prompt}))

        tg.start_soon(run)
        if decision is not None:
            pending = await console.receive()
            assert pending["type"] == "pending"
            await console.send({"type": "decision", "id": pending["id"], **decision})
            assert (await console.receive())["type"] == "resolved"
    return results[0]


@pytest.mark.anyio
async def test_revoked_always_approval_is_asked_again_by_the_running_proxy(
    tmp_path: Path, dirs: dict[str, str], llm: FakeLLMServer
) -> None:
    policy = write_policy(tmp_path, openai_policy(llm.base_url, rules=PROMPT_RULES))
    async with sdk_host(proxy_command(policy), proxy_env(**dirs), tmp_path / "stderr.log") as client:
        console = await SocketConsole.attach(Path(dirs["MCP_SAMPLING_PROXY_RUNTIME_DIR"]))
        first = await call(client, console, "one", {"approve": True, "scope": "always"})
        assert tool_json(first)["content"]["text"] == "echo: one"

        listed = approvals(dirs, "list")
        assert listed.returncode == 0, listed.stderr
        header, row = listed.stdout.splitlines()[:2]
        assert header.split() == ["#", "server", "tool", "rule", "when", "by", "trusted"]
        assert row.split()[:4] == ["1", "kitchen_sink_server", "sample", "ask"]
        assert row.split()[-2:] == ["console", "yes"]  # sealed by the proxy that remembered it
        (entry,) = [json.loads(line) for line in approvals(dirs, "list", "--json").stdout.splitlines()]
        assert entry["server"] == "kitchen_sink_server" and entry["at"].endswith("Z") and entry["trusted"] is True

        second = await call(client, console, "two", None)  # remembered: nobody is asked
        assert tool_json(second)["content"]["text"] == "echo: two"

        revoked = approvals(dirs, "revoke", "1")
        assert revoked.returncode == 0, revoked.stderr
        assert "revoked: kitchen_sink_server / sample" in revoked.stdout
        assert "no remembered approvals" in approvals(dirs, "list").stdout

        third = await call(client, console, "three", {"approve": False})  # asked again, and refused
        assert tool_json(third)["error"]["code"] == -1
    assert len(llm.requests) == 2


def test_revoke_by_server_all_and_bad_numbers(tmp_path: Path, dirs: dict[str, str]) -> None:
    state = Path(dirs["MCP_SAMPLING_PROXY_STATE_DIR"])
    state.mkdir(mode=0o700)
    entries = [
        ["summarizer", "summarize"],  # written by an older proxy: no rule or time
        {"server": "summarizer", "tool": "", "rule": "ask", "at": "2026-01-05T10:04:11Z", "channel": "terminal"},
        {"server": "github", "tool": "search", "rule": "ask", "at": "2026-01-06T09:00:00Z", "channel": "console"},
    ]
    (state / "approvals.json").write_text(json.dumps({"always": entries}))
    listed = approvals(dirs, "list").stdout
    assert "(before it was recorded)" in listed and "(no tool call)" in listed

    bad = approvals(dirs, "revoke", "7")
    assert bad.returncode == 1 and "no approval numbered 7 (there are 3" in bad.stderr
    assert approvals(dirs, "revoke").returncode == 2  # nothing chosen: says how

    by_server = approvals(dirs, "revoke", "--server", "Summarizer", "--tool", "summarize")
    assert by_server.returncode == 0 and by_server.stdout.count("revoked:") == 1
    assert approvals(dirs, "revoke", "--server", "summarizer").stdout.count("revoked:") == 1
    remaining = [json.loads(line)["server"] for line in approvals(dirs, "list", "--json").stdout.splitlines()]
    assert remaining == ["github"]
    assert approvals(dirs, "revoke", "--all").returncode == 0
    assert json.loads((state / "approvals.json").read_text()) == {"always": []}
    assert approvals(dirs, "revoke", "--all").returncode == 1  # nothing left to match


def test_a_damaged_approvals_file_is_not_a_crash(tmp_path: Path) -> None:
    """`always` holding something other than a list (an edit by hand, another program) means no
    remembered approvals; remembering one replaces it. It used to raise TypeError on every request."""
    from mcp_sampling_proxy.approval.memory import ApprovalMemory
    from mcp_sampling_proxy.quotas.state import JsonStateFile

    path = tmp_path / "approvals.json"
    path.write_text(json.dumps({"always": {"server": "notes"}}))
    memory = ApprovalMemory(store=JsonStateFile(path))
    assert memory.remembers("notes", "summarize") is None
    memory.remember("notes", "summarize", "always", rule="ask", channel="console")
    assert memory.remembers("notes", "summarize") == "always"
    assert [e["server"] for e in json.loads(path.read_text())["always"]] == ["notes"]
