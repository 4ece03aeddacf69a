"""Where the proxy keeps things for this user: state, console sockets, configuration.

`platformdirs` decides per OS; our own variables win over it. On Linux that is the XDG Base
Directory spec, with its rules (only absolute `XDG_*` values count; a runtime dir must be the
user's own with mode 0700, or the next candidate is used):

- state (budgets, remembered approvals, backups): `$MCP_SAMPLING_PROXY_STATE_DIR`, else
  `$XDG_STATE_HOME/mcp-sampling-proxy`, else `~/.local/state/mcp-sampling-proxy`;
  macOS `~/Library/Application Support/mcp-sampling-proxy`, Windows `%LOCALAPPDATA%\\mcp-sampling-proxy`.
- runtime (console sockets; `approval.console_server.runtime_dir` adds its checks on the last
  part): `$MCP_SAMPLING_PROXY_RUNTIME_DIR`, else `mcp-sampling-proxy` in `$XDG_RUNTIME_DIR`,
  else in `/run/user/UID`, else in `$TMPDIR/runtime-UID`; macOS `~/Library/Caches/TemporaryItems`.
- servers' data (one directory per sandboxed server, which it may write): `$XDG_DATA_HOME/mcp-sampling-proxy/
  servers`, else `~/.local/share/mcp-sampling-proxy/servers`.
- servers' package runner caches (one directory per sandboxed server started by npx, uvx, pipx or bunx):
  `$XDG_CACHE_HOME/mcp-sampling-proxy/servers`, else `~/.cache/mcp-sampling-proxy/servers`.
- configuration (the policy file `init` writes): `$XDG_CONFIG_HOME/mcp-sampling-proxy`, else
  `~/.config/mcp-sampling-proxy`; macOS `~/Library/Application Support/mcp-sampling-proxy`,
  Windows `%LOCALAPPDATA%\\mcp-sampling-proxy`.

On macOS the `XDG_*` variables are honoured too, as platformdirs does. platformdirs is imported
on first use (a few milliseconds), not when this module is; so is the logger (structlog costs
~40 ms, and the command line asks for `config_dir` before it starts the server).
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from platformdirs import PlatformDirs, RuntimeDirWarning

APP_DIR = "mcp-sampling-proxy"
STATE_DIR_ENV = "MCP_SAMPLING_PROXY_STATE_DIR"


def _platform(*, ensure_exists: bool = False, app: bool = True) -> Any:
    # appauthor=False: no vendor folder on Windows; no version: the layout is shared by every release
    return PlatformDirs(APP_DIR if app else None, appauthor=False, ensure_exists=ensure_exists)


def state_dir(environ: Mapping[str, str] | None = None, *, create: bool = True) -> Path:
    """The directory for this user's persistent proxy state, created 0700 when missing.

    `environ` is looked at for `$MCP_SAMPLING_PROXY_STATE_DIR` only; the `XDG_*` variables and
    the home directory are the process's own (platformdirs reads them). An existing directory
    keeps its mode: the proxy never chmods a directory it did not create.
    """
    environ = os.environ if environ is None else environ
    explicit = environ.get(STATE_DIR_ENV)
    path = Path(explicit).expanduser() if explicit else Path(_platform().user_state_dir)
    if create:
        # mode applies to the leaf only; parents (e.g. ~/.local/state) get the usual default
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
    return path


def servers_data_dir() -> Path:
    """Where sandboxed servers keep their own data, one directory each (`server_data_dir`): the proxy
    reads nothing here, so what a server writes cannot become something the proxy trusts."""
    return Path(_platform().user_data_dir) / "servers"


def server_data_dir(name: str) -> Path:
    """The data directory of the server called `name`."""
    return servers_data_dir() / _server_folder(name)


def servers_cache_dir() -> Path:
    """Where the package runners (npx, uvx) of sandboxed servers keep their downloads, one directory per
    server (`server_cache_dir`): the user's own runner caches run as the user later, so no server writes
    them (transport/grants.py), and no server sees another's."""
    return Path(_platform().user_cache_dir) / "servers"


def server_cache_dir(name: str) -> Path:
    """The package runner's cache of the server called `name`."""
    return servers_cache_dir() / _server_folder(name)


def _server_folder(name: str) -> str:
    """A folder name for the server called `name`: letters, digits, `.`, `_` and `-` of its name, with a
    digest of the whole so that two names never share one."""
    import zlib  # start-up: only with a sandbox (hashlib would load OpenSSL: 4 ms)

    safe = "".join(c if c.isascii() and (c.isalnum() or c in "._-") else "_" for c in name).strip(".")[:64]
    return f"{safe or 'server'}-{zlib.crc32(name.encode()):08x}"


def config_dir() -> Path:
    """Where this user's configuration (the default policy file) lives; not created here."""
    return Path(_platform().user_config_dir)


_HELD: list[warnings.WarningMessage] = []  # why a runtime dir was passed over, before logging was set up


def runtime_base_quietly() -> Path:
    """`runtime_base` without its log lines: for callers that run before logging is set up (a line then
    would go to stdout, the host's protocol stream). Why a candidate was passed over is kept for the
    next `runtime_base`, which logs it (platformdirs says each reason only once per process)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", RuntimeDirWarning)
        path = Path(_platform(ensure_exists=True, app=False).user_runtime_dir)
    _HELD.extend(w for w in caught if issubclass(w.category, RuntimeDirWarning))
    return path


def runtime_base() -> Path:
    """This user's runtime directory (without our part), as platformdirs vets it: owned by the
    user, mode 0700, under parents nobody else can replace; created (0700) when it is the
    temporary-directory fallback. `PermissionError` when even that fallback is another user's.

    Why a candidate was passed over goes to the log: at debug level when `XDG_RUNTIME_DIR` is
    simply unset (common over ssh and in containers), as a warning when it is unusable.
    """
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", RuntimeDirWarning)
        path = Path(_platform(ensure_exists=True, app=False).user_runtime_dir)
    from mcp_sampling_proxy.log import get_logger  # start-up: structlog; cli gets here before it spawns the server

    log = get_logger("mcp_sampling_proxy.config.dirs")
    held, _HELD[:] = list(_HELD), []
    for warning in [*held, *caught]:
        message = str(warning.message)
        if not issubclass(warning.category, RuntimeDirWarning):  # another thread's, caught meanwhile: pass it on
            warnings.warn_explicit(warning.message, warning.category, warning.filename, warning.lineno)
        elif "XDG_RUNTIME_DIR is not set" in message:
            log.debug("runtime dir", reason=message)
        else:
            log.warning("XDG_RUNTIME_DIR is not used for console sockets", reason=message)
    return path


def home_relative(path: Path) -> str:
    """`path` with the home directory shown as `~`, for messages and docs."""
    home = Path.home()
    return f"~{os.sep}{path.relative_to(home)}" if path.is_relative_to(home) and path != home else str(path)
