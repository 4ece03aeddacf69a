"""The suite fails when it changed the proxy's directories in the real user's home.

Every test gets directories of its own (conftest's `isolated_user_dirs`), but a process a test starts
can still find the real ones: a host passes a server only a few variables, HOME among them, so a proxy
started by a host under test once kept its tool pins in the real `~/.local/state` and the next run
read them. This plugin lists those directories (names, sizes, times) when the run starts and again when
it ends, in the controlling process only, and fails the run when anything there changed.
"""

from __future__ import annotations

import os
import pwd
from pathlib import Path

import pytest

APP = "mcp-sampling-proxy"
PLACES = (".config", ".local/state", ".local/share", ".cache")


def real_home() -> Path:
    """The home the password database gives this user: not $HOME, which the suite replaces."""
    return Path(pwd.getpwuid(os.getuid()).pw_dir)


DEPTH = 2  # state files, and each server's data directory: not what a server keeps inside its own


def listing(home: Path) -> dict[str, tuple[int, int]]:
    """The files and directories under the proxy's places in `home`, at most DEPTH levels down, with their
    size and modification time. Not deeper: a user's servers may keep tens of thousands of files in their
    data directories (a package runner's cache), and every run of the suite lists them twice."""
    seen: dict[str, tuple[int, int]] = {}
    for place in PLACES:
        top = home / place / APP
        for root, dirs, files in os.walk(top):
            depth = len(Path(root).relative_to(top).parts)
            for name in [*dirs, *files]:
                path = Path(root) / name
                try:
                    status = path.lstat()
                except FileNotFoundError:
                    continue
                seen[str(path)] = (status.st_size, status.st_mtime_ns)
            if depth + 1 >= DEPTH:
                dirs.clear()  # os.walk goes no deeper
        if top.exists():
            seen[str(top)] = (0, top.lstat().st_mtime_ns)
    return seen


def changes(before: dict[str, tuple[int, int]], after: dict[str, tuple[int, int]]) -> list[str]:
    """What differs between two listings, one line each."""
    lines = [f"new: {path}" for path in sorted(after.keys() - before.keys())]
    lines += [f"gone: {path}" for path in sorted(before.keys() - after.keys())]
    lines += [f"changed: {path}" for path in sorted(before.keys() & after.keys()) if before[path] != after[path]]
    return lines


def _controller(config: pytest.Config) -> bool:
    return not hasattr(config, "workerinput")  # an xdist worker has it


@pytest.hookimpl(tryfirst=True)
def pytest_sessionstart(session: pytest.Session) -> None:
    if _controller(session.config):
        session.config.stash[_BEFORE] = listing(real_home())


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    config = session.config
    if not _controller(config) or _BEFORE not in config.stash:
        return
    found = changes(config.stash[_BEFORE], listing(real_home()))
    if found:
        shown = "\n  ".join(found[:20]) + (f"\n  ... and {len(found) - 20} more" if len(found) > 20 else "")
        reporter = config.pluginmanager.get_plugin("terminalreporter")
        message = (
            f"the suite changed the proxy's directories in the real home {real_home()} (a process a test started "
            f"found them; give it the test's own HOME or directories), or a proxy of yours ran meanwhile:\n  {shown}"
        )
        if reporter is not None:
            reporter.ensure_newline()
            reporter.write_line(message, red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


_BEFORE = pytest.StashKey[dict[str, tuple[int, int]]]()
