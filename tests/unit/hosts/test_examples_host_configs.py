"""The host config examples do what their README says: every path they name is absolute (GUI hosts start
servers with a minimal PATH and an unknown working directory), each is the host's valid JSON with
the proxy in front of the summarizer and no key in it, and the README says where each goes on every OS
(the places hosts/registry.py knows)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers.support import ROOT

from mcp_sampling_proxy.commands.cli import build_parser
from mcp_sampling_proxy.hosts.registry import config_path

EXAMPLES = sorted((ROOT / "examples" / "host-configs").glob("*.json"))


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_every_path_an_example_names_is_absolute(path: Path) -> None:
    config = json.loads(path.read_text())
    servers = config.get("mcpServers") or config.get("servers")
    entry = servers["summarizer"]
    args = entry["args"]
    assert entry["command"].startswith("/ABSOLUTE/PATH/TO/"), entry["command"]
    assert entry["command"].endswith("mcp-sampling-proxy")
    server = args[args.index("--") + 1 :]
    assert server[0].startswith("/ABSOLUTE/PATH/TO/") and server[1].startswith("/ABSOLUTE/PATH/TO/"), server
    assert args[args.index("--policy") + 1].startswith("/ABSOLUTE/PATH/TO/")


README = (ROOT / "examples" / "host-configs" / "README.md").read_text()
# example file -> the host and scope whose user file it goes in (Claude Code's goes in the project: no OS path)
USER_FILES = {"claude_desktop_config.json": "claude-desktop", "cursor.mcp.json": "cursor", "vscode.mcp.json": "vscode"}
SYSTEMS = {"Linux": "linux", "macOS": "darwin", "Windows": "win32"}


def shown(host: str, platform: str) -> str:
    """Where `host` reads its user file on `platform`, written as the README writes it (~, %APPDATA%)."""
    environ = {"APPDATA": "%APPDATA%", "USERPROFILE": "%USERPROFILE%"}
    home = None if platform == "win32" else "/HOME"  # Windows: %USERPROFILE%
    path = str(config_path(host, "user", environ=environ, platform=platform, home=home))
    return path.replace("/HOME", "~", 1)


@pytest.mark.parametrize("example", USER_FILES)
def test_the_readme_says_where_each_example_goes_on_every_os(example: str) -> None:
    """A Linux user of Claude Desktop (community builds) or VS Code found only macOS and Windows paths."""
    row = next(line for line in README.splitlines() if line.startswith(f"| `{example}` |"))
    where = row.split(" | ")[2]
    for system, platform in SYSTEMS.items():
        assert f"`{shown(USER_FILES[example], platform)}`" in where, f"{example}: {system}"


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_no_example_holds_a_key(path: Path) -> None:
    """The README advises a key file the proxy reads; an example entry's env names the key only as a
    reference its host resolves (`${env:OPENAI_API_KEY}`, `${input:...}`), never the key itself."""
    config = json.loads(path.read_text())
    entry = (config.get("mcpServers") or config.get("servers"))["summarizer"]
    for name, value in entry.get("env", {}).items():
        assert value.startswith("${") and value.endswith("}"), f"{path.name}: env {name} holds a literal value"


def test_the_proxys_help_shows_an_entry_without_a_key() -> None:
    """`mcp-sampling-proxy --help` shows a host config entry too: absolute paths, and the key left to a key file."""
    shown = build_parser().format_help().split("host config entry", 1)[1].split("\n\n", 1)[0]
    assert '"env"' not in shown and "sk-" not in shown, shown
    assert '"--", "/usr/bin/python3", ' in shown and "api_key_file" in shown
