"""Files the user's proxies share with everything else running as the user, the governed server
included (the audit log, token budgets, remembered approvals, OAuth logins): a lock on them, and a
read of them, that end.

A lock held forever must cost a request an error, not hang it (or the relay) for good; a FIFO at the
path would block the open until a writer came, /dev/zero would never end, a huge file would be read
whole."""

from __future__ import annotations

import fcntl
import os
import stat
import time


class NotARegularFile(OSError):
    """What is at the path is not a regular file of a sane size (the message says which)."""


def open_regular(path: str | os.PathLike[str]) -> int:
    """A read-only descriptor of the regular file at `path` (else NotARegularFile). Symlinks are
    followed; O_NONBLOCK keeps the open of a FIFO from waiting for a writer."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise NotARegularFile(f"{path} is not a regular file")
    return fd


def read_regular(path: str | os.PathLike[str], max_bytes: int) -> bytes:
    """The bytes of the regular file at `path`, at most `max_bytes` (else NotARegularFile)."""
    fd = open_regular(path)
    try:
        chunks: list[bytes] = []
        size = 0
        while chunk := os.read(fd, 1 << 20):
            size += len(chunk)
            if size > max_bytes:
                raise NotARegularFile(f"{path} is over {max_bytes:,} bytes")
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


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
