"""Which hosts there are, where each keeps its MCP config, and where in it the server entries sit."""

from __future__ import annotations

import os
import sys
from pathlib import Path, PurePath, PurePosixPath, PureWindowsPath
from typing import Literal

from msgspec import Struct


class ConfigError(Exception):
    """A config file that is missing, does not parse, or cannot be edited safely; names the file."""


# -- hosts ------------------------------------------------------------------------------------------

# The directories a host's file sits under: the user's home, the project's folder, where desktop apps
# keep settings (%APPDATA%, ~/Library/Application Support, $XDG_CONFIG_HOME or ~/.config), and the XDG
# config directory on every OS ($XDG_CONFIG_HOME or ~/.config; Zed uses it on macOS too).
BaseDir = Literal["home", "project", "app-config", "xdg-config"]
# The platform families whose directories differ ("linux": any other Unix, XDG directories).
OS = Literal["linux", "macos", "windows"]
# In a `Place.table`: stands for the project's absolute path (Claude Code's local scope).
PROJECT_DIR = "<project>"


class Place(Struct, frozen=True):
    """Where a host keeps its MCP config for one scope: a path under a base directory, a variable
    that moves it, the table of server entries in it. A place for one OS comes before the general one."""

    scope: str  # user: per-user file; project: file in the project; local: Claude Code's per-project
    base: BaseDir
    path: str  # under `base`, "/"-separated
    env: str | None = None  # a variable naming the file's directory instead of base/path's (CODEX_HOME)
    env_absolute_only: bool = False  # a relative value of `env` is ignored (else taken as it is)
    table: tuple[str, ...] | None = None  # the key path of the server entries; None: (Host.servers_key,)
    os: OS | None = None  # only on this OS; None: on any


class Host(Struct, frozen=True):
    name: str
    title: str
    format: str  # "json" | "toml" | "yaml" (Continue: its JSON files go through the JSON editor)
    servers_key: str  # the table holding the server entries
    places: tuple[Place, ...]  # its config file for each scope
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

    @property
    def scopes(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(place.scope for place in self.places))


# VS Code before 1.102 kept servers in settings.json under "mcp": {"servers": ...} (it moves them to
# mcp.json itself since); `--scope settings` edits that table in the user settings.json.
VSCODE_SETTINGS_TABLE = ("mcp", "servers")
# Continue's workspace folder of server files (each .yaml/.yml block or Claude-style .json)
CONTINUE_BLOCKS = ".continue/mcpServers"
CONTINUE_SUFFIXES = (".yaml", ".yml", ".json")

HOSTS: dict[str, Host] = {
    h.name: h
    for h in (
        Host(
            name="claude-desktop",
            title="Claude Desktop",
            format="json",
            servers_key="mcpServers",
            places=(Place("user", "app-config", "Claude/claude_desktop_config.json"),),
            syntax="JSON",
            url_keys=("url",),
            elicitation="no",
            sampling="no",
            reload="quit Claude Desktop completely and start it again",
            environment="own",
        ),
        # `local` is the user file, whose `projects.<dir>.mcpServers` holds the project's servers.
        Host(
            name="claude-code",
            title="Claude Code",
            format="json",
            servers_key="mcpServers",
            places=(
                Place("user", "home", ".claude.json", env="CLAUDE_CONFIG_DIR"),
                Place("project", "project", ".mcp.json"),
                Place(
                    "local",
                    "home",
                    ".claude.json",
                    env="CLAUDE_CONFIG_DIR",
                    table=("projects", PROJECT_DIR, "mcpServers"),
                ),
            ),
            syntax="JSON",
            url_keys=("url",),
            elicitation="no",
            sampling="no",
            reload="start a new claude session (check with /mcp)",
            environment="shell",
        ),
        Host(
            name="cursor",
            title="Cursor",
            format="json",
            servers_key="mcpServers",
            places=(Place("user", "home", ".cursor/mcp.json"), Place("project", "project", ".cursor/mcp.json")),
            syntax="JSON",
            url_keys=("url",),
            elicitation="yes",
            sampling="no",
            reload="turn the server off and on in Cursor Settings > MCP",
            environment="login",
        ),
        Host(
            name="vscode",
            title="VS Code",
            format="json",
            servers_key="servers",
            places=(
                Place("user", "app-config", "Code/User/mcp.json"),
                Place("project", "project", ".vscode/mcp.json"),
                Place("settings", "app-config", "Code/User/settings.json", table=VSCODE_SETTINGS_TABLE),
            ),
            syntax="JSONC (comments, trailing commas)",
            url_keys=("url",),
            elicitation="yes",
            sampling="yes",
            reload="restart the server (command palette: MCP: List Servers)",
            environment="login",
        ),
        Host(
            name="windsurf",
            title="Windsurf",
            format="json",
            servers_key="mcpServers",
            places=(Place("user", "home", ".codeium/windsurf/mcp_config.json"),),
            syntax="JSON",
            url_keys=("serverUrl", "url"),
            elicitation="no",
            sampling="no",
            reload="press refresh in Windsurf's MCP settings",
            environment="login",
        ),
        Host(
            name="gemini",
            title="Gemini CLI",
            format="json",
            servers_key="mcpServers",
            places=(
                Place("user", "home", ".gemini/settings.json"),
                Place("project", "project", ".gemini/settings.json"),
            ),
            syntax="JSON with comments",
            url_keys=("httpUrl", "url"),
            elicitation="no",
            sampling="no",
            reload="run /mcp refresh, or start gemini again",
            environment="shell",
        ),
        Host(
            name="codex",
            title="Codex",
            format="toml",
            servers_key="mcp_servers",
            places=(
                Place("user", "home", ".codex/config.toml", env="CODEX_HOME"),
                Place("project", "project", ".codex/config.toml"),
            ),
            syntax="TOML",
            url_keys=("url",),
            elicitation="yes",
            sampling="no",
            reload="start a new codex session",
            environment="allowlist",
        ),
        # https://zed.dev/docs/ai/mcp: `context_servers` in settings.json (JSONC), {command, args, env} or
        # {url, headers}; "Tools and Prompts" only, so no elicitation or sampling. ~/.config/zed on macOS too
        # (zed.dev/docs/configuring-zed).
        Host(
            name="zed",
            title="Zed",
            format="json",
            servers_key="context_servers",
            places=(
                Place("user", "app-config", "Zed/settings.json", os="windows"),
                Place("user", "xdg-config", "zed/settings.json"),
                Place("project", "project", ".zed/settings.json"),
            ),
            syntax="JSONC (comments, trailing commas)",
            url_keys=("url",),
            elicitation="no",
            sampling="no",
            reload=(
                "Zed restarts a context server when its settings change "
                "(else: agent panel > settings, toggle the server)"
            ),
            environment="own",
        ),
        # https://docs.cline.bot/mcp/configuring-mcp-servers: cline_mcp_settings.json in the VS Code extension's
        # global storage, `mcpServers` with Cline's own keys (disabled, autoApprove, timeout, type/transportType).
        Host(
            name="cline",
            title="Cline",
            format="json",
            servers_key="mcpServers",
            places=(
                Place(
                    "user",
                    "app-config",
                    "Code/User/globalStorage/saoudrizwan.claude-dev/settings/cline_mcp_settings.json",
                ),
            ),
            syntax="JSON",
            url_keys=("url",),
            elicitation="no",
            sampling="no",
            reload="Cline reloads the file when it changes (else: MCP Servers > Installed > Restart Server)",
            environment="login",
        ),
        # https://lmstudio.ai/docs/app/mcp: ~/.lmstudio/mcp.json, "Cursor's mcp.json notation" (`mcpServers`).
        Host(
            name="lmstudio",
            title="LM Studio",
            format="json",
            servers_key="mcpServers",
            places=(Place("user", "home", ".lmstudio/mcp.json"),),
            syntax="JSON",
            url_keys=("url",),
            elicitation="no",
            sampling="no",
            reload="save mcp.json in LM Studio's editor, or restart LM Studio",
            environment="own",
        ),
        # https://docs.continue.dev/reference (config.yaml) and /customize/deep-dives/mcp: `mcpServers:` is a
        # LIST of {name, command, args, env, cwd, type: stdio|sse|streamable-http, url, requestOptions: {headers}}
        # in ~/.continue/config.yaml; a workspace has block files .continue/mcpServers/*.yaml (name, version,
        # schema, mcpServers) and Claude-style JSON files there (the project place is that folder:
        # `config_files` lists them). Its MCP client declares no capabilities
        # (core/context/mcp/MCPConnection.ts: `capabilities: {}`).
        Host(
            name="continue",
            title="Continue",
            format="yaml",
            servers_key="mcpServers",
            places=(
                Place("user", "home", ".continue/config.yaml", env="CONTINUE_GLOBAL_DIR", env_absolute_only=True),
                Place("project", "project", CONTINUE_BLOCKS),
            ),
            syntax="YAML (JSON files in .continue/mcpServers/)",
            url_keys=("url",),
            elicitation="no",
            sampling="no",
            reload="Continue reloads its config when a file changes (else: command palette, Continue: Reload)",
            environment="allowlist",
        ),
    )
}
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
    """The file `host` reads for `scope` on `platform` (default: this machine): its `Place`, resolved."""
    environ = dict(os.environ) if environ is None else environ
    platform = platform or sys.platform
    os_family: OS = "windows" if platform.startswith("win") else "macos" if platform == "darwin" else "linux"
    pure: type[PurePath] = PureWindowsPath if os_family == "windows" else PurePosixPath
    place = _place(host, scope, os_family)
    relative = PurePosixPath(place.path)
    moved = environ.get(place.env) if place.env else None
    if moved and (pure(moved).is_absolute() or not place.env_absolute_only):
        return pure(moved, relative.name)
    if place.base == "project":
        return pure(project_dir if project_dir is not None else os.getcwd(), *relative.parts)
    home_path = pure(home or (environ.get("USERPROFILE") if os_family == "windows" else None) or str(Path.home()))
    return _base_dir(place.base, os_family, pure, home_path, environ).joinpath(*relative.parts)


def _place(host: str, scope: str, os_family: OS) -> Place:
    if host not in HOSTS:
        raise ConfigError(f"unknown host '{host}' (known: {', '.join(HOSTS)})")
    spec = HOSTS[host]
    places = [place for place in spec.places if place.scope == scope and place.os in (os_family, None)]
    if not places:
        raise ConfigError(f"{spec.title} has no {scope} scope (scopes: {', '.join(spec.scopes)})")
    return places[0]


def _base_dir(base: BaseDir, os_family: OS, pure: type[PurePath], home: PurePath, environ: dict[str, str]) -> PurePath:
    """The user's directory `base` stands for on `os_family` (the project's folder is the caller's)."""
    xdg = environ.get("XDG_CONFIG_HOME")
    xdg_config = pure(xdg) if xdg and pure(xdg).is_absolute() else home / ".config"
    if base == "app-config" and os_family == "windows":
        return pure(environ.get("APPDATA") or home / "AppData" / "Roaming")
    if base == "app-config" and os_family == "macos":
        return home / "Library" / "Application Support"
    if base in ("app-config", "xdg-config"):
        return xdg_config
    return home


def config_files(path: Path) -> list[Path]:
    """The config files `path` stands for: itself, or for a folder (Continue's `.continue/mcpServers/`)
    the server files in it, by name."""
    if not path.is_dir():
        return [path]
    return sorted(p for p in path.iterdir() if p.suffix.lower() in CONTINUE_SUFFIXES and p.is_file())


def servers_table(host: str, scope: str = "user", project_dir: str | os.PathLike[str] | None = None) -> tuple[str, ...]:
    """The key path of the table of server entries in the host's file for `scope`."""
    table = _place(host, scope, "linux").table or (HOSTS[host].servers_key,)  # (the same on every OS)
    if PROJECT_DIR not in table:
        return table
    project = os.path.abspath(project_dir if project_dir is not None else os.getcwd())
    return tuple(project if key == PROJECT_DIR else key for key in table)


def table_label(table: tuple[str, ...]) -> str:
    if len(table) == 3 and table[0] == "projects":
        return f"local scope of project {table[1]}"
    return ".".join(table)
