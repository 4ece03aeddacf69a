"""doctor's start-up section: whether a proxy started from here is forked warm (system/warm_start.py)."""

from __future__ import annotations

import os
from collections.abc import Mapping

from mcp_sampling_proxy.doctor.checklist import Section
from mcp_sampling_proxy.system import warm_start


def check_startup(environ: Mapping[str, str] = os.environ) -> Section:
    """As a launch from this shell would find it (a host's environment may differ: its runtime directory,
    its PYTHON* variables)."""
    section = Section("start-up")
    if not warm_start.enabled(environ):
        why = f"{warm_start.ENV}=off" if environ.get(warm_start.ENV) else "not on this system (Linux only)"
        section.add("info", f"warm start: off ({why}): each proxy loads its modules as it starts (about 150 ms)")
        return section
    place = warm_start.folder(environ)
    if place is None:
        section.add(
            "info",
            "warm start: no runtime directory of yours (XDG_RUNTIME_DIR, /run/user/UID): each proxy loads its "
            "modules as it starts (about 150 ms)",
        )
        return section
    if os.path.exists(place) and not warm_start.private(place):
        section.add(
            "warn",
            f"warm start: {place} is not yours alone (or the folder above it is writable by others): not used",
            f"chmod 700 {place} {os.path.dirname(place)}, or remove {place} (the next proxy makes it anew)",
        )
        return section
    seen = warm_start.look(environ)
    if seen.state == "none":
        section.add(
            "info",
            f"warm start: on; none runs for this shell's interpreter yet (the next proxy started from here starts "
            f"one, in {place})",
        )
    elif seen.state == "serving":
        section.add(
            "ok",
            f"warm start: on; a warm start server (process {seen.pid}) forks the proxies started from here, "
            f"its modules loaded ({warm_start.ENV}=off turns it off; `kill {seen.pid}` ends it, and leaves the "
            "proxies it forked running)",
        )
    else:
        waits = warm_start.READY_SECONDS if seen.state == "silent" else warm_start.WAIT_SECONDS
        doing = "does not answer" if seen.state == "silent" else "has not started listening"
        who = f"process {seen.pid}" if seen.pid else "its process"
        end = f"kill -KILL {seen.pid}" if seen.pid else f"pkill -KILL -x {warm_start.WARM_COMM}"
        section.add(
            "warn",
            f"warm start: the warm start server ({who}) {doing} (stopped or hung): each proxy started from here "
            f"waits {waits:.0f} s for it, then loads its modules itself",
            f"`{end}` ends it (a stopped process does not act on a plain kill); the next proxy starts a new one",
        )
    return section
