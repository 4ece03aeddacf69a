"""The package runners a server may be started by (npx, uvx, pipx, pnpm dlx, bunx): where each keeps the
packages it runs, and the variables that move that place.

A runner's cache runs as the user later: `npx some-server` runs what `~/.npm/_npx` holds for it without
fetching it again, and `uvx` reuses the environments in uv's cache. A server that could write the user's
cache could put its code in every package the user (or another server, with other grants) runs from it.
So no grant may reach the user's runner caches (transport/grants.py), and a sandboxed server started by
a runner gets a cache of its own (config/dirs.py `server_cache_dir`), named in the runner's variables.
That cache starts empty: the server's first start downloads its packages, from the runner's registry.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

from msgspec import Struct


class Runner(Struct, frozen=True):
    """A package runner: the variables that name where it keeps what it runs, and where that is when none
    is set."""

    what: str  # what those places are, for messages
    # (variable, a folder of the server's own runner cache): npm reads its variable in either case; uvx
    # makes its tool directory and `pipx run` its bin and man directories, even for what they do not install
    variables: tuple[tuple[str, str], ...]
    registry: tuple[str, ...]  # the hosts it downloads from: a server's own cache starts empty
    in_home: tuple[str, ...] = ()  # its default places, under the home directory
    in_cache_home: tuple[str, ...] = ()  # ... under $XDG_CACHE_HOME (else ~/.cache)
    # with no network: run from the cache at once, or fail at once, rather than retry the registry for a
    # minute at every start (npx -y asks it each time)
    offline: tuple[tuple[str, str], ...] = ()


NPM_REGISTRY = ("registry.npmjs.org",)
PYPI = ("pypi.org", "files.pythonhosted.org")
NPM = Runner(
    "npm's cache: npx runs the packages in it as you",
    (("npm_config_cache", "npm"), ("NPM_CONFIG_CACHE", "npm")),
    NPM_REGISTRY,
    in_home=(".npm",),
    offline=(("npm_config_offline", "true"),),
)
UV = Runner(
    "uv's cache and tools: uvx runs what they hold as you",
    (("UV_CACHE_DIR", "uv-cache"), ("UV_TOOL_DIR", "uv-tools")),
    PYPI,
    in_home=(".local/share/uv",),
    in_cache_home=("uv",),
    offline=(("UV_OFFLINE", "1"),),
)
PIPX = Runner(
    "pipx's home: it runs the programs in it as you",
    # (and uv's: pipx installs with uv where it finds it)
    (("PIPX_HOME", "pipx"), ("PIPX_BIN_DIR", "pipx/bin"), ("PIPX_MAN_DIR", "pipx/man"), *UV.variables),
    PYPI,
    in_home=(".local/share/pipx", ".local/pipx"),
)
PNPM = Runner(
    "pnpm's store and cache: pnpm dlx runs the packages in them as you",
    (
        ("npm_config_store_dir", "pnpm-store"),
        ("npm_config_cache_dir", "pnpm-cache"),
        ("npm_config_state_dir", "pnpm-state"),
    ),
    NPM_REGISTRY,
    in_home=(".local/share/pnpm",),
    in_cache_home=("pnpm",),
    offline=(("npm_config_offline", "true"),),
)
BUN = Runner(
    "bun's cache: bunx runs the packages in it as you",
    (("BUN_INSTALL_CACHE_DIR", "bun"),),
    NPM_REGISTRY,
    in_home=(".bun/install/cache",),
)

BY_COMMAND: dict[str, Runner] = {
    **{"npx": NPM, "npm": NPM, "uvx": UV, "uv": UV, "pipx": PIPX},
    **{"pnpm": PNPM, "pnpx": PNPM, "bunx": BUN, "bun": BUN},
}


def runner_of(command: Sequence[str]) -> Runner | None:
    """The runner that starts `command` (also behind `/usr/bin/env [-i] [VAR=VALUE...]`), or None."""
    words = list(command)
    if words and os.path.basename(words[0]) == "env":
        words = [w for w in words[1:] if not w.startswith("-") and "=" not in w]
    return BY_COMMAND.get(os.path.basename(words[0])) if words else None


def shared_caches(environ: Mapping[str, str]) -> list[tuple[str, str]]:
    """The user's own runner caches, as `environ` places them: (path, what it is)."""
    home = os.path.normpath(environ.get("HOME") or os.path.expanduser("~"))
    cache_home = environ.get("XDG_CACHE_HOME") or os.path.join(home, ".cache")
    found: list[tuple[str, str]] = []
    for runner in (NPM, UV, PIPX, PNPM, BUN):
        places = [os.path.join(home, p) for p in runner.in_home]
        places += [os.path.join(cache_home, p) for p in runner.in_cache_home]
        places += [environ[v] for v, _ in runner.variables if os.path.isabs(environ.get(v) or "")]
        found += [(os.path.normpath(place), runner.what) for place in dict.fromkeys(places)]
    return found


def private_cache_variables(runner: Runner, cache: str) -> list[tuple[str, str]]:
    """What points `runner` at folders of `cache` (the server's own) instead of the user's places."""
    return [(variable, os.path.join(cache, folder)) for variable, folder in runner.variables]
