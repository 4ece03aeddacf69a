"""Where each host keeps its MCP config, recorded: every host x scope x OS x environment, as
`wrap`, `unwrap` and `doctor` have always found them. The host table may change shape; these answers
must not (a moved file is a user's servers silently left unwrapped)."""

from pathlib import Path

import pytest

from mcp_sampling_proxy.hosts.registry import HOSTS, ConfigError, config_path, servers_table

# The directory variables the hosts read, set absolute, set relative (some hosts take a relative one
# as it is, others ignore it), or not at all.
POSIX_VARS = {
    "APPDATA": "/ad",
    "XDG_CONFIG_HOME": "/xdg",
    "CLAUDE_CONFIG_DIR": "/ccd",
    "CODEX_HOME": "/cxh",
    "CONTINUE_GLOBAL_DIR": "/cgd",
}
WINDOWS_VARS = {
    "APPDATA": r"C:\ad",
    "XDG_CONFIG_HOME": r"C:\xdg",
    "CLAUDE_CONFIG_DIR": r"C:\ccd",
    "CODEX_HOME": r"C:\cxh",
    "CONTINUE_GLOBAL_DIR": r"C:\cgd",
}
RELATIVE_VARS = dict.fromkeys(POSIX_VARS, "rel")
CLINE = ("globalStorage", "saoudrizwan.claude-dev", "settings", "cline_mcp_settings.json")

# host scope platform environment -> the file, with HOME /h (C:\Users\h) and the project /p (C:\p);
# `userprofile`: no home given, USERPROFILE names it (Windows). {cline}: Cline's file in VS Code's storage.
RECORDED_PATHS = r"""
claude-desktop user linux plain /h/.config/Claude/claude_desktop_config.json
claude-desktop user linux set /xdg/Claude/claude_desktop_config.json
claude-desktop user linux relative /h/.config/Claude/claude_desktop_config.json
claude-desktop user darwin plain /h/Library/Application Support/Claude/claude_desktop_config.json
claude-desktop user darwin set /h/Library/Application Support/Claude/claude_desktop_config.json
claude-desktop user darwin relative /h/Library/Application Support/Claude/claude_desktop_config.json
claude-desktop user win32 plain C:\Users\h\AppData\Roaming\Claude\claude_desktop_config.json
claude-desktop user win32 set C:\ad\Claude\claude_desktop_config.json
claude-desktop user win32 relative rel\Claude\claude_desktop_config.json
claude-desktop user win32 userprofile C:\Users\u\AppData\Roaming\Claude\claude_desktop_config.json
claude-code user linux plain /h/.claude.json
claude-code user linux set /ccd/.claude.json
claude-code user linux relative rel/.claude.json
claude-code user darwin plain /h/.claude.json
claude-code user darwin set /ccd/.claude.json
claude-code user darwin relative rel/.claude.json
claude-code user win32 plain C:\Users\h\.claude.json
claude-code user win32 set C:\ccd\.claude.json
claude-code user win32 relative rel\.claude.json
claude-code user win32 userprofile C:\Users\u\.claude.json
claude-code project linux plain /p/.mcp.json
claude-code project linux set /p/.mcp.json
claude-code project linux relative /p/.mcp.json
claude-code project darwin plain /p/.mcp.json
claude-code project darwin set /p/.mcp.json
claude-code project darwin relative /p/.mcp.json
claude-code project win32 plain C:\p\.mcp.json
claude-code project win32 set C:\p\.mcp.json
claude-code project win32 relative C:\p\.mcp.json
claude-code project win32 userprofile C:\p\.mcp.json
claude-code local linux plain /h/.claude.json
claude-code local linux set /ccd/.claude.json
claude-code local linux relative rel/.claude.json
claude-code local darwin plain /h/.claude.json
claude-code local darwin set /ccd/.claude.json
claude-code local darwin relative rel/.claude.json
claude-code local win32 plain C:\Users\h\.claude.json
claude-code local win32 set C:\ccd\.claude.json
claude-code local win32 relative rel\.claude.json
claude-code local win32 userprofile C:\Users\u\.claude.json
cursor user linux plain /h/.cursor/mcp.json
cursor user linux set /h/.cursor/mcp.json
cursor user linux relative /h/.cursor/mcp.json
cursor user darwin plain /h/.cursor/mcp.json
cursor user darwin set /h/.cursor/mcp.json
cursor user darwin relative /h/.cursor/mcp.json
cursor user win32 plain C:\Users\h\.cursor\mcp.json
cursor user win32 set C:\Users\h\.cursor\mcp.json
cursor user win32 relative C:\Users\h\.cursor\mcp.json
cursor user win32 userprofile C:\Users\u\.cursor\mcp.json
cursor project linux plain /p/.cursor/mcp.json
cursor project linux set /p/.cursor/mcp.json
cursor project linux relative /p/.cursor/mcp.json
cursor project darwin plain /p/.cursor/mcp.json
cursor project darwin set /p/.cursor/mcp.json
cursor project darwin relative /p/.cursor/mcp.json
cursor project win32 plain C:\p\.cursor\mcp.json
cursor project win32 set C:\p\.cursor\mcp.json
cursor project win32 relative C:\p\.cursor\mcp.json
cursor project win32 userprofile C:\p\.cursor\mcp.json
vscode user linux plain /h/.config/Code/User/mcp.json
vscode user linux set /xdg/Code/User/mcp.json
vscode user linux relative /h/.config/Code/User/mcp.json
vscode user darwin plain /h/Library/Application Support/Code/User/mcp.json
vscode user darwin set /h/Library/Application Support/Code/User/mcp.json
vscode user darwin relative /h/Library/Application Support/Code/User/mcp.json
vscode user win32 plain C:\Users\h\AppData\Roaming\Code\User\mcp.json
vscode user win32 set C:\ad\Code\User\mcp.json
vscode user win32 relative rel\Code\User\mcp.json
vscode user win32 userprofile C:\Users\u\AppData\Roaming\Code\User\mcp.json
vscode project linux plain /p/.vscode/mcp.json
vscode project linux set /p/.vscode/mcp.json
vscode project linux relative /p/.vscode/mcp.json
vscode project darwin plain /p/.vscode/mcp.json
vscode project darwin set /p/.vscode/mcp.json
vscode project darwin relative /p/.vscode/mcp.json
vscode project win32 plain C:\p\.vscode\mcp.json
vscode project win32 set C:\p\.vscode\mcp.json
vscode project win32 relative C:\p\.vscode\mcp.json
vscode project win32 userprofile C:\p\.vscode\mcp.json
vscode settings linux plain /h/.config/Code/User/settings.json
vscode settings linux set /xdg/Code/User/settings.json
vscode settings linux relative /h/.config/Code/User/settings.json
vscode settings darwin plain /h/Library/Application Support/Code/User/settings.json
vscode settings darwin set /h/Library/Application Support/Code/User/settings.json
vscode settings darwin relative /h/Library/Application Support/Code/User/settings.json
vscode settings win32 plain C:\Users\h\AppData\Roaming\Code\User\settings.json
vscode settings win32 set C:\ad\Code\User\settings.json
vscode settings win32 relative rel\Code\User\settings.json
vscode settings win32 userprofile C:\Users\u\AppData\Roaming\Code\User\settings.json
windsurf user linux plain /h/.codeium/windsurf/mcp_config.json
windsurf user linux set /h/.codeium/windsurf/mcp_config.json
windsurf user linux relative /h/.codeium/windsurf/mcp_config.json
windsurf user darwin plain /h/.codeium/windsurf/mcp_config.json
windsurf user darwin set /h/.codeium/windsurf/mcp_config.json
windsurf user darwin relative /h/.codeium/windsurf/mcp_config.json
windsurf user win32 plain C:\Users\h\.codeium\windsurf\mcp_config.json
windsurf user win32 set C:\Users\h\.codeium\windsurf\mcp_config.json
windsurf user win32 relative C:\Users\h\.codeium\windsurf\mcp_config.json
windsurf user win32 userprofile C:\Users\u\.codeium\windsurf\mcp_config.json
gemini user linux plain /h/.gemini/settings.json
gemini user linux set /h/.gemini/settings.json
gemini user linux relative /h/.gemini/settings.json
gemini user darwin plain /h/.gemini/settings.json
gemini user darwin set /h/.gemini/settings.json
gemini user darwin relative /h/.gemini/settings.json
gemini user win32 plain C:\Users\h\.gemini\settings.json
gemini user win32 set C:\Users\h\.gemini\settings.json
gemini user win32 relative C:\Users\h\.gemini\settings.json
gemini user win32 userprofile C:\Users\u\.gemini\settings.json
gemini project linux plain /p/.gemini/settings.json
gemini project linux set /p/.gemini/settings.json
gemini project linux relative /p/.gemini/settings.json
gemini project darwin plain /p/.gemini/settings.json
gemini project darwin set /p/.gemini/settings.json
gemini project darwin relative /p/.gemini/settings.json
gemini project win32 plain C:\p\.gemini\settings.json
gemini project win32 set C:\p\.gemini\settings.json
gemini project win32 relative C:\p\.gemini\settings.json
gemini project win32 userprofile C:\p\.gemini\settings.json
codex user linux plain /h/.codex/config.toml
codex user linux set /cxh/config.toml
codex user linux relative rel/config.toml
codex user darwin plain /h/.codex/config.toml
codex user darwin set /cxh/config.toml
codex user darwin relative rel/config.toml
codex user win32 plain C:\Users\h\.codex\config.toml
codex user win32 set C:\cxh\config.toml
codex user win32 relative rel\config.toml
codex user win32 userprofile C:\Users\u\.codex\config.toml
codex project linux plain /p/.codex/config.toml
codex project linux set /p/.codex/config.toml
codex project linux relative /p/.codex/config.toml
codex project darwin plain /p/.codex/config.toml
codex project darwin set /p/.codex/config.toml
codex project darwin relative /p/.codex/config.toml
codex project win32 plain C:\p\.codex\config.toml
codex project win32 set C:\p\.codex\config.toml
codex project win32 relative C:\p\.codex\config.toml
codex project win32 userprofile C:\p\.codex\config.toml
zed user linux plain /h/.config/zed/settings.json
zed user linux set /xdg/zed/settings.json
zed user linux relative /h/.config/zed/settings.json
zed user darwin plain /h/.config/zed/settings.json
zed user darwin set /xdg/zed/settings.json
zed user darwin relative /h/.config/zed/settings.json
zed user win32 plain C:\Users\h\AppData\Roaming\Zed\settings.json
zed user win32 set C:\ad\Zed\settings.json
zed user win32 relative rel\Zed\settings.json
zed user win32 userprofile C:\Users\u\AppData\Roaming\Zed\settings.json
zed project linux plain /p/.zed/settings.json
zed project linux set /p/.zed/settings.json
zed project linux relative /p/.zed/settings.json
zed project darwin plain /p/.zed/settings.json
zed project darwin set /p/.zed/settings.json
zed project darwin relative /p/.zed/settings.json
zed project win32 plain C:\p\.zed\settings.json
zed project win32 set C:\p\.zed\settings.json
zed project win32 relative C:\p\.zed\settings.json
zed project win32 userprofile C:\p\.zed\settings.json
cline user linux plain /h/.config/Code/User/{cline}
cline user linux set /xdg/Code/User/{cline}
cline user linux relative /h/.config/Code/User/{cline}
cline user darwin plain /h/Library/Application Support/Code/User/{cline}
cline user darwin set /h/Library/Application Support/Code/User/{cline}
cline user darwin relative /h/Library/Application Support/Code/User/{cline}
cline user win32 plain C:\Users\h\AppData\Roaming\Code\User\{cline}
cline user win32 set C:\ad\Code\User\{cline}
cline user win32 relative rel\Code\User\{cline}
cline user win32 userprofile C:\Users\u\AppData\Roaming\Code\User\{cline}
lmstudio user linux plain /h/.lmstudio/mcp.json
lmstudio user linux set /h/.lmstudio/mcp.json
lmstudio user linux relative /h/.lmstudio/mcp.json
lmstudio user darwin plain /h/.lmstudio/mcp.json
lmstudio user darwin set /h/.lmstudio/mcp.json
lmstudio user darwin relative /h/.lmstudio/mcp.json
lmstudio user win32 plain C:\Users\h\.lmstudio\mcp.json
lmstudio user win32 set C:\Users\h\.lmstudio\mcp.json
lmstudio user win32 relative C:\Users\h\.lmstudio\mcp.json
lmstudio user win32 userprofile C:\Users\u\.lmstudio\mcp.json
continue user linux plain /h/.continue/config.yaml
continue user linux set /cgd/config.yaml
continue user linux relative /h/.continue/config.yaml
continue user darwin plain /h/.continue/config.yaml
continue user darwin set /cgd/config.yaml
continue user darwin relative /h/.continue/config.yaml
continue user win32 plain C:\Users\h\.continue\config.yaml
continue user win32 set C:\cgd\config.yaml
continue user win32 relative C:\Users\h\.continue\config.yaml
continue user win32 userprofile C:\Users\u\.continue\config.yaml
continue project linux plain /p/.continue/mcpServers
continue project linux set /p/.continue/mcpServers
continue project linux relative /p/.continue/mcpServers
continue project darwin plain /p/.continue/mcpServers
continue project darwin set /p/.continue/mcpServers
continue project darwin relative /p/.continue/mcpServers
continue project win32 plain C:\p\.continue\mcpServers
continue project win32 set C:\p\.continue\mcpServers
continue project win32 relative C:\p\.continue\mcpServers
continue project win32 userprofile C:\p\.continue\mcpServers
"""

# host scope -> the key path of the server table (keys joined by " / "), for the project /p
RECORDED_TABLES = """
claude-desktop user mcpServers
claude-code user mcpServers
claude-code project mcpServers
claude-code local projects / /p / mcpServers
cursor user mcpServers
cursor project mcpServers
vscode user servers
vscode project servers
vscode settings mcp / servers
windsurf user mcpServers
gemini user mcpServers
gemini project mcpServers
codex user mcp_servers
codex project mcp_servers
zed user context_servers
zed project context_servers
cline user mcpServers
lmstudio user mcpServers
continue user mcpServers
continue project mcpServers
"""


def _recorded(line: str) -> tuple[tuple[str, ...], str]:
    host, scope, platform, variant, path = line.split(maxsplit=4)
    return (host, scope, platform, variant), path.replace("{cline}", ("\\" if platform == "win32" else "/").join(CLINE))


PATHS = dict(_recorded(line) for line in RECORDED_PATHS.strip().splitlines())
TABLES = {
    tuple(line.split(maxsplit=2)[:2]): tuple(line.split(maxsplit=2)[2].split(" / "))
    for line in RECORDED_TABLES.strip().splitlines()
}


def _environment(platform: str, variant: str) -> tuple[dict[str, str], str | None]:
    windows = platform == "win32"
    home = r"C:\Users\h" if windows else "/h"
    if variant == "set":
        return dict(WINDOWS_VARS if windows else POSIX_VARS), home
    if variant == "relative":
        return dict(RELATIVE_VARS), home
    if variant == "userprofile":
        return {"USERPROFILE": r"C:\Users\u"}, None
    return {}, home


@pytest.mark.parametrize(("host", "scope", "platform", "variant"), list(PATHS))
def test_every_host_scope_and_platform_finds_the_file_it_always_did(
    host: str, scope: str, platform: str, variant: str
) -> None:
    environ, home = _environment(platform, variant)
    project = r"C:\p" if platform == "win32" else "/p"
    got = config_path(host, scope, project_dir=project, environ=environ, platform=platform, home=home)
    assert str(got) == PATHS[host, scope, platform, variant]


def test_the_record_covers_every_host_and_scope() -> None:
    recorded = {(host, scope) for host, scope, _, _ in PATHS}
    assert recorded == {(name, scope) for name, host in HOSTS.items() for scope in host.scopes}
    assert set(TABLES) == recorded


@pytest.mark.parametrize("host", list(HOSTS))
def test_each_hosts_places_are_relative_and_cover_every_os(host: str) -> None:
    """What a new row in HOSTS must get right: each scope has a file on every OS, written as a
    "/"-separated path under its base directory."""
    spec = HOSTS[host]
    for place in spec.places:
        assert not place.path.startswith("/") and "\\" not in place.path, place
    for scope in spec.scopes:
        for platform in ("linux", "darwin", "win32", "freebsd14"):
            assert config_path(host, scope, project_dir="/p", environ={}, platform=platform, home="/h").name


@pytest.mark.parametrize(("host", "scope"), list(TABLES))
def test_every_host_and_scope_keeps_its_servers_where_it_always_did(host: str, scope: str) -> None:
    assert servers_table(host, scope, "/p") == TABLES[host, scope]


def test_the_local_scope_names_the_project_by_its_absolute_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert servers_table("claude-code", "local", "app") == ("projects", str(tmp_path / "app"), "mcpServers")
    assert servers_table("claude-code", "local") == ("projects", str(tmp_path), "mcpServers")


def test_without_a_home_given_the_users_home_and_working_directory_count(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    assert config_path("cursor", environ={}, platform="linux") == tmp_path / "home" / ".cursor" / "mcp.json"
    assert config_path("cursor", "project", environ={}, platform="linux") == tmp_path / ".cursor" / "mcp.json"
    monkeypatch.setenv("CODEX_HOME", str(tmp_path / "codex"))
    assert config_path("codex", platform="linux") == tmp_path / "codex" / "config.toml"  # os.environ by default


def test_an_unknown_host_or_scope_is_refused_with_what_there_is() -> None:
    with pytest.raises(ConfigError, match=r"unknown host 'atom' \(known: claude-desktop, claude-code, cursor, "):
        config_path("atom")
    with pytest.raises(ConfigError, match=r"^Cursor has no settings scope \(scopes: user, project\)$"):
        config_path("cursor", "settings")
