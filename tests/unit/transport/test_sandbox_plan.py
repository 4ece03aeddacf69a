"""The sandbox's plan, in process: what it grants, hides and refuses, read off the bwrap words it builds.
(Whether bwrap works here is the machine's question, not this module's: it is taken as yes.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from mcp_sampling_proxy.config.sandbox_settings import SandboxSettings
from mcp_sampling_proxy.config.settings import parse_settings
from mcp_sampling_proxy.transport import sandbox
from mcp_sampling_proxy.transport.grants import grant_problems
from mcp_sampling_proxy.transport.netns import EGRESS_PORT


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "home"
    for part in (".ssh", "notes/.git/hooks", "notes/sub/.git/hooks", ".config", ".local/share"):
        (home / part).mkdir(parents=True)
    for part in (".ssh/id_rsa", ".ssh/known_hosts", "notes/.git/config", ".bashrc"):
        (home / part).write_text("x")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_DATA_HOME", str(home / ".local" / "share"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(home / ".cache"))
    for variable in ("npm_config_cache", "NPM_CONFIG_CACHE", "UV_CACHE_DIR", "PIPX_HOME", "BUN_INSTALL_CACHE_DIR"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setattr(sandbox, "unavailable", lambda: None)
    return home


def pairs(words: tuple[str, ...], flag: str) -> list[str]:
    return [words[i + 1] for i, word in enumerate(words) if word == flag]


def settings_of(text: str, home: Path) -> SandboxSettings:
    return parse_settings(text, str(home / "policy.yaml")).sandbox.for_server("notes")


def test_everything_is_read_only_but_the_grants_and_the_data_directory(home: Path) -> None:
    plan = sandbox.plan(settings_of("sandbox:\n  servers:\n    notes: {write: [~/notes]}\n", home), [], name="notes")
    assert plan.prefix[1:4] == ("--ro-bind", "/", "/")
    writable = pairs(plan.prefix, "--bind")
    assert str(home / "notes") in writable
    data = dict(plan.env)[sandbox.DATA_ENV]
    assert data in writable and data.startswith(str(home / ".local" / "share" / "mcp-sampling-proxy" / "servers"))
    assert "--unshare-net" in plan.prefix and dict(plan.env)["HTTPS_PROXY"] == f"http://127.0.0.1:{EGRESS_PORT}"
    # the hooks and config of repositories inside the grant stay read-only, two levels deep
    read_only = pairs(plan.prefix, "--ro-bind")
    assert str(home / "notes" / ".git" / "hooks") in read_only and str(home / "notes" / ".git" / "config") in read_only
    assert str(home / "notes" / "sub" / ".git" / "hooks") in read_only


def test_secrets_are_hidden_and_a_read_grant_inside_one_shows_only_itself(home: Path) -> None:
    server = [str(home / "server.py")]  # (the home is in /tmp here: the sandbox shows it only when named)
    plan = sandbox.plan(settings_of("sandbox:\n  read: [~/.ssh/known_hosts]\n", home), [], name="notes", command=server)
    assert str(home / ".ssh") in pairs(plan.prefix, "--tmpfs")  # the directory stays hidden ...
    assert str(home / ".ssh" / "known_hosts") in pairs(plan.prefix, "--ro-bind")  # ... but for the one file
    plan = sandbox.plan(settings_of('sandbox:\n  read: ["~"]\n', home), [], name="notes", command=server)
    assert str(home / ".ssh") in pairs(plan.prefix, "--tmpfs")  # the home readable anyway: secrets stay hidden


def test_network_false_and_host(home: Path) -> None:
    off = sandbox.plan(settings_of("sandbox:\n  network: false\n", home), [], name="notes")
    assert "--unshare-net" in off.prefix and "HTTPS_PROXY" not in dict(off.env) and not off.relayed
    host = sandbox.plan(settings_of("sandbox:\n  network: host\n", home), [], name="notes")
    assert "--unshare-net" not in host.prefix and "HTTPS_PROXY" not in dict(host.env)


@pytest.mark.parametrize(
    ("grant", "said"),
    [
        ('"~"', "write: ~ holds ~/.bashrc, "),
        ("~/.ssh/keys", "is inside ~/.ssh (SSH's keys"),
        ("~/notes/../.config", "holds"),  # written another way, the same place
        ("~/proxy-state", "is the same as ~/proxy-state (the proxy's own"),
        # what a package runner runs later, without fetching it again
        ("~/.npm/_npx", "is inside ~/.npm (npm's cache: npx runs the packages in it as you)"),
        ("~/.cache", "holds ~/.cache/uv (uv's cache and tools: uvx runs what they hold as you)"),
        ("~/.local/share/pipx/venvs", "is inside ~/.local/share/pipx (pipx's home"),
        ("~/.bun", "holds ~/.bun/bin (a toolchain's programs: they run as you)"),
        ("~/.local/share/uv/tools", "is inside ~/.local/share/uv (uv's cache and tools"),
        ("~/.cache/pnpm/dlx", "is inside ~/.cache/pnpm (pnpm's store and cache"),
        ("~/.local/lib/python3.12/site-packages", "is inside ~/.local/lib (Python's user site-packages"),
        ("~/.cargo", "holds ~/.cargo/bin (a toolchain's programs"),
        ("~/.vscode", "holds ~/.vscode/extensions (editor extensions: they run as you)"),
    ],
)
def test_grants_that_reach_what_runs_later_or_the_proxys_own_are_refused(home: Path, grant: str, said: str) -> None:
    settings = settings_of(f"sandbox:\n  servers:\n    notes: {{write: [{grant}]}}\n", home)
    problems = grant_problems(settings, [home / "proxy-state"])
    assert len(problems) == 1 and problems[0].startswith("sandbox.servers.notes.write: ") and said in problems[0]


def test_a_symlink_to_the_home_directory_is_the_home_directory(home: Path) -> None:
    (home / "notes" / "up").symlink_to(home)
    settings = settings_of("sandbox:\n  servers:\n    notes: {write: [~/notes/up]}\n", home)
    assert "holds" in grant_problems(settings, [])[0]


def test_a_read_grant_never_shows_the_proxys_own_files(home: Path) -> None:
    """`read:` shows a secret back; inside the proxy's own state it would show its key: refused, and were the
    plan made anyway, nothing of the proxy's is bound back over its hiding."""
    state = home / ".ssh" / "proxy-state"  # the proxy's own, inside a hidden secret
    state.mkdir()
    (state / "integrity.key").write_text("k")
    settings = settings_of(f"sandbox:\n  servers:\n    notes: {{read: [{state / 'integrity.key'}]}}\n", home)
    (problem,) = grant_problems(settings, [state])
    assert problem.startswith("sandbox.servers.notes.read: ") and "(the proxy's own" in problem
    assert "a server never sees it" in problem
    plan = sandbox.plan(settings, [state], name="notes", command=[str(home / "server.py")])
    assert str(state / "integrity.key") not in pairs(plan.prefix, "--ro-bind")
    assert str(state) in pairs(plan.prefix, "--tmpfs")


def test_what_the_policy_hides_stays_hidden_with_the_data_directory_inside_it(home: Path) -> None:
    """`hide:` is never undone: a hidden directory that holds the server's data directory hides it too
    (the data directory is bound before the hiding and not again after it)."""
    server = [str(home / "server.py")]  # (the home is in /tmp here: the sandbox shows it only when named)
    plan = sandbox.plan(settings_of('sandbox:\n  hide: ["~/.local/share"]\n', home), [], name="notes", command=server)
    hidden = plan.prefix.index(str(home / ".local" / "share"))
    assert plan.prefix[hidden - 1] == "--tmpfs"
    folder = dict(plan.env)[sandbox.DATA_ENV]
    bound_after = [i for i, word in enumerate(plan.prefix) if word == folder and i > hidden]
    assert bound_after == [], f"{folder} is bound again over the hidden {home / '.local' / 'share'}"


USERS_CACHES = {
    "npx": ".npm",
    "uvx": ".cache/uv",
    "pipx": ".local/share/pipx",
    "bunx": ".bun/install/cache",
    "pnpm": ".local/share/pnpm",
}


@pytest.mark.parametrize(
    ("command", "variables"),
    [
        (["npx", "-y", "@acme/notes-server"], ["npm_config_cache", "NPM_CONFIG_CACHE"]),
        (["/usr/bin/env", "-i", "DEBUG=1", "uvx", "notes-server"], ["UV_CACHE_DIR", "UV_TOOL_DIR"]),
        (["pipx", "run", "notes-server"], ["PIPX_HOME"]),
        (["bunx", "notes-server"], ["BUN_INSTALL_CACHE_DIR"]),
        (["pnpm", "dlx", "notes-server"], ["npm_config_store_dir", "npm_config_cache_dir"]),
    ],
)
def test_a_server_started_by_a_package_runner_gets_a_cache_of_its_own(
    home: Path, command: list[str], variables: list[str]
) -> None:
    """The user's runner cache runs as the user later (npx runs ~/.npm/_npx's copy of a package without
    fetching it again): the server writes a cache of its own instead, named in the runner's variables, and
    other servers' caches are out of its sight."""
    runner = next(word for word in command if word in USERS_CACHES)
    (home / USERS_CACHES[runner]).mkdir(parents=True)
    plan = sandbox.plan(SandboxSettings(), [], name="notes", command=command)
    env = dict(plan.env)
    assert set(variables) <= set(env)
    folders = {Path(env[variable]).parent for variable in variables}  # folders of the server's own cache
    assert len(folders) == 1
    cache = str(folders.pop())
    servers = home / ".cache" / "mcp-sampling-proxy" / "servers"
    assert Path(cache).parent == servers and Path(cache).is_dir() and cache in plan.writable
    assert str(home / USERS_CACHES[runner]) not in pairs(plan.prefix, "--bind")
    other = dict(sandbox.plan(SandboxSettings(), [], name="other", command=command).env)[variables[0]]
    assert not other.startswith(cache) and out_of_sight(plan, other)  # one per server, another's not seen
    assert not out_of_sight(plan, cache)
    assert plan.registry  # for the start's word on `network: false` (its first start must download)


def out_of_sight(plan: sandbox.Plan, path: str) -> bool:
    """True when the last mount covering `path` hides it: a tmpfs over it or a folder above, or, in /tmp
    (private in the sandbox), no bind of it or above."""
    covering = [
        (flag, target)
        for flag, target in zip(plan.prefix, plan.prefix[1:], strict=False)
        if flag in ("--tmpfs", "--bind", "--ro-bind") and (path == target or path.startswith(target + "/"))
    ]
    covering = [(flag, target) for flag, target in covering if target != "/"]
    return not covering or covering[-1][0] == "--tmpfs"


def test_a_server_started_directly_gets_no_runner_cache(home: Path) -> None:
    plan = sandbox.plan(SandboxSettings(), [], name="notes", command=["python3", "server.py"])
    assert not {"npm_config_cache", "UV_CACHE_DIR", "PIPX_HOME"} & set(dict(plan.env))
    assert not any("/.cache/" in path for path in plan.writable)


@pytest.mark.parametrize(
    ("command", "offline"),
    [(["npx", "-y", "notes-server"], ("npm_config_offline", "true")), (["uvx", "notes-server"], ("UV_OFFLINE", "1"))],
)
def test_with_no_network_a_runner_is_told_to_work_offline(
    home: Path, command: list[str], offline: tuple[str, str]
) -> None:
    """`npx -y` asks its registry at every start: with no network it retried for a minute before it ran what
    its cache held (or failed). Told to work offline, it runs from its cache, or fails, at once; with a
    network it is not told."""
    closed = sandbox.plan(settings_of("sandbox:\n  network: false\n", home), [], name="notes", command=command)
    assert offline in closed.env
    open_ = sandbox.plan(
        settings_of("sandbox:\n  network: [registry.npmjs.org]\n", home), [], name="notes", command=command
    )
    assert offline not in open_.env
