"""doctor's checks of what the proxy writes and trusts: the audit log's and the state directory,
the tool pins, and containment (whether servers run in the sandbox here, and whether the sealed
state still verifies)."""

from __future__ import annotations

import os
import tempfile
from datetime import datetime
from pathlib import Path
from typing import Any

from mcp_sampling_proxy.config.dirs import config_dir, home_relative
from mcp_sampling_proxy.doctor.checklist import Check, Section
from mcp_sampling_proxy.doctor.pins import check_pins
from mcp_sampling_proxy.quotas.integrity import report, start_anew
from mcp_sampling_proxy.quotas.state import state_dir
from mcp_sampling_proxy.text.sanitize import one_line
from mcp_sampling_proxy.transport.bwrap_probe import unavailable
from mcp_sampling_proxy.transport.plan_scans import beside
from mcp_sampling_proxy.transport.sandbox_notes import notes


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


def _hidden_file_by_file(settings: Any) -> list[Check]:
    """A file the proxy trusts that shares its folder with other files is hidden from a sandboxed server file
    by file, and a bind follows the file, not its name: one written there anew while the server runs (the
    audit log's rotation, a key saved by an editor) is in its sight until its next start. In a folder of its
    own, or one of the proxy's (hidden whole), it is not."""
    whole = [state_dir(create=False), config_dir()]
    found = []
    for what, raw in settings.trusted_files():
        path = os.path.abspath(os.path.expanduser(raw))
        if any(Path(path).is_relative_to(folder) for folder in whole):
            continue
        alone, _ = beside(path)
        if alone or not os.path.isdir(os.path.dirname(path)):
            continue
        found.append(
            Check(
                "warn",
                f"{one_line(what, 120)} {home_relative(Path(path))} shares its folder with other files: a "
                "sandboxed server does not see it, but would see it written there anew while it runs (the log's "
                "next rotation, a key saved by an editor), until its next start",
                "give it a folder of its own (the sandbox then hides the folder), or keep it in the proxy's "
                "state or configuration directory",
            )
        )
    return found


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
    if why is None and mode != "off" and settings is not None:
        section.checks += _hidden_file_by_file(settings)
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
    section.checks += check_pins()
    return section
