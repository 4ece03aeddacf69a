"""The sandbox plan's looks at the filesystem that take more than one question: which paths exist, the git
repositories inside write grants (their hooks and configuration stay read-only), the files named after
one of the proxy's own (an audit log's rotations, lock and seal: hidden with it), and whether such a file
has a folder of its own.

Lean on purpose (only `os`): the early start asks a scan again as one question, its answer what the plan
reads of it (transport/plan_facts.py), before anything heavy is loaded.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable

GIT_RUNS_LATER = ("hooks", "config")
GIT_SCAN_DEPTH = 2  # .git directories looked for this deep inside a write grant ...
GIT_SCAN_DIRECTORIES = 400  # ... in at most this many directories of each (a start must not walk a disk)


def existing(paths: Iterable[str]) -> list[str]:
    """Absolute, resolved paths that exist (bwrap needs a mount point), in order, without repeats."""
    found: list[str] = []
    cwd = os.getcwd()
    for raw in paths:
        path = os.path.expanduser(raw)
        resolved = os.path.realpath(path if os.path.isabs(path) else os.path.join(cwd, path))
        if resolved not in found and resolved != "/" and os.path.lexists(resolved):
            found.append(resolved)
    return found


def git_protected(grants: Iterable[str]) -> list[str]:
    """The hooks and configuration of git repositories inside write grants (at most GIT_SCAN_DEPTH deep):
    they run as the user at the next `git` there, so they stay read-only."""
    found: list[str] = []
    for grant in existing(grants):
        level, budget = [grant], GIT_SCAN_DIRECTORIES
        for depth in range(GIT_SCAN_DEPTH + 1):
            below: list[str] = []
            for directory in level[:budget]:
                budget -= 1
                git = os.path.join(directory, ".git")
                if os.path.isdir(git):
                    found += [os.path.join(git, p) for p in GIT_RUNS_LATER if os.path.lexists(os.path.join(git, p))]
                if depth < GIT_SCAN_DEPTH and len(below) < budget:
                    with contextlib.suppress(OSError), os.scandir(directory) as entries:
                        below += [e.path for e in entries if e.is_dir(follow_symlinks=False) and e.name != ".git"]
            level = below
    return found


def beside(path: str) -> tuple[bool, list[str]]:
    """What the folder of `path` holds of it: whether nothing but it and the files named after it (a folder
    of its own, which can be hidden whole), and those files (NAME.1, NAME.lock, ...), sorted. One listing;
    (False, []) when the folder cannot be listed."""
    folder, name = os.path.split(path)
    try:
        names = os.listdir(folder or ".")
    except OSError:
        return False, []
    named_after = sorted(other for other in names if other.startswith(name + "."))
    alone = len(named_after) + (name in names) == len(names)
    return alone, [os.path.join(folder, other) for other in named_after]
