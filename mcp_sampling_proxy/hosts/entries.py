"""What a server entry is: local (stdio) or remote, wrapped by the proxy or not, and the proxy's arguments."""

from __future__ import annotations

import re
from typing import Any

from msgspec import Struct, field

from mcp_sampling_proxy.hosts.registry import HOSTS

PROXY_NAMES = ("mcp-sampling-proxy", "mcp-sampling-proxy.exe")
PROXY_MODULE = "mcp_sampling_proxy"
_PROXY_VALUE_OPTIONS = ("--policy", "--name", "--url", "--header", "--log-level", "--log-format", "--max-message-bytes")


class Remote(Struct):
    """A server the host reaches over HTTP."""

    url: str
    url_key: str
    transport: str  # "http" (Streamable HTTP) | "sse"
    headers: dict[str, str] = field(default_factory=dict)
    env_vars: tuple[str, ...] = ()  # variables the headers read through ${VAR} (Codex's *_env_var keys)


class Kind(Struct):
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


class ProxyArgs(Struct):
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
            out.command = items[i + 1 :]
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
