"""`type: command` providers in process: the policy's command keys and their mistakes, the adapter's own
refusal of tools, `doctor`'s check of the program (not run), the documented examples. Through the real
proxy, running a stand-in of the user's CLI: tests/e2e/test_command_provider.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from helpers.cli_standins import install, path_with, runs

from mcp_sampling_proxy.config.settings import parse_settings
from mcp_sampling_proxy.notation.yamlnodes import PolicyError

pytestmark = pytest.mark.anyio


def provider(name: str, body: str) -> str:
    lines = "".join(f"      {line}\n" for line in body.strip().splitlines())
    return f"llm:\n  providers:\n    {name}:\n      type: command\n{lines}"


# -- what a CLI cannot take -----------------------------------------------------------------------

TOOL = {"name": "get_weather", "inputSchema": {"type": "object", "properties": {"city": {"type": "string"}}}}


async def test_the_adapter_names_itself_when_offered_tools() -> None:
    from mcp_sampling_proxy.providers.base import UnsupportedContentError
    from mcp_sampling_proxy.providers.command import CommandAdapter

    (config,) = parse_settings(provider("claude", "preset: claude"), "p.yaml").providers
    assert config.supports_tools is False
    with pytest.raises(UnsupportedContentError) as caught:
        asked: Any = {"messages": [{"role": "user", "content": {"type": "text", "text": "x"}}], "tools": [TOOL]}
        await CommandAdapter(config).complete(asked, "default")  # (no maxTokens: refused before it matters)
    assert caught.value.code == -32602
    assert "provider 'claude' (command): command providers cannot use tools" in caught.value.message


# -- the policy file ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ("preset: claude\ncommand: [x]", "needs exactly one of preset"),
        ("models: [x]", "needs exactly one of preset"),
        ("preset: cluade", "'cluade' is not one of claude, codex, gemini, llm (did you mean 'claude'?)"),
        ("preset: claude\nbase_url: http://x", "base_url does not apply to type: command"),
        ("preset: claude\napi_key_env: X", "api_key_env does not apply to type: command"),
        ("preset: claude\noutput: json", "output is set by preset claude"),
        ("preset: claude\ntools: true", "command providers cannot use tools"),
        ("command: [x]\noutput: json", "output: json needs json: {text: PATH}"),
        ("command: [x]\njson: {text: a}", "json: goes with output: json"),
        ("command: [x]\nprompt: argv", "'argv' is not one of stdin, arg"),
        ("preset: llm\ntimeout: {read: 3}", "one duration for the whole run"),
    ],
)
def test_policy_mistakes_are_caught_at_start(body: str, expected: str) -> None:
    with pytest.raises(PolicyError) as caught:
        parse_settings(provider("p", body), "policy.yaml")
    assert expected in str(caught.value)
    assert str(caught.value).startswith("policy.yaml:")


def test_command_keys_belong_to_command_providers() -> None:
    text = "llm:\n  providers:\n    o:\n      type: openai\n      models: [m]\n      preset: claude\n"
    with pytest.raises(PolicyError, match="preset does not apply to type: openai"):
        parse_settings(text, "policy.yaml")


def test_a_command_timeout_is_the_whole_run() -> None:
    (config,) = parse_settings(provider("p", "preset: llm\ntimeout: 5m"), "p.yaml").providers
    assert config.total_timeout == 300
    assert [m.name for m in config.models] == ["default"]


async def test_doctor_checks_the_program_without_running_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from mcp_sampling_proxy.doctor.providers import probe_provider

    bin_dir = install(tmp_path / "bin", "claude")
    monkeypatch.setenv("PATH", path_with(bin_dir))
    monkeypatch.setenv("STANDIN_LOG", str(tmp_path / "runs.jsonl"))
    (found,) = await probe_provider(parse_settings(provider("cc", "preset: claude"), "p.yaml").providers[0], 2)
    assert found.status == "ok" and str(bin_dir / "claude") in found.text
    (missing,) = await probe_provider(parse_settings(provider("g", "preset: gemini"), "p.yaml").providers[0], 2)
    assert missing.status == "fail" and "'gemini' not found on PATH" in missing.text
    assert runs(tmp_path / "runs.jsonl") == []


def test_the_documented_provider_examples_are_valid_policies() -> None:
    section = (Path(__file__).resolve().parents[3] / "docs" / "guides" / "providers.md").read_text()
    blocks = [part.split("```", 1)[0] for part in section.split("```yaml\n")[1:]]
    assert len(blocks) == 3  # the key sources, the endpoints, the command providers
    for block in blocks:
        assert parse_settings(block, "README.md").providers
