"""Shared pytest configuration and fixtures."""

import contextlib
import fcntl
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

# The suite writes bytecode even where PYTHONDONTWRITEBYTECODE is set (some machines and CI images set it):
# without it every xdist worker compiles and assertion-rewrites every test module again at each run (9 s of
# CPU per worker instead of 3.6 s to collect), and every proxy and server the tests start compiles the
# package's changed modules again. What is written goes to __pycache__ (git ignores it); the processes the
# tests start still run with the variable as it was, and read what was written here.
sys.dont_write_bytecode = False

import pytest  # noqa: E402 (imports below the bytecode setting, so that what they load is written too)
import structlog  # noqa: E402
from fakes.llm_server import FakeLLMServer  # noqa: E402
from helpers.support import free_port  # noqa: E402
from helpers.warm import end_warm_servers  # noqa: E402

# fixtures and plugins kept in tests/helpers (one conftest for the suite, so mypy sees one module of that name):
# no_process fails a unit test that starts a process; pytester runs that guard on a suite of its own
pytest_plugins = [
    "helpers.browser",
    "helpers.doctoring",
    "helpers.no_process",
    "helpers.tmux_screen",
    "helpers.untouched_home",
    "pytester",
]
TESTS = Path(__file__).resolve().parent
KINDS = ("unit", "e2e", "security", "conformance")  # the folders under tests/, each a marker (pyproject.toml)


def pytest_configure(config: pytest.Config) -> None:
    """A suite started in the background (`... &` in a script, nohup) ignores SIGINT, SIGQUIT or SIGHUP,
    and every process it starts inherits that: a console or `audit tail -f` that a test stops as a
    person would, with Ctrl-C's signal, never stops, and the test waits on it for ever. The terminal's
    defaults are restored here, in the controller and in each xdist worker."""
    for sig, handler in (
        (signal.SIGINT, signal.default_int_handler),
        (signal.SIGQUIT, signal.SIG_DFL),
        (signal.SIGHUP, signal.SIG_DFL),
    ):
        if signal.getsignal(sig) == signal.SIG_IGN:
            signal.signal(sig, handler)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark each test with its folder's kind, so `pytest -m unit` (or `-m "not conformance"`) selects by it."""
    for item in items:
        kind = item.path.resolve().relative_to(TESTS).parts[0]
        if kind in KINDS:
            item.add_marker(kind)


@pytest.fixture(autouse=True)
def loggers_never_cached(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A command's `main()` run in process configures structlog to cache each logger on first use; a
    module's logger cached then keeps that configuration for the rest of the worker, and a later test's
    `capture_logs` sees nothing of it. Tests share one process, so nothing is cached in it, and the
    configuration a test leaves (a `main()` at `--log-level warning` filters out info) is undone after it."""
    real = structlog.configure
    before = structlog.get_config()

    def configure(**settings: Any) -> None:
        real(**{**settings, "cache_logger_on_first_use": False})

    monkeypatch.setattr(structlog, "configure", configure)
    yield
    real(**before)


def private_user_dirs(patch: pytest.MonkeyPatch) -> Path:
    """Set (with `patch`) a home and configuration, state, data and runtime directories made for the caller,
    under a short /tmp path (console sockets live in the runtime dir, and a Unix socket's path is limited to 107
    bytes), and unset the user's own keys and proxy settings (and turn the warm start off); returns their parent."""
    for name in list(os.environ):
        if name.startswith(("MCP_SAMPLING_PROXY_", "OPENAI_", "ANTHROPIC_")):
            patch.delenv(name)
    patch.setenv("PYTHON_KEYRING_BACKEND", "keyring.backends.fail.Keyring")
    patch.setenv("MCP_SAMPLING_PROXY_WARM_START", "off")  # no proxy a test starts leaves a warm start server
    base = Path(tempfile.mkdtemp(prefix="msp-"))
    for variable, name in (
        ("XDG_CONFIG_HOME", "config"),
        ("XDG_STATE_HOME", "state"),
        ("XDG_RUNTIME_DIR", "run"),
        ("XDG_DATA_HOME", "data"),  # sandboxed servers' data directories
        ("HOME", "home"),
    ):
        (base / name).mkdir(mode=0o700)
        patch.setenv(variable, str(base / name))
    return base


@pytest.fixture(scope="session", autouse=True)
def no_warm_server_outlives_the_session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """A proxy a test starts with the warm start on (a host's own environment, tests/e2e/test_warm_start.py)
    leaves a warm start server, which ends when its runtime directory goes, or after 30 idle minutes: one
    whose directory is in this worker's tmp_path (kept after the test) is ended with the worker."""
    yield
    end_warm_servers(tmp_path_factory.getbasetemp())


@pytest.fixture(scope="session", autouse=True)
def isolated_user_dirs_of_the_session() -> Iterator[Path]:
    """What `isolated_user_dirs` gives each test, for what is made before any test's own exist: a fixture wider
    than one test (a module's one proxy, `serve` or LLM) starts its processes with the environment of that
    moment, and they must not find the user's directories either (a module's proxy once kept its sandboxed
    server's data directory in the real ~/.local/share)."""
    with pytest.MonkeyPatch.context() as patch:
        base = private_user_dirs(patch)
        try:
            yield base
        finally:
            shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(autouse=True)
def isolated_user_dirs(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Every test runs with a home and configuration, state, data and runtime directories of its own, never
    the user's: a console the user has open must not see the suite's requests, and the suite must not read
    the user's policy, approvals, tool pins or budgets. The home too, since a host passes a server only a few
    variables (HOME, PATH, ...), so a proxy a host under test starts finds its directories from HOME. The
    user's own keys and proxy settings are unset (tests that need them set them), and no keyring is the
    user's: stored logins go to files (a test of the keyring path names its own backend), and keyring's
    search for a backend, which runs ldconfig and gcc, never runs."""
    base = private_user_dirs(monkeypatch)
    try:
        yield base
    finally:
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def open_tmp() -> Iterator[Path]:
    """A directory an ordinary user (tests drop to `nobody` as root) and the test can both write: the
    tests' own tmp_path is root's, 0700."""
    path = Path(tempfile.mkdtemp(prefix="msp-open-"))
    path.chmod(0o777)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def alone_as_nobody(testrun_uid: str) -> Iterator[None]:
    """One such test at a time across the xdist workers, and no test of `among_others_as_nobody` beside it:
    tests that run a hostile server unconfined as an ordinary user (it reads the pipes, taking what is in
    them, and paints the terminals of every process of that user)."""
    with _nobody_lock(testrun_uid, fcntl.LOCK_EX):
        yield


@pytest.fixture
def among_others_as_nobody(testrun_uid: str) -> Iterator[None]:
    """Tests that run processes as an ordinary user but nothing hostile unconfined (a hostile server in
    the sandbox, which reaches no other process; a well-behaved one): any number at once, none beside a
    test of `alone_as_nobody`, whose server would read their pipes."""
    with _nobody_lock(testrun_uid, fcntl.LOCK_SH):
        yield


@contextlib.contextmanager
def _nobody_lock(testrun_uid: str, how: int) -> Iterator[None]:
    path = Path(tempfile.gettempdir()) / f"mcp-sampling-proxy-tests-{testrun_uid}.nobody.lock"
    with path.open("a") as lock:
        fcntl.flock(lock, how)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


@pytest.fixture
def anyio_backend() -> str:
    """Run ``@pytest.mark.anyio`` tests on asyncio only (the proxy targets asyncio)."""
    return "asyncio"


@pytest.fixture
def llm() -> Iterator[FakeLLMServer]:
    """A loopback LLM server speaking the OpenAI wire format."""
    with FakeLLMServer("openai") as server:
        yield server


@pytest.fixture
def no_proxy_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    """No proxy named by the environment (this machine's own would route a test's loopback LLM through it);
    a test that wants one sets it."""
    for name in ("http_proxy", "https_proxy", "all_proxy", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.upper(), raising=False)


@pytest.fixture
def llm_key(monkeypatch: pytest.MonkeyPatch) -> None:
    """TEST_LLM_KEY set in this process, for a proxy run in process whose policy names it (`api_key_env`)."""
    monkeypatch.setenv("TEST_LLM_KEY", "sk-test")


@pytest.fixture
def dirs(tmp_path: Path) -> dict[str, str]:
    """Private runtime (console sockets) and state (approvals, budgets) dirs, and a test key."""
    return {
        "MCP_SAMPLING_PROXY_RUNTIME_DIR": str(tmp_path / "run"),
        "MCP_SAMPLING_PROXY_STATE_DIR": str(tmp_path / "state"),
        "TEST_LLM_KEY": "k",
    }


@pytest.fixture
def redis_url(tmp_path: Path) -> Iterator[str]:
    """A private redis-server on a free loopback port (the Debian package; .ci/run installs it)."""
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.skip("redis-server is not installed (.ci/run installs the Debian package redis-server)")
    port = free_port()
    server = subprocess.Popen(
        [
            binary,
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(tmp_path),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.5) as conn:
                    conn.sendall(b"PING\r\n")
                    if conn.recv(16).startswith(b"+PONG"):
                        break
            except OSError:
                pass
            if time.monotonic() > deadline or server.poll() is not None:
                pytest.fail("redis-server did not start")
            time.sleep(0.05)
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        server.terminate()
        server.wait(10)
