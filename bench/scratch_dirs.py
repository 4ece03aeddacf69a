"""The user directories a benchmark's proxies and their servers use, all inside the run's own temporary
directory: the policy and state a proxy reads, the console sockets, and the data directory a sandboxed
server may write. A benchmark never reads the user's policy nor leaves a server's directory behind in
the user's home (`~/.local/share/mcp-sampling-proxy/servers/`)."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

# variable -> directory under the run's own: the XDG ones cover servers' data and config; ours win over them
_DIRS = {
    "XDG_CONFIG_HOME": "xdg-config",
    "XDG_STATE_HOME": "xdg-state",
    "XDG_DATA_HOME": "xdg-data",
    "MCP_SAMPLING_PROXY_CONFIG_DIR": "config",
    "MCP_SAMPLING_PROXY_STATE_DIR": "state",
    "MCP_SAMPLING_PROXY_RUNTIME_DIR": "run",
}


def scratch_dirs(root: Path) -> dict[str, str]:
    """The variables that put every user directory under `root` (made, mode 0700)."""
    env: dict[str, str] = {}
    for variable, name in _DIRS.items():
        directory = root / name
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        env[variable] = str(directory)
    return env


@contextmanager
def scratch_environment() -> Iterator[Path]:
    """For a benchmark that runs the proxy's code in its own process: a temporary directory whose
    `scratch_dirs` (and no terminal) are this process's environment while the block runs; the
    environment as it was, and the directory gone, after it."""
    saved = dict(os.environ)
    with tempfile.TemporaryDirectory(prefix="bench-") as scratch:
        os.environ.update(scratch_dirs(Path(scratch)), MCP_SAMPLING_PROXY_NO_TERMINAL="1")
        try:
            yield Path(scratch)
        finally:
            os.environ.clear()
            os.environ.update(saved)
