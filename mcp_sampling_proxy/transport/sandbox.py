"""The governed server runs in a sandbox that grants what it may do, rather than hiding a few things.

The server runs as the same user as the proxy. Hiding chosen paths under a writable home cannot hold:
whatever is writable can be renamed around a mount (the directory above the proxy's state, moved away
and replaced by one holding the server's own key and approvals). So on Linux the proxy starts it under
bubblewrap (`bwrap`, unprivileged user namespaces), by grant, as Flatpak and Anthropic's
sandbox-runtime do:

- the whole filesystem read-only; writable only its `write:` grants (transport/grants.py refuses a
  grant that holds or lies inside anything the proxy trusts or that runs as the user later), a data
  directory of its own (`$MCP_SERVER_DATA_DIR`) and, started by a package runner (npx, uvx), a cache
  of its own for it (config/runners.py: the user's runs as the user later);
- the proxy's own files (policy, configuration, state, runtime, audit, key and secret files) and the
  user's secrets (SSH and cloud keys, tokens, browser profiles, keyrings, the session bus) out of
  sight; a secret a server needs is granted with `read:`;
- its own network namespace: no loopback services of the user's, no abstract sockets; its way out is
  the proxy's filtering relay (transport/egress.py) on its own loopback, named in `HTTP(S)_PROXY`,
  which allows public hosts, or the listed ones (`network: [...]`), or none (`network: false`);
  `network: host` shares the user's network, unfiltered;
- its own PID namespace, in which it is process 1, `--die-with-parent`, a new session, a fresh
  `/dev` without the user's terminals and a private `/tmp`.

Where bubblewrap cannot run (not Linux, `bwrap` missing, user namespaces disabled) the server runs
unconfined, and the proxy says so once at start (`sandbox: required` refuses instead).
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from msgspec import Struct, field

from mcp_sampling_proxy.config.dirs import (
    APP_DIR,
    config_dir,
    runtime_base_quietly,
    server_cache_dir,
    server_data_dir,
    servers_cache_dir,
    state_dir,
)
from mcp_sampling_proxy.config.dirs import servers_data_dir as _servers_data_dir
from mcp_sampling_proxy.config.runners import private_cache_variables, runner_of
from mcp_sampling_proxy.config.sandbox_settings import Network, SandboxSettings
from mcp_sampling_proxy.transport.bwrap_probe import forget_probe, unavailable
from mcp_sampling_proxy.transport.grants import secrets
from mcp_sampling_proxy.transport.netns import EGRESS_PORT
from mcp_sampling_proxy.transport.plan_facts import files_beside, git_scan
from mcp_sampling_proxy.transport.plan_scans import existing as _existing

if TYPE_CHECKING:
    from mcp_sampling_proxy.transport.sandbox_notes import SandboxNotes

RUNTIME_ENV = "MCP_SAMPLING_PROXY_RUNTIME_DIR"  # as approval/console/server.py reads it
DATA_ENV = "MCP_SERVER_DATA_DIR"  # the server's own writable directory, as the server sees it
# what a sandboxed server's git repositories keep that runs as the user: read-only inside a write grant


class Plan(Struct, frozen=True):
    """How the server is started: the words before its command and what it is granted, or why it is not
    sandboxed."""

    prefix: tuple[str, ...]
    unavailable: str | None = None  # why there is no sandbox (None: sandboxed, or switched off)
    off: bool = False
    network: Network = field(default_factory=Network)
    env: tuple[tuple[str, str], ...] = ()  # variables the server gets besides the host's (proxy, data dir)
    writable: tuple[str, ...] = ()  # what it may write, for messages and doctor
    name: str = ""
    where: str = "sandbox"  # where its grants are written (sandbox.servers.NAME)
    registry: tuple[str, ...] = ()  # started by a package runner: the hosts it downloads from

    @property
    def active(self) -> bool:
        return bool(self.prefix)

    def notes(self) -> SandboxNotes | None:
        """Where this server's refusals are said (None when it is not sandboxed)."""
        if not self.active:
            return None
        from mcp_sampling_proxy.transport.sandbox_notes import SandboxNotes  # start-up: structlog, for a sandbox

        return SandboxNotes(self.name, self.where, offline=self.network.mode == "none")

    @property
    def relayed(self) -> bool:
        """True when the server's way out is the proxy's relay (a listener in its namespace, transport/netns.py)."""
        return self.active and self.network.mode == "relay"


def plan(
    settings: SandboxSettings,
    own: Iterable[Path],
    *,
    name: str,
    cwd: str | None = None,
    command: Sequence[str] = (),
    environ: Mapping[str, str] | None = None,
) -> Plan:
    """The bwrap words for the server `name` runs with `command` under `settings`: read-only but for its
    grants, the proxy's `own` paths and the user's secrets hidden. (Grants are checked before this:
    transport/grants.py.) The server's working directory and the files its command names stay
    reachable, read-only, when they are in /tmp (the server's own /tmp is private)."""
    if settings.mode == "off":
        forget_probe()
        return Plan((), off=True, name=name)
    why = unavailable()
    if why is not None:
        return Plan((), unavailable=why, name=name)
    environ = os.environ if environ is None else environ
    cwd = cwd or os.getcwd()
    words = [shutil.which("bwrap") or "bwrap", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
    words += ["--tmpfs", "/tmp", "--unshare-pid", "--as-pid-1", "--die-with-parent", "--new-session"]
    if settings.network.mode != "host":
        words.append("--unshare-net")
    data = _made(server_data_dir(name))
    runner = runner_of(command)
    cache = _made(server_cache_dir(name)) if runner is not None else None  # never the user's own
    writable = _existing([*settings.write, *(data or ()), *(cache or ())])
    tops = _under_tmp([cwd, *command], cwd, writable)
    for path in tops:
        words += ["--ro-bind", path, path]  # the server's own, as it would see them directly (read-only)
    for path in writable:
        words += ["--bind", path, path]
    for path in git_scan(settings.write):
        words += ["--ro-bind", path, path]
    sight = [*tops, *writable]
    # other servers' data and runner caches: not this one's to see (its own are bound again below)
    unshown = [str(p) for base in (_servers_data_dir(), servers_cache_dir()) for p in _made(base) or ()]
    unshown += [s.path for s in secrets(environ) if not _granted(s.path, settings.read)]
    unshown = [p for p in _existing(unshown) if _in_sight(p, sight)]
    kept = [p for p in _existing([*settings.hide, *map(str, own)]) if _in_sight(p, sight)]  # never shown again
    for path in [*unshown, *kept]:
        words += ["--tmpfs", path] if os.path.isdir(path) else ["--ro-bind", os.devnull, path]
    for path in writable:  # a grant inside a hidden directory (its data directory): there again, on top
        if _strictly_inside(path, unshown) and not _inside(path, kept):
            words += ["--bind", path, path]
    for path in _existing(settings.read):  # a secret granted inside a hidden one (~/.ssh/known_hosts): it alone
        if _strictly_inside(path, unshown) and not _inside(path, kept) and path not in writable:
            words += ["--ro-bind", path, path]
    words += ["--chdir", cwd, "--"]
    env = [(DATA_ENV, data[0])] if data else []
    if runner is not None and cache:
        env += private_cache_variables(runner, cache[0])
        env += list(runner.offline) if settings.network.mode == "none" else []
    if settings.network.mode == "relay":
        env += proxy_variables(EGRESS_PORT)
    return Plan(
        tuple(words),
        network=settings.network,
        env=tuple(env),
        writable=tuple(writable),
        name=name,
        where=settings.place(name),
        registry=runner.registry if runner is not None else (),
    )


def proxy_variables(port: int) -> list[tuple[str, str]]:
    """What tells a server's HTTP clients to go out through the relay (curl, Python's httpx, requests and
    urllib, Go, Rust's reqwest, npm, git; Node's own fetch with NODE_USE_ENV_PROXY, from Node 22.21)."""
    url = f"http://127.0.0.1:{port}"
    found = [(name, url) for name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy")]
    found += [(name, "localhost,127.0.0.1,::1") for name in ("NO_PROXY", "no_proxy")]
    return [*found, ("NODE_USE_ENV_PROXY", "1")]


def _granted(secret: str, read: Iterable[str]) -> bool:
    """True when a `read:` grant names the secret itself (an ancestor such as `~` does not: the home
    directory is readable anyway; a path inside it is shown alone, over the hidden secret)."""
    return any(os.path.normpath(os.path.expanduser(raw)) == secret for raw in read)


def _strictly_inside(path: str, directories: Iterable[str]) -> bool:
    return any(path != d and path.startswith(d.rstrip(os.sep) + os.sep) for d in directories)


def _inside(path: str, places: Iterable[str]) -> bool:
    """`path` is one of `places` or lies inside one."""
    return any(path == p or path.startswith(p.rstrip(os.sep) + os.sep) for p in places)


def _made(path: Path) -> tuple[str] | None:
    """`path` made (0700) when missing; None when it cannot be."""
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError:
        return None
    return (str(path),)


def _in_sight(path: str, tops: Iterable[str]) -> bool:
    """False for a path in /tmp outside the entries bound into the sandbox: its /tmp is private already."""
    for tmp in ("/tmp", os.path.realpath("/tmp")):
        if path.startswith(tmp + os.sep):
            return any(path == top or path.startswith(top + os.sep) for top in tops)
    return True


def _under_tmp(paths: Iterable[str], cwd: str, server_writes: Iterable[str]) -> list[str]:
    """The top directories (or files) under /tmp that hold `paths`: the working directory and the
    paths a command names. The whole top entry, not the path alone: a virtual environment's `python`
    is a symlink whose `pyvenv.cfg` and `lib/` sit beside it, and a script imports its neighbours. A
    relative path counts from `cwd`, and a path through a link counts where the link leads too (a
    checkout's `.venv` linking a virtual environment in another /tmp entry), but only through links the
    server cannot write: one it planted in its grants would bring into sight any /tmp entry it liked
    (a tmux socket's directory)."""
    tmps = {"/tmp", os.path.realpath("/tmp")}
    planted = list(server_writes)
    tops: list[str] = []
    for raw in paths:
        if not raw or raw.startswith("-"):
            continue
        path = os.path.normpath(os.path.join(cwd, raw))
        folder, name = os.path.split(path)
        beside = _followed(folder, planted)  # a venv's `python` links the base interpreter: its folder counts
        led = [_followed(path, planted), os.path.join(beside, name) if beside else None]
        for candidate in (path, *filter(None, led)):
            for tmp in tmps:
                if candidate.startswith(tmp + os.sep):
                    top = os.path.join(tmp, candidate[len(tmp) + 1 :].split(os.sep, 1)[0])
                    if os.path.lexists(top) and top not in tops:
                        tops.append(top)
    return tops


def _followed(path: str, planted: list[str], hops: int = 40) -> str | None:
    """Where `path` leads through its links, or None when a link on the way lies where the server can
    write (or there are too many)."""
    done = os.sep
    todo = path.strip(os.sep).split(os.sep)
    while todo:
        part = todo.pop(0)
        here = os.path.join(done, part)
        if not os.path.islink(here):
            done = here
            continue
        hops -= 1
        if hops < 0 or _inside(here, planted):
            return None
        target = os.path.join(done, os.readlink(here))
        todo = os.path.normpath(target).strip(os.sep).split(os.sep) + todo
        done = os.sep
    return os.path.normpath(done)


def log_plan(found: Plan) -> None:
    """Say at start how the server runs: what it is granted, or that it is not contained, and why."""
    from mcp_sampling_proxy.log import get_logger  # start-up: structlog, once logging is set up

    log = get_logger("mcp_sampling_proxy")
    if found.active:
        log.info(
            "server sandboxed (bubblewrap): read-only files but for its grants, your secrets and the proxy's "
            "own files out of sight, its own network, process namespace and /tmp, no terminals",
            writes=list(found.writable) or None,
            network=found.network.describe(),
        )
        if found.registry and found.network.mode == "none":
            log.warning(
                "the server is started by a package runner with network: false: the runner cannot reach its "
                "registry, and the server's own runner cache starts empty, so a first start fails (the "
                "runner is told to work offline: once a start with the network filled the cache, it runs "
                "from there)",
                fix=f"grant the registry: {found.where}.network: [{', '.join(found.registry)}]",
            )
    elif found.off:
        log.warning(
            "sandbox: off: the server runs as you, unconfined: it can write your files (~/.bashrc), read your "
            "keys, reach your local services, read this proxy's state and outlive the proxy"
        )
    else:
        log.warning(
            "the server runs without a sandbox: it can write your files (~/.bashrc), read your keys, reach "
            "your local services, read this proxy's state and outlive the proxy",
            why=found.unavailable,
            fix="install bubblewrap, or set sandbox: off to silence this",
        )


def policy_grant_problems(settings: SandboxSettings, policy: str | None, named: Iterable[str]) -> list[str]:
    """What is wrong with every write grant of the `sandbox:` section and its servers' entries (for
    `policy check` and `doctor`: nothing is made)."""
    from mcp_sampling_proxy.transport.grants import grant_problems  # (the hosts' registry)

    trusted = proxy_paths(policy, named, create=False)
    found: list[str] = []
    for entry in (settings, *settings.servers.values()):
        if entry.mode != "off":
            found += [p for p in grant_problems(entry, trusted) if p not in found]
    return found


class SandboxRefused(ValueError):
    """The server may not start as the policy says: a grant reaches what it must not, or `sandbox:
    required` where there is no sandbox. The message names the grant and the fix."""


def contain(
    settings: SandboxSettings,
    policy: str | None,
    named: Iterable[str],
    *,
    name: str,
    command: Sequence[str],
) -> Plan:
    """The plan for the server `name` under the policy's `settings` (`named`: every file the proxy trusts
    besides its directories and the policy: audit log, key, token and secret files); SandboxRefused when
    a grant would reach them, or what runs as the user later, or the sandbox is required and cannot run."""
    from mcp_sampling_proxy.transport.grants import grant_problems  # start-up: hosts' registry, with a sandbox

    contained = settings.for_server(name)
    if contained.mode == "off":
        forget_probe()
        return Plan((), off=True, name=name)
    trusted = proxy_paths(policy, named)
    if shutil.which("bwrap") is not None:  # (where there is no sandbox, nothing is made for one)
        for base in (_servers_data_dir(), servers_cache_dir()):  # made before the check looks above them (a
            _made(base)  # new home has no ~/.cache): else the next start, finding them, would not read as this one
    problems = grant_problems(contained, trusted)
    if problems:
        raise SandboxRefused("; ".join(problems))
    found = plan(contained, trusted, name=name, command=command)
    if contained.mode == "required" and not found.active:
        raise SandboxRefused(
            f"sandbox: required, but the server cannot be sandboxed here: {found.unavailable}; "
            "install bubblewrap, or set sandbox: auto to run it unconfined with a warning"
        )
    return found


def proxy_paths(policy: str | None, named: Iterable[str] = (), *, create: bool = True) -> list[Path]:
    """The proxy's own places the server must not see: the policy file, the configuration, state and
    runtime directories (made now when missing, so they are hidden from the start; not with `create`
    False, for a check), and `named` files (the audit log and its rotations, key, token and secret files).
    A named file in a folder of its own is hidden with its folder: a file made there while the server runs
    (the audit log's rotation, a key replaced by a rename) would be in sight past a mask of the file alone,
    which follows the file, not its name."""
    found: list[Path] = []
    if policy:
        found.append(Path(policy))
    found.append(config_dir())
    with contextlib.suppress(OSError):
        found.append(state_dir(create=create))
    runtime = os.environ.get(RUNTIME_ENV)
    with contextlib.suppress(OSError, RuntimeError):
        runtime_path = Path(runtime) if runtime else runtime_base_quietly() / APP_DIR
        if create:
            runtime_path.mkdir(mode=0o700, parents=True, exist_ok=True)
        found.append(runtime_path)
    for name in named:
        path = Path(name).expanduser()
        alone, named_after = files_beside(str(path))
        if alone:
            found.append(path.parent)
            continue
        found.append(path)
        found += [Path(other) for other in named_after]  # NAME.1, NAME.lock, ...
    return found
