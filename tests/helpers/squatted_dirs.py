"""A console runtime directory someone else prepared, each way it can be: another user's, a symlink, a file,
one others can read. What the proxy and `console` must refuse to use, and say why."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

# (how the directory is squatted, what the refusal says)
SQUATS = [
    ("other-user", "belongs to uid 65534"),
    ("symlink", "symbolic link"),
    ("file", "not a directory"),
    ("mode", "chmod 700"),
]


def squat(run_dir: Path, kind: str) -> None:
    if kind == "other-user":
        if os.getuid() != 0:
            pytest.skip("chown to another user needs root (the suite runs as root in CI)")
        run_dir.mkdir(mode=0o700)
        os.chown(run_dir, 65534, 65534)
    elif kind == "symlink":
        (run_dir.parent / "elsewhere").mkdir(mode=0o700)
        run_dir.symlink_to(run_dir.parent / "elsewhere")
    elif kind == "file":
        run_dir.write_text("")
    else:
        run_dir.mkdir(mode=0o755)
        run_dir.chmod(0o755)
