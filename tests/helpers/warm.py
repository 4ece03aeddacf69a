"""The warm start servers a test's proxies left (system/warm_start.py), found by the folder they serve."""

from __future__ import annotations

import contextlib
import os
import signal
from pathlib import Path

from mcp_sampling_proxy.system.hardening import cmdline, comm
from mcp_sampling_proxy.system.warm_start import SERVER_FLAG, WARM_COMM


def carrying_the_flag(under: Path | str) -> list[int]:
    """The live processes whose command line is a warm server's serving a folder under `under`."""
    prefix = str(under)
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            words = cmdline(int(entry.name))
            if SERVER_FLAG in words and any(word.startswith(prefix) for word in words):
                found.append(int(entry.name))
    return found


def warm_servers(under: Path | str) -> list[int]:
    """The live warm servers serving a folder under `under` (by name, as `pkill -x` finds them)."""
    return [pid for pid in carrying_the_flag(under) if comm(pid) == WARM_COMM]


def end_warm_servers(under: Path | str) -> None:
    """Stop them (SIGKILL: a test's, with nothing to finish)."""
    for pid in carrying_the_flag(under):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
