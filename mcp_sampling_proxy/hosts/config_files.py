"""MCP hosts' config files: where each host keeps them, what their entries look like, and how to
change one entry without disturbing the rest of the file.

Formats. Every JSON file is read with a tolerant JSONC scanner (comments and trailing commas are
accepted: VS Code's `mcp.json` allows both, Gemini CLI strips comments) that records where each
value sits in the text. An edit replaces only the text of the values that change, inside the one
server entry, so comments, indentation, key order and everything else in the file stay as they
were; what it writes follows the file's own style (indent unit, line endings, one-line vs
multi-line values). The JSONC editor is our own on purpose: no Python library round-trips JSON
with comments and trailing commas (json5/commentjson-style parsers drop the comments on writing).
Codex's TOML is read with `tomllib` and edited with `tomlkit`, which keeps comments, quoting and
layout. Continue's YAML is spliced the same way as JSONC, at the positions PyYAML reports
(`hosts.yaml_doc`). After every edit the new text is parsed again and must equal the expected document
exactly, or nothing is written.

Restoring exactly. What `unwrap` needs to restore an entry byte for byte is kept in a record file
in the state dir (`STATE_DIR/wrapped/HASH-FILENAME.json`, mode 0600, one record per host, file,
table and server; older versions kept it beside the config), not in the entry itself: hosts
validate their entries (VS Code's `mcp.json` schema has `additionalProperties: false`, Codex's TOML
schema denies unknown fields), so an extra marker key would be flagged or rejected. Whether an
entry is wrapped is read from the entry (its command is the proxy), so a lost record only costs
exactness: `unwrap` then rebuilds the entry from the proxy's arguments.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import re
import sys
import tomllib
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path, PurePath, PurePosixPath, PureWindowsPath
from typing import Any

import tomlkit
import tomlkit.exceptions
import tomlkit.items

from mcp_sampling_proxy.config.atomic import write_atomic


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


HOSTS: dict[str, Host] = {h.name: h for h in (
    Host("claude-desktop", "Claude Desktop", "json", "mcpServers", ("user",), "JSON", ("url",),
         "no", "no", "quit Claude Desktop completely and start it again"),
    Host("claude-code", "Claude Code", "json", "mcpServers", ("user", "project", "local"), "JSON", ("url",),
         "no", "no", "start a new claude session (check with /mcp)"),
    Host("cursor", "Cursor", "json", "mcpServers", ("user", "project"), "JSON", ("url",),
         "yes", "no", "turn the server off and on in Cursor Settings > MCP"),
    Host("vscode", "VS Code", "json", "servers", ("user", "project", "settings"), "JSONC (comments, trailing commas)",
         ("url",),
         "yes", "yes", "restart the server (command palette: MCP: List Servers)"),
    Host("windsurf", "Windsurf", "json", "mcpServers", ("user",), "JSON", ("serverUrl", "url"),
         "no", "no", "press refresh in Windsurf's MCP settings"),
    Host("gemini", "Gemini CLI", "json", "mcpServers", ("user", "project"), "JSON with comments",
         ("httpUrl", "url"), "no", "no", "run /mcp refresh, or start gemini again"),
    Host("codex", "Codex", "toml", "mcp_servers", ("user", "project"), "TOML", ("url",),
         "yes", "no", "start a new codex session"),
    # https://zed.dev/docs/ai/mcp: `context_servers` in settings.json (JSONC), {command, args, env} or
    # {url, headers}; "Tools and Prompts" only, so no elicitation or sampling.
    Host("zed", "Zed", "json", "context_servers", ("user", "project"), "JSONC (comments, trailing commas)", ("url",),
         "no", "no", "Zed restarts a context server when its settings change (else: agent panel > settings, "
         "toggle the server)"),
    # https://docs.cline.bot/mcp/configuring-mcp-servers: cline_mcp_settings.json in the VS Code extension's
    # global storage, `mcpServers` with Cline's own keys (disabled, autoApprove, timeout, type/transportType).
    Host("cline", "Cline", "json", "mcpServers", ("user",), "JSON", ("url",),
         "no", "no", "Cline reloads the file when it changes (else: MCP Servers > Installed > Restart Server)"),
    # https://lmstudio.ai/docs/app/mcp: ~/.lmstudio/mcp.json, "Cursor's mcp.json notation" (`mcpServers`).
    Host("lmstudio", "LM Studio", "json", "mcpServers", ("user",), "JSON", ("url",),
         "no", "no", "save mcp.json in LM Studio's editor, or restart LM Studio"),
    # https://docs.continue.dev/reference (config.yaml) and /customize/deep-dives/mcp: `mcpServers:` is a
    # LIST of {name, command, args, env, cwd, type: stdio|sse|streamable-http, url, requestOptions: {headers}}
    # in ~/.continue/config.yaml; a workspace has block files .continue/mcpServers/*.yaml (name, version,
    # schema, mcpServers) and Claude-style JSON files there. Its MCP client declares no capabilities
    # (core/context/mcp/MCPConnection.ts: `capabilities: {}`).
    Host("continue", "Continue", "yaml", "mcpServers", ("user", "project"),
         "YAML (JSON files in .continue/mcpServers/)", ("url",),
         "no", "no", "Continue reloads its config when a file changes (else: command palette, Continue: Reload)"),
)}
# VS Code before 1.102 kept servers in settings.json under "mcp": {"servers": ...} (it moves them to
# mcp.json itself since); `--scope settings` edits that table in the user settings.json.
VSCODE_SETTINGS_TABLE = ("mcp", "servers")
# Where the elicitation/sampling columns come from: the capabilities each host declares in its
# `initialize` request (public records of them, late 2025). The proxy itself goes by what the
# host really declares at run time; this table only helps choose approval channels up front.
HOST_SUPPORT_NOTE = ("as declared by each host's initialize request in late 2025; the proxy checks the "
                     "real capabilities at run time")

# Keys of a remote entry that describe the connection (dropped when it becomes a stdio entry).
CODEX_HTTP_KEYS = ("url", "bearer_token", "bearer_token_env_var", "http_headers", "env_http_headers")


def config_path(host: str, scope: str = "user", *, project_dir: str | os.PathLike[str] | None = None,
                environ: dict[str, str] | None = None, platform: str | None = None,
                home: str | None = None) -> PurePath:
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
        return (app_config_dir() / "Code" / "User" / "globalStorage" / "saoudrizwan.claude-dev" / "settings"
                / "cline_mcp_settings.json")
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
        return ("projects", os.path.abspath(project_dir if project_dir is not None else os.getcwd()),
                HOSTS[host].servers_key)
    if host == "vscode" and scope == "settings":
        return VSCODE_SETTINGS_TABLE
    return (HOSTS[host].servers_key,)


def table_label(table: tuple[str, ...]) -> str:
    if len(table) == 3 and table[0] == "projects":
        return f"local scope of project {table[1]}"
    return ".".join(table)


# -- what an entry is -------------------------------------------------------------------------------

PROXY_NAMES = ("mcp-sampling-proxy", "mcp-sampling-proxy.exe")
PROXY_MODULE = "mcp_sampling_proxy"
_PROXY_VALUE_OPTIONS = ("--policy", "--name", "--url", "--header", "--log-level", "--log-format",
                        "--max-message-bytes")


@dataclass
class Remote:
    """A server the host reaches over HTTP."""

    url: str
    url_key: str
    transport: str  # "http" (Streamable HTTP) | "sse"
    headers: dict[str, str] = field(default_factory=dict)
    env_vars: tuple[str, ...] = ()  # variables the headers read through ${VAR} (Codex's *_env_var keys)


@dataclass
class Kind:
    kind: str  # "stdio" | "http" | "sse" | "invalid"
    remote: Remote | None = None
    problem: str = ""


def classify(host: str, entry: Any) -> Kind:
    """Is `entry` a stdio server, a remote one (and which transport), or something we cannot wrap?"""
    if not isinstance(entry, dict):
        return Kind("invalid", problem="the entry is not an object")
    if "command" in entry:
        if not isinstance(entry["command"], str) or not entry["command"]:
            return Kind("invalid", problem="its command is not a non-empty string")
        args = entry.get("args", [])
        if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
            return Kind("invalid", problem="its args are not a list of strings")
        return Kind("stdio")
    spec = HOSTS[host]
    url_key = next((k for k in spec.url_keys if isinstance(entry.get(k), str)), None)
    if url_key is None:
        return Kind("invalid", problem="it has neither a command nor a URL")
    url = entry[url_key]
    headers: dict[str, str] = {}
    env_vars: list[str] = []
    if host == "codex":
        transport = "http"
        for key, value in (entry.get("http_headers") or {}).items():
            headers[str(key)] = value
        for key, var in (entry.get("env_http_headers") or {}).items():
            headers[str(key)] = _env_ref(str(var))
            env_vars.append(str(var))
        if isinstance(entry.get("bearer_token_env_var"), str):
            headers["Authorization"] = "Bearer " + _env_ref(entry["bearer_token_env_var"])
            env_vars.append(entry["bearer_token_env_var"])
        elif isinstance(entry.get("bearer_token"), str):
            headers["Authorization"] = f"Bearer {entry['bearer_token']}"
    else:
        raw = entry.get("headers") or {}
        options = entry.get("requestOptions")
        if host == "continue" and options is not None:  # Continue's YAML: requestOptions.headers
            if not isinstance(options, dict):
                return Kind("invalid", problem="its requestOptions is not a mapping")
            raw = options.get("headers") or raw
        if not isinstance(raw, dict):
            return Kind("invalid", problem="its headers are not an object")
        headers = dict(raw)
        declared = str(entry.get("type") or entry.get("transport") or entry.get("transportType") or "").lower()
        if host == "gemini":
            transport = "http" if url_key == "httpUrl" else "sse"
        elif declared in ("sse",):
            transport = "sse"
        elif declared in ("http", "streamable-http", "streamablehttp", "streamable_http"):
            transport = "http"
        else:  # hosts that guess: an endpoint named /sse is the old SSE transport
            transport = "sse" if url.rstrip("/").lower().endswith("/sse") else "http"
    if not all(isinstance(v, str) for v in headers.values()):
        return Kind("invalid", problem="a header value is not a string")
    return Kind(transport, Remote(url, url_key, transport, headers, tuple(dict.fromkeys(env_vars))))


def _env_ref(var: str) -> str:
    """`${VAR}`: the proxy expands it in --header values from its environment."""
    return "${" + var + "}"


def is_wrapped(entry: Any) -> bool:
    """Does this entry start the proxy (by script or `python -m mcp_sampling_proxy`)?"""
    if not isinstance(entry, dict) or not isinstance(entry.get("command"), str):
        return False
    base = re.split(r"[\\/]", entry["command"])[-1].lower()
    args: list[Any] = entry["args"] if isinstance(entry.get("args"), list) else []
    return base in PROXY_NAMES or args[:2] == ["-m", PROXY_MODULE]


@dataclass
class ProxyArgs:
    """What a wrapped entry's arguments say."""

    options: dict[str, str] = field(default_factory=dict)  # --policy, --name, ... (last wins)
    headers: list[str] = field(default_factory=list)
    command: list[str] = field(default_factory=list)  # after --


def parse_proxy_args(args: list[Any]) -> ProxyArgs:
    out = ProxyArgs()
    items = [str(a) for a in args]
    if items[:2] == ["-m", PROXY_MODULE]:
        items = items[2:]
    i = 0
    while i < len(items):
        item = items[i]
        if item == "--":
            out.command = items[i + 1:]
            break
        name, eq, value = item.partition("=")
        if eq and name in _PROXY_VALUE_OPTIONS:
            i += 1
        elif item in _PROXY_VALUE_OPTIONS and i + 1 < len(items):
            name, value = item, items[i + 1]
            i += 2
        else:
            i += 1
            continue
        if name == "--header":
            out.headers.append(value)
        else:
            out.options[name] = value
    return out


# -- JSONC with spans ---------------------------------------------------------------------------------


@dataclass
class JNode:
    start: int
    end: int
    value: Any
    members: dict[str, JMember] | None = None  # objects


@dataclass
class JMember:
    key_start: int
    node: JNode


class _SyntaxProblem(Exception):
    def __init__(self, problem: str, pos: int):
        super().__init__(problem)
        self.problem = problem
        self.pos = pos


_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?")
_WORDS = (("true", True), ("false", False), ("null", None))


class _Jsonc:
    def __init__(self, text: str):
        self.text = text
        self.pos = 0

    def fail(self, problem: str, pos: int | None = None) -> _SyntaxProblem:
        pos = self.pos if pos is None else pos
        if pos >= len(self.text):
            problem = f"unexpected end of file: {problem}"
        return _SyntaxProblem(problem, pos)

    def at(self, char: str) -> bool:
        return self.text.startswith(char, self.pos)

    def skip(self) -> None:
        text, n = self.text, len(self.text)
        while self.pos < n:
            c = text[self.pos]
            if c in " \t\r\n":
                self.pos += 1
            elif text.startswith("//", self.pos):
                newline = text.find("\n", self.pos)
                self.pos = n if newline < 0 else newline + 1
            elif text.startswith("/*", self.pos):
                end = text.find("*/", self.pos + 2)
                if end < 0:
                    raise self.fail("unterminated /* comment")
                self.pos = end + 2
            else:
                return

    def document(self) -> JNode:
        node = self.value()
        self.skip()
        if self.pos < len(self.text):
            raise self.fail(f"unexpected {_describe(self.text[self.pos])} after the end of the JSON document")
        return node

    def value(self) -> JNode:
        self.skip()
        if self.pos >= len(self.text):
            raise self.fail("expected a value")
        c, start = self.text[self.pos], self.pos
        if c == "{":
            return self.object()
        if c == "[":
            return self.array()
        if c == '"':
            return self._string_node()
        match = _NUMBER.match(self.text, self.pos)
        if match:
            self.pos = match.end()
            literal = match.group()
            number: Any = float(literal) if any(ch in literal for ch in ".eE") else int(literal)
            return JNode(start, self.pos, number)
        for word, value in _WORDS:
            if self.text.startswith(word, self.pos):
                self.pos += len(word)
                return JNode(start, self.pos, value)
        raise self.fail(f"unexpected {_describe(c)}: expected a value")

    def _string_node(self) -> JNode:
        start = self.pos
        value = self.string()
        return JNode(start, self.pos, value)

    def string(self) -> str:
        try:
            value, end = json.decoder.scanstring(self.text, self.pos + 1, True)  # type: ignore[attr-defined]
        except json.JSONDecodeError as exc:
            message = exc.msg
            if message.startswith("Unterminated string"):
                message = "unterminated string"
            elif message.startswith("Invalid control character"):
                message = "a control character (such as a raw line break) inside a string: write it as \\n"
            elif message.startswith("Invalid \\escape"):
                message = "invalid escape in a string"
            raise self.fail(message, exc.pos) from None
        self.pos = end
        return value

    def object(self) -> JNode:
        start = self.pos
        self.pos += 1
        members: dict[str, JMember] = {}
        value: dict[str, Any] = {}
        while True:
            self.skip()
            if self.at("}"):
                self.pos += 1
                break
            if not self.at('"'):
                raise self.fail("expected a string key" + ("" if members else " or '}'"))
            key_start = self.pos
            key = self.string()
            self.skip()
            if not self.at(":"):
                raise self.fail(f"expected ':' after the key {json.dumps(key)}")
            self.pos += 1
            node = self.value()
            members[key] = JMember(key_start, node)
            value[key] = node.value
            self.skip()
            if self.at(","):
                self.pos += 1
            elif self.at("}"):
                self.pos += 1
                break
            else:
                raise self.fail("expected ',' or '}' after an object member")
        return JNode(start, self.pos, value, members=members)

    def array(self) -> JNode:
        start = self.pos
        self.pos += 1
        items: list[Any] = []
        while True:
            self.skip()
            if self.at("]"):
                self.pos += 1
                break
            items.append(self.value().value)
            self.skip()
            if self.at(","):
                self.pos += 1
            elif self.at("]"):
                self.pos += 1
                break
            else:
                raise self.fail("expected ',' or ']' after an array item")
        return JNode(start, self.pos, items)


def _describe(char: str) -> str:
    return repr(char) if char.isprintable() else f"character U+{ord(char):04X}"


def _line_col(text: str, pos: int) -> tuple[int, int]:
    line = text.count("\n", 0, pos) + 1
    col = pos - (text.rfind("\n", 0, pos) + 1) + 1
    return line, col


def parse_jsonc(text: str, where: str = "<text>") -> JNode:
    """Parse JSON with comments and trailing commas, keeping each value's span."""
    try:
        return _Jsonc(text).document()
    except _SyntaxProblem as exc:
        line, col = _line_col(text, exc.pos)
        raise ConfigError(f"{where}:{line}:{col}: {exc.problem}") from None
    except RecursionError:  # a config nested thousands deep (any checked-out project may hold one)
        raise ConfigError(f"{where}: nested too deeply to read as an MCP config") from None


# -- rendering values in a file's own style ------------------------------------------------------------


def _line_indent(text: str, pos: int) -> str:
    start = text.rfind("\n", 0, pos) + 1
    match = re.match(r"[ \t]*", text[start:pos])
    return match.group() if match else ""


def _indent_unit(text: str) -> str:
    """The file's indentation step (the first indented line's), else two spaces."""
    match = re.search(r"\n([ \t]+)\S", text)
    if not match:
        return "  "
    return "\t" if match.group(1).startswith("\t") else match.group(1)


def _newline(text: str) -> str:
    return "\r\n" if "\r\n" in text else "\n"


def render_json(value: Any, *, unit: str, base: str, newline: str, multiline: bool) -> str:
    if not multiline or not isinstance(value, dict | list) or not value:
        return json.dumps(value, ensure_ascii=False, separators=(", ", ": "))
    return json.dumps(value, ensure_ascii=False, indent=unit).replace("\n", newline + base)


# -- documents ----------------------------------------------------------------------------------------


def _get(data: Any, path: tuple[str, ...]) -> Any:
    for key in path:
        if not isinstance(data, dict) or key not in data:
            return None
        data = data[key]
    return data


def _with_value(data: dict[str, Any], path: tuple[str, ...], value: Any) -> dict[str, Any]:
    """A copy of `data` with the value at `path` replaced."""
    copy = dict(data)
    if len(path) == 1:
        copy[path[0]] = value
    else:
        copy[path[0]] = _with_value(copy[path[0]], path[1:], value)
    return copy


def _same(a: Any, b: Any) -> bool:
    """Equal, and of the same types all the way down (1 == 1.0 == True must not pass)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float) and math.isnan(a):
        return math.isnan(b)
    return bool(a == b)


def _order_after_insert(keys: list[str], added: list[str]) -> list[str]:
    """The key order an in-place edit produces: `args`, when added, goes right after `command`."""
    out: list[str] = []
    for key in keys:
        out.append(key)
        if key == "command" and "args" in added:
            out.append("args")
    return out


class ConfigDoc:
    """One host config file: its text, its data, and edits of single server entries."""

    BOM = "\ufeff"

    def __init__(self, path: Path, host: str, text: str):
        self.path = path
        self.host = host
        self.bom = text.startswith(self.BOM)
        self.text = text[1:] if self.bom else text
        self.data: dict[str, Any] = {}

    @staticmethod
    def load(path: str | os.PathLike[str], host: str) -> ConfigDoc:
        path = Path(path)
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            raise ConfigError(f"{path}: file not found") from None
        except IsADirectoryError:
            raise ConfigError(f"{path}: is a directory, not a config file") from None
        except OSError as exc:
            raise ConfigError(f"{path}: cannot read: {exc.strerror}") from None
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ConfigError(f"{path}: not UTF-8 text (byte {exc.start})") from None
        cls: type[ConfigDoc] = TomlDoc if HOSTS[host].format == "toml" else JsonDoc
        if HOSTS[host].format == "yaml" and path.suffix.lower() != ".json":
            from mcp_sampling_proxy.hosts.yaml_doc import YamlDoc

            cls = YamlDoc
        return cls(path, host, text)

    def encode(self, text: str) -> bytes:
        return ((self.BOM if self.bom else "") + text).encode("utf-8")

    def with_text(self, text: str) -> ConfigDoc:
        """The same file after an edit."""
        return type(self)(self.path, self.host, (self.BOM if self.bom else "") + text)

    def servers(self, table: tuple[str, ...]) -> dict[str, Any]:
        found = _get(self.data, table)
        if found is None:
            return {}
        if not isinstance(found, dict):
            raise ConfigError(f"{self.path}: {'.'.join(table)} is not an object of server entries")
        return found

    def tables(self) -> list[tuple[str, ...]]:
        """The tables of server entries this file holds (Claude Code's user file: also per project)."""
        spec = HOSTS[self.host]
        found: list[tuple[str, ...]] = [(spec.servers_key,)]
        if self.host == "vscode" and isinstance(_get(self.data, VSCODE_SETTINGS_TABLE), dict):
            found = [VSCODE_SETTINGS_TABLE]
        if self.host == "claude-code" and isinstance(self.data.get("projects"), dict):
            for project, settings in self.data["projects"].items():
                if isinstance(settings, dict) and isinstance(settings.get(spec.servers_key), dict) \
                        and settings[spec.servers_key]:
                    found.append(("projects", project, spec.servers_key))
        return found

    # what a format implements
    def entry_span(self, table: tuple[str, ...], name: str) -> tuple[int, int]:
        raise NotImplementedError

    def _replace(self, table: tuple[str, ...], name: str, old: dict[str, Any], new: dict[str, Any]) -> str:
        raise NotImplementedError

    def _parse(self, text: str) -> dict[str, Any]:
        raise NotImplementedError

    def _expected(self, table: tuple[str, ...], name: str, value: Any) -> dict[str, Any]:
        """The data once the entry is `value`."""
        return _with_value(self.data, (*table, name), value)

    # shared
    def entry_text(self, table: tuple[str, ...], name: str) -> str:
        start, end = self.entry_span(table, name)
        return self.text[start:end]

    def replace_entry(self, table: tuple[str, ...], name: str, new: dict[str, Any]) -> str:
        """The file's text with the entry set to `new`, changing as little text as possible."""
        old = self.servers(table)[name]
        text = self._replace(table, name, old, new)
        return self._checked(text, table, name, new)

    def restore_entry_text(self, table: tuple[str, ...], name: str, entry_text: str, expected: Any) -> str:
        """The file's text with the entry's text put back as it was (it must mean `expected`)."""
        start, end = self.entry_span(table, name)
        return self._checked(self.text[:start] + entry_text + self.text[end:], table, name, expected)

    def _checked(self, text: str, table: tuple[str, ...], name: str, value: Any) -> str:
        try:
            got = self._parse(text)
        except ConfigError as exc:
            raise ConfigError(f"{self.path}: editing '{name}' would break the file ({exc}); nothing written") from None
        if not _same(got, self._expected(table, name, value)):
            raise ConfigError(f"{self.path}: editing '{name}' in place did not give the expected result "
                              "(an unusual layout?); nothing written")
        return text


def in_place_edit(old: dict[str, Any], new: dict[str, Any], *, has_command: bool) -> tuple[list[str], bool]:
    """The keys `new` adds, and whether the entry can be edited value by value (what wrap and unwrap
    do: values change, `args` may be added after `command`, the order stays) instead of written anew."""
    added = [k for k in new if k not in old]
    in_place = all(k in new for k in old) and set(added) <= {"args"} and (not added or has_command) \
        and list(new) == _order_after_insert(list(old), added)
    return added, in_place


class JsonDoc(ConfigDoc):
    def __init__(self, path: Path, host: str, text: str):
        super().__init__(path, host, text)
        self.root = parse_jsonc(self.text, str(path))
        if not isinstance(self.root.value, dict):
            raise ConfigError(f"{path}:1:1: the file must hold a JSON object")
        self.data = self.root.value

    def _parse(self, text: str) -> dict[str, Any]:
        return parse_jsonc(text, str(self.path)).value

    def servers(self, table: tuple[str, ...]) -> dict[str, Any]:
        if self.host == "continue" and table == ("mcpServers",) and "mcpServers" not in self.data \
                and ("command" in self.data or "url" in self.data):
            raise ConfigError(f"{self.path}: holds one server without a name (Continue's single-server JSON), which "
                              'this tool does not edit; write it as {"mcpServers": {"NAME": {...}}}')
        return super().servers(table)

    def _member(self, path: tuple[str, ...]) -> JMember:
        node, member = self.root, None
        for key in path:
            if node.members is None or key not in node.members:
                raise ConfigError(f"{self.path}: no {'.'.join(path)}")
            member = node.members[key]
            node = member.node
        assert member is not None
        return member

    def entry_span(self, table: tuple[str, ...], name: str) -> tuple[int, int]:
        node = self._member((*table, name)).node
        return node.start, node.end

    def _replace(self, table: tuple[str, ...], name: str, old: dict[str, Any], new: dict[str, Any]) -> str:
        text = self.text
        entry = self._member((*table, name))
        members = entry.node.members or {}
        newline, unit = _newline(text), _indent_unit(text)
        entry_multiline = "\n" in text[entry.node.start:entry.node.end]
        added, in_place = in_place_edit(old, new, has_command="command" in members)
        if not in_place:  # the entry's shape changes: write it anew in the file's style
            base = _line_indent(text, entry.key_start)
            rendered = render_json(new, unit=unit, base=base, newline=newline, multiline=entry_multiline)
            return text[:entry.node.start] + rendered + text[entry.node.end:]
        edits: list[tuple[int, int, str]] = []
        for key, member in members.items():
            if key in new and not _same(new[key], old[key]):
                node = member.node
                multiline = "\n" in text[node.start:node.end]
                base = _line_indent(text, member.key_start)
                edits.append((node.start, node.end,
                              render_json(new[key], unit=unit, base=base, newline=newline, multiline=multiline)))
        if added:
            command = members["command"]
            base = _line_indent(text, command.key_start)
            separator = f",{newline}{base}" if entry_multiline else ", "
            rendered = render_json(new["args"], unit=unit, base=base, newline=newline, multiline=entry_multiline)
            edits.append((command.node.end, command.node.end, f'{separator}"args": {rendered}'))
        for start, end, replacement in sorted(edits, reverse=True):
            text = text[:start] + replacement + text[end:]
        return text


class TomlDoc(ConfigDoc):
    """Codex's config.toml, edited with tomlkit (style-preserving: comments, key order, quoting, the
    layout of values it does not touch); tomllib reads the data and checks every edit."""

    def __init__(self, path: Path, host: str, text: str):
        super().__init__(path, host, text)
        self.data = self._parse(self.text)

    def _parse(self, text: str) -> dict[str, Any]:
        try:
            return tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            message = str(exc)
            match = re.search(r"\s*\(at line (\d+), column (\d+)\)$", message)
            if match:
                message = message[:match.start()]
                raise ConfigError(f"{self.path}:{match.group(1)}:{match.group(2)}: {message}") from None
            match = re.search(r"\s*\(at end of document\)$", message)
            if match:
                line = text.count("\n") + 1
                raise ConfigError(f"{self.path}:{line}:1: {message[:match.start()]} (at the end)") from None
            raise ConfigError(f"{self.path}: {message}") from None

    def _document(self) -> tomlkit.TOMLDocument:
        try:
            document = tomlkit.parse(self.text)
        except tomlkit.exceptions.TOMLKitError as exc:  # tomllib accepted it: a tomlkit limitation
            raise ConfigError(f"{self.path}: cannot edit this TOML in place ({exc})") from None
        if document.as_string() != self.text:
            raise ConfigError(f"{self.path}: this TOML does not survive a round trip through tomlkit; nothing written")
        return document

    def _item(self, document: tomlkit.TOMLDocument, table: tuple[str, ...], name: str) -> Any:
        node: Any = document
        for key in (*table, name):
            node = node[key]
        if not isinstance(node, tomlkit.items.Table | tomlkit.items.InlineTable):
            raise ConfigError(f"{self.path}: server '{name}' is not written as a [{'.'.join((*table, name))}] table "
                              "or an inline table, which is all this tool edits; move it into its own table")
        return node

    def entry_text(self, table: tuple[str, ...], name: str) -> str:
        """The entry's text as the file holds it: a table's body (below its header) or an inline table."""
        return str(self._item(self._document(), table, name).as_string())

    def entry_span(self, table: tuple[str, ...], name: str) -> tuple[int, int]:
        body = self.entry_text(table, name)
        start = self.text.find(body)
        if start < 0 or self.text.find(body, start + 1) >= 0:
            raise ConfigError(f"{self.path}: cannot tell where server '{name}' is written (its text is not in one "
                              "place, or appears twice)")
        return start, start + len(body)

    def _replace(self, table: tuple[str, ...], name: str, old: dict[str, Any], new: dict[str, Any]) -> str:
        document = self._document()
        item = self._item(document, table, name)
        added, in_place = in_place_edit(old, new, has_command="command" in old)
        if in_place:
            for key in old:
                if _same(new[key], old[key]):
                    continue
                if not _reshape_array(item[key], old[key], new[key]):
                    item[key] = _toml_like(new[key], item[key])
            if added:
                container = item.value if isinstance(item, tomlkit.items.Table) else item
                container._insert_after("command", "args", _toml_like(new["args"], None))
        else:  # the entry's shape changes: its keys are written anew, in order, under the same header
            for key in list(item.keys()):
                del item[key]
            for key, value in new.items():
                item[key] = value
        return str(document.as_string())


def _reshape_array(array: Any, old: Any, new: Any) -> bool:
    """Turn the array `old` into `new` in place when one ends with the other (wrap puts the proxy's
    arguments in front, unwrap takes them off), so its items keep their layout and indentation."""
    if not (isinstance(array, tomlkit.items.Array) and isinstance(old, list) and isinstance(new, list)):
        return False
    if len(new) >= len(old) and _same(new[len(new) - len(old):], old):
        for value in reversed(new[:len(new) - len(old)]):
            array.insert(0, value)
        return True
    if len(new) < len(old) and _same(old[len(old) - len(new):], new):
        for _ in range(len(old) - len(new)):
            array.pop(0)
        return True
    return False


def _toml_like(value: Any, old: Any) -> Any:
    """`value` as a tomlkit item; a list replacing a multi-line array stays multi-line."""
    if isinstance(value, list):
        array = tomlkit.array()
        array.extend(value)
        text = old.as_string() if isinstance(old, tomlkit.items.Array) else ""
        if "\n" in text:
            array.multiline(True)
        return array
    return value


# -- writing ------------------------------------------------------------------------------------------


# -- the sidecar --------------------------------------------------------------------------------------

SIDECAR_NAME = ".mcp-sampling-proxy.json"  # where older versions kept the record: beside the config


def record_path(config: Path) -> Path:
    """`STATE_DIR/wrapped/HASH-FILENAME.json`: the record of one config file (HASH of its absolute
    path). Not beside the config: in a project folder such as `.vscode/` it would end up in version
    control, and it may hold secrets copied from the config's `env`."""
    from mcp_sampling_proxy.config.dirs import state_dir

    folder = state_dir(create=False) / "wrapped"  # made when a record is saved (not by --dry-run)
    absolute = os.path.abspath(config)
    name = re.sub(r"[^A-Za-z0-9._-]+", "_", config.name)
    return folder / f"{hashlib.sha256(absolute.encode()).hexdigest()[:16]}-{name}.json"


class Sidecar:
    """The record of one config: the original text of each entry `wrap` changed, so `unwrap` can
    restore it exactly. Kept in the state dir (`record_path`); a record an older version left
    beside the config is read, and this config's records are moved there on the next save (that
    file holds the records of every config in its folder: the others stay in it)."""

    def __init__(self, config: Path):
        self.config = config
        self.path = record_path(config)
        self.legacy = config.with_name(SIDECAR_NAME)
        self.records = self._read(self.path)
        legacy = self._read(self.legacy)
        self._legacy_others = [r for r in legacy if r.get("file") != config.name]
        self._from_legacy = len(legacy) != len(self._legacy_others)
        held = {self._record_key(r) for r in self.records}
        self.records += [r for r in legacy if r.get("file") == config.name and self._record_key(r) not in held]

    @classmethod
    def _read(cls, path: Path) -> list[dict[str, Any]]:
        try:
            raw = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise ConfigError(f"{path}: cannot read: {exc.strerror}") from None
        return cls._parse(path, raw)

    @staticmethod
    def _record_key(record: dict[str, Any]) -> tuple[Any, ...]:
        table = record.get("table")
        return (record.get("host"), record.get("file"), tuple(table) if isinstance(table, list) else table,
                record.get("server"))

    @staticmethod
    def _parse(path: Path, raw: str) -> list[dict[str, Any]]:
        try:
            data = json.loads(raw)
            records = data["records"]
            if not isinstance(records, list) or not all(isinstance(r, dict) for r in records):
                raise TypeError
        except (ValueError, KeyError, TypeError):
            raise ConfigError(f"{path}: not a record file written by mcp-sampling-proxy wrap; move it "
                              "away and try again") from None
        return records

    def _key(self, host: str, table: tuple[str, ...], server: str) -> tuple[Any, ...]:
        return host, self.config.name, tuple(table), server

    def find(self, host: str, table: tuple[str, ...], server: str) -> dict[str, Any] | None:
        key = self._key(host, table, server)
        return next((record for record in self.records if self._record_key(record) == key), None)

    def put(self, host: str, table: tuple[str, ...], server: str, **fields: Any) -> None:
        self.remove(host, table, server)
        self.records.append({"host": host, "file": self.config.name, "table": list(table), "server": server,
                             "wrapped_at": datetime.now(UTC).isoformat(timespec="seconds"), **fields})

    def remove(self, host: str, table: tuple[str, ...], server: str) -> None:
        key = self._key(host, table, server)
        self.records = [r for r in self.records if self._record_key(r) != key]

    def save(self) -> None:
        """Write this config's records (first, so a failure loses nothing), then take them out of
        an older version's shared file beside the config."""
        from mcp_sampling_proxy.config.dirs import state_dir

        if self.records:
            state_dir()  # created 0700 when missing
        self._write(self.path, self.records, config=os.path.abspath(self.config))
        if self._from_legacy:
            self._write(self.legacy, self._legacy_others)
            self._from_legacy = False

    @staticmethod
    def _write(path: Path, records: list[dict[str, Any]], **extra: Any) -> None:
        if not records:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
            return
        document = {
            "note": "written by `mcp-sampling-proxy wrap`: the original text of each server entry it changed, so "
                    "`mcp-sampling-proxy unwrap` can restore it exactly; may hold secrets from the config",
            "version": 1, **extra, "records": records,
        }
        text = json.dumps(document, indent=2, ensure_ascii=False, default=str) + "\n"
        path.parent.mkdir(mode=0o700, exist_ok=True)
        write_atomic(path, text.encode("utf-8"), mode=0o600)
