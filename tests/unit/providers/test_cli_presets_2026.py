"""The subscription CLIs as they are in late 2026, in process: each preset says which meter it spends and
never runs its CLI with a permission bypass; `agy` is refused; doctor's line for each (tests/e2e/
test_cli_presets.py runs them through the real proxy)."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers.cli_standins import bypasses, install, path_with, provider

from mcp_sampling_proxy.config.providers import COMMAND_PRESETS, PRESET_FACTS, bypass_flag
from mcp_sampling_proxy.config.settings import parse_settings
from mcp_sampling_proxy.notation.yamlnodes import PolicyError
from mcp_sampling_proxy.providers.command import PRESETS

DOCS = Path(__file__).resolve().parents[3] / "docs" / "guides" / "providers.md"


def test_every_preset_has_its_facts() -> None:
    assert set(PRESETS) == set(PRESET_FACTS) == set(COMMAND_PRESETS)
    for name, preset in PRESETS.items():
        assert preset.executable == name and preset.facts.meter and preset.facts.tools_off


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_no_preset_runs_its_cli_with_a_permission_bypass(name: str) -> None:
    preset = PRESETS[name]
    argv = [preset.executable, *preset.flags, *preset.tail]
    assert not bypasses(argv), argv
    assert bypass_flag(argv, short_yolo=True) is None


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
    from mcp_sampling_proxy.doctor.providers import probe_provider

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
