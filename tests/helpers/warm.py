"""The warm start servers a test's proxies left (system/warm_start.py), found by the folder they serve."""

from __future__ import annotations

import contextlib
import os
import signal
from pathlib import Path

from mcp_sampling_proxy.entry import WARM_COMM
from mcp_sampling_proxy.system.warm_start import SERVER_FLAG


def carrying_the_flag(under: Path | str) -> list[int]:
    """The live processes whose command line is a warm server's serving a folder under `under`: the warm
    servers, and the proxies they forked and those proxies' guards (a fork keeps the command line)."""
    prefix = os.fsencode(str(under))
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                words = (entry / "cmdline").read_bytes().split(b"\0")
                if SERVER_FLAG.encode() in words and any(word.startswith(prefix) for word in words):
                    found.append(int(entry.name))
    return found


def name_of(pid: int) -> str | None:
    """The process's name (its comm, as `ps -e` and `pkill -x` see it), or None when it is gone."""
    try:
        return (Path("/proc") / str(pid) / "comm").read_text().strip()
    except OSError:
        return None


def warm_servers(under: Path | str) -> list[int]:
    """The live warm servers serving a folder under `under` (by name: not the proxies they forked)."""
    return [pid for pid in carrying_the_flag(under) if name_of(pid) == WARM_COMM]


def end_warm_servers(under: Path | str) -> None:
    """Stop them, and whatever they forked (SIGKILL: a test's, with nothing to finish)."""
    for pid in carrying_the_flag(under):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
