"""The guard of tests/helpers/no_process.py: a unit test that starts a process fails, naming the command.

Nothing is started here: `sys.audit` raises the very events by which Python starts a process, with the
arguments they carry, and the guard cannot tell them from a real start. The whole guard runs on a small
suite of its own (pytester, in process), its `tests/unit` pointed at that suite's `unit/` folder.
"""

from __future__ import annotations

import sys

import pytest
from helpers import no_process

UNIT_TESTS = """
import sys

import pytest


def test_starts_a_command_and_swallows_the_error():
    try:
        sys.audit("subprocess.Popen", "/usr/bin/redis-server", ["redis-server", "--port", "0"], None, None)
    except Exception:
        pass


@pytest.fixture
def forked():
    sys.audit("os.fork")
    yield


def test_forks_in_its_setup(forked):
    pass


def test_starts_nothing():
    pass
"""
E2E_TEST = """
import sys


def test_an_e2e_test_may_start_processes():
    sys.audit("subprocess.Popen", "tmux", ["tmux", "new-session"], None, None)
"""


def test_the_suite_runs_the_guard(request: pytest.FixtureRequest) -> None:
    assert request.config.pluginmanager.has_plugin("helpers.no_process")
    assert no_process.is_unit(request.path) and not no_process.is_unit(no_process.ROOT / "tests" / "e2e" / "x.py")


@pytest.mark.parametrize(
    ("event", "args", "shown"),
    [
        ("subprocess.Popen", ("/usr/bin/python3", ["python3", "-m", "x", "a b"], None, None), "`python3 -m x 'a b'`"),
        ("subprocess.Popen", ("ls -l", None, None, None), "`ls -l`"),  # shell=True: a string, no args
        ("os.posix_spawn", (b"/bin/true", [b"true", b"-x"], {}), "`true -x`"),
        ("os.exec", ("/bin/sh", ["sh", "-c", "exit 3"], None), "`sh -c 'exit 3'`"),
        ("os.spawn", (0, "/bin/true", ["true"], {}), "`true`"),
        ("os.system", (b"make all",), "`make all`"),
        ("pty.spawn", (["bash", "-i"],), "`bash -i`"),
        ("os.fork", (), "a fork of the test process"),
        ("os.forkpty", (), "a fork of the test process"),
    ],
)
def test_each_way_to_start_a_process_is_named(event: str, args: tuple[object, ...], shown: str) -> None:
    assert event in no_process.EVENTS
    assert no_process.command(event, args) == shown


def test_a_start_is_recorded_with_where_it_was_made() -> None:
    watcher = no_process._WATCHER
    this_test, watcher.watch = watcher.watch, no_process.Watch("probe")  # this test's own watch, set aside
    try:
        sys.audit("subprocess.Popen", "/bin/true", ["true", "once"], None, None)
        sys.audit("os.posix_spawn", "/bin/true", ["true", "once"], {})
        sys.audit("open", "/dev/null", "r", 0)  # not a start
        probe = watcher.stop()
    finally:
        watcher.watch = this_test
    assert probe is not None and len(probe.started) == 2
    assert probe.started[0].startswith("`true once` (subprocess.Popen)")
    assert "tests/unit/ground/test_no_process.py:" in probe.started[0]  # the line that started it
    message = no_process.failure(probe)
    assert message.startswith("probe started a process, and tests under tests/unit start none:")
    assert "Move the test to tests/e2e" in message and "play it in process" in message


@pytest.fixture
def guarded(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    """A suite of its own whose `unit/` folder the guard watches (this test's own watch ends here: the
    guard has one watch at a time, and the inner suite's tests take it)."""
    monkeypatch.setattr(no_process, "UNIT", pytester.path / "unit")
    (pytester.path / "unit").mkdir()
    (pytester.path / "e2e").mkdir()
    return pytester


def test_a_unit_test_that_starts_a_process_fails_even_when_it_swallows_the_error(guarded: pytest.Pytester) -> None:
    (guarded.path / "unit" / "test_starts.py").write_text(UNIT_TESTS)
    (guarded.path / "e2e" / "test_e2e_starts.py").write_text(E2E_TEST)
    result = guarded.runpytest_inprocess("-p", "helpers.no_process", "-p", "no:xdist", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=2, failed=1, errors=1)
    out = result.stdout.str()
    assert "test_starts_a_command_and_swallows_the_error (call) started a process" in out
    assert "`redis-server --port 0` (subprocess.Popen)" in out
    assert "test_forks_in_its_setup (setup) started a process" in out and "a fork of the test process" in out
    assert "Move the test to tests/e2e" in out


def test_a_unit_module_that_starts_a_process_when_imported_fails_to_collect(guarded: pytest.Pytester) -> None:
    (guarded.path / "unit" / "test_at_import.py").write_text(
        'import sys\n\nsys.audit("os.system", b"make fixtures")\n\n\ndef test_never_run():\n    pass\n'
    )
    result = guarded.runpytest_inprocess("-p", "helpers.no_process", "-p", "no:xdist", "-p", "no:cacheprovider")
    result.assert_outcomes(errors=1)
    assert "importing unit/test_at_import.py started a process" in result.stdout.str()
    assert "`make fixtures` (os.system)" in result.stdout.str()
