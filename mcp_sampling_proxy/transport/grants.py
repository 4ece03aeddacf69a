"""What a sandboxed server is never granted, and what it does not see unless granted.

The sandbox (transport/sandbox.py) makes the filesystem read-only and grants writes; these lists say
where no grant may reach and what stays out of sight:

- `SECRETS`: credentials of the user's (keys, tokens, logins, browser profiles, password stores). A
  server does not see them unless its `read:` (or `write:`) names one.
- `RUNS_LATER`: places whose contents run as the user later, outside any sandbox (shell start-up files,
  autostart entries, systemd user units, programs on PATH, git and editor configuration, SSH's
  authorized keys, the hosts' MCP configurations, which start servers; the package runners' caches,
  config/runners.py). No write grant may be one of them, lie inside one, or hold one: a server that
  could write `~/.bashrc` owns the next login.
- the proxy's own files (policy, configuration, state, runtime, audit, key and secret files), given by
  the caller: hidden always, and never inside, around or equal to a grant, so no rename of a parent can
  put a file of the server's where the proxy reads.

A grant is compared by its path as written and as resolved (a symlink to the home directory is the home
directory), and a protected path counts whether or not it exists yet (a grant of `~` would let the
server create `~/.bashrc`).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path

from msgspec import Struct

from mcp_sampling_proxy.config.dirs import home_relative
from mcp_sampling_proxy.config.runners import shared_caches
from mcp_sampling_proxy.config.sandbox_settings import SandboxSettings

# (a path under the home directory, what it holds): hidden unless a server's `read:` names it
SECRETS: tuple[tuple[str, str], ...] = (
    (".ssh", "SSH keys"),
    (".gnupg", "GnuPG keys"),
    (".aws", "AWS credentials"),
    (".config/gcloud", "Google Cloud credentials"),
    (".azure", "Azure credentials"),
    (".kube", "Kubernetes credentials"),
    (".docker/config.json", "Docker registry credentials"),
    (".netrc", "login credentials"),
    (".git-credentials", "git credentials"),
    (".config/gh", "the GitHub CLI's token"),
    (".npmrc", "npm tokens"),
    (".pypirc", "PyPI tokens"),
    (".cargo/credentials.toml", "the crates.io token"),
    (".cargo/credentials", "the crates.io token"),
    (".password-store", "a password store"),
    (".local/share/keyrings", "keyrings"),
    (".local/share/kwalletd", "the KDE wallet"),
    (".mozilla", "Firefox profiles"),
    (".thunderbird", "Thunderbird profiles"),
    (".config/google-chrome", "Chrome profiles"),
    (".config/chromium", "Chromium profiles"),
    (".config/BraveSoftware", "Brave profiles"),
    (".config/microsoft-edge", "Edge profiles"),
    (".config/vivaldi", "Vivaldi profiles"),
    (".claude/.credentials.json", "Claude Code's login"),
    (".codex/auth.json", "Codex's login"),
    (".gemini/oauth_creds.json", "Gemini CLI's login"),
)

SHELL_START = "a shell start-up file: it runs as you at your next login"
# (a path under the home directory, what it is): never written by a server
RUNS_LATER: tuple[tuple[str, str], ...] = (
    *(
        (name, SHELL_START)
        for name in (
            ".bashrc",
            ".bash_profile",
            ".bash_login",
            ".bash_logout",
            ".profile",
            ".zshrc",
            ".zshenv",
            ".zprofile",
            ".zlogin",
            ".zlogout",
            ".kshrc",
            ".cshrc",
            ".tcshrc",
            ".config/fish",
            ".inputrc",
        )
    ),
    *(
        (name, "session start-up: it runs as you when you log in")
        for name in (".xprofile", ".xinitrc", ".xsession", ".xsessionrc", ".pam_environment")
    ),
    (".config/environment.d", "session environment: it runs as you when you log in"),
    (".config/plasma-workspace", "KDE session scripts: they run as you when you log in"),
    (".config/autostart", "autostart entries: they run as you when you log in"),
    (".config/autostart-scripts", "autostart scripts: they run as you when you log in"),
    (".config/systemd", "systemd user units: they run as you"),
    (".local/share/systemd", "systemd user units: they run as you"),
    (".local/share/applications", "desktop launchers: they run as you when opened"),
    (".local/bin", "programs on your PATH"),
    ("bin", "programs on your PATH"),
    *(
        (name, "a toolchain's programs: they run as you")
        for name in (
            ".cargo/bin",
            "go/bin",
            ".deno/bin",
            ".bun/bin",
            ".npm-global",
            ".yarn/bin",
            ".volta",
            ".nvm",
            ".pyenv",
            ".rbenv",
            ".asdf",
            ".sdkman",
            ".rustup",
            ".local/share/mise",
        )
    ),
    (".local/lib", "Python's user site-packages: a .pth file there runs at every Python start"),
    (".ipython", "IPython's start-up scripts: they run as you"),
    (".tmux.conf", "tmux's configuration: its commands run as you"),
    (".config/tmux", "tmux's configuration: its commands run as you"),
    (".vscode/extensions", "editor extensions: they run as you"),
    (".cursor/extensions", "editor extensions: they run as you"),
    (".gitconfig", "git's configuration: hooks and aliases run as you"),
    (".config/git", "git's configuration: hooks and aliases run as you"),
    (".ssh", "SSH's keys, config and authorized_keys"),
    (".gnupg", "GnuPG's keys and agent configuration"),
    (".vimrc", "an editor's start-up file: it runs as you"),
    (".vim", "an editor's start-up files: they run as you"),
    (".config/nvim", "an editor's start-up files: they run as you"),
    (".emacs", "an editor's start-up file: it runs as you"),
    (".emacs.d", "an editor's start-up files: they run as you"),
)

HOST_CONFIG = "a host's MCP configuration: it starts servers as you, and holds their tokens"
PROXY_OWN = "the proxy's own: what it trusts"
RUNTIME = "your session's sockets: the D-Bus session bus, keyring and agent sockets"


class Protected(Struct, frozen=True):
    """A path no grant may touch, or that is hidden by default; `what` says why, for messages."""

    path: str  # absolute, normalised
    what: str


def _home(environ: Mapping[str, str]) -> str:
    return os.path.normpath(environ.get("HOME") or str(Path.home()))


# the variables that move a host's configuration (hosts/registry.py: its `Place`s and base directories)
_MOVERS = ("HOME", "XDG_CONFIG_HOME", "CLAUDE_CONFIG_DIR", "CODEX_HOME", "CONTINUE_GLOBAL_DIR", "APPDATA")


def host_configs(environ: Mapping[str, str]) -> list[str]:
    """Every host's user-level MCP configuration file on this machine (hosts/registry.py)."""
    return list(_host_configs(tuple((name, environ.get(name)) for name in _MOVERS)))


@functools.lru_cache(maxsize=8)
def _host_configs(movers: tuple[tuple[str, str | None], ...]) -> tuple[str, ...]:
    from mcp_sampling_proxy.hosts.registry import HOSTS, config_path  # start-up: only with a sandbox

    environ = {name: value for name, value in movers if value is not None}
    found: list[str] = []
    for host in HOSTS.values():
        for place in host.places:
            if place.scope in ("user", "settings"):
                try:
                    path = str(config_path(host.name, place.scope, environ=environ, home=environ.get("HOME")))
                except Exception:  # a host without this scope on this system: nothing to protect
                    continue
                if path not in found:
                    found.append(path)
    return tuple(found)


def secrets(environ: Mapping[str, str]) -> list[Protected]:
    """What a server does not see unless granted: credentials, host configurations, the session's sockets."""
    home = _home(environ)
    found = [Protected(os.path.join(home, path), what) for path, what in SECRETS]
    found += [Protected(path, HOST_CONFIG) for path in host_configs(environ)]
    runtime = environ.get("XDG_RUNTIME_DIR")
    if runtime and os.path.isabs(runtime):
        found.append(Protected(os.path.normpath(runtime), RUNTIME))
    agent = environ.get("SSH_AUTH_SOCK")
    if agent and os.path.isabs(agent):
        found.append(Protected(os.path.normpath(agent), "the SSH agent's socket: it signs with your keys"))
    return found


def runs_later(environ: Mapping[str, str]) -> list[Protected]:
    """What no grant may touch, besides the proxy's own files."""
    home = _home(environ)
    found = [Protected(os.path.join(home, path), what) for path, what in RUNS_LATER]
    found += [Protected(path, HOST_CONFIG) for path in host_configs(environ)]
    found += [Protected(path, what) for path, what in shared_caches(environ)]
    return found


def _forms(path: str) -> set[str]:
    """A path as written and as resolved (symlinks followed as far as they exist)."""
    normal = os.path.normpath(path)
    return {normal, os.path.realpath(normal)}


def _within(inner: str, outer: str) -> bool:
    return inner == outer or inner.startswith(outer.rstrip(os.sep) + os.sep)


class Guards:
    """What no write grant may touch (what runs as the user later, and the proxy's `own` files), each
    resolved once (`_forms` follows symlinks: a look at the filesystem), to ask of many paths in a row: the
    grants of a policy, the folders on the way to a path a server was refused (sandbox_notes). What is there
    comes first: it says the most."""

    def __init__(self, environ: Mapping[str, str], own: Iterable[str] = ()):
        protected = runs_later(environ) + [Protected(path, PROXY_OWN) for path in own]
        protected.sort(key=lambda guard: not os.path.lexists(guard.path))
        self._guards = [(guard, _forms(guard.path)) for guard in protected]

    def clashes(self, grant: str) -> Iterator[tuple[Protected, str]]:
        """Each protected path a write grant of `grant` would meet, and how ("inside", "holds", ...)."""
        forms = _forms(grant)
        for guard, guard_forms in self._guards:
            clash = _clash_of(forms, guard_forms)
            if clash is not None:
                yield guard, clash


def grant_problems(
    settings: SandboxSettings, own: Iterable[str | os.PathLike[str]], environ: Mapping[str, str] | None = None
) -> list[str]:
    """What is wrong with the grants of `settings` (one sentence each, naming the grant): a write grant
    that is, holds or lies inside the proxy's `own` files or a place whose contents run as the user later
    (the home directory itself and `/` hold them all); a read grant that is, or lies inside, the proxy's
    own files (which it would show)."""
    environ = os.environ if environ is None else environ
    problems: list[str] = []
    owned = [os.path.normpath(os.fspath(path)) for path in own]
    for grant in dict.fromkeys(settings.read):  # a secret to show: never one of the proxy's own files
        shows = next(((p, c) for p in owned if (c := _clash(grant, p)) is not None and c != "holds"), None)
        if shows is not None:
            problems.append(
                f"{settings.where or 'sandbox'}.read: {home_relative(Path(grant))} is {shows[1]} "
                f"{home_relative(Path(shows[0]))} ({PROXY_OWN}): a server never sees it"
            )
    if not settings.write:
        return problems
    guards = Guards(environ, owned)
    where = f"{settings.where or 'sandbox'}.write"
    for grant in dict.fromkeys(settings.write):
        clashes = list(guards.clashes(grant))
        if not clashes:
            continue
        shown = "~" if os.path.normpath(grant) == _home(environ) else home_relative(Path(grant))
        inside = next(((g, c) for g, c in clashes if c != "holds"), None)
        if inside is not None:
            guard, clash = inside
            problems.append(
                f"{where}: {shown} is {clash} {home_relative(Path(guard.path))} ({guard.what}): "
                "a server may not write there"
            )
            continue
        groups: dict[str, list[str]] = {}  # what -> the paths of it, in order
        for guard, _ in clashes[:MAX_NAMED]:
            groups.setdefault(guard.what, []).append(str(home_relative(Path(guard.path))))
        named = [f"{', '.join(paths)} ({what})" for what, paths in groups.items()]
        more = f" and {len(clashes) - MAX_NAMED} more" if len(clashes) > MAX_NAMED else ""
        problems.append(
            f"{where}: {shown} holds {', '.join(named)}{more}: a server may not write there; "
            "grant the directories below it that the server needs instead"
        )
    return problems


MAX_NAMED = 3  # protected paths a refused grant names (then "and N more")


def _clash(grant: str, protected: str) -> str | None:
    """How a grant meets a protected path: "holds" (an ancestor, or the same), "inside", or None."""
    return _clash_of(_forms(grant), _forms(protected))


def _clash_of(grant_forms: Iterable[str], protected_forms: Iterable[str]) -> str | None:
    for g in grant_forms:
        for p in protected_forms:
            if _within(p, g):
                return "holds" if p != g else "the same as"
            if _within(g, p):
                return "inside"
    return None
