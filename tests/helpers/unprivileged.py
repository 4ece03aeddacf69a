"""Running as an ordinary user (the suite runs as root in CI), and a key no built-in secret shape matches."""

from __future__ import annotations

import atexit
import functools
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

import pytest

from helpers.support import ROOT

# Matches none of the built-in secret shapes: only configured-key scrubbing can catch it.
KEY = "unpatterned-Key-Zq9xW3vB7nM2pL5kR8tY1uE4oI6a"


def runs_of(key: str, n: int = 8) -> list[str]:
    return [key[i : i + n] for i in range(len(key) - n + 1)]


def assert_no_run(text: str, key: str = KEY, where: str = "") -> None:
    leaked = [run for run in runs_of(key) if run in text]
    assert not leaked, f"{where}: 8-character runs of the key leaked: {leaked[:3]}"


def unprivileged_python() -> tuple[list[str], dict[str, str]]:
    """A command prefix that runs this Python as `nobody`, and the PYTHONPATH it needs; skip if none."""
    if os.geteuid() != 0:
        pytest.skip("needs root to drop to an ordinary user (as root, /proc reads are not refused)")
    found = _found_as_nobody()
    if isinstance(found, str):
        pytest.skip(found)
    prefix, env = found
    return list(prefix), dict(env)


@functools.cache
def _found_as_nobody() -> tuple[tuple[str, ...], tuple[tuple[str, str], ...]] | str:
    """The prefix and PYTHONPATH, or why there are none: asked once a worker, as the answer is the
    machine's (each probe starts Python as nobody and imports the proxy: about a second on a loaded core)."""
    setpriv = shutil.which("setpriv")
    if not setpriv:
        return "setpriv (util-linux) is not installed"
    drop = [setpriv, "--reuid=nobody", "--regid=nogroup", "--clear-groups"]
    paths = [str(ROOT), sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]]
    env = {"PYTHONPATH": os.pathsep.join(dict.fromkeys(paths))}
    major, minor = sys.version_info[:2]
    for python in (sys.executable, f"/usr/bin/python{major}.{minor}", f"/usr/local/bin/python{major}.{minor}"):
        probe = subprocess.run(
            [
                *drop,
                python,
                "-c",
                "import os, sys, mcp_sampling_proxy.commands.cli, httpx, mcp; "
                "sys.exit(not os.access(sys.executable, os.X_OK))",
            ],
            env={**os.environ, **env},
            capture_output=True,
            timeout=60,
            check=False,
        )
        if probe.returncode == 0:
            return tuple([*drop, python]), tuple(env.items())
    # The checkout or the venv sits where nobody cannot read (a private home): copy what the proxy
    # imports to a readable place and run it with the system's interpreter of the same version.
    readable = Path(tempfile.mkdtemp(prefix="keys-proc-lib-"))
    readable.chmod(0o755)
    atexit.register(shutil.rmtree, readable, True)
    for source in dict.fromkeys([str(ROOT / "mcp_sampling_proxy"), *paths[1:]]):
        if source.endswith("mcp_sampling_proxy"):
            shutil.copytree(source, readable / "mcp_sampling_proxy", dirs_exist_ok=True)
        else:
            shutil.copytree(
                source,
                readable,
                dirs_exist_ok=True,
                symlinks=True,
                ignore=shutil.ignore_patterns("__editable__*", "*.pth", "_pytest", "pytest*"),
            )
    env = {"PYTHONPATH": str(readable)}
    for python in (f"/usr/bin/python{major}.{minor}", f"/usr/local/bin/python{major}.{minor}"):
        probe = subprocess.run(
            [*drop, python, "-c", "import mcp_sampling_proxy.commands.cli, httpx, mcp"],
            env={**os.environ, **env},
            capture_output=True,
            timeout=60,
            check=False,
        )
        if probe.returncode == 0:
            return tuple([*drop, python]), tuple(env.items())
    return (
        f"no Python {major}.{minor} that user nobody can run (the venv's interpreter sits under a "
        f"private home directory and the system has no python{major}.{minor})"
    )
