"""Where an audit log lives: its folder, the log and its lock file.

Lean on purpose (only `os` and `contextlib`): they are made before a sandboxed server's plan, which hides
only what exists. Made later, at the first record, they would be in the sight of every server planned
before: the log (its records hold other servers' and callers' requests) to read, the lock to hold.
"""

from __future__ import annotations

import contextlib
import os

LOCK_SUFFIX = ".lock"


def lock_path(path: str) -> str:
    """The lock file of the log at `path`: held while a record is appended or the log rotated."""
    return path + LOCK_SUFFIX


def make_place(path: str | None) -> None:
    """The log's folder (0700), the log and its lock file (0600), made when missing (nothing without a log).
    What cannot be made is left: the audit says why at its start, and refuses to go on without its log."""
    if not path:
        return
    with contextlib.suppress(OSError):
        folder = os.path.dirname(path)
        if folder:
            os.makedirs(folder, mode=0o700, exist_ok=True)
        for name in (path, lock_path(path)):
            os.close(os.open(name, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o600))
