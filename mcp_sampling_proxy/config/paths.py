"""Where the user's own policy file lives by default: what `init` writes and `--policy` falls back to.

Kept apart from `settings` (and free of heavy imports): the command line reads it before it spawns
the server, when every millisecond of start-up shows in the host.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from mcp_sampling_proxy.config import dirs  # the XDG variables and HOME of this process

CONFIG_DIR_ENV = "MCP_SAMPLING_PROXY_CONFIG_DIR"  # overrides the XDG lookup (tests; several setups side by side)
POLICY_FILE = "policy.yaml"


def config_dir(environ: Mapping[str, str] | None = None) -> Path:
    """`$MCP_SAMPLING_PROXY_CONFIG_DIR` (read from `environ`), else the platform's (config.dirs: `$XDG_CONFIG_HOME/
    mcp-sampling-proxy`, an absolute XDG path only, else `~/.config/mcp-sampling-proxy` on Linux;
    `~/Library/Application Support/mcp-sampling-proxy` on macOS)."""
    environ = os.environ if environ is None else environ
    explicit = environ.get(CONFIG_DIR_ENV)
    if explicit:
        return Path(explicit).expanduser()
    return dirs.config_dir()


def default_policy_path(environ: Mapping[str, str] | None = None) -> Path:
    """The documented default policy file (it may not exist)."""
    return config_dir(environ) / POLICY_FILE


def policy_or_default(given: str | None, environ: Mapping[str, str] | None = None) -> tuple[str | None, bool]:
    """The policy file to use: the one given, else the default file when it exists (else None),
    and whether it is the default."""
    if given is not None:
        return given, False
    default = default_policy_path(environ)
    return (str(default), True) if default.is_file() else (None, False)
