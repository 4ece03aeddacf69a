"""doctor's checks of the hosts' configs: every config in the usual places, each wrapped server
entry as its host will start it (entries.py), and each remote server's OAuth login."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

from mcp_sampling_proxy.doctor.checklist import Section
from mcp_sampling_proxy.doctor.entries import check_entry, entries_from
from mcp_sampling_proxy.doctor.remotes import remote_entries
from mcp_sampling_proxy.hosts.registry import HOSTS
from mcp_sampling_proxy.hosts.survey import survey
from mcp_sampling_proxy.text.sanitize import one_line
from mcp_sampling_proxy.transport.oauth import describe_login
from mcp_sampling_proxy.transport.oauth_store import login_command


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
    """Each wrapped entry as its host will start it (see entries.py: one function per check)."""
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
