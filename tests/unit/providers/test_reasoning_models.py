"""OpenAI reasoning models (o-series, GPT-5) through the proxy's real relay and services (played in
memory, tests/helpers/playbook.py) and the fake OpenAI server.

Issue #11 defect 8: the adapter sent `max_tokens` and `temperature`, which the API refuses for
these models (the fake answers with the real 400s), so every sampling request routed to o3 failed.
"""

from __future__ import annotations

import logging
from collections.abc import MutableMapping
from pathlib import Path
from typing import Any

import pytest
import structlog
from fakes.llm_server import FakeLLMServer
from helpers.playbook import Playbook
from structlog.testing import capture_logs

from mcp_sampling_proxy.config.providers import ModelSpec, ProviderConfig
from mcp_sampling_proxy.config.settings import parse_settings


async def sample(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, base_url: str, models: str, calls: list[dict[str, Any]]
) -> tuple[list[dict[str, Any]], list[MutableMapping[str, Any]]]:
    """Each of `calls` (a prompt, its max_tokens and temperature) asked of the proxy by a server: what the
    server got back (a response: its `result`, or its `error`), and what the proxy logged meanwhile."""
    policy = (
        "llm:\n  providers:\n    openai:\n      type: openai\n"
        f"      base_url: {base_url}\n      api_key_env: TEST_LLM_KEY\n      models: {models}\n"
        "rules:\n  - name: all\n    action: allow\n"
    )
    monkeypatch.setenv("TEST_LLM_KEY", "k")
    saved = structlog.get_config()  # at info, the proxy's default level (a command run before may have set another)
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.INFO))
    try:
        with capture_logs() as logs:
            async with Playbook(tmp_path, policy) as play:
                await play.handshake()
                results = [
                    await play.sample(
                        {
                            "messages": [{"role": "user", "content": {"type": "text", "text": call["prompt"]}}],
                            "maxTokens": call["max_tokens"],
                            "temperature": call["temperature"],
                        }
                    )
                    for call in calls
                ]
    finally:
        structlog.configure(**saved)
    return results, logs


@pytest.mark.anyio
async def test_o3_gets_max_completion_tokens_and_no_temperature(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, llm: FakeLLMServer
) -> None:
    results, logs = await sample(
        tmp_path, monkeypatch, llm.base_url, "[o3]", [{"prompt": "think", "max_tokens": 300, "temperature": 0.2}]
    )
    assert "error" not in results[0], results[0]  # before the fix: the 400 about max_tokens
    assert results[0]["result"]["content"]["text"] == "echo: think"
    body = llm.last.body
    assert body["max_completion_tokens"] == 300
    assert "max_tokens" not in body and "temperature" not in body
    notes = [entry for entry in logs if "temperature dropped" in entry["event"]]
    assert notes and notes[0]["model"] == "o3" and notes[0]["temperature"] == 0.2


@pytest.mark.anyio
async def test_an_ordinary_model_still_gets_max_tokens_and_temperature(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, llm: FakeLLMServer
) -> None:
    await sample(
        tmp_path, monkeypatch, llm.base_url, "[gpt-4o]", [{"prompt": "x", "max_tokens": 50, "temperature": 0.2}]
    )
    assert llm.last.body["max_tokens"] == 50 and llm.last.body["temperature"] == 0.2
    assert "max_completion_tokens" not in llm.last.body


@pytest.mark.anyio
async def test_reasoning_key_in_the_policy_overrides_the_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, llm: FakeLLMServer
) -> None:
    # a reasoning model under a name the guess does not know (e.g. a deployment name)
    await sample(
        tmp_path,
        monkeypatch,
        llm.base_url,
        "[{name: my-thinker, reasoning: true}]",
        [{"prompt": "x", "max_tokens": 40, "temperature": 0.5}],
    )
    assert llm.last.body["max_completion_tokens"] == 40 and "temperature" not in llm.last.body


def test_the_fake_refuses_max_tokens_like_the_real_api(llm: FakeLLMServer) -> None:
    import httpx

    answer = httpx.post(f"{llm.base_url}/chat/completions", json={"model": "o4-mini", "messages": [], "max_tokens": 5})
    assert answer.status_code == 400
    assert answer.json()["error"]["code"] == "unsupported_parameter"


@pytest.mark.parametrize(
    ("name", "setting", "expected"),
    [
        ("o1", None, True),
        ("o3-mini", None, True),
        ("O4-mini", None, True),
        ("gpt-5", None, True),
        ("gpt-5-mini", None, True),
        ("openai/o3", None, True),
        ("gpt-4o", None, False),
        ("llama-o3", None, False),
        ("gpt-5-chat", False, False),
        ("my-deployment", True, True),
    ],
)
def test_default_by_name_and_override(name: str, setting: bool | None, expected: bool) -> None:
    from mcp_sampling_proxy.providers.openai import is_reasoning_model

    config = ProviderConfig(name="p", type="openai", models=(ModelSpec(name, reasoning=setting),))
    assert is_reasoning_model(config, name) is expected


def test_policy_parses_the_reasoning_key() -> None:
    settings = parse_settings(
        "llm:\n  providers:\n    o:\n      type: openai\n      models: [o3, {name: gpt-5-chat, reasoning: false}]\n",
        "policy.yaml",
    )
    assert [m.reasoning for m in settings.providers[0].models] == [None, False]
