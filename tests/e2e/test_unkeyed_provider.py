"""A proxy whose LLM provider has no key refuses a request before a human is asked to approve it.

The usual cause: a desktop host starts the proxy without the shell's variables, and the policy reads
the key from one. The request used to go to the companion console, be approved there, and only then
fail with a 401. The proxy runs as a process, a test console (the console protocol on the proxy's
socket) is attached, and a real MCP client calls the small server's sampling tool.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest
from helpers.console import PROMPT_RULES, SocketConsole
from helpers.support import proxy_command, proxy_env, sdk_host, tool_json, write_policy

pytestmark = pytest.mark.anyio

# the vendor's own endpoint (no base_url): it needs a key, and the test never reaches it
UNKEYED = (
    "llm:\n  providers:\n    openai:\n      type: openai\n      api_key_env: NO_SUCH_TEST_KEY\n"
    "      models: [gpt-4o-mini]\n"
)


async def test_no_key_is_refused_before_the_console_is_asked(tmp_path: Path, dirs: dict[str, str]) -> None:
    audit = tmp_path / "audit.jsonl"
    policy = write_policy(tmp_path, UNKEYED + f"audit:\n  path: {audit}\n" + PROMPT_RULES)
    asked: list[dict[str, Any]] = []
    async with sdk_host(proxy_command(policy), proxy_env(**dirs), tmp_path / "stderr.log") as client:
        console = await SocketConsole.attach(Path(dirs["MCP_SAMPLING_PROXY_RUNTIME_DIR"]))

        async def listen() -> None:
            while True:
                asked.append(await console.receive())

        async with anyio.create_task_group() as group:
            group.start_soon(listen)
            with anyio.fail_after(15):  # at once: nobody is waited for
                result = await client.call_tool("sample", {"prompt": "ask me"})
            await anyio.sleep(0.5)  # a question sent meanwhile would have arrived by now
            group.cancel_scope.cancel()
    error = tool_json(result)["error"]
    assert "provider 'openai' has no key: NO_SUCH_TEST_KEY is not set" in error["message"]
    assert "nobody was asked" in error["message"] and "api_key_file" in error["message"]
    assert [message for message in asked if message.get("type") == "pending"] == []
    [record] = [json.loads(line) for line in audit.read_text().splitlines()]
    assert record["decision"] == "error" and record.get("approver") is None


async def test_a_provider_on_this_machine_is_asked_for_without_a_key(tmp_path: Path, dirs: dict[str, str]) -> None:
    """A local server (Ollama, LM Studio) often takes no key: the human is asked as before."""
    policy = write_policy(
        tmp_path,
        UNKEYED.replace("type: openai\n", "type: openai\n      base_url: http://127.0.0.1:9/v1\n") + PROMPT_RULES,
    )
    async with sdk_host(proxy_command(policy), proxy_env(**dirs), tmp_path / "stderr.log") as client:
        console = await SocketConsole.attach(Path(dirs["MCP_SAMPLING_PROXY_RUNTIME_DIR"]))
        async with anyio.create_task_group() as group:

            async def call() -> None:
                await client.call_tool("sample", {"prompt": "ask me"})

            group.start_soon(call)
            pending = await console.receive()
            assert pending["type"] == "pending"
            await console.send({"type": "decision", "id": pending["id"], "approve": False})
