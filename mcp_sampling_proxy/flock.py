"""An exclusive `flock` that gives up.

The user's proxies share files (the audit log, token budgets, remembered approvals) under flock,
and so can anything else running as the user, the governed server included: a lock held forever
must cost a request an error, not hang it (or the relay) for good."""

from __future__ import annotations

import fcntl
import os
import time


def lock_within(fd: int, seconds: float, path: str | os.PathLike[str]) -> None:
    """Take an exclusive flock on fd, waiting at most `seconds`; TimeoutError (an OSError) after that."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return
    except BlockingIOError:
        pass
    deadline = time.monotonic() + seconds
    delay = 0.001
    while True:
        time.sleep(delay)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() >= deadline:
                raise TimeoutError(f"{path} has been locked by another process for over {seconds:g} s") from None
            delay = min(delay * 2, 0.05)
