"""The environment a server starts with: the host's, without the keys the policy names however it spells
them. The real proxy's server getting it is tests/e2e/test_relay.py (one policy, through the process)."""

from __future__ import annotations

import os

import pytest

from mcp_sampling_proxy.config.child_env import child_environment
from mcp_sampling_proxy.config.settings import load_settings

POLICIES = {
    "block": "llm:\n  providers:\n    p:\n      type: openai\n      api_key_env: CUSTOM_KEY\n      models: [m]\n",
    "flow": "llm: {providers: {p: {type: openai, api_key_env: 'CUSTOM_KEY', models: [m]}}}\n",
    "alias": "llm:\n  providers:\n    p: {type: openai, api_key_env: &k CUSTOM_KEY, models: [m]}\n"
    "    q: {type: openai, api_key_env: *k, models: [n]}\n",
    "escaped": 'llm:\n  providers:\n    p: {type: openai, api_key_env: "CUSTOM\\x5fKEY", models: [m]}\n',
    "pass_env": "llm:\n  providers:\n    p: {type: openai, api_key_env: CUSTOM_KEY, models: [m]}\n"
    "upstream: {pass_env: [ANTHROPIC_API_KEY]}\n",
}
HOST_ENV = {
    "OPENAI_API_KEY": "sk-secret-openai",
    "ANTHROPIC_API_KEY": "sk-ant-secret",
    "CUSTOM_KEY": "sk-custom-secret",
    "SOME_SETTING": "kept",
    "MCP_SAMPLING_PROXY_CONFIG_DIR": "/the/proxys/own",
}


@pytest.mark.parametrize("style", list(POLICIES))
def test_the_server_gets_the_hosts_environment_without_the_keys_the_policy_names(style: str) -> None:
    settings = load_settings("policy.yaml", text=POLICIES[style])  # as the proxy reads it before the server starts
    names = set(child_environment(HOST_ENV, settings.secret_env_vars()))
    assert "SOME_SETTING" in names
    assert "CUSTOM_KEY" not in names and "OPENAI_API_KEY" not in names
    assert "MCP_SAMPLING_PROXY_CONFIG_DIR" not in names  # the proxy's own settings stay with it
    assert ("ANTHROPIC_API_KEY" in names) == (style == "pass_env")


def test_a_helper_gets_only_the_withheld_keys_its_configuration_names(monkeypatch: pytest.MonkeyPatch) -> None:
    """Once read, the keys leave the proxy's environment; a process the proxy starts (a CLI provider, an
    `api_key_command`, a check) gets back only those its configuration passes it (`pass_env`)."""
    from mcp_sampling_proxy.config import child_env

    monkeypatch.setattr(child_env, "_WITHHELD", {})
    monkeypatch.setenv("GEMINI_API_KEY", "gm-secret")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret-openai")
    monkeypatch.setenv("SOME_SETTING", "kept")
    child_env.withhold(["GEMINI_API_KEY", "OPENAI_API_KEY"])
    assert "GEMINI_API_KEY" not in os.environ and "OPENAI_API_KEY" not in os.environ
    cli = child_env.helper_environment(["GEMINI_API_KEY"])
    assert cli["GEMINI_API_KEY"] == "gm-secret" and "OPENAI_API_KEY" not in cli and cli["SOME_SETTING"] == "kept"
    assert (
        "GEMINI_API_KEY" not in child_env.helper_environment()
        and "OPENAI_API_KEY" not in child_env.helper_environment()
    )
