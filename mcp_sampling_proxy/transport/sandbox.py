"""The governed server runs in a sandbox: what it cannot reach, it cannot forge, read or outlive.

The server runs as the same user as the proxy, so without a boundary it can read the proxy's
children's `/proc`, write the proxy's state (remembered approvals, budgets), open the user's
terminals and keep a daemon running after the proxy ends. On Linux the proxy starts it under
bubblewrap (`bwrap`, unprivileged user namespaces):

- its own PID namespace, in which it is process 1 (`--unshare-pid --as-pid-1`): it sees no other
  process, so neither the proxy nor the proxy's helpers (a CLI provider, `api_key_command`, the
  URL opener) nor their `/proc`; and when it ends, everything it started ends with it;
- `--die-with-parent`: nothing in it outlives the proxy;
- a new session and a fresh `/dev` without the user's terminals, and a private `/tmp` (where other
  programs keep sockets: tmux's, X11's);
- the proxy's own configuration, state and runtime directories, the policy file, the audit log and
  key files hidden (an empty directory or file in their place).

Everything else of the filesystem and the network stays as the server would see it directly,
unless the policy narrows it (`sandbox:`: paths to hide, to make read-only or writable, and the
network). Where bubblewrap cannot run (not Linux, `bwrap` missing, user namespaces disabled) the
server runs as before, and the proxy says so once at start (`sandbox: required` refuses instead).
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from mcp_sampling_proxy.config.dirs import APP_DIR, config_dir, runtime_base_quietly, state_dir
from mcp_sampling_proxy.config.sandbox_settings import SandboxSettings

RUNTIME_ENV = "MCP_SAMPLING_PROXY_RUNTIME_DIR"  # as approval/console/server.py reads it
PROBE_TIMEOUT = 5.0  # s: bwrap starts in milliseconds; one that hangs is treated as unusable


@dataclass(frozen=True)
class Plan:
    """How the server is started: the words before its command, or why it is not sandboxed."""

    prefix: tuple[str, ...]
    unavailable: str | None = None  # why there is no sandbox (None: sandboxed, or switched off)
    off: bool = False

    @property
    def active(self) -> bool:
        return bool(self.prefix)


@functools.lru_cache(maxsize=1)
def unavailable() -> str | None:
    """Why bubblewrap cannot sandbox here (None: it can). Run once per process, ~4 ms: a real start
    of `bwrap` is the only sure test (user namespaces may be off, or refused by a security module)."""
    if not sys.platform.startswith("linux"):
        return f"no sandbox for {sys.platform} yet (bubblewrap is Linux only; see SECURITY.md for macOS)"
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return "bwrap is not installed (Debian/Ubuntu: apt install bubblewrap; Fedora: dnf install bubblewrap)"
    true = shutil.which("true") or "/bin/true"
    try:
        done = subprocess.run(
            [bwrap, "--dev-bind", "/", "/", "--unshare-pid", "--as-pid-1", "--die-with-parent", true],
            capture_output=True,
            timeout=PROBE_TIMEOUT,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"bwrap could not be started ({exc})"
    if done.returncode != 0:
        why = done.stderr.decode("utf-8", "replace").strip().splitlines()
        return (
            f"bwrap cannot create a sandbox here ({why[-1] if why else f'exit {done.returncode}'}; "
            "unprivileged user namespaces may be disabled)"
        )
    return None


def plan(
    settings: SandboxSettings, hidden: Iterable[Path], cwd: str | None = None, command: Iterable[str] = ()
) -> Plan:
    """The bwrap words for a server under `settings`, hiding the proxy's own `hidden` paths. The
    server's working directory and the files its command names stay reachable when they are in
    /tmp (the server's own /tmp is private): a server started from there still starts."""
    if settings.mode == "off":
        return Plan((), off=True)
    why = unavailable()
    if why is not None:
        return Plan((), unavailable=why)
    bwrap = shutil.which("bwrap") or "bwrap"
    words = [
        bwrap,
        "--dev-bind",
        "/",
        "/",
        "--dev",
        "/dev",
        "--proc",
        "/proc",
        "--tmpfs",
        "/tmp",
        "--unshare-pid",
        "--as-pid-1",
        "--die-with-parent",
        "--new-session",
    ]
    if not settings.network:
        words.append("--unshare-net")
    cwd = cwd or os.getcwd()
    for path in _under_tmp([cwd, *command]):
        words += ["--bind", path, path]  # the server's own, as they would be directly
    for path in _existing(settings.read):
        words += ["--ro-bind", path, path]
    for path in _existing(settings.write):
        words += ["--bind", path, path]
    for path in _existing([*map(str, hidden), *settings.hide]):
        words += ["--tmpfs", path] if os.path.isdir(path) else ["--ro-bind", os.devnull, path]
    words += ["--chdir", cwd, "--"]
    return Plan(tuple(words))


def _under_tmp(paths: Iterable[str]) -> list[str]:
    """The top directories (or files) under /tmp that hold `paths`: the working directory and the
    paths a command names. The whole top entry, not the path alone: a virtual environment's `python`
    is a symlink whose `pyvenv.cfg` and `lib/` sit beside it, and a script imports its neighbours."""
    tmps = {"/tmp", os.path.realpath("/tmp")}
    tops: list[str] = []
    for raw in paths:
        if not raw.startswith("/"):
            continue
        path = os.path.normpath(raw)
        for tmp in tmps:
            if path.startswith(tmp + os.sep):
                top = os.path.join(tmp, path[len(tmp) + 1 :].split(os.sep, 1)[0])
                if os.path.lexists(top) and top not in tops:
                    tops.append(top)
    return tops


def _existing(paths: Iterable[str]) -> list[str]:
    """Absolute, resolved paths that exist (bwrap needs a mount point), in order, without repeats."""
    found: list[str] = []
    for raw in paths:
        path = Path(raw).expanduser()
        if not path.is_absolute():
            path = Path.cwd() / path
        try:
            resolved = str(path.resolve(strict=True))
        except (OSError, RuntimeError):
            continue
        if resolved not in found and resolved != "/":
            found.append(resolved)
    return found


_PATH_VALUE = re.compile(r"""(?m)^\s*(?:path|api_key_file)\s*:\s*['"]?([^'"\s#]+)""")


def proxy_paths(policy: str | None, named: Iterable[str] = ()) -> list[Path]:
    """The proxy's own places the server must not see: the policy file, the configuration, state and
    runtime directories (made now when missing, so they are hidden from the start), and `named`
    files (the audit log and its rotations, key files)."""
    found: list[Path] = []
    if policy:
        found.append(Path(policy))
    found.append(config_dir())
    with contextlib.suppress(OSError):
        found.append(state_dir(create=True))
    runtime = os.environ.get(RUNTIME_ENV)
    with contextlib.suppress(OSError, RuntimeError):
        runtime_path = Path(runtime) if runtime else runtime_base_quietly() / APP_DIR
        runtime_path.mkdir(mode=0o700, parents=True, exist_ok=True)
        found.append(runtime_path)
    for name in named:
        path = Path(name).expanduser()
        found.append(path)
        with contextlib.suppress(OSError):  # rotations, its lock and seal: NAME.1, NAME.lock, ...
            found += sorted(p for p in path.parent.iterdir() if p.name.startswith(path.name + "."))
    return found


def named_in_text(policy: str | None, text: str | None) -> list[str]:
    """Before the policy is parsed: the files it names (an audit log, key files), read off its text.
    A superset is harmless (hiding a file the server never needed); the parsed policy's exact list is
    compared afterwards (commands/cli.py)."""
    if not text:
        return []
    base = os.path.dirname(os.path.abspath(policy)) if policy else os.getcwd()
    found = []
    for raw in _PATH_VALUE.findall(text):
        path = os.path.expanduser(raw)
        found.append(path if os.path.isabs(path) else os.path.join(base, path))
    return found
