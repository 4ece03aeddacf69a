"""Per-user directories through the real proxy and console processes: the state in XDG_STATE_HOME, the
console's runtime dir and its checks, and a proxy and a console that agree on it when nobody set
XDG_RUNTIME_DIR."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fakes.llm_server import FakeLLMServer
from helpers.support import (
    PY,
    RawHost,
    openai_policy,
    private_dir_of_mine,
    proxy_command,
    proxy_env,
    run_subcommand,
    write_policy,
)
from helpers.terminal import PtySession, terminal_env

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="the documented Linux (XDG) paths")


UID = os.getuid()


@pytest.fixture
def short() -> Iterator[Path]:
    """A directory with a short path: a socket's path must fit in 108 bytes, and pytest's tmp_path
    under xdist is too long for `.../mcp-sampling-proxy/PID.sock` below it."""
    path = Path(tempfile.mkdtemp(prefix="msp-", dir="/tmp"))
    yield path
    for child in path.rglob("*"):  # a squatted dir was chowned away: take it back to remove it
        with contextlib.suppress(OSError):
            os.lchown(child, UID, -1)
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def env(short: Path) -> dict[str, str]:
    """A proxy environment with its own home and temporary dir, and no XDG variable."""
    (short / "home").mkdir()
    (short / "tmp").mkdir()
    env = {k: v for k, v in proxy_env().items() if not k.startswith("XDG_")}
    return {**env, "HOME": str(short / "home"), "TMPDIR": str(short / "tmp"), "TEST_LLM_KEY": "k"}


def wait_for_socket(directory: Path, timeout: float = 20.0) -> Path:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        sockets = list(directory.glob("*.sock")) if directory.is_dir() else []
        if sockets:
            return sockets[0]
        time.sleep(0.05)
    raise AssertionError(f"no console socket appeared in {directory}")


def fallback_runtime_dir(env: dict[str, str]) -> Path:
    """Where the README says sockets go without a usable XDG_RUNTIME_DIR."""
    run_user = Path(f"/run/user/{UID}")
    return (
        run_user if private_dir_of_mine(run_user) else Path(env["TMPDIR"]) / f"runtime-{UID}"
    ) / "mcp-sampling-proxy"


def test_policy_error_suggests_an_audit_path_in_this_users_state_dir(tmp_path: Path) -> None:
    policy = write_policy(tmp_path, "audit:\n  content: full\n")
    checked = subprocess.run(
        [PY, "-m", "mcp_sampling_proxy", "policy", "check", policy],
        capture_output=True,
        text=True,
        timeout=60,
        env={**proxy_env(), "XDG_STATE_HOME": str(tmp_path / "xdg")},
    )
    assert checked.returncode != 0
    assert f"(e.g. {tmp_path / 'xdg' / 'mcp-sampling-proxy' / 'audit.jsonl'})" in checked.stdout + checked.stderr


def test_budgets_live_in_xdg_state_home(tmp_path: Path, short: Path, env: dict[str, str]) -> None:
    env = {**env, "XDG_STATE_HOME": str(tmp_path / "xdg-state"), "XDG_RUNTIME_DIR": str(short / "run")}
    (short / "run").mkdir(mode=0o700)
    rules = "rules:\n  - name: budgeted\n    action: allow\n    budget: {tokens: 300, per: 1d}\n"
    with FakeLLMServer("openai") as llm:
        policy = write_policy(tmp_path, openai_policy(llm.base_url, rules=rules))
        with RawHost(proxy_command(policy), env, tmp_path / "stderr.log") as host:
            host.initialize()
            answer = host.request("tools/call", {"name": "sample", "arguments": {"prompt": "hi"}})
    assert "error" not in answer and not answer["result"].get("isError"), answer
    state = tmp_path / "xdg-state" / "mcp-sampling-proxy"
    assert stat.S_IMODE(state.stat().st_mode) == 0o700
    assert "budgeted" in (state / "budgets.json").read_text()
    assert not (Path(env["HOME"]) / ".local" / "state").exists()  # (~/.local/share holds the server's data dir)


def test_console_socket_goes_in_xdg_runtime_dir(tmp_path: Path, short: Path, env: dict[str, str]) -> None:
    (short / "run").mkdir(mode=0o700)
    env = {**env, "XDG_RUNTIME_DIR": str(short / "run")}
    with RawHost(proxy_command(), env, tmp_path / "stderr.log") as host:
        host.initialize()
        socket = wait_for_socket(short / "run" / "mcp-sampling-proxy")
        assert socket.name == f"{host.proc.pid}.sock"
        assert stat.S_IMODE(socket.parent.stat().st_mode) == 0o700
        assert stat.S_IMODE(socket.stat().st_mode) == 0o600


def test_without_xdg_runtime_dir_the_proxy_and_the_console_still_meet(tmp_path: Path, env: dict[str, str]) -> None:
    """A host may start the proxy without XDG_RUNTIME_DIR (it is set only in login sessions): the
    fallback must be found by a console run in another environment without it too."""
    expected = fallback_runtime_dir(env)
    schema = {"type": "object", "properties": {"age": {"type": "integer"}}, "required": ["age"]}
    console = PtySession(
        [PY, "-m", "mcp_sampling_proxy", "console"],
        {
            **{k: v for k, v in terminal_env().items() if not k.startswith("XDG_")},
            **{k: v for k, v in env.items() if k != "MCP_SAMPLING_PROXY_NO_TERMINAL"},
        },
    )
    try:
        with RawHost(proxy_command(), env, tmp_path / "stderr.log") as host:
            host.initialize()
            assert wait_for_socket(expected).name == f"{host.proc.pid}.sock"
            if expected.parent.name == f"runtime-{UID}":
                assert stat.S_IMODE(expected.parent.stat().st_mode) == 0o700
            console.read_until(b"attached")
            host.send(
                {
                    "jsonrpc": "2.0",
                    "id": 3,
                    "method": "tools/call",
                    "params": {"name": "elicit_form", "arguments": {"schema_json": json.dumps(schema)}},
                }
            )
            console.read_until(b"[a]nswer the form")
            console.type("a\n")
            console.read_until(b"age")
            console.type("7\n")
            response = host.wait_for(lambda m: m.get("id") == 3)
    finally:
        os.kill(console.pid, 2)
        console.finish()
    assert json.loads(response["result"]["content"][0]["text"]) == {"action": "accept", "data": {"age": 7}}


def test_an_xdg_runtime_dir_open_to_others_is_passed_over_with_a_warning(
    tmp_path: Path, short: Path, env: dict[str, str]
) -> None:
    shared = short / "shared-run"
    shared.mkdir()
    shared.chmod(0o755)  # the XDG spec: the runtime dir MUST be 0700 and the user's own
    env = {**env, "XDG_RUNTIME_DIR": str(shared)}
    with RawHost(proxy_command(), env, tmp_path / "stderr.log") as host:
        host.initialize()
        wait_for_socket(fallback_runtime_dir(env))
    assert not (shared / "mcp-sampling-proxy").exists()
    log = (tmp_path / "stderr.log").read_text()
    assert "XDG_RUNTIME_DIR is not used for console sockets" in log and "mode 0755" in log


@pytest.mark.parametrize("where", ["xdg", "fallback"])
def test_a_squatted_runtime_dir_is_a_clear_error(
    tmp_path: Path, short: Path, env: dict[str, str], where: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another user created the directory first (in /tmp anyone can): refused, naming it and the way out.
    The console runs in process, in the proxy's environment (it stops at the directory); the proxy as one."""
    if UID != 0:
        pytest.skip("chown to another user needs root (the suite runs as root in CI)")
    if where == "xdg":
        (short / "run").mkdir(mode=0o700)
        env = {**env, "XDG_RUNTIME_DIR": str(short / "run")}
        squatted = short / "run" / "mcp-sampling-proxy"
    else:
        if private_dir_of_mine(Path(f"/run/user/{UID}")):
            pytest.skip("/run/user/UID exists here: the temporary-directory fallback is not used")
        squatted = Path(env["TMPDIR"]) / f"runtime-{UID}"
    squatted.mkdir(mode=0o700)
    os.chown(squatted, 65534, 65534)
    for name in [n for n in os.environ if n.startswith("XDG_")]:
        monkeypatch.delenv(name)
    for name in ("HOME", "TMPDIR", "XDG_RUNTIME_DIR"):
        if name in env:
            monkeypatch.setenv(name, env[name])
    monkeypatch.setattr(tempfile, "tempdir", None)  # read again from TMPDIR, as a new process would
    console = run_subcommand(["console"], stdin="")
    assert console.returncode == 1
    assert str(squatted) in console.stderr and "65534" in console.stderr
    with RawHost(proxy_command(), env, tmp_path / "stderr.log") as host:
        host.initialize()
        echoed = host.request("tools/call", {"name": "echo", "arguments": {"text": "still relays"}})
    assert "still relays" in json.dumps(echoed)
    log = (tmp_path / "stderr.log").read_text()
    assert "companion console unavailable" in log and str(squatted) in log


def test_looking_for_the_default_policy_imports_no_logging_before_the_server_starts(tmp_path: Path) -> None:
    """Without --policy the command line looks for the default policy before it spawns the server;
    that lookup must not pull in structlog (~40 ms), or every such proxy's server starts later."""
    env = {k: v for k, v in proxy_env().items() if k != "MCP_SAMPLING_PROXY_CONFIG_DIR"}
    env.update(HOME=str(tmp_path), XDG_CONFIG_HOME=str(tmp_path / "config"))
    done = subprocess.run(
        [PY, "-X", "importtime", "-m", "mcp_sampling_proxy", "--no-terminal", "--", PY, "-c", ""],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    finished = [line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")]
    assert "mcp_sampling_proxy.config.dirs" in finished  # the default policy was looked for
    assert finished.index("mcp_sampling_proxy.transport.stdio") < finished.index("structlog")


def test_a_test_proxy_uses_the_tests_own_directories(tmp_path: Path, isolated_user_dirs: Path) -> None:
    """Every test has runtime, state and configuration directories of its own (conftest.py): a proxy a
    test starts with nothing set puts its console socket there, never where a console the user has
    open would see the suite's requests."""
    with RawHost(proxy_command(), proxy_env(), tmp_path / "stderr.log") as host:
        host.initialize()
        socket_path = wait_for_socket(isolated_user_dirs / "run" / "mcp-sampling-proxy")
        assert socket_path.name == f"{host.proc.pid}.sock"
        host.close_stdin()
        host.wait()
