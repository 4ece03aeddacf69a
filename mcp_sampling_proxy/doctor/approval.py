"""doctor's approval checks: this terminal, the companion console's socket directory and who is
attached, the webhook, which hosts answer elicitation."""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path
from typing import Any

from mcp_sampling_proxy.approval.console.server import in_temp_fallback, runtime_dir
from mcp_sampling_proxy.approval.webhook_channel import read_secret
from mcp_sampling_proxy.config.child_env import withheld
from mcp_sampling_proxy.doctor.checklist import Section
from mcp_sampling_proxy.hosts.registry import HOST_SUPPORT_NOTE, HOSTS
from mcp_sampling_proxy.system.terminal import DISABLE_ENV, Terminal
from mcp_sampling_proxy.text.sanitize import one_line


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
