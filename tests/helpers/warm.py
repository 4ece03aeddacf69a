"""The warm start servers a test's proxies left (system/warm_start.py), found by the folder they serve."""

from __future__ import annotations

import contextlib
import os
import signal
from pathlib import Path

from mcp_sampling_proxy.system.warm_start import SERVER_FLAG


def warm_servers(under: Path | str) -> list[int]:
    """The live warm servers whose socket folder lies under `under`."""
    prefix = os.fsencode(str(under))
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                words = (entry / "cmdline").read_bytes().split(b"\0")
                if SERVER_FLAG.encode() in words and any(word.startswith(prefix) for word in words):
                    found.append(int(entry.name))
    return found


def end_warm_servers(under: Path | str) -> None:
    """Stop them (SIGKILL: a test's, with nothing to finish)."""
    for pid in warm_servers(under):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
