"""The subscription CLIs as they are in late 2026: each preset says which meter it spends, runs its CLI
with the tools off and never with a permission bypass; `agy` is refused; gemini needs an API key.
Through the real proxy with the CLI stand-ins (tests/helpers/cli_standins.py) first on its PATH."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from helpers.cli_standins import install, path_with, runs
from helpers.support import proxy_command, proxy_env, sdk_host, tool_json, write_policy

from mcp_sampling_proxy.config.providers import COMMAND_PRESETS, PRESET_FACTS, bypass_flag
from mcp_sampling_proxy.config.settings import parse_settings
from mcp_sampling_proxy.providers.command import PRESETS
from mcp_sampling_proxy.yamlnodes import PolicyError

ALLOW = "rules:\n  - name: allow-all\n    action: allow\n"
# The flags that let each CLI act without asking, as the CLIs spell them (independent of the proxy's list).
BYPASSES = (
    "--dangerously-skip-permissions",
    "--yolo",
    "--full-auto",
    "--dangerously-bypass-approvals-and-sandbox",
    "-y",
    "bypassPermissions",
    "danger-full-access",
)
DOCS = Path(__file__).resolve().parents[3] / "docs" / "guides" / "providers.md"


def provider(name: str, body: str) -> str:
    lines = "".join(f"      {line}\n" for line in body.strip().splitlines())
    return f"llm:\n  providers:\n    {name}:\n      type: command\n{lines}"


async def sample(tmp_path: Path, preset: str, **env: str) -> Any:
    bin_dir = install(tmp_path / "bin")
    policy = write_policy(tmp_path, provider(preset, f"preset: {preset}") + ALLOW)
    environment = proxy_env(
        PATH=path_with(bin_dir),
        STANDIN_LOG=str(tmp_path / "runs.jsonl"),
        MCP_SAMPLING_PROXY_STATE_DIR=str(tmp_path / "state"),
        **env,
    )
    for key_var in ("GEMINI_API_KEY", "GOOGLE_API_KEY"):  # only the test's own, never the machine's
        if key_var not in env:
            environment.pop(key_var, None)
    async with sdk_host(proxy_command(policy), environment, tmp_path / "stderr.log") as client:
        return await client.call_tool("sample", {"prompt": "Capital of France?"})


def test_every_preset_has_its_facts() -> None:
    assert set(PRESETS) == set(PRESET_FACTS) == set(COMMAND_PRESETS)
    for name, preset in PRESETS.items():
        assert preset.executable == name and preset.facts.meter and preset.facts.tools_off


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_no_preset_runs_its_cli_with_a_permission_bypass(name: str) -> None:
    preset = PRESETS[name]
    argv = [preset.executable, *preset.flags, *preset.tail]
    assert not [arg for arg in argv if any(bypass in arg for bypass in BYPASSES)], argv
    assert bypass_flag(argv, short_yolo=True) is None


@pytest.mark.anyio
@pytest.mark.parametrize("name", sorted(PRESETS))
async def test_each_preset_runs_with_its_tools_off(tmp_path: Path, name: str) -> None:
    result = await sample(tmp_path, name, STANDIN_ANSWER="Paris.", GEMINI_API_KEY="test-key-not-real")
    assert tool_json(result)["content"]["text"] == "Paris."
    (run,) = runs(tmp_path / "runs.jsonl")
    argv = run["argv"]
    assert not [arg for arg in argv if any(bypass in arg for bypass in BYPASSES)], argv
    if name == "claude":
        assert argv[argv.index("--tools") + 1] == "" and "--strict-mcp-config" in argv
    elif name == "codex":
        overrides = [argv[i + 1] for i, arg in enumerate(argv) if arg == "-c"]
        assert {"features.shell_tool=false", "features.unified_exec=false", "mcp_servers={}"} <= set(overrides)
        assert 'web_search="disabled"' in overrides
        assert argv[argv.index("--sandbox") + 1] == "read-only"
    elif name == "gemini":
        settings = run["system_settings"]  # the file the run was given, read by the stand-in as Gemini would
        assert settings["tools"]["core"] == ["mcp-sampling-proxy-allows-none"]
        assert {"run_shell_command", "read_file", "web_fetch", "google_web_search"} <= set(settings["tools"]["exclude"])
        assert settings["mcp"]["allowed"] == ["mcp-sampling-proxy-allows-none"]
    else:
        assert argv == []  # llm offers no tools unless given -T/--functions
    assert "system_settings" in run if name == "gemini" else "system_settings" not in run


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ("preset: agy", "preset agy is refused: Antigravity's `agy -p` writes its answer to the terminal"),
        ("command: [/opt/antigravity/bin/agy, -p]", "agy is refused: Antigravity's"),
    ],
)
def test_agy_is_refused_with_the_reason_and_the_api_key_route(body: str, expected: str) -> None:
    with pytest.raises(PolicyError) as caught:
        parse_settings(provider("ag", body), "p.yaml")
    message = str(caught.value)
    assert expected in message
    assert "not to stdout" in message and "runs tools without asking" in message
    assert "preset: gemini with GEMINI_API_KEY" in message


@pytest.mark.parametrize(
    ("body", "flag"),
    [
        ("preset: claude\nargs: [--dangerously-skip-permissions]", "--dangerously-skip-permissions"),
        ("preset: claude\nargs: ['--permission-mode=bypassPermissions']", "--permission-mode bypassPermissions"),
        ("preset: codex\nargs: [--dangerously-bypass-approvals-and-sandbox]", "--dangerously-bypass-approvals"),
        ("preset: codex\nargs: [--full-auto]", "--full-auto"),
        ("preset: codex\nargs: [-s, danger-full-access]", "-s danger-full-access"),
        ("preset: gemini\nargs: [-y]", "-y lets the CLI act without asking"),
        ("preset: gemini\nargs: [--approval-mode, yolo]", "--approval-mode yolo"),
        ("command: [gemini, --yolo, --output-format, json]\noutput: json\njson: {text: response}", "--yolo"),
    ],
)
def test_a_permission_bypass_in_args_or_command_is_a_policy_error(body: str, flag: str) -> None:
    with pytest.raises(PolicyError) as caught:
        parse_settings(provider("p", body), "p.yaml")
    assert flag in str(caught.value) and "never runs with a permission or sandbox bypass" in str(caught.value)


def test_a_short_y_is_left_alone_outside_gemini() -> None:
    (config,) = parse_settings(provider("p", "command: [my-llm, -y]"), "p.yaml").providers
    assert config.command is not None and config.command.argv == ("my-llm", "-y")


def test_help_says_which_meter_each_preset_spends_and_refuses_agy() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "mcp_sampling_proxy", "--help"], capture_output=True, text=True, check=True
    ).stdout
    for name, facts in PRESET_FACTS.items():
        assert f"  {name:<7} {facts.meter}" in out
    assert "agy     refused: Antigravity's `agy -p` writes its answer to the terminal" in out
    assert "never with a permission bypass" in out


def test_the_providers_guide_has_a_row_per_preset_with_its_meter() -> None:
    text = DOCS.read_text()
    for name, facts in PRESET_FACTS.items():
        (row,) = [line for line in text.splitlines() if line.startswith(f"| `{name}` | ") and facts.meter in line]
        assert facts.tools_off.split(" ")[0] in row
    assert "| `agy` | refused" in text


@pytest.mark.anyio
async def test_doctor_line_names_the_meter_and_gemini_warns_without_a_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from mcp_sampling_proxy.commands.doctor import probe_provider

    monkeypatch.setenv("PATH", path_with(install(tmp_path / "bin", "claude", "gemini")))
    monkeypatch.delenv("GEMINI_API_KEY", raising=False)
    monkeypatch.delenv("GOOGLE_API_KEY", raising=False)
    (claude,) = await probe_provider(parse_settings(provider("cc", "preset: claude"), "p.yaml").providers[0], 2)
    assert claude.status == "ok" and f"spends {PRESET_FACTS['claude'].meter}" in claude.text
    assert "tools off: --tools" in claude.text
    gemini_config = parse_settings(provider("g", "preset: gemini"), "p.yaml").providers[0]
    found, warning = await probe_provider(gemini_config, 2)
    assert found.status == "ok" and "spends a Gemini API key at API rates" in found.text
    assert warning.status == "warn" and "needs an API key now" in warning.text and "GEMINI_API_KEY" in warning.fix
    monkeypatch.setenv("GEMINI_API_KEY", "test-key-not-real")
    assert [c.status for c in await probe_provider(gemini_config, 2)] == ["ok"]


@pytest.mark.anyio
async def test_a_failing_gemini_without_a_key_says_it_needs_one(tmp_path: Path) -> None:
    result = await sample(tmp_path, "gemini", STANDIN_MODE="fail", STANDIN_ERROR="Please set an Auth method")
    message = tool_json(result)["error"]["message"]
    assert "exited with status 1" in message
    assert "it needs an API key: set GEMINI_API_KEY or GOOGLE_API_KEY" in message


@pytest.mark.anyio
async def test_gemini_key_reaches_the_cli_and_is_withheld_from_the_server(tmp_path: Path) -> None:
    await sample(tmp_path, "gemini", GEMINI_API_KEY="test-key-not-real")
    (run,) = runs(tmp_path / "runs.jsonl")
    assert run["env"]["GEMINI_API_KEY"] == "test-key-not-real"
    text = provider("g", "preset: gemini") + ALLOW
    # the proxy's own key now: hidden from the server
    assert {"GEMINI_API_KEY", "GOOGLE_API_KEY"} <= parse_settings(text, "p.yaml").secret_env_vars()
    assert "GEMINI_API_KEY" not in parse_settings(provider("c", "preset: claude"), "p.yaml").secret_env_vars()
