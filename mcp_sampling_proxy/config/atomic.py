"""Replace a file's content in one step: the policy `init` writes, host configs, backups, logins."""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path


def write_atomic(path: Path, data: bytes, *, mode: int | None = None) -> None:
    """Replace `path`'s content in one step (a symlinked config keeps its link), keeping its mode."""
    real = Path(os.path.realpath(path))
    if mode is None:
        try:
            mode = real.stat().st_mode & 0o777
        except FileNotFoundError:
            mode = 0o600
    fd, tmp = tempfile.mkstemp(prefix=f".{real.name}.", suffix=".tmp", dir=real.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, real)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
