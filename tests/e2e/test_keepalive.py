"""Progress keep-alive: a host whose tool-call timeout resets on progress survives a long wait.

The host is the SDK's Client through the real proxy process. The Python SDK 2.3.0 client has no
reset-timeout-on-progress switch (the TypeScript SDK's `resetTimeoutOnProgress`), so the host here
does what such hosts do: a 2 s deadline for the tool call, pushed back by each progress notification
it gets through `progress_callback` (which also makes the SDK send `_meta.progressToken`). The other
keep-alive cases (no token, keep-alive off, a slow approval in the host's form, server progress) run in
memory: tests/unit/relay/test_keepalive_played.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest
from fakes.llm_server import FakeLLMServer
from helpers.support import openai_policy, proxy_command, proxy_env, sdk_host, tool_json, write_policy

HOST_TIMEOUT = 2.0
WAIT = 3.5  # s: well past the host's timeout, which only the keep-alive's progress resets
KEEPALIVE = "sampling:\n  keepalive_seconds: 0.25\n"


async def call_with_resetting_timeout(
    client: Any, arguments: dict[str, Any], *, with_progress: bool, seen: list[tuple[float, float | None, str | None]]
) -> Any:
    """Call `sample` with a 2 s timeout that each progress notification resets; None when it timed out."""
    with anyio.CancelScope() as scope:
        scope.deadline = anyio.current_time() + HOST_TIMEOUT

        async def on_progress(progress: float, total: float | None, message: str | None) -> None:
            seen.append((progress, total, message))
            scope.deadline = anyio.current_time() + HOST_TIMEOUT

        return await client.call_tool("sample", arguments, progress_callback=on_progress if with_progress else None)
    return None


@pytest.mark.anyio
async def test_slow_llm_keeps_the_tool_call_alive(tmp_path: Path) -> None:
    seen: list[tuple[float, float | None, str | None]] = []
    with FakeLLMServer("openai") as llm:
        llm.reply_text("warm")
        llm.reply_text("finally", delay=WAIT)
        policy = write_policy(tmp_path, openai_policy(llm.base_url, extra=KEEPALIVE))
        async with sdk_host(proxy_command(policy), proxy_env(TEST_LLM_KEY="k"), tmp_path / "stderr.log") as client:
            # a first call warms the proxy and the server up (imports, the LLM connection): on a loaded
            # machine the first sampling request alone can take longer than this host's 2 s timeout
            await client.call_tool("sample", {"prompt": "warm up"})
            started = anyio.current_time()
            result = await call_with_resetting_timeout(
                client, {"prompt": "take your time"}, with_progress=True, seen=seen
            )
            elapsed = anyio.current_time() - started
            await anyio.sleep(0.5)  # nothing more may arrive for a call that has ended (two keep-alive periods)
    assert result is not None, "the host timed the call out despite the keep-alive"
    assert tool_json(result)["content"]["text"] == "finally"
    assert elapsed >= WAIT
    count = len(seen)
    assert count >= 7  # about one every 0.25 s for 3.5 s
    values = [progress for progress, _total, _message in seen]
    assert values == sorted(values) and len(set(values)) == len(values), "progress must increase"
    assert values[-1] < 0.001  # the host's bar does not move: tiny steps from 0
    assert {message for _progress, _total, message in seen} == {"waiting for the LLM"}
