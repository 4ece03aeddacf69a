"""Approval when the host gives the proxy no terminal, through the real proxy: the companion console
approves a request from the small server for an SDK host. Denials, edits, remembered and timed-out
approvals, reviews and host elicitation, played in memory: tests/unit/services/test_approval_channels_played.py;
the remembered approvals' file alone: tests/unit/approval/test_approval_memory.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest
from fakes.llm_server import FakeLLMServer
from helpers.console import PROMPT_RULES, SocketConsole
from helpers.support import openai_policy, proxy_command, proxy_env, sdk_host, tool_json, write_policy


async def sample_with_console(
    tmp_path: Path, dirs: dict[str, str], policy_text: str, decide: Any, prompts: tuple[str, ...] = ("ask me",)
) -> list[Any]:
    policy = write_policy(tmp_path, policy_text)
    results: list[Any] = []
    async with sdk_host(proxy_command(policy), proxy_env(**dirs), tmp_path / "stderr.log") as client:
        console = await SocketConsole.attach(Path(dirs["MCP_SAMPLING_PROXY_RUNTIME_DIR"]))
        async with anyio.create_task_group() as tg:

            async def run_calls() -> None:
                for prompt in prompts:
                    results.append(await client.call_tool("sample", {"prompt": prompt}))
                tg.cancel_scope.cancel()

            tg.start_soon(run_calls)
            await decide(console)
            await anyio.sleep_forever()
    return results


@pytest.mark.anyio
async def test_console_approves(tmp_path: Path, dirs: dict[str, str], llm: FakeLLMServer) -> None:
    async def decide(console: SocketConsole) -> None:
        pending = await console.receive()
        assert pending["type"] == "pending"
        assert pending["server"] == "small_server"
        assert pending["tool"] == "sample"
        assert pending["params"]["messages"][0]["content"]["text"] == "ask me"
        await console.send({"type": "decision", "id": pending["id"], "approve": True, "scope": "once"})

    (result,) = await sample_with_console(tmp_path, dirs, openai_policy(llm.base_url, rules=PROMPT_RULES), decide)
    assert tool_json(result)["content"]["text"] == "echo: ask me"
