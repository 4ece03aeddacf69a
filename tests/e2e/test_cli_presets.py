"""The subscription CLIs' presets through the real proxy, with the CLI stand-ins (tests/helpers/cli_standins.py)
first on its PATH: each runs its CLI with the tools off, `--help` names the meter each spends and refuses
`agy`, and gemini needs an API key, which reaches the CLI and never the server."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from helpers.cli_standins import bypasses, install, path_with, provider, runs
from helpers.support import proxy_command, proxy_env, sdk_host, tool_json, write_policy

from mcp_sampling_proxy.config.providers import PRESET_FACTS
from mcp_sampling_proxy.config.settings import parse_settings
from mcp_sampling_proxy.providers.command import PRESETS

ALLOW = "rules:\n  - name: allow-all\n    action: allow\n"


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


@pytest.mark.anyio
@pytest.mark.parametrize("name", sorted(PRESETS))
async def test_each_preset_runs_with_its_tools_off(tmp_path: Path, name: str) -> None:
    result = await sample(tmp_path, name, STANDIN_ANSWER="Paris.", GEMINI_API_KEY="test-key-not-real")
    assert tool_json(result)["content"]["text"] == "Paris."
    (run,) = runs(tmp_path / "runs.jsonl")
    argv = run["argv"]
    assert not bypasses(argv), argv
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
        assert run["env"]["GEMINI_API_KEY"] == "test-key-not-real"  # the key reaches the CLI
    else:
        assert argv == []  # llm offers no tools unless given -T/--functions
    assert "system_settings" in run if name == "gemini" else "system_settings" not in run


def test_help_says_which_meter_each_preset_spends_and_refuses_agy() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "mcp_sampling_proxy", "--help"], capture_output=True, text=True, check=True
    ).stdout
    for name, facts in PRESET_FACTS.items():
        assert f"  {name:<7} {facts.meter}" in out
    assert "agy     refused: Antigravity's `agy -p` writes its answer to the terminal" in out
    assert "never with a permission bypass" in out


@pytest.mark.anyio
async def test_a_failing_gemini_without_a_key_says_it_needs_one(tmp_path: Path) -> None:
    result = await sample(tmp_path, "gemini", STANDIN_MODE="fail", STANDIN_ERROR="Please set an Auth method")
    message = tool_json(result)["error"]["message"]
    assert "exited with status 1" in message
    assert "it needs an API key: set GEMINI_API_KEY or GOOGLE_API_KEY" in message


def test_gemini_key_is_withheld_from_the_server() -> None:
    """The key reaches the CLI (above, gemini's run); for the server it is the proxy's own key, hidden."""
    text = provider("g", "preset: gemini") + ALLOW
    assert {"GEMINI_API_KEY", "GOOGLE_API_KEY"} <= parse_settings(text, "p.yaml").secret_env_vars()
    assert "GEMINI_API_KEY" not in parse_settings(provider("c", "preset: claude"), "p.yaml").secret_env_vars()
