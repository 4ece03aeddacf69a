"""Whether bubblewrap can sandbox here: a real start of `bwrap`, begun early so nobody waits for it.

User namespaces may be switched off, or refused by a security module, so the only sure test is to start
bwrap. It takes about 5 ms; `start_probe` begins it as soon as the command line is read, and the proxy
reads its policy meanwhile. This module imports nothing of the proxy's: it runs before anything else.
"""

from __future__ import annotations

import contextlib
import functools
import shutil
import subprocess
import sys

PROBE_TIMEOUT = 5.0  # s: bwrap starts in milliseconds; one that hangs is treated as unusable

_PROBE: list[subprocess.Popen[bytes]] = []  # the probe started early (start_probe), until it is read


def start_probe() -> None:
    """Start bubblewrap's check now, so that it runs while the proxy reads its policy: `unavailable`
    then finds it done (it costs a bwrap start, ~5 ms, that the server's start would otherwise wait for)."""
    if _PROBE or not sys.platform.startswith("linux") or unavailable.cache_info().currsize:
        return
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return
    with contextlib.suppress(OSError):
        _PROBE.append(
            subprocess.Popen(
                [bwrap, *_PROBE_WORDS, shutil.which("true") or "/bin/true"],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
            )
        )


_PROBE_WORDS = ("--ro-bind", "/", "/", "--unshare-pid", "--unshare-net", "--as-pid-1", "--die-with-parent")


@functools.lru_cache(maxsize=1)
def unavailable() -> str | None:
    """Why bubblewrap cannot sandbox here (None: it can). Run once per process, ~5 ms (or started early by
    `start_probe`): a real start of `bwrap` is the only sure test (user namespaces may be off, or refused
    by a security module)."""
    if not sys.platform.startswith("linux"):
        return f"no sandbox for {sys.platform} yet (bubblewrap is Linux only; see SECURITY.md for macOS)"
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return "bwrap is not installed (Debian/Ubuntu: apt install bubblewrap; Fedora: dnf install bubblewrap)"
    try:
        if _PROBE:
            probe = _PROBE.pop()
            _, stderr = probe.communicate(timeout=PROBE_TIMEOUT)
            code = probe.returncode
        else:
            done = subprocess.run(
                [bwrap, *_PROBE_WORDS, shutil.which("true") or "/bin/true"],
                capture_output=True,
                timeout=PROBE_TIMEOUT,
            )
            code, stderr = done.returncode, done.stderr
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"bwrap could not be started ({exc})"
    if code != 0:
        why = stderr.decode("utf-8", "replace").strip().splitlines()
        return (
            f"bwrap cannot create a sandbox here ({why[-1] if why else f'exit {code}'}; "
            "unprivileged user namespaces may be disabled)"
        )
    return None


def forget_probe() -> None:
    """The sandbox is off: end the probe started early, and reap it (no zombie left behind)."""
    while _PROBE:
        probe = _PROBE.pop()
        with contextlib.suppress(OSError):
            probe.kill()
        with contextlib.suppress(OSError, subprocess.TimeoutExpired):
            probe.communicate(timeout=PROBE_TIMEOUT)
