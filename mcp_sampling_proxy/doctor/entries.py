"""`doctor`'s checks of wrapped host entries, each as the host will run it.

A wrapped entry can look fine and still fail the moment the host starts it: the proxy was moved
or uninstalled, the server's command is not on the PATH the host gives it, the policy file named
in `--policy` has an error, or a provider's key does not reach the proxy (a key variable not in the
environment the host gives, a key file the proxy would refuse, a key command not on the host's PATH). Each
check below is one function returning `Check`s, so a new check (or another worker's) is one more
function in `ENTRY_CHECKS`. What the host gives the proxy: the entry's `env` over the host's own
environment, which depends on the host (hosts/registry.py, `Host.environment`): a CLI started from a
terminal passes that shell's; an editor that reads a login shell's environment at start passes that
(doctor asks a login shell for it, as the editor does); an app started from the desktop passes its own,
without your shell's variables (a key exported in your shell never reaches it) and with the session's short
PATH (hosts/search_path.py: a command only your shell finds is not found there); Codex passes only the
variables listed in `env_vars`, Continue only HOME, USER, USERPROFILE, LOGNAME, USERNAME and PATH.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

from msgspec import Struct, field

from mcp_sampling_proxy.config.child_env import WELL_KNOWN_KEY_VARS
from mcp_sampling_proxy.config.dirs import home_relative
from mcp_sampling_proxy.config.keys import KeySourceError, read_key_file
from mcp_sampling_proxy.config.paths import policy_or_default
from mcp_sampling_proxy.config.providers import ProviderConfig
from mcp_sampling_proxy.config.runners import runner_of
from mcp_sampling_proxy.config.settings import load_settings, settings_from_environment
from mcp_sampling_proxy.doctor.checklist import Check
from mcp_sampling_proxy.hosts.entries import PROXY_MODULE, parse_proxy_args
from mcp_sampling_proxy.hosts.registry import HOSTS
from mcp_sampling_proxy.hosts.search_path import desktop_path, find
from mcp_sampling_proxy.notation.yamlnodes import PolicyError
from mcp_sampling_proxy.text.identity import derive_from_command, normalise
from mcp_sampling_proxy.text.sanitize import one_line
from mcp_sampling_proxy.transport.grants import grant_problems
from mcp_sampling_proxy.transport.sandbox import proxy_paths
from mcp_sampling_proxy.transport.sandbox_notes import notes


class WrappedEntry(Struct):
    """One wrapped server entry and what the host will start it with."""

    host: str
    path: Path  # the config file
    scope: str
    name: str
    entry: dict[str, Any]
    settings: Any = None  # the policy, once `check_policy_file` loaded it
    env: dict[str, str] = field(default_factory=dict)

    @property
    def label(self) -> str:
        return f"{HOSTS[self.host].title} '{one_line(self.name, 60)}'"

    @property
    def unwrap_hint(self) -> str:
        return f"`mcp-sampling-proxy unwrap --host {self.host} --config {self.path} --server {self.name}`"

    def variable(self, name: str) -> str | None:
        """The value the proxy will see for `name` (None: unset), as the host passes the environment."""
        if name in self.env:
            return self.env[name]
        if self.host == "codex" and name not in CODEX_DEFAULT_VARS and name not in codex_env_vars(self.entry):
            return None
        if self.host == "continue" and name not in CONTINUE_DEFAULT_VARS:
            return None
        source = HOSTS[self.host].environment
        if source == "own" and name == "PATH":
            return desktop_path() or os.environ.get(name)  # the session's, without what your shell adds
        if source == "own" and name not in SESSION_VARS:
            return None  # a desktop app's environment: not this shell's exports
        if source == "login":
            login = login_environment()
            if login is not None:
                return login.get(name)
        return os.environ.get(name)

    @property
    def environment_note(self) -> str:
        """Where the proxy's variables come from, for a message."""
        title = HOSTS[self.host].title
        source = HOSTS[self.host].environment
        if self.host == "codex":
            return "the entry's env or its env_vars list"
        if self.host == "continue":
            return "the entry's env (Continue passes a server no other variables but HOME, USER, PATH and the like)"
        if source == "own":
            return (
                f"the entry's env ({title} starts servers with its own environment, not your shell's: a variable "
                "exported in your shell does not reach it)"
            )
        if source == "login" and login_environment() is not None:
            return f"the entry's env or your login shell's environment (what {title} reads at start)"
        return "the entry's env or the host's environment (here: this shell's)"

    @property
    def path_note(self) -> str:
        """Whose PATH the proxy gets, for a message."""
        title = HOSTS[self.host].title
        source = HOSTS[self.host].environment
        if "PATH" in self.env:
            return "the PATH in the entry's env"
        if source == "own" and desktop_path() is not None:
            return (
                f"the PATH {title} starts servers with (an app started from the desktop gets the session's "
                "PATH, without what your shell's start-up files add)"
            )
        if source == "login" and login_environment() is not None:
            return f"your login shell's PATH (what {title} reads at start)"
        return "the host's PATH (here: this shell's)"


# Variables Codex passes to every stdio server without env_vars: its Unix allow-list, DEFAULT_ENV_VARS in
# codex-rs/rmcp-client/src/utils.rs (checked against openai/codex in November 2026).
CODEX_DEFAULT_VARS = (
    "HOME",
    "LOGNAME",
    "PATH",
    "SHELL",
    "USER",
    "__CF_USER_TEXT_ENCODING",
    "LANG",
    "LC_ALL",
    "TERM",
    "TMPDIR",
    "TZ",
)


def codex_env_vars(entry: dict[str, Any]) -> set[str]:
    """The names an entry's `env_vars` adds: strings, or tables with a `name` (newer Codex; those with
    `source = "remote"` come from a remote executor, not this machine, and are left out)."""
    listed = entry.get("env_vars")
    names: set[str] = set()
    for item in listed if isinstance(listed, list) else []:
        if isinstance(item, str):
            names.add(item)
        elif isinstance(item, dict) and isinstance(item.get("name"), str) and item.get("source") != "remote":
            names.add(item["name"])
    return names


# What a desktop session gives every app, whatever the shell exports: enough to find commands
SESSION_VARS = ("HOME", "USER", "LOGNAME", "PATH", "SHELL", "LANG", "TMPDIR", "XDG_RUNTIME_DIR", "DISPLAY")


def login_environment() -> dict[str, str] | None:
    """The environment your login shell sets up from its start-up files: what VS Code-like editors read
    when they are not started from a terminal (they run `$SHELL -ilc` for it). The shell starts from a
    desktop session's variables only, so a key exported in this terminal alone does not count. None when
    no shell answers in time."""
    return _login_environment(os.environ.get("SHELL") or "/bin/sh", os.environ.get("HOME") or "/")


@functools.lru_cache(maxsize=4)
def _login_environment(shell: str, home: str) -> dict[str, str] | None:
    session = {k: v for k, v in os.environ.items() if k in SESSION_VARS}
    session.update(HOME=home, SHELL=shell, PATH=session.get("PATH") or os.defpath)
    try:
        done = subprocess.run(
            [shell, "-ilc", "env -0"],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=LOGIN_SHELL_TIMEOUT,
            env=session,
            cwd=home if os.path.isdir(home) else None,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if done.returncode != 0:
        return None
    found: dict[str, str] = {}
    for item in done.stdout.split(b"\0"):
        name, sep, value = item.decode("utf-8", "replace").partition("=")
        if sep and name:
            found[name] = value
    return found


LOGIN_SHELL_TIMEOUT = 10.0  # s; a login shell that prompts or hangs is given up on


# What Continue gives a stdio server besides its env: core/context/mcp/MCPConnection.ts (COMMONS_ENV_VARS and
# PATH, the latter from the user's login shell).
CONTINUE_DEFAULT_VARS = ("HOME", "USER", "USERPROFILE", "LOGNAME", "USERNAME", "PATH")


def wrapped_entry(host: str, path: Path, scope: str, name: str, entry: dict[str, Any]) -> WrappedEntry:
    raw = entry.get("env")
    env = {str(k): str(v) for k, v in raw.items()} if isinstance(raw, dict) else {}
    return WrappedEntry(host, path, scope, name, entry, env=env)


def _uses_host_variables(text: str) -> bool:
    return "${" in text


def _resolve(command: str, entry: WrappedEntry) -> tuple[str | None, str]:
    """(the executable's path or None, where it was looked for)."""
    if os.sep in command or (os.altsep and os.altsep in command):
        candidate = Path(os.path.expanduser(command))
        cwd = entry.entry.get("cwd")
        if not candidate.is_absolute() and isinstance(cwd, str) and not _uses_host_variables(cwd):
            candidate = Path(cwd) / candidate
        ok = candidate.is_file() and os.access(candidate, os.X_OK)
        return (str(candidate) if ok else None), str(candidate)
    search = entry.variable("PATH") or os.defpath
    return shutil.which(command, path=search), f"PATH={one_line(search, 200)}"


def check_proxy(entry: WrappedEntry) -> list[Check]:
    """The proxy's own command (the script, or python with `-m mcp_sampling_proxy`) exists and runs."""
    command = str(entry.entry.get("command", ""))
    found, where = _resolve(command, entry)
    if found is None:
        return [
            Check(
                "fail",
                f"{entry.label}: the proxy command {one_line(command, 200)} is not an executable file ({where})",
                f"reinstall mcp-sampling-proxy, or run {entry.unwrap_hint} and wrap again from the "
                "installation you use",
            )
        ]
    args = entry.entry.get("args") or []
    if args[:2] == ["-m", PROXY_MODULE]:
        return [Check("ok", f"{entry.label}: proxy {found} -m {PROXY_MODULE}")]
    return [Check("ok", f"{entry.label}: proxy {found}")]


def check_upstream(entry: WrappedEntry) -> list[Check]:
    """The server's command (after `--`) resolves on the PATH the host gives the proxy."""
    parsed = parse_proxy_args(entry.entry.get("args") or [])
    if not parsed.command:
        url = parsed.options.get("--url")
        if url:
            return [Check("info", f"{entry.label}: upstream {one_line(url, 200)} (remote; not contacted)")]
        return [
            Check(
                "fail",
                f"{entry.label}: its arguments name no server (neither '-- COMMAND' nor --url)",
                f"run {entry.unwrap_hint}, fix the entry, and wrap it again",
            )
        ]
    command = parsed.command[0]
    if _uses_host_variables(command):
        return [Check("info", f"{entry.label}: upstream {one_line(command, 200)} uses a host variable; not checked")]
    found, where = _resolve(command, entry)
    if found is None:
        yours = find(command, os.environ.get("PATH")) if os.sep not in command else None
        if yours is not None:  # the trap: your terminal finds it, the host will not
            return [
                Check(
                    "fail",
                    f"{entry.label}: {HOSTS[entry.host].title} will not find the server command "
                    f"'{one_line(command, 120)}': it is not on {entry.path_note}: {where}; only your shell "
                    f"finds it, at {home_relative(Path(yours))}",
                    f"write its absolute path {yours} in the entry: run {entry.unwrap_hint}, then wrap it again "
                    "(wrap writes the absolute path of a command the host would not find); or set PATH in the "
                    "entry's env",
                )
            ]
        return [
            Check(
                "fail",
                f"{entry.label}: the server command '{one_line(command, 120)}' is not found on "
                f"{entry.path_note}: {where}",
                f"write the command's absolute path in the entry (`which {one_line(command, 60)}`), or add "
                "its directory to PATH in the entry's env",
            )
        ]
    return [Check("ok", f"{entry.label}: upstream {found}")]


def check_policy_file(entry: WrappedEntry) -> list[Check]:
    """The --policy file loads, with the same checks as `mcp-sampling-proxy policy check`."""
    given = parse_proxy_args(entry.entry.get("args") or []).options.get("--policy")
    policy, is_default = policy_or_default(given, {**os.environ, **entry.env})  # what the proxy will read
    if policy is None:
        return [
            Check(
                "info",
                f"{entry.label}: no --policy and no default policy file (providers from the "
                "environment; every request asks)",
            )
        ]
    if not os.path.isabs(os.path.expanduser(policy)):
        return [
            Check(
                "fail",
                f"{entry.label}: --policy {one_line(policy, 200)} is a relative path, read from "
                "whatever directory the host starts the proxy in",
                "write the policy's absolute path in the entry",
            )
        ]
    try:
        entry.settings = load_settings(os.path.expanduser(policy), environ={})
    except PolicyError as exc:
        return [
            Check(
                "fail",
                f"{entry.label}: its policy is invalid: {one_line(str(exc), 400)}",
                f"fix the file; `mcp-sampling-proxy policy check {policy}` checks it again",
            )
        ]
    which = "the default policy file (no --policy)" if is_default else "policy"
    return [Check("ok", f"{entry.label}: {which} {policy} is valid")]


def check_policy_variables(entry: WrappedEntry) -> list[Check]:
    """Each provider's key reaches the proxy as this host starts it: a key file or command the proxy
    reads itself (checked as it will read it), or a variable in the host's environment; and the Redis
    URL's variable. A policy without providers: the well-known key variables in the host's environment."""
    settings = entry.settings
    if settings is None:
        return []
    checks: list[Check] = []
    providers = [p for p in settings.providers if p.kind.http]
    if not settings.providers:
        found = settings_from_environment({k: v for k in WELL_KNOWN_KEY_VARS if (v := entry.variable(k))})
        providers = found.providers
        if not providers:
            checks.append(
                Check(  # a warning: a policy that only denies, or leaves sampling to the host, needs no LLM
                    "warn",
                    f"{entry.label}: its policy names no LLM provider, and neither "
                    f"{' nor '.join(WELL_KNOWN_KEY_VARS)} is set in {entry.environment_note}: the proxy has no "
                    "LLM, so a request it would answer itself fails",
                    "run `mcp-sampling-proxy init --key-file FILE` (a policy whose provider reads its key from a "
                    f"0600 file), or {key_fix(entry.host, WELL_KNOWN_KEY_VARS[0], str(entry.path))}",
                )
            )
    for provider in providers:
        checks += _key_reaches(entry, provider)
    if getattr(settings.state, "url_env", None):
        name = settings.state.url_env
        if entry.variable(name):
            checks.append(Check("ok", f"{entry.label}: {name} set (the Redis state)"))
        else:
            checks.append(
                Check(
                    "fail",
                    f"{entry.label}: {name} (for the Redis state) is not set in {entry.environment_note}",
                    key_fix(entry.host, name, str(entry.path)),
                )
            )
    return checks


def _key_reaches(entry: WrappedEntry, provider: ProviderConfig) -> list[Check]:
    """Whether `provider`'s key reaches the proxy `entry`'s host starts, and from where."""
    who = f"provider '{one_line(provider.name, 60)}'"
    if provider.api_key_file:
        shown = home_relative(Path(provider.api_key_file))
        try:
            read_key_file(provider)  # as the proxy will: yours, 0600, a regular file
        except KeySourceError as exc:
            return [
                Check(
                    "fail",
                    f"{entry.label}: {one_line(str(exc), 300)}",
                    "fix the key file; the proxy refuses to start without it",
                )
            ]
        return [
            Check(
                "ok",
                f"{entry.label}: {who} key from its key file {shown}, read by the proxy itself (reaches it "
                "whatever the host's environment)",
            )
        ]
    if provider.api_key_command:
        program = provider.api_key_command[0]
        found, where = _resolve(program, entry)
        if found is None:
            return [
                Check(
                    "fail",
                    f"{entry.label}: {who}: api_key_command's program '{one_line(program, 120)}' is not found "
                    f"({where}, as the host starts the proxy)",
                    f"write its absolute path in api_key_command (`which {one_line(program, 60)}`)",
                )
            ]
        return [Check("ok", f"{entry.label}: {who} key from api_key_command {found}, run by the proxy at start")]
    if provider.api_key_env:
        name = provider.api_key_env
        if entry.variable(name):
            where = "the entry's env" if name in entry.env else "the host's environment"
            return [Check("ok", f"{entry.label}: {name} set ({where}): {who} gets its key")]
        return [
            Check(
                "fail",
                f"{entry.label}: {name} (for {who}) is not set in {entry.environment_note}",
                key_fix(entry.host, name, str(entry.path)),
            )
        ]
    return []  # no key: a local server


def key_fix(host: str, name: str, path: str) -> str:
    """The ways to get variable `name` to a proxy `host` starts, best first (wrap prints them too)."""
    ways = [
        "keep the key out of variables: api_key_file (a 0600 file) or api_key_command (your password "
        "manager's CLI) in the policy's provider (`mcp-sampling-proxy init --key-file FILE` writes both)",
    ]
    if host == "vscode":
        ways.append(
            f'or in {path}: "env": {{"{name}": "${{input:{name.lower()}}}"}} with an "inputs" entry '
            f'{{"id": "{name.lower()}", "type": "promptString", "password": true}} (VS Code asks once)'
        )
    elif host == "codex":
        ways.append(f"or add {name} to the entry's env_vars in {path} (Codex then passes it from its environment)")
    else:
        ways.append(f"or add {name} to the entry's env in {path} (the key then sits in that file)")
    return "; ".join(ways)


def check_sandbox(entry: WrappedEntry) -> list[Check]:
    """What the sandbox grants this server under its policy: where it may write, what it may reach; a grant
    the proxy would refuse to start with; and what the sandbox refused it lately (transport/sandbox_notes.py)."""
    parsed = parse_proxy_args(entry.entry.get("args") or [])
    if not parsed.command or entry.settings is None:
        return []  # a remote server, or a policy that did not load (said above)
    name = (parsed.options.get("--name") or "").strip() or derive_from_command(parsed.command)
    contained = entry.settings.sandbox.for_server(name)
    if contained.mode == "off":
        return [
            Check(
                "warn",
                f"{entry.label}: runs unconfined ({contained.place(name)}: off): it can write your files and "
                "reach your local services",
                "remove the `off` unless the server truly needs your whole account",
            )
        ]
    given = parse_proxy_args(entry.entry.get("args") or []).options.get("--policy")
    policy, _ = policy_or_default(given, {**os.environ, **entry.env})
    problems = grant_problems(contained, proxy_paths(policy, entry.settings.named_files(), create=False))
    if problems:
        return [
            Check("fail", f"{entry.label}: {one_line(problem, 400)}", "the proxy refuses to start it: change the grant")
            for problem in problems
        ]
    runner = runner_of(parsed.command)
    writes = [str(home_relative(Path(p))) for p in contained.write] + ["its data directory"]
    writes += ["a runner cache of its own"] if runner is not None else []
    granted = f"writes {', '.join(writes)}; network: {contained.network.describe()}"
    checks = [Check("info", f"{entry.label}: sandbox grants: {one_line(granted, 400)} ({contained.place(name)})")]
    if runner is not None and contained.network.mode == "none":
        checks.append(
            Check(
                "warn",
                f"{entry.label}: started by a package runner with network: false: the runner "
                "cannot reach its registry, and the server's own runner cache starts empty, so its first "
                "start fails",
                f"grant the registry: {contained.place(name)}.network: [{', '.join(runner.registry)}]",
            )
        )
    for note in [n for n in notes() if normalise(n.server) == normalise(name)][-3:]:
        refused = "a write to" if note.kind == "write" else "a connection to"
        checks.append(
            Check(
                "warn",
                f"{entry.label}: the sandbox refused it {refused} {one_line(note.what, 200)}",
                f"if it needs it: {note.fix}",
            )
        )
    return checks


ENTRY_CHECKS: tuple[Callable[[WrappedEntry], list[Check]], ...] = (
    check_proxy,
    check_upstream,
    check_policy_file,
    check_policy_variables,
    check_sandbox,
)


def check_entry(entry: WrappedEntry) -> list[Check]:
    checks: list[Check] = []
    for check in ENTRY_CHECKS:
        checks += check(entry)
    return checks


def entries_from(statuses: list[Any]) -> list[WrappedEntry]:
    """The wrapped entries in `wrap.survey`'s results."""
    found = []
    for status in statuses:
        for server in status.servers:
            if server.wrapped and isinstance(server.entry, dict):
                found.append(wrapped_entry(status.host, status.path, status.scope, server.name, server.entry))
    return found
