"""The PATH a host started from the desktop gives the servers it starts, and where a bare command is found.

An app started from the Dock, Finder or an application menu does not run your shell's start-up files, so
a directory they add to PATH (~/.local/bin, Homebrew's, nvm's, pipx's) is not on the PATH the proxy and
its server get: a bare command your terminal finds fails there with "not found" (exit 127). `doctor`
judges a desktop host's entries with the smallest such PATH in common use on each OS, and `wrap` writes
the absolute path of a command that PATH lacks, so what they pass, the host finds.
"""

from __future__ import annotations

import os
import shutil
import sys

# The session PATH an app started from the desktop gets: launchd's default for apps on macOS; on Linux
# the system directories every desktop session has (what is added beyond them depends on the distribution
# and the session, so it is not counted on).
DESKTOP_PATHS = {
    "linux": "/usr/local/bin:/usr/bin:/bin",
    "macos": "/usr/bin:/bin:/usr/sbin:/sbin",
}


def desktop_path(platform: str | None = None) -> str | None:
    """The PATH a desktop app on `platform` (default: this machine's) starts servers with; None on Windows,
    where an app gets the user's PATH from the registry, as a new terminal does."""
    platform = platform or sys.platform
    if platform.startswith("win"):
        return None
    return DESKTOP_PATHS["macos" if platform == "darwin" else "linux"]


def is_bare(command: str) -> bool:
    """A command name a host looks up on PATH (no directory in it); a ${VAR} is the host's to expand."""
    return bool(command) and "${" not in command and os.sep not in command and not (os.altsep and os.altsep in command)


def find(command: str, search_path: str | None) -> str | None:
    """The executable `command` names on `search_path` (None: the default path), or None."""
    return shutil.which(command, path=search_path if search_path is not None else os.defpath)
