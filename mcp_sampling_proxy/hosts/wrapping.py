"""A host's server entry with the proxy in front, and back: what `wrap` writes and `unwrap` restores.

A stdio entry keeps its env, cwd and every other key, and its command line moves after `--`; a
Streamable HTTP entry becomes a stdio entry running `--url URL --header 'K: V'`. The proxy is named by
absolute path (hosts start servers with a minimal PATH), and so is a bare server command the host would
not find on the PATH it gives (`server_command`). An entry whose original is lost is rebuilt from the
proxy's arguments in the host's own form (`derived_entry`).
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path
from typing import Any

from msgspec import Struct

from mcp_sampling_proxy.hosts.documents import same_data
from mcp_sampling_proxy.hosts.entries import classify, is_wrapped, parse_proxy_args
from mcp_sampling_proxy.hosts.registry import CODEX_HTTP_KEYS, HOSTS
from mcp_sampling_proxy.hosts.search_path import desktop_path, find, is_bare
from mcp_sampling_proxy.text.sanitize import one_line

# -- how the host should start the proxy ----------------------------------------------------------------


class Invocation(Struct, frozen=True):
    command: str
    prefix: tuple[str, ...] = ()  # arguments before the proxy's own (`-m mcp_sampling_proxy`)


def proxy_invocation() -> Invocation:
    """The installed console script by absolute path, else this interpreter with `-m`.

    The script next to `sys.executable` comes first (the same installation as the running code);
    `sys.executable` is not resolved, since a venv's python is a symlink that must stay one."""
    python = os.path.abspath(sys.executable)
    names = ("mcp-sampling-proxy.exe",) if os.name == "nt" else ("mcp-sampling-proxy",)
    folder = Path(python).parent
    for candidate in (folder / name for name in names):
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return Invocation(str(candidate))
    if os.name == "nt":
        for candidate in (folder / "Scripts" / name for name in names):
            if candidate.is_file():
                return Invocation(str(candidate))
    found = shutil.which("mcp-sampling-proxy")
    if found:
        return Invocation(os.path.abspath(found))
    return Invocation(python, ("-m", "mcp_sampling_proxy"))


# -- entries ----------------------------------------------------------------------------------------------


class Skip(Exception):
    """This entry cannot be wrapped (the reason is the message)."""


def wrapped_entry(
    host: str, key: str, entry: dict[str, Any], invocation: Invocation, policy: str | None, name: str | None
) -> dict[str, Any]:
    """The entry with the proxy in front; key order and unrelated keys are kept."""
    kind = classify(host, entry)
    if kind.kind == "invalid":
        raise Skip(f"cannot wrap: {kind.problem}")
    if kind.kind == "sse":
        raise Skip(
            "cannot wrap: it uses the SSE transport, and the proxy reaches remote servers over Streamable HTTP only"
        )
    args = list(invocation.prefix)
    if policy:
        args += ["--policy", policy]
    if name:
        args += ["--name", name]
    new: dict[str, Any] = {}
    if kind.kind == "stdio":
        args += ["--", entry["command"], *entry.get("args", [])]
        for k, v in entry.items():
            if k == "command":
                new["command"] = invocation.command
                new["args"] = args
            elif k != "args":
                new[k] = v
        return new
    remote = kind.remote
    assert remote is not None
    options = entry.get("requestOptions") if host == "continue" else None
    unsupported = sorted(k for k in options if k != "headers") if isinstance(options, dict) else []
    if unsupported:
        raise Skip(
            f"cannot wrap: its requestOptions has {', '.join(unsupported)}, which the proxy would not "
            "apply to the remote server (only headers)"
        )
    args += ["--url", remote.url]
    for header, value in remote.headers.items():
        args += ["--header", f"{header}: {value}"]
    drop = set(HOSTS[host].url_keys) | {"headers"}
    if host == "codex":
        drop |= set(CODEX_HTTP_KEYS)
    if host == "continue":  # Continue's YAML keeps headers in requestOptions
        drop.add("requestOptions")
    for k, v in entry.items():
        if k == remote.url_key:
            new["command"] = invocation.command
            new["args"] = args
        elif k in ("type", "transportType"):  # transportType: Cline's older spelling
            new[k] = "stdio"
        elif k not in drop:
            new[k] = v
    if host == "codex" and remote.env_vars:  # Codex passes only listed variables to a server
        existing: list[Any] = entry["env_vars"] if isinstance(entry.get("env_vars"), list) else []
        new["env_vars"] = list(dict.fromkeys([*existing, *remote.env_vars]))
    return new


def upstream_of(host: str, entry: Any) -> tuple[Any, ...] | None:
    """What an unwrapped entry connects to: ("stdio", argv) or ("http", url, headers)."""
    kind = classify(host, entry)
    if kind.kind == "stdio":
        return "stdio", [entry["command"], *entry.get("args", [])]
    if kind.remote is not None:
        return "http", kind.remote.url, kind.remote.headers
    return None


def _transport_keys(host: str) -> set[str]:
    keys = {"command", "args", "type", "transportType", "headers", *HOSTS[host].url_keys}
    if host == "continue":
        keys.add("requestOptions")
    return keys | set(CODEX_HTTP_KEYS) if host == "codex" else keys


def derived_entry(
    host: str, entry: dict[str, Any], original: dict[str, Any] | None, *, yaml: bool = False
) -> dict[str, Any] | None:
    """An unwrapped entry rebuilt from the proxy's arguments (the record is gone, or the entry was edited
    since): the upstream comes from the arguments, every other key from the entry as it is now. When the
    upstream is still the recorded original's, that original's form of it is used."""
    parsed = parse_proxy_args(entry.get("args") or [])
    upstream: tuple[Any, ...]
    if parsed.command:
        upstream = ("stdio", parsed.command)
    elif "--url" in parsed.options:
        headers = {}
        for spec in parsed.headers:
            header, _, value = spec.partition(":")
            headers[header.strip()] = value.strip()
        upstream = ("http", parsed.options["--url"], headers)
    else:
        return None
    transport_keys = _transport_keys(host)
    others = {k: v for k, v in entry.items() if k not in transport_keys}
    if original is not None and same_data(list(upstream_of(host, original) or ()), list(upstream)):
        transport = {k: v for k, v in original.items() if k in transport_keys}
        order = list(original)
    else:
        transport = _transport_for(host, upstream, had_type="type" in entry, yaml=yaml)
        keys = list(entry)
        position = len([k for k in keys[: keys.index("command")] if k != "args"])
        order = [k for k in keys if k not in ("command", "args")]
        order[position:position] = [k for k in transport if k != "type"]
    out = {}
    for k in order:
        if k in transport:
            out[k] = transport[k]
        elif k in others:
            out[k] = others[k]
    for k, v in {**transport, **others}.items():
        out.setdefault(k, v)
    return out


def _transport_for(host: str, upstream: tuple[Any, ...], *, had_type: bool, yaml: bool = False) -> dict[str, Any]:
    """The keys that make `upstream` in the host's own form (`yaml`: Continue's YAML, with its
    requestOptions.headers and type streamable-http)."""
    if upstream[0] == "stdio":
        command = upstream[1]
        out: dict[str, Any] = {"command": command[0]}
        if command[1:]:
            out["args"] = command[1:]
        if had_type:
            out["type"] = "stdio"
        return out
    _, url, headers = upstream
    url_key = {"gemini": "httpUrl", "windsurf": "serverUrl"}.get(host, "url")
    out = {url_key: url}
    if headers and yaml:
        out["requestOptions"] = {"headers": headers}
    elif headers:
        out["http_headers" if host == "codex" else "headers"] = headers
    if had_type:
        out["type"] = "streamable-http" if yaml else "http"
    return out


def describe_upstream(host: str, entry: Any) -> str:
    """A short, terminal-safe description of what an entry runs or reaches."""
    if is_wrapped(entry):
        parsed = parse_proxy_args(entry.get("args") or [])
        target = " ".join(parsed.command) if parsed.command else f"--url {parsed.options.get('--url', '?')}"
        policy = parsed.options.get("--policy")
        return one_line(f"{target}  (policy: {policy or 'the default policy file, if any'})", 160)
    kind = classify(host, entry)
    if kind.kind == "stdio":
        return one_line(" ".join([entry["command"], *entry.get("args", [])]), 120)
    if kind.remote is not None:
        what = "SSE, cannot be wrapped" if kind.kind == "sse" else "Streamable HTTP"
        return one_line(f"{kind.remote.url} ({what})", 120)
    return one_line(f"cannot be wrapped: {kind.problem}", 120)


class ServerCommand(Struct, frozen=True):
    """What wrap does with a stdio entry's command: `command` is the absolute path to write instead of a
    bare name the host would not find (None: keep it as it is), `note` says so, `warning` says that
    nobody finds it."""

    command: str | None = None
    note: str = ""
    warning: str | None = None


def server_command(host: str, entry: Any) -> ServerCommand:
    """A bare server command is looked up on the PATH the host gives the proxy: the entry's env's, else a
    desktop app's short session PATH (hosts/search_path.py), else this shell's. One the host would not
    find but this shell finds is written as its absolute path; one nobody finds is a warning."""
    if classify(host, entry).kind != "stdio" or not isinstance(entry.get("command"), str):
        return ServerCommand()
    command = entry["command"]
    if not is_bare(command):
        return ServerCommand()
    title = HOSTS[host].title
    env = entry.get("env") if isinstance(entry.get("env"), dict) else {}
    shell_path = os.environ.get("PATH")
    if isinstance(env.get("PATH"), str):
        host_path, whose = env["PATH"], "the PATH in the entry's env"
    elif HOSTS[host].environment == "own" and desktop_path() is not None:
        host_path, whose = desktop_path(), "the PATH it starts servers with"
    else:
        host_path, whose = shell_path, "the PATH it gets from your shell"
    if "${" in (host_path or "") or find(command, host_path) is not None:
        return ServerCommand()
    yours = find(command, shell_path)
    shown = one_line(command, 80)
    if yours is None:
        return ServerCommand(
            warning=f"{title} will not find the server command '{shown}': it is on neither {whose} "
            f"({one_line(host_path or '', 200)}) nor yours; install it, or write its absolute path in the "
            "entry, then check with `mcp-sampling-proxy doctor`"
        )
    absolute = os.path.abspath(yours)
    return ServerCommand(
        absolute,
        f"; '{shown}' written as {one_line(absolute, 200)} ({title} would not find it on {whose}, "
        f"{one_line(host_path or '', 200)})",
    )
