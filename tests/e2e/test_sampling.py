"""Sampling through the real proxy: a host without sampling, a server that samples, a loopback LLM.

What needs the process stays here: the round trip through an SDK host and the small server, a key kept out
of stderr, cancellation by the server's SDK (the kitchen sink's), the protocol eras of real peers. What the relay and
the services decide is played in memory: tests/unit/services/test_sampling_played.py (wire formats, invalid
requests, LLM errors), test_sampling_policy_played.py (rules, audit) and test_sampling_route_played.py
(host sampling, fallback, capabilities)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest
from fakes.llm_server import FakeLLMServer
from helpers.support import (
    KITCHEN_SINK,
    PY,
    first_text,
    openai_policy,
    proxy_command,
    proxy_env,
    sdk_host,
    tool_json,
    write_policy,
)

KEY = "sk-test-key-never-logged-0123456789"


async def call(
    tmp_path: Path, policy_text: str | None, tool: str, arguments: dict[str, Any], **client_kwargs: Any
) -> Any:
    """`tool` of the kitchen sink: the SDK's server, whose eras the test is about."""
    policy = write_policy(tmp_path, policy_text) if policy_text is not None else None
    command = proxy_command(policy, upstream=[PY, KITCHEN_SINK])
    async with sdk_host(command, proxy_env(TEST_LLM_KEY=KEY), tmp_path / "stderr.log", **client_kwargs) as client:
        return await client.call_tool(tool, arguments)


@pytest.mark.anyio
async def test_openai_round_trip_with_every_parameter_and_a_401_that_names_the_variable_never_the_key(
    tmp_path: Path, openai_llm: FakeLLMServer
) -> None:
    """One proxy, two calls: the first answered, the second refused by the provider (401)."""
    openai_llm.reply_text("Paris.", model="gpt-test-2026-01", finish="stop", usage=(12, 3))
    openai_llm.reply_error(401, f"Incorrect API key provided: {KEY}")
    policy = write_policy(tmp_path, openai_policy(openai_llm.base_url))
    async with sdk_host(proxy_command(policy), proxy_env(TEST_LLM_KEY=KEY), tmp_path / "stderr.log") as client:
        result = await client.call_tool(
            "sample",
            {
                "prompt": "Capital of France?",
                "system": "Be brief.",
                "max_tokens": 42,
                "temperature": 0.25,
                "stop": ["\n\n"],
                "hints": ["gpt"],
            },
        )
        refused = await client.call_tool("sample", {"prompt": "x"})
    body = openai_llm.requests[0].body
    assert body["model"] == "gpt-test"
    assert body["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Capital of France?"},
    ]
    assert body["max_tokens"] == 42
    assert body["temperature"] == 0.25
    assert body["stop"] == ["\n\n"]
    assert openai_llm.requests[0].headers["authorization"] == f"Bearer {KEY}"
    answer = tool_json(result)
    assert answer == {
        "content": {"type": "text", "text": "Paris."},
        "model": "gpt-test-2026-01",
        "stopReason": "endTurn",
    }

    error = tool_json(refused)["error"]
    assert "401" in error["message"]
    assert "TEST_LLM_KEY" in error["message"]
    assert KEY not in error["message"]
    assert KEY not in (tmp_path / "stderr.log").read_text()


@pytest.mark.anyio
async def test_cancelled_tool_call_aborts_the_llm_request(tmp_path: Path, openai_llm: FakeLLMServer) -> None:
    openai_llm.enqueue(delay=20.0)
    policy = write_policy(tmp_path, openai_policy(openai_llm.base_url))
    stderr = tmp_path / "stderr.log"
    # debug: "sampling fulfilled" is logged at debug level, and must not appear
    command = proxy_command(policy, "--log-level", "debug", upstream=[PY, KITCHEN_SINK])  # its SDK cancels
    async with sdk_host(command, proxy_env(TEST_LLM_KEY=KEY), stderr) as client:
        async with anyio.create_task_group() as calls:  # the host gives up once the LLM has the request
            calls.start_soon(client.call_tool, "sample", {"prompt": "never answered"})
            with anyio.fail_after(15):
                while not openai_llm.requests:
                    await anyio.sleep(0.02)
            calls.cancel_scope.cancel()
        for _ in range(50):
            if "server cancelled a request the proxy was serving" in stderr.read_text():
                break
            await anyio.sleep(0.1)
        # the relay keeps working after the cancellation
        assert first_text(await client.call_tool("echo", {"text": "alive"})) == "alive"
    log = stderr.read_text()
    assert "server cancelled a request the proxy was serving" in log
    assert "sampling fulfilled" not in log
    assert len(openai_llm.requests) == 1


@pytest.mark.anyio
async def test_handshake_pin_serves_old_style_sampling_for_auto_mode_hosts(
    tmp_path: Path, openai_llm: FakeLLMServer
) -> None:
    """The kitchen sink samples the old way (a request of its own), which its SDK allows only in the
    handshake era. An auto host gets the 2026 era from it by default (as directly, where that tool
    fails); `upstream.era: handshake` keeps the server leg in the handshake era and bridges the
    host's 2026 requests to it, so the tool works."""
    default = await call(tmp_path, openai_policy(openai_llm.base_url), "sample", {"prompt": "auto host"}, mode="auto")
    assert "content" not in tool_json(default)  # the SDK refuses a server request in the 2026 era
    pinned = openai_policy(openai_llm.base_url) + "upstream:\n  era: handshake\n"
    result = await call(tmp_path, pinned, "sample", {"prompt": "auto host"}, mode="auto")
    assert tool_json(result)["content"]["text"] == "echo: auto host"


def test_a_handshake_pin_in_front_of_a_2026_only_server_says_which_setting_refuses(tmp_path: Path) -> None:
    """`upstream.era: handshake` keeps the proxy from bridging to a server that speaks only 2026-07-28: the
    host's initialize fails as the server refused it, and the error now names the setting to change."""
    from helpers.support import PY, ROOT, RawHost

    modern = str(ROOT / "tests" / "fixtures" / "modern_raw_server.py")
    policy = write_policy(tmp_path, "upstream:\n  era: handshake\n")
    with RawHost(proxy_command(policy, upstream=[PY, modern]), proxy_env(), tmp_path / "stderr.log") as host:
        answer = host.initialize()
        host.close_stdin()
        host.wait()
    message = answer["error"]["message"]
    assert message.startswith("Method not found (upstream.era is 'handshake' in the policy"), message
    assert "set upstream.era: auto" in message


@pytest.mark.anyio
async def test_resolve_sample_tool_works_for_an_auto_mode_host(tmp_path: Path, openai_llm: FakeLLMServer) -> None:
    from helpers.support import PY, ROOT

    server = [PY, str(ROOT / "tests" / "fixtures" / "resolve_server.py")]
    policy = write_policy(tmp_path, openai_policy(openai_llm.base_url))
    async with sdk_host(
        proxy_command(policy, upstream=server), proxy_env(TEST_LLM_KEY=KEY), tmp_path / "stderr.log", mode="auto"
    ) as client:
        result = await client.call_tool("one_liner", {"topic": "otters"})
    assert first_text(result) == "gpt-test: echo: One line about otters"


@pytest.mark.anyio
async def test_2026_host_gets_input_required_resolved_by_the_proxy(tmp_path: Path, openai_llm: FakeLLMServer) -> None:
    from helpers.support import PY, ROOT

    server = [PY, str(ROOT / "tests" / "fixtures" / "resolve_server.py")]
    openai_llm.reply_text("Otters hold hands while sleeping.")
    policy = write_policy(tmp_path, openai_policy(openai_llm.base_url) + "upstream:\n  era: any\n")
    stderr = tmp_path / "stderr.log"
    async with sdk_host(
        proxy_command(policy, upstream=server), proxy_env(TEST_LLM_KEY=KEY), stderr, mode="2026-07-28"
    ) as client:
        result = await client.call_tool("one_liner", {"topic": "otters"})
    assert first_text(result) == "gpt-test: Otters hold hands while sleeping."
    assert "retrying with input responses" in stderr.read_text()
    assert openai_llm.requests[0].body["messages"][-1]["content"] == "One line about otters"
