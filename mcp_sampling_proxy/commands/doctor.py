"""`mcp-sampling-proxy doctor [--policy FILE]`: check the setup the proxy depends on and say what to fix.

Checks, in order: the policy file (loaded exactly as the proxy loads it), each LLM provider (its
models list, or a 1-token completion when it has none; the status it got and whether the key
variable is set, never the key), the approval channels (this terminal, the companion console's
socket directory and who is attached, which hosts answer elicitation), the audit log's directory
and the state directory, every host config in the usual places, and each wrapped server entry as
its host will start it (proxy, server command on its PATH, policy, key variables: doctor_entries),
and containment: whether servers run in the sandbox here, and whether the sealed state still verifies
(a remembered approval or a budgets file something else wrote).
Prints a checklist and exits 1 when something is broken; warnings (a
missing console, a model the provider does not list) do not fail it. Provider checks run in
parallel with a short timeout, so a dead provider costs seconds, not minutes.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import Any

import anyio
import httpx

from mcp_sampling_proxy.approval.console.server import in_temp_fallback, runtime_dir
from mcp_sampling_proxy.approval.webhook_channel import read_secret
from mcp_sampling_proxy.commands.checklist import Check, Section
from mcp_sampling_proxy.commands.doctor_entries import check_entry, entries_from
from mcp_sampling_proxy.commands.parsing import Parser
from mcp_sampling_proxy.commands.remotes import remote_entries
from mcp_sampling_proxy.commands.tools import doctor_checks as tool_checks
from mcp_sampling_proxy.config.child_env import withheld
from mcp_sampling_proxy.config.dirs import home_relative
from mcp_sampling_proxy.config.keys import KeySourceError, key_source, resolve_key
from mcp_sampling_proxy.config.paths import policy_or_default
from mcp_sampling_proxy.config.providers import PRESET_FACTS
from mcp_sampling_proxy.config.settings import load_settings
from mcp_sampling_proxy.hosts.registry import HOST_SUPPORT_NOTE, HOSTS
from mcp_sampling_proxy.hosts.survey import survey
from mcp_sampling_proxy.notation.yamlnodes import PolicyError
from mcp_sampling_proxy.providers.base import LLMError
from mcp_sampling_proxy.providers.command import program_of
from mcp_sampling_proxy.providers.errors import http_error, safe_url
from mcp_sampling_proxy.providers.registry import make_adapter
from mcp_sampling_proxy.providers.retry import connect_reason
from mcp_sampling_proxy.quotas.integrity import report, start_anew
from mcp_sampling_proxy.quotas.state import state_dir
from mcp_sampling_proxy.system.terminal import DISABLE_ENV, Terminal
from mcp_sampling_proxy.text.sanitize import one_line
from mcp_sampling_proxy.transport.bwrap_probe import unavailable
from mcp_sampling_proxy.transport.oauth import describe_login
from mcp_sampling_proxy.transport.oauth_store import login_command
from mcp_sampling_proxy.transport.sandbox_notes import notes

PROG = "mcp-sampling-proxy doctor"
DEFAULT_TIMEOUT = 5.0


# -- policy ---------------------------------------------------------------------------------------------


def check_policy(path: str | None) -> tuple[Any, Section]:
    section = Section("policy")
    try:
        settings = load_settings(path)
    except PolicyError as exc:
        section.add(
            "fail",
            one_line(str(exc), 400),
            "fix the file at that line; `mcp-sampling-proxy policy check FILE` checks it again",
        )
        return None, section
    if path is None:
        section.add("info", "no --policy: providers come from the environment and every request needs approval")
    else:
        rules = len(settings.rules)
        providers = ", ".join(p.name for p in settings.providers) or "from the environment"
        section.add("ok", f"{path}: valid ({rules} rule{'s' if rules != 1 else ''}; providers: {providers})")
    return settings, section


# -- providers ----------------------------------------------------------------------------------------


def _status_fix(status: int, key_var: str | None, url: str, source: str | None = None) -> str:
    """What to do about an HTTP error status; `source`: the key file or command the key came from."""
    if status == 401:
        if source:
            return f"the key from {source} was refused: check it belongs to this provider and is still valid"
        if not key_var:
            return (
                "the provider wants a key: give its provider api_key_file: FILE (a 0600 file holding the key) "
                "or api_key_env: VAR in the policy"
            )
        if os.environ.get(key_var):
            return f"the key in {key_var} was refused: check it belongs to this provider and is still valid"
        return f"set {key_var} (in the host config's env, and in this shell to check again)"
    if status == 403:
        holder = f" from {source}" if source else f" in {key_var}" if key_var else ""
        return f"the key{holder} lacks access to this API or model"
    if status == 404:
        return f"nothing answers at {url}: check base_url (OpenAI-compatible servers usually end in /v1)"
    if status == 429:
        return "rate limited or out of quota: try again later, or check the account's limits"
    if status >= 500:
        return "the provider has a problem right now: try again later"
    return "check the provider's base_url and key"


async def probe_provider(provider: Any, timeout: float) -> list[Check]:
    """One provider: for one that speaks HTTP, GET its models list (and a 1-token completion when it has
    none); for a CLI, whether its program is there; the console only needs a terminal."""
    name = f"'{provider.name}' ({provider.type})"
    if not provider.kind.http and not provider.kind.runs_command:
        return [Check("info", f"{name}: you type the replies; needs a terminal, so not for hosts without one")]
    if provider.kind.runs_command:
        program, found = program_of(provider)
        if found is None:
            return [
                Check(
                    "fail",
                    f"{name}: '{program}' not found on PATH",
                    "install it, or give its absolute path in command: (hosts often start servers with a short PATH)",
                )
            ]
        facts = PRESET_FACTS.get(provider.command.preset or "") if provider.command else None
        spends = f"; spends {facts.meter}; tools off: {facts.tools_off}" if facts else ""
        checks = [Check("ok", f"{name}: runs {found} (not called: a check would spend your quota){spends}")]
        if facts is not None and facts.key_vars and not any(os.environ.get(var) for var in facts.key_vars):
            checks.append(
                Check(
                    "warn",
                    f"{name}: needs an API key now, and none of {', '.join(facts.key_vars)} is set",
                    f"set {facts.key_vars[0]} (a key from Google AI Studio) where the host starts the proxy",
                )
            )
        return checks
    key_var = provider.api_key_env
    key = os.environ.get(key_var) if key_var else None
    key_note = f"{key_var} is set" if key else (f"{key_var} is not set" if key_var else "no api_key_env")
    if provider.api_key_file or provider.api_key_command:  # doctor runs the command, as the proxy would
        try:
            provider = resolve_key(provider)
        except KeySourceError as exc:
            return [Check("fail", f"{name}: {exc}", "fix the key source; the proxy refuses to start without it")]
        key, key_note = provider.api_key, f"{key_source(provider)} gave a key"
    # The adapter the proxy would use: its URLs and headers (key, api-version, extra headers), one try
    adapter = make_adapter(
        replace(provider, max_attempts=1, read_timeout=timeout, connect_timeout=min(timeout, provider.connect_timeout))
    )
    try:
        return await _probe_with(adapter, provider, name, key_var, key_note, timeout)
    finally:
        await adapter.aclose()


async def _probe_with(
    adapter: Any, provider: Any, name: str, key_var: str | None, key_note: str, timeout: float
) -> list[Check]:
    source = key_source(provider) if provider.api_key_file or provider.api_key_command else None
    base, url = adapter.base_url, adapter.models_url()
    try:
        shown = safe_url(base)
    except Exception:  # a base_url httpx cannot parse is shown as given
        shown = one_line(base, 80)
    label = f"{name} at {shown}"
    try:
        response = await adapter.list_models()
    except httpx.TimeoutException:
        return [
            Check(
                "fail",
                f"{label}: no answer within {timeout:g} s ({key_note})",
                "check that the server is up and base_url points at it",
            )
        ]
    except (httpx.UnsupportedProtocol, httpx.InvalidURL) as exc:
        return [
            Check(
                "fail",
                f"{label}: unusable base_url ({one_line(str(exc), 120)})",
                "base_url must start with http:// or https://",
            )
        ]
    except httpx.TransportError as exc:
        reason = connect_reason(exc)
        if reason == "connection refused":
            fix = f"nothing listens at {shown}: start the server (Ollama: `ollama serve`) or correct base_url"
        elif reason == "host name not found":
            fix = "the host name in base_url does not resolve: check it (and your network)"
        else:
            fix = "check base_url and your network"
        return [Check("fail", f"{label}: {reason} ({key_note})", fix)]
    path = url[len(base) :]
    if response.is_success:
        try:
            listed = [m.get("id") for m in response.json().get("data", []) if isinstance(m, dict)]
        except (ValueError, AttributeError):
            listed = []
        checks = [
            Check(
                "ok",
                f"{label}: GET {path} answered {response.status_code} "
                f"({len(listed)} model{'s' if len(listed) != 1 else ''}); {key_note}",
            )
        ]
        # Azure lists base models, not the deployments the policy names
        missing = [m.name for m in provider.models if listed and m.name not in listed and provider.azure is None]
        if missing:
            checks.append(
                Check(
                    "warn",
                    f"{name}: {', '.join(missing)} not among the models it lists",
                    "check the model names under llm.providers in the policy",
                )
            )
        return checks
    if response.status_code in (404, 405) and provider.models:  # no models list: try a 1-token completion
        model = provider.models[0].name
        params = {"messages": [{"role": "user", "content": {"type": "text", "text": "ping"}}], "maxTokens": 1}
        try:
            with anyio.fail_after(timeout + 1):
                await adapter.complete(params, model)
        except LLMError as exc:
            fix = _status_fix(exc.status, key_var, shown, source) if exc.status else "check base_url and the model name"
            return [
                Check(
                    "fail",
                    f"{label}: no models list, and a 1-token completion with {model} failed: "
                    f"{_noted(one_line(exc.message, 300), key_note)}",
                    fix,
                )
            ]
        except TimeoutError:
            return [
                Check(
                    "fail",
                    f"{label}: a 1-token completion with {model} got no answer within {timeout:g} s",
                    "check that the server is up and base_url points at it",
                )
            ]
        return [
            Check(
                "ok",
                f"{label}: no models list (GET {path}: {response.status_code}), but a 1-token "
                f"completion with {model} worked; {key_note}",
            )
        ]
    message = http_error(provider, response).message
    return [
        Check(
            "fail",
            f"{label}: GET {path}: {_noted(one_line(message, 300), key_note)}",
            _status_fix(response.status_code, key_var, shown, source),
        )
    ]


def _noted(said: str, key_note: str) -> str:
    """`said`, then where the key stands, unless `said` says it already (a 401's "VAR is not set")."""
    return said if key_note in said else f"{said} ({key_note})"


async def _probe_all(providers: list[Any], timeout: float) -> list[list[Check]]:
    results: list[list[Check]] = [[] for _ in providers]

    async def run(index: int, provider: Any) -> None:
        try:
            results[index] = await probe_provider(provider, timeout)
        except Exception as exc:  # one odd provider must not hide the others
            results[index] = [
                Check(
                    "fail",
                    f"'{provider.name}': the check itself failed: {type(exc).__name__}: {one_line(str(exc), 200)}",
                )
            ]

    async with anyio.create_task_group() as tg:
        for index, provider in enumerate(providers):
            tg.start_soon(run, index, provider)
    return results


def check_providers(settings: Any, timeout: float) -> Section:
    section = Section("LLM providers")
    if settings is None:
        section.add("info", "not checked: the policy did not load")
        return section
    if not settings.providers:
        section.add(
            "warn",
            "no LLM provider configured",
            "set OPENAI_API_KEY (or OPENAI_BASE_URL for a local server) or ANTHROPIC_API_KEY in the host "
            "config's env, or add llm.providers to the policy; without one, replies can only be typed at a "
            "terminal",
        )
        return section
    for provider, checks in zip(
        settings.providers, anyio.run(_probe_all, list(settings.providers), timeout), strict=True
    ):
        if provider.kind.http:
            section.add("info", key_origin(provider))
        section.checks += checks
    return section


def key_origin(provider: Any) -> str:
    """Where the proxy gets a provider's key, and so which hosts' proxies get it (never the key)."""
    name = f"'{provider.name}'"
    if provider.api_key_file:
        return (
            f"{name}: the proxy reads its key from the key file {home_relative(Path(provider.api_key_file))} "
            "itself: it reaches the proxy whatever environment a host gives it"
        )
    if provider.api_key_command:
        return (
            f"{name}: the proxy runs api_key_command {one_line(' '.join(provider.api_key_command), 120)} at start "
            "for its key (found on the PATH the host gives it)"
        )
    if provider.api_key_env:
        return (
            f"{name}: its key comes from the variable {provider.api_key_env} of the environment the host gives "
            "the proxy (desktop apps do not pass your shell's: see wrapped servers below)"
        )
    return f"{name}: no key (a local server)"


# -- approval -------------------------------------------------------------------------------------------


def may_prompt(settings: Any) -> bool:
    """Can a request end up asking a human? (a `prompt` rule, or no catch-all rule before the end)"""
    for rule in settings.rules:
        if rule.action == "prompt":
            return True
        if not getattr(rule.when, "conditions", True):
            return False
    return True


def _unix_sockets() -> dict[str, list[tuple[int, str]]] | None:
    """Path -> [(flags, state)] of the Unix sockets on this machine (Linux), or None when unknown."""
    try:
        lines = Path("/proc/net/unix").read_text(encoding="utf-8", errors="replace").splitlines()[1:]
    except OSError:
        return None
    found: dict[str, list[tuple[int, str]]] = {}
    for line in lines:
        parts = line.split(None, 7)
        if len(parts) == 8:
            with contextlib.suppress(ValueError):
                found.setdefault(parts[7], []).append((int(parts[3], 16), parts[5]))
    return found


def console_status(directory: Path) -> tuple[int, int | None]:
    """(proxies listening in `directory`, consoles attached to them; None when this OS cannot tell)."""
    sockets = sorted(directory.glob("*.sock"))
    table = _unix_sockets()
    if table is None:
        live = 0
        for sock in sockets:
            with contextlib.suppress(ValueError, ProcessLookupError, PermissionError):
                os.kill(int(sock.stem), 0)
                live += 1
        return live, None
    live, consoles = 0, 0
    for sock in sockets:
        entries = table.get(str(sock), []) + (
            [] if str(sock) == os.path.abspath(sock) else table.get(os.path.abspath(sock), [])
        )
        if any(flags & 0x10000 for flags, _ in entries):  # __SO_ACCEPTCON: a listening socket
            live += 1
            consoles = max(consoles, sum(1 for flags, state in entries if state == "03" and not flags & 0x10000))
    return live, consoles


def check_approval(settings: Any) -> Section:
    section = Section("approval")
    asks = settings is None or may_prompt(settings)
    if settings is not None:
        channels = ", ".join(settings.approval.channels)
        why = "" if asks else "; the rules never ask (a catch-all allow/deny comes first)"
        section.add("info", f"channels, in order: {channels} (timeout {settings.approval.timeout:g} s){why}")
    terminal = Terminal.open()
    if terminal is not None:
        terminal.close()
        section.add(
            "ok",
            "terminal: this shell has one; proxies started from a terminal (or by `try`) ask there, "
            "but hosts such as Claude Desktop start them without one",
        )
    elif os.environ.get(DISABLE_ENV):
        section.add("info", f"terminal: turned off by {DISABLE_ENV}")
    else:
        section.add("info", "terminal: none here (normal for proxies a host starts)")
    try:
        directory = runtime_dir()
    except OSError as exc:
        section.add(
            "fail",
            f"console: socket directory unusable: {one_line(str(exc), 200)}",
            "make it yours and private (chmod 700), or set MCP_SAMPLING_PROXY_RUNTIME_DIR to another directory",
        )
    else:
        probe = None
        try:
            probe = tempfile.NamedTemporaryFile(dir=directory, prefix=".doctor-")  # noqa: SIM115
        except OSError as exc:
            section.add(
                "fail",
                f"console: cannot create sockets in {directory}: {exc.strerror}",
                "make the directory writable, or set MCP_SAMPLING_PROXY_RUNTIME_DIR to another directory",
            )
        finally:
            if probe is not None:
                probe.close()
        if probe is not None and in_temp_fallback(directory):
            section.add(
                "info",
                f"console: {directory} is the shared fallback (no XDG_RUNTIME_DIR, no /run/user/UID): every "
                "proxy and console of yours started without a runtime dir meets here, from any host, terminal or "
                "login, so one console sees all their questions (each names its proxy and host); those started "
                "with XDG_RUNTIME_DIR set meet in that directory instead. To choose who meets whom, give the "
                "hosts' proxies and the console the same MCP_SAMPLING_PROXY_RUNTIME_DIR (a private directory)",
            )
        if probe is not None:
            proxies, consoles = console_status(directory)
            running = f"{proxies} prox{'ies' if proxies != 1 else 'y'} running"
            if consoles is None:
                section.add("ok", f"console: socket directory {directory} is usable; {running}")
            elif proxies == 0:
                section.add("ok", f"console: socket directory {directory} is usable; no proxy running now")
            elif consoles:
                section.add("ok", f"console: {running}, {consoles} console{'s' if consoles != 1 else ''} attached")
            elif asks:
                section.add(
                    "warn",
                    f"console: {running}, no console attached",
                    "run `mcp-sampling-proxy console` in a terminal to approve requests from hosts that "
                    "give the proxy no terminal",
                )
            else:
                section.add("info", f"console: {running}, no console attached (the rules never ask)")
    answer = [h.title for h in HOSTS.values() if h.elicitation == "yes"]
    silent = [h.title for h in HOSTS.values() if h.elicitation != "yes"]
    section.add(
        "info",
        f"host: {', '.join(answer)} can ask in their own UI (elicitation); {', '.join(silent)} "
        f"cannot, so use the console there ({HOST_SUPPORT_NOTE})",
    )
    if settings is not None:
        _check_webhook(section, settings)
    return section


def _check_webhook(section: Section, settings: Any) -> None:
    """The webhook channel can sign and check only with its secret; the quorum is said as it is."""
    if settings.approval.quorum > 1:
        section.add(
            "info",
            f"quorum: {settings.approval.quorum} different approvers must approve each request "
            "(terminal, host, each named web-console user, each webhook approver)",
        )
    webhook = settings.approval.webhook
    if webhook is None:
        return
    if read_secret(webhook, os.environ, withheld) is None:
        fix = (
            f"set {webhook.secret_env} in the environment the host starts the proxy with"
            if webhook.secret_env
            else f"write the shared secret into {webhook.secret_file} (chmod 600)"
        )
        section.add("fail", f"webhook: its secret is not set ({webhook.secret_source}): the channel cannot ask", fix)
    else:
        section.add("ok", f"webhook: requests are signed for {webhook.url} (secret from {webhook.secret_source})")


# -- files ----------------------------------------------------------------------------------------------


def _writable_dir(directory: Path) -> str | None:
    """None when files can be created in `directory` (or it can be created); else why not."""
    probe = directory
    while not probe.exists():
        if probe.parent == probe:
            return "no existing parent directory"
        probe = probe.parent
    if not probe.is_dir():
        return f"{probe} is not a directory"
    if probe != directory:
        return None if os.access(probe, os.W_OK | os.X_OK) else f"cannot create it: {probe} is not writable"
    try:
        with tempfile.NamedTemporaryFile(dir=directory, prefix=".doctor-"):
            pass
    except OSError as exc:
        return f"cannot write there: {exc.strerror}"
    return None


def check_files(settings: Any) -> Section:
    section = Section("files")
    audit = getattr(settings, "audit_path", None) if settings is not None else None
    if settings is None:
        section.add("info", "audit log: not checked (the policy did not load)")
    elif not audit:
        section.add("info", "audit log: off (set audit.path in the policy to record every decision)")
    else:
        path = Path(audit)
        problem = _writable_dir(path.parent)
        if problem is None and path.exists() and not os.access(path, os.W_OK):
            problem = "the file is not writable"
        if problem is None and path.is_dir():
            problem = "it is a directory"
        if problem:
            section.add(
                "fail",
                f"audit log {path}: {problem}",
                "make the directory writable by you, or point audit.path elsewhere",
            )
        else:
            section.add("ok", f"audit log {path}: writable")
    directory = state_dir(create=False)
    problem = _writable_dir(directory)
    if problem:
        section.add(
            "fail",
            f"state directory {directory}: {problem} (budgets and remembered approvals live there)",
            "make it writable by you, or set MCP_SAMPLING_PROXY_STATE_DIR to another directory",
        )
    else:
        section.add("ok", f"state directory {directory}: writable{'' if directory.exists() else ' (created on use)'}")
    for aside in sorted(directory.glob("*.corrupt")) if directory.is_dir() else ():
        when = datetime.fromtimestamp(aside.lstat().st_mtime).strftime("%Y-%m-%d %H:%M")
        section.add(
            "warn",
            f"{aside.name} in the state directory: {aside.name.removesuffix('.corrupt')} could not be "
            f"used and was set aside (last changed {when}); the proxies started again from empty state",
            f"look at {aside} (not JSON, not a file, or too large: written by something else?), then delete it",
        )
    return section


def check_containment(settings: Any) -> Section:
    """The sandbox servers run in, and whether the sealed state (approvals, budgets) still verifies."""
    section = Section("containment")
    sandbox = getattr(settings, "sandbox", None)
    mode = sandbox.mode if sandbox is not None else "auto"
    why = unavailable() if mode != "off" else None
    if why is not None and why.startswith("bwrap is not installed"):
        why = "bwrap is not installed"  # (the fix says how to install it)
    install = "install bubblewrap (Debian/Ubuntu: apt install bubblewrap; Fedora: dnf install bubblewrap)"
    if mode == "off":
        section.add(
            "warn",
            "sandbox: off in the policy: servers run as you, unconfined (they can read your files, "
            "open your terminals and outlive a proxy killed outright)",
            "remove `sandbox: off` (or keep it off only for the servers that need it, under sandbox.servers)",
        )
    elif why is None:
        section.add(
            "ok",
            "sandbox: bubblewrap works here; servers run in it by grant: your files read-only but for what "
            "each is granted, your secrets and the proxy's own files out of sight, the network through the "
            "proxy (no loopback services of yours), their own process namespace and /tmp, no terminals",
        )
    elif mode == "required":
        section.add("fail", f"sandbox: required, but {why}: proxies refuse to start", install)
    else:
        section.add(
            "warn", f"no sandbox: {why}; servers run unconfined", f"{install}, or set sandbox: off to say you mean it"
        )
    for name, override in sorted((sandbox.servers if sandbox is not None else {}).items()):
        if override.mode == "off" and mode != "off":
            section.add("info", f"server '{one_line(name, 80)}': sandbox off (sandbox.servers)")
    for note in notes()[-5:]:  # what the sandbox refused servers lately (transport/sandbox_notes.py)
        refused = "a write to" if note.kind == "write" else "a connection to"
        section.add(
            "info",
            f"the sandbox refused server '{one_line(note.server, 80)}' {refused} {one_line(note.what, 200)}",
            f"if it needs it: {note.fix}",
        )
    directory = state_dir(create=False)
    state = report(directory)
    if state.key is not None:
        section.add("info", f"sealed state: {state.key}")
    elif not state.unsealed_approvals and state.budgets is None:
        section.add("ok", f"sealed state: remembered approvals and budgets in {directory} verify")
    for server, tool in state.unsealed_approvals:
        tool_part = f", tool '{one_line(tool, 80)}'" if tool else ""
        section.add(
            "warn",
            f"a remembered approval for server '{one_line(server, 80)}'{tool_part} was not written "
            "by a proxy (its seal does not match): proxies ignore it",
            "`mcp-sampling-proxy approvals list` shows it; revoke it, and approve again if you meant it "
            "(something running as you wrote it: a server without a sandbox?)",
        )
    if state.budgets is not None:
        section.add(
            "fail",
            f"{state.budgets}: budgeted requests are refused",
            f"{start_anew(directory / 'budgets.json')} (budgets then start again from zero)",
        )
    for status, text, fix in tool_checks():
        section.add(status, text, fix or "")
    return section


def host_configs() -> list[Any]:
    """Every host's config files in the usual places (`wrap.survey`), read once for both sections."""
    return [status for host in HOSTS for status in survey(host) if status.exists]


def check_hosts(statuses: list[Any] | None = None) -> Section:
    section = Section("host configs")
    statuses = host_configs() if statuses is None else statuses
    for status in statuses:
        title = f"{HOSTS[status.host].title} ({status.scope}) {status.path}"
        if status.error:
            section.add("fail", f"{title}: {one_line(status.error, 200)}", "fix the file; the host cannot read it")
            continue
        wrapped = sum(s.wrapped for s in status.servers)
        section.add("info", f"{title}: {wrapped} of {len(status.servers)} servers wrapped")
    if not statuses:
        section.add("info", "no host config found in the usual places (`mcp-sampling-proxy wrap --list` shows them)")
    return section


def check_wrapped_servers(statuses: list[Any]) -> Section:
    """Each wrapped entry as its host will start it (see doctor_entries: one function per check)."""
    section = Section("wrapped servers")
    entries = entries_from(statuses)
    for entry in entries:
        section.checks += check_entry(entry)
    if not entries:
        section.add("info", "no wrapped server found (`mcp-sampling-proxy wrap --host HOST --all` wraps them)")
    return section


def check_remote_logins(statuses: list[Any] | None = None) -> Section:
    """Each remote server's OAuth login state: a host-spawned proxy cannot log in by itself. The
    servers are probed at the same time (a few seconds each at worst), from the configs already read."""
    section = Section("remote servers (OAuth login)")
    marks = {"logged-in": "ok", "refreshable": "ok", "none-needed": "ok", "expired": "fail", "needs-login": "fail"}
    remotes = remote_entries(statuses)
    probed = [r for r in remotes if not r.static_auth]
    with ThreadPoolExecutor(max_workers=max(1, min(8, len(probed)))) as pool:
        states = dict(
            zip(
                [r.url for r in probed],
                pool.map(lambda r: describe_login(r.url, probe_timeout=3.0), probed),
                strict=True,
            )
        )
    for remote in remotes:
        if remote.static_auth:
            section.add("info", f"{remote.name} {remote.url}: sends its own Authorization header (no OAuth login)")
            continue
        state, text = states[remote.url]
        section.add(marks.get(state, "info"), f"{remote.name} {remote.url}: {text}", login_command(remote.url))
    if not section.checks:
        section.add("info", "no remote (--url) servers in the hosts' configs")
    return section


# -- output ---------------------------------------------------------------------------------------------


def _marks() -> dict[str, str]:
    marks = {"ok": "✓", "fail": "✗", "warn": "!", "info": "·"}
    encoding = getattr(sys.stdout, "encoding", None) or "ascii"
    try:
        "".join(marks.values()).encode(encoding)
    except (UnicodeEncodeError, LookupError):
        marks = {"ok": "ok", "fail": "XX", "warn": "!", "info": "-"}
    return marks


def main(argv: Sequence[str]) -> int:
    parser = Parser(
        prog=PROG,
        description="Check the policy file, the LLM providers, the approval channels, the audit log, the "
        "state directory, the sandbox and the sealed state, and every wrapped server in the hosts' "
        "configs (proxy, server command, policy, key variables); print what to fix. "
        "Exit 1 when something is broken, 0 when all is well.",
        epilog="Providers are checked with this shell's environment. Wrapped servers are checked with the "
        "environment each host gives the proxy: a CLI started from a terminal passes that shell's, an editor "
        "such as VS Code a login shell's, a desktop app such as Claude Desktop only the entry's env (and "
        "the session's short PATH, where a command only your shell finds is not found).",
    )
    parser.add_argument(
        "--policy",
        metavar="FILE",
        help="the policy file the proxy runs with (default: the one "
        "`init` writes, ~/.config/mcp-sampling-proxy/policy.yaml, when it exists)",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_TIMEOUT,
        metavar="SECONDS",
        help=f"per provider (default {DEFAULT_TIMEOUT:g})",
    )
    args = parser.parse_args(list(argv))
    path, is_default = policy_or_default(args.policy)
    settings, policy = check_policy(path)
    statuses = host_configs()
    if is_default:
        policy.add("info", f"no --policy: using the default policy file {path}, as the proxy does")
    sections = [
        policy,
        check_providers(settings, args.timeout),
        check_approval(settings),
        check_files(settings),
        check_containment(settings),
        check_hosts(statuses),
        check_wrapped_servers(statuses),
        check_remote_logins(statuses),
    ]
    marks = _marks()
    print(
        f"{PROG}: providers are checked with this shell's environment; wrapped servers with the one each "
        "host gives the proxy (a desktop app does not see this shell's variables)"
    )
    for section in sections:
        print(f"\n{section.title}")
        for check in section.checks:
            print(f"  {marks[check.status]} {check.text}")
            if check.fix and check.status in ("fail", "warn"):
                print(f"      fix: {check.fix}")
    failures = sum(c.status == "fail" for s in sections for c in s.checks)
    warnings = sum(c.status == "warn" for s in sections for c in s.checks)
    summary = f"{failures} problem{'s' if failures != 1 else ''}, {warnings} warning{'s' if warnings != 1 else ''}"
    print(f"\n{summary}" if failures or warnings else "\neverything checked is in order")
    return 1 if failures else 0
