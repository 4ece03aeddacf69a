"""The common OpenAI-compatible endpoints by their quirks, through the proxy's real relay and services
(played in memory, tests/helpers/playbook.py) against the loopback fake: the URL and headers each one
needs on the wire."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fakes.llm_server import FakeLLMServer
from helpers.playbook import Playbook

from mcp_sampling_proxy.config.settings import parse_settings
from mcp_sampling_proxy.notation.yamlnodes import PolicyError

pytestmark = pytest.mark.anyio
KEY = "sk-test-endpoint-key-0123456789"
ALLOW = "rules:\n  - name: allow-all\n    action: allow\n"


@pytest.fixture
def llm() -> Iterator[FakeLLMServer]:
    with FakeLLMServer("openai") as server:
        yield server


def policy(body: str) -> str:
    lines = "".join(f"      {line}\n" for line in body.strip().splitlines())
    return f"llm:\n  providers:\n    p:\n      type: openai\n{lines}{ALLOW}"


PROMPT = {"messages": [{"role": "user", "content": {"type": "text", "text": "hi"}}], "maxTokens": 100}


async def sample(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str, **env: str) -> Any:
    """What the server gets back for one sampling request under the policy `text`, the proxy's
    environment holding `env` (a response: its `result`, or its `error`)."""
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    async with Playbook(tmp_path, text) as play:
        await play.handshake()
        return await play.sample(PROMPT)


async def test_ollama_needs_no_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, llm: FakeLLMServer) -> None:
    # Ollama: base_url http://127.0.0.1:11434/v1, no key; a key variable left unset sends none either
    answer = await sample(tmp_path, monkeypatch, policy(f"base_url: {llm.base_url}\nmodels: [llama3.2]"))
    assert answer["result"]["content"]["text"]
    request = llm.last
    assert request.path == "/v1/chat/completions"
    assert "authorization" not in request.headers
    assert request.body["model"] == "llama3.2"


async def test_lm_studio_and_vllm_send_the_key_as_bearer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, llm: FakeLLMServer
) -> None:
    # LM Studio (:1234/v1) accepts any key; vLLM (:8000/v1) checks the one given to `vllm serve --api-key`
    text = policy(f"base_url: {llm.base_url}\napi_key_env: VLLM_KEY\nmodels: [Qwen/Qwen2.5-7B-Instruct]")
    await sample(tmp_path, monkeypatch, text, VLLM_KEY=KEY)
    assert llm.last.path == "/v1/chat/completions"
    assert llm.last.headers["authorization"] == f"Bearer {KEY}"
    assert llm.last.body["model"] == "Qwen/Qwen2.5-7B-Instruct"


async def test_openrouter_attribution_headers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, llm: FakeLLMServer
) -> None:
    text = policy(f"""
base_url: {llm.base_url}
api_key_env: OPENROUTER_API_KEY
models: [anthropic/claude-sonnet-4.5]
headers: {{HTTP-Referer: "https://github.com/me/my-setup", X-Title: "my MCP setup"}}
""")
    await sample(tmp_path, monkeypatch, text, OPENROUTER_API_KEY=KEY)
    headers = llm.last.headers
    assert headers["http-referer"] == "https://github.com/me/my-setup"
    assert headers["x-title"] == "my MCP setup"
    assert headers["authorization"] == f"Bearer {KEY}"
    assert llm.last.body["model"] == "anthropic/claude-sonnet-4.5"


async def test_azure_deployment_url_api_version_and_api_key_header(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, llm: FakeLLMServer
) -> None:
    root = llm.base_url.removesuffix("/v1")  # the resource endpoint, https://NAME.openai.azure.com
    text = policy(f"""
base_url: {root}
api_key_env: AZURE_OPENAI_API_KEY
azure: {{api_version: "2024-10-21"}}
models: [my-gpt4o-deployment]
""")
    answer = await sample(tmp_path, monkeypatch, text, AZURE_OPENAI_API_KEY=KEY)
    assert answer["result"]["content"]["text"]
    request = llm.last
    assert request.path == "/openai/deployments/my-gpt4o-deployment/chat/completions"
    assert request.query == "api-version=2024-10-21"
    assert request.headers["api-key"] == KEY
    assert "authorization" not in request.headers


async def test_azure_pinned_deployment_and_a_base_url_ending_in_openai(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, llm: FakeLLMServer
) -> None:
    root = llm.base_url.removesuffix("/v1")
    text = policy(f"""
base_url: {root}/openai
api_key_env: AZURE_OPENAI_API_KEY
azure: {{api_version: 2025-01-01-preview, deployment: prod-4o}}
models: [gpt-4o]
""")
    await sample(tmp_path, monkeypatch, text, AZURE_OPENAI_API_KEY=KEY)
    assert llm.last.path == "/openai/deployments/prod-4o/chat/completions"
    assert llm.last.query == "api-version=2025-01-01-preview"


async def test_api_key_header_names_another_header(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, llm: FakeLLMServer
) -> None:
    # Azure's v1 API (base_url .../openai/v1, no api-version) and gateways that want the key as is
    text = policy(f"base_url: {llm.base_url}\napi_key_env: GW_KEY\napi_key_header: X-Api-Key\nmodels: [m]")
    await sample(tmp_path, monkeypatch, text, GW_KEY=KEY)
    assert llm.last.path == "/v1/chat/completions"
    assert llm.last.headers["x-api-key"] == KEY
    assert "authorization" not in llm.last.headers


async def test_azure_wrong_key_names_the_variable_not_the_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with FakeLLMServer("openai", api_key="the-right-key-000000") as llm:
        root = llm.base_url.removesuffix("/v1")
        text = policy(
            f"base_url: {root}\napi_key_env: AZURE_OPENAI_API_KEY\n"
            "azure: {api_version: '2024-10-21'}\nmodels: [dep]\nmax_attempts: 1"
        )
        answer = await sample(tmp_path, monkeypatch, text, AZURE_OPENAI_API_KEY=KEY)
    message = answer["error"]["message"]
    assert "401" in message and "AZURE_OPENAI_API_KEY" in message
    assert KEY not in message


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ("base_url: https://x.openai.azure.com\nmodels: [d]\nazure: {deployment: d}", "azure needs api_version"),
        ("models: [d]\nazure: {api_version: '2024-10-21'}", "azure needs base_url"),
        ("base_url: https://x\nmodels: [d]\napi_key_header: 'bad header'", "must be an HTTP header name"),
    ],
)
def test_endpoint_settings_mistakes(body: str, expected: str) -> None:
    with pytest.raises(PolicyError, match=expected):
        parse_settings(policy(body), "policy.yaml")


def test_azure_applies_to_openai_providers_only() -> None:
    text = (
        "llm:\n  providers:\n    a:\n      type: anthropic\n      models: [m]\n"
        "      azure: {api_version: '2024-10-21'}\n"
    )
    with pytest.raises(PolicyError, match="azure: applies to type: openai only"):
        parse_settings(text, "policy.yaml")
