"""A test under tests/unit that starts a process fails, naming what it started.

Unit tests run in process: they test one package's behaviour through its functions, its commands run
in process (`helpers.support.run_subcommand`) or the real relay played in memory (`helpers.playbook`).
A test that needs a process (the proxy as a command, a CLI it runs, a Redis server, a terminal) belongs
in tests/e2e, tests/security or tests/conformance. Without a guard the rule wears away one convenient
`subprocess.run` at a time, and the unit tier gets slow and flaky on a loaded machine.

So this plugin watches the audit events by which Python starts a process (`sys.addaudithook`:
subprocess, fork, exec, posix_spawn, os.system, pty.spawn, os.spawn*) while a test under tests/unit is
being set up, run and torn down, and while such a module is imported, and fails that test (or that
module's collection) with the command it started. It does not stop the start: code under test may catch
an error, and the test must fail all the same. A library that starts a process lazily (keyring's search
for a backend runs ldconfig and gcc, `platform` runs uname, `ctypes.util.find_library` runs ldconfig)
counts too: the test's setup must keep the proxy's code off that path (conftest sets
PYTHON_KEYRING_BACKEND), or the test is not a unit test.

An audit hook cannot be removed, and xdist runs tests in worker processes: each process that imports
this plugin adds one hook, which is idle except while a unit test (or module) of that process is watched.
"""

from __future__ import annotations

import shlex
import sys
import threading
import traceback
from collections.abc import Generator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

UNIT = Path(__file__).resolve().parents[1] / "unit"
ROOT = UNIT.parents[1]
EVENTS = frozenset(
    {
        "subprocess.Popen",  # subprocess, asyncio and anyio processes
        "os.posix_spawn",
        "os.fork",
        "os.forkpty",
        "os.exec",
        "os.system",
        "os.spawn",
        "pty.spawn",
    }
)


@dataclass
class Watch:
    """What a watched unit test (or module) started: one line per start, with where it was started."""

    what: str
    started: list[str] = field(default_factory=list)


class _Watcher:
    """The one audit hook of this process, and the watch it reports to (None: nothing watched)."""

    def __init__(self) -> None:
        self.watch: Watch | None = None
        self._lock = threading.Lock()
        sys.addaudithook(self._hook)

    def _hook(self, event: str, args: tuple[Any, ...]) -> None:
        watch = self.watch
        if watch is None or event not in EVENTS:
            return
        line = f"{command(event, args)} ({event}){where()}"
        with self._lock:
            if line not in watch.started:
                watch.started.append(line)

    def start(self, what: str) -> Watch:
        self.watch = Watch(what)
        return self.watch

    def stop(self) -> Watch | None:
        watch, self.watch = self.watch, None
        return watch if watch is not None and watch.started else None


def command(event: str, args: tuple[Any, ...]) -> str:
    """The command an audit event starts, as a shell would show it (shortened): the args of the event."""
    argv: Any = None
    if event == "subprocess.Popen":  # (executable, args, cwd, env)
        argv = args[1] if args[1] is not None else args[0]
    elif event in ("os.posix_spawn", "os.exec"):  # (path, argv, env)
        argv = args[1]
    elif event == "os.spawn":  # (mode, path, args, env)
        argv = args[2]
    elif event in ("os.system", "pty.spawn"):  # (command,), (argv,)
        argv = args[0]
    else:  # os.fork, os.forkpty: no command, the process runs this interpreter's code
        return "a fork of the test process"
    if isinstance(argv, bytes | str):
        text = argv.decode(errors="replace") if isinstance(argv, bytes) else argv
    elif isinstance(argv, Sequence):
        text = shlex.join(a.decode(errors="replace") if isinstance(a, bytes) else str(a) for a in argv)
    else:
        text = repr(argv)
    return f"`{text[:200]}{'...' if len(text) > 200 else ''}`"


def where() -> str:
    """The project's frames (tests and the package) that led to the start, innermost last: what a reader
    needs to find the line, a library's lazy start included. (Frames only: no source is read in the hook.)"""
    frames = [
        f"{Path(frame.f_code.co_filename).relative_to(ROOT)}:{line}"
        for frame, line in reversed(list(traceback.walk_stack(sys._getframe())))
        if frame.f_code.co_filename.startswith(f"{ROOT}/")
        and "/.venv/" not in frame.f_code.co_filename
        and frame.f_code.co_filename != __file__
    ]
    return f"\n      from {' > '.join(frames[-4:])}" if frames else ""


def is_unit(path: Path) -> bool:
    return path.resolve().is_relative_to(UNIT)


def failure(watch: Watch) -> str:
    started = "\n".join(f"  - {line}" for line in watch.started)
    return (
        f"{watch.what} started a process, and tests under tests/unit start none:\n{started}\n"
        "Move the test to tests/e2e (or tests/security, tests/conformance) if the process is the point, "
        "or play it in process: helpers.support.run_subcommand runs a subcommand, helpers.playbook.Playbook "
        "runs the real relay and services, tests/fakes serve on 127.0.0.1 from a thread."
    )


_WATCHER = _Watcher()  # per process: xdist's workers each import this plugin


def _watched(item: pytest.Item, phase: str) -> Generator[None, None, None]:
    if not is_unit(item.path):
        return (yield)
    _WATCHER.start(f"{item.nodeid} ({phase})")
    try:
        return (yield)
    finally:
        watch = _WATCHER.stop()
        if watch is not None:
            pytest.fail(failure(watch), pytrace=False)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Generator[None, None, None]:
    return (yield from _watched(item, "setup"))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, None, None]:
    return (yield from _watched(item, "call"))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Generator[None, None, None]:
    return (yield from _watched(item, "teardown"))


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(
    collector: pytest.Collector,
) -> Generator[None, pytest.CollectReport, pytest.CollectReport]:
    """A unit module's import (its module-level code) is watched too: a start fails its collection."""
    if not (isinstance(collector, pytest.Module) and is_unit(collector.path)):
        return (yield)
    _WATCHER.start(f"importing {collector.nodeid}")
    try:
        report = yield
    finally:
        watch = _WATCHER.stop()
    if watch is not None:
        report.outcome, report.longrepr, report.result = "failed", failure(watch), []
    return report
