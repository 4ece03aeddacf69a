"""`mcp-sampling-proxy approvals list|revoke` through the CLI process, against a running proxy whose
console approved a request "always": once revoked, the same running proxy asks again. The command's
other answers, in process: tests/unit/commands/test_approvals_cli.py."""

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
        assert row.split()[:4] == ["1", "small_server", "sample", "ask"]
        assert row.split()[-2:] == ["console", "yes"]  # sealed by the proxy that remembered it
        (entry,) = [json.loads(line) for line in approvals(dirs, "list", "--json").stdout.splitlines()]
        assert entry["server"] == "small_server" and entry["at"].endswith("Z") and entry["trusted"] is True

        second = await call(client, console, "two", None)  # remembered: nobody is asked
        assert tool_json(second)["content"]["text"] == "echo: two"

        revoked = approvals(dirs, "revoke", "1")
        assert revoked.returncode == 0, revoked.stderr
        assert "revoked: small_server / sample" in revoked.stdout
        assert "no remembered approvals" in approvals(dirs, "list").stdout

        third = await call(client, console, "three", {"approve": False})  # asked again, and refused
        assert tool_json(third)["error"]["code"] == -1
    assert len(llm.requests) == 2
