"""Which hosts there are, where each keeps its MCP config, and where in it the server entries sit."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path, PurePath, PurePosixPath, PureWindowsPath


class ConfigError(Exception):
    """A config file that is missing, does not parse, or cannot be edited safely; names the file."""


# -- hosts ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Host:
    name: str
    title: str
    format: str  # "json" | "toml" | "yaml" (Continue: its JSON files go through the JSON editor)
    servers_key: str  # the table holding the server entries
    scopes: tuple[str, ...]  # user: per-user file; project: file in the project; local: Claude Code's per-project
    syntax: str  # what the host's own parser accepts
    url_keys: tuple[str, ...]  # keys that hold a remote server's URL
    elicitation: str  # "yes" | "no": does the host answer elicitation/create (the `host` approval channel)
    sampling: str  # "yes" | "no": does the host answer sampling/createMessage itself
    reload: str  # how to make the host pick up the change
    # The environment it starts a server with, besides the entry's env: "shell" (a CLI started from your
    # terminal: that shell's), "login" (an editor that reads a login shell's environment at start, as VS
    # Code does when not started from a terminal), "own" (an app started from the desktop: its own,
    # without your shell's variables), "allowlist" (only a few named variables: Codex, Continue)
    environment: str = "own"


HOSTS: dict[str, Host] = {
    h.name: h
    for h in (
        Host(
            "claude-desktop",
            "Claude Desktop",
            "json",
            "mcpServers",
            ("user",),
            "JSON",
            ("url",),
            "no",
            "no",
            "quit Claude Desktop completely and start it again",
            environment="own",
        ),
        Host(
            "claude-code",
            "Claude Code",
            "json",
            "mcpServers",
            ("user", "project", "local"),
            "JSON",
            ("url",),
            "no",
            "no",
            "start a new claude session (check with /mcp)",
            environment="shell",
        ),
        Host(
            "cursor",
            "Cursor",
            "json",
            "mcpServers",
            ("user", "project"),
            "JSON",
            ("url",),
            "yes",
            "no",
            "turn the server off and on in Cursor Settings > MCP",
            environment="login",
        ),
        Host(
            "vscode",
            "VS Code",
            "json",
            "servers",
            ("user", "project", "settings"),
            "JSONC (comments, trailing commas)",
            ("url",),
            "yes",
            "yes",
            "restart the server (command palette: MCP: List Servers)",
            environment="login",
        ),
        Host(
            "windsurf",
            "Windsurf",
            "json",
            "mcpServers",
            ("user",),
            "JSON",
            ("serverUrl", "url"),
            "no",
            "no",
            "press refresh in Windsurf's MCP settings",
            environment="login",
        ),
        Host(
            "gemini",
            "Gemini CLI",
            "json",
            "mcpServers",
            ("user", "project"),
            "JSON with comments",
            ("httpUrl", "url"),
            "no",
            "no",
            "run /mcp refresh, or start gemini again",
            environment="shell",
        ),
        Host(
            "codex",
            "Codex",
            "toml",
            "mcp_servers",
            ("user", "project"),
            "TOML",
            ("url",),
            "yes",
            "no",
            "start a new codex session",
            environment="allowlist",
        ),
        # https://zed.dev/docs/ai/mcp: `context_servers` in settings.json (JSONC), {command, args, env} or
        # {url, headers}; "Tools and Prompts" only, so no elicitation or sampling.
        Host(
            "zed",
            "Zed",
            "json",
            "context_servers",
            ("user", "project"),
            "JSONC (comments, trailing commas)",
            ("url",),
            "no",
            "no",
            "Zed restarts a context server when its settings change (else: agent panel > settings, toggle the server)",
            environment="own",
        ),
        # https://docs.cline.bot/mcp/configuring-mcp-servers: cline_mcp_settings.json in the VS Code extension's
        # global storage, `mcpServers` with Cline's own keys (disabled, autoApprove, timeout, type/transportType).
        Host(
            "cline",
            "Cline",
            "json",
            "mcpServers",
            ("user",),
            "JSON",
            ("url",),
            "no",
            "no",
            "Cline reloads the file when it changes (else: MCP Servers > Installed > Restart Server)",
            environment="login",
        ),
        # https://lmstudio.ai/docs/app/mcp: ~/.lmstudio/mcp.json, "Cursor's mcp.json notation" (`mcpServers`).
        Host(
            "lmstudio",
            "LM Studio",
            "json",
            "mcpServers",
            ("user",),
            "JSON",
            ("url",),
            "no",
            "no",
            "save mcp.json in LM Studio's editor, or restart LM Studio",
            environment="own",
        ),
        # https://docs.continue.dev/reference (config.yaml) and /customize/deep-dives/mcp: `mcpServers:` is a
        # LIST of {name, command, args, env, cwd, type: stdio|sse|streamable-http, url, requestOptions: {headers}}
        # in ~/.continue/config.yaml; a workspace has block files .continue/mcpServers/*.yaml (name, version,
        # schema, mcpServers) and Claude-style JSON files there. Its MCP client declares no capabilities
        # (core/context/mcp/MCPConnection.ts: `capabilities: {}`).
        Host(
            "continue",
            "Continue",
            "yaml",
            "mcpServers",
            ("user", "project"),
            "YAML (JSON files in .continue/mcpServers/)",
            ("url",),
            "no",
            "no",
            "Continue reloads its config when a file changes (else: command palette, Continue: Reload)",
            environment="allowlist",
        ),
    )
}
# VS Code before 1.102 kept servers in settings.json under "mcp": {"servers": ...} (it moves them to
# mcp.json itself since); `--scope settings` edits that table in the user settings.json.
VSCODE_SETTINGS_TABLE = ("mcp", "servers")
# Where the elicitation/sampling columns come from: the capabilities each host declares in its
# `initialize` request (public records of them, late 2025). The proxy itself goes by what the
# host really declares at run time; this table only helps choose approval channels up front.
HOST_SUPPORT_NOTE = (
    "as declared by each host's initialize request in late 2025; the proxy checks the real capabilities at run time"
)

# Keys of a remote entry that describe the connection (dropped when it becomes a stdio entry).
CODEX_HTTP_KEYS = ("url", "bearer_token", "bearer_token_env_var", "http_headers", "env_http_headers")


def config_path(
    host: str,
    scope: str = "user",
    *,
    project_dir: str | os.PathLike[str] | None = None,
    environ: dict[str, str] | None = None,
    platform: str | None = None,
    home: str | None = None,
) -> PurePath:
    """The file `host` reads for `scope` on `platform` (default: this machine).

    `local` is Claude Code's per-project scope: the user file (`~/.claude.json`), whose
    `projects.<dir>.mcpServers` holds the servers (see `servers_table`)."""
    environ = dict(os.environ) if environ is None else environ
    platform = platform or sys.platform
    windows = platform.startswith("win")
    pure: type[PurePath] = PureWindowsPath if windows else PurePosixPath
    home_path = pure(home or (environ.get("USERPROFILE") if windows else None) or str(Path.home()))
    project = pure(project_dir if project_dir is not None else os.getcwd())
    if host not in HOSTS:
        raise ConfigError(f"unknown host '{host}' (known: {', '.join(HOSTS)})")
    if scope not in HOSTS[host].scopes:
        raise ConfigError(f"{HOSTS[host].title} has no {scope} scope (scopes: {', '.join(HOSTS[host].scopes)})")

    def app_config_dir() -> PurePath:  # where desktop apps keep per-user settings
        if windows:
            return pure(environ.get("APPDATA") or home_path / "AppData" / "Roaming")
        if platform == "darwin":
            return home_path / "Library" / "Application Support"
        xdg = environ.get("XDG_CONFIG_HOME")
        return pure(xdg) if xdg and pure(xdg).is_absolute() else home_path / ".config"

    if host == "claude-desktop":
        return app_config_dir() / "Claude" / "claude_desktop_config.json"
    if host == "claude-code":
        if scope == "project":
            return project / ".mcp.json"
        base = environ.get("CLAUDE_CONFIG_DIR")
        return (pure(base) if base else home_path) / ".claude.json"
    if host == "cursor":
        return (project if scope == "project" else home_path) / ".cursor" / "mcp.json"
    if host == "vscode":
        if scope == "project":
            return project / ".vscode" / "mcp.json"
        if scope == "settings":
            return app_config_dir() / "Code" / "User" / "settings.json"
        return app_config_dir() / "Code" / "User" / "mcp.json"
    if host == "zed":  # ~/.config/zed on macOS too (zed.dev/docs/configuring-zed)
        if scope == "project":
            return project / ".zed" / "settings.json"
        if windows:
            return app_config_dir() / "Zed" / "settings.json"
        xdg = environ.get("XDG_CONFIG_HOME")
        return (pure(xdg) if xdg and pure(xdg).is_absolute() else home_path / ".config") / "zed" / "settings.json"
    if host == "cline":
        return (
            app_config_dir()
            / "Code"
            / "User"
            / "globalStorage"
            / "saoudrizwan.claude-dev"
            / "settings"
            / "cline_mcp_settings.json"
        )
    if host == "lmstudio":
        return home_path / ".lmstudio" / "mcp.json"
    if host == "continue":  # project: the folder of block files (`config_files` lists them)
        if scope == "project":
            return project / CONTINUE_BLOCKS
        base = environ.get("CONTINUE_GLOBAL_DIR")
        return (pure(base) if base and pure(base).is_absolute() else home_path / ".continue") / "config.yaml"
    if host == "windsurf":
        return home_path / ".codeium" / "windsurf" / "mcp_config.json"
    if host == "gemini":
        return (project if scope == "project" else home_path) / ".gemini" / "settings.json"
    # codex
    if scope == "project":
        return project / ".codex" / "config.toml"
    base = environ.get("CODEX_HOME")
    return (pure(base) if base else home_path / ".codex") / "config.toml"


# Continue's workspace folder of server files (each .yaml/.yml block or Claude-style .json)
CONTINUE_BLOCKS = PurePosixPath(".continue", "mcpServers")
CONTINUE_SUFFIXES = (".yaml", ".yml", ".json")


def config_files(path: Path) -> list[Path]:
    """The config files `path` stands for: itself, or for a folder (Continue's `.continue/mcpServers/`)
    the server files in it, by name."""
    if not path.is_dir():
        return [path]
    return sorted(p for p in path.iterdir() if p.suffix.lower() in CONTINUE_SUFFIXES and p.is_file())


def servers_table(host: str, scope: str = "user", project_dir: str | os.PathLike[str] | None = None) -> tuple[str, ...]:
    """The key path of the table of server entries in the host's file."""
    if host == "claude-code" and scope == "local":
        return (
            "projects",
            os.path.abspath(project_dir if project_dir is not None else os.getcwd()),
            HOSTS[host].servers_key,
        )
    if host == "vscode" and scope == "settings":
        return VSCODE_SETTINGS_TABLE
    return (HOSTS[host].servers_key,)


def table_label(table: tuple[str, ...]) -> str:
    if len(table) == 3 and table[0] == "projects":
        return f"local scope of project {table[1]}"
    return ".".join(table)
