"""What the benchmarks read of processes in /proc: their children and their CPU time.

A module beside the scripts (running `python bench/NAME.py` puts bench/ on `sys.path`); /proc/N/stat
is read rather than /proc/N/task/*/children, so a non-dumpable process (the proxy) is seen too.
"""

from __future__ import annotations

import contextlib
from pathlib import Path


def children_map() -> dict[int, list[int]]:
    """Every process's children, by parent pid, read once."""
    kids: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, ValueError, IndexError):
                stat = (entry / "stat").read_text()
                ppid = int(stat[stat.rindex(")") + 2 :].split()[1])
                kids.setdefault(ppid, []).append(int(entry.name))
    return kids


def children(pid: int) -> set[int]:
    """The direct children of `pid`."""
    return set(children_map().get(pid, []))


def descendants(pid: int, kids: dict[int, list[int]] | None = None) -> list[int]:
    """Every process below `pid` (from `kids`, a `children_map()`, when given)."""
    kids = children_map() if kids is None else kids
    found, todo = [], list(kids.get(pid, []))
    while todo:
        p = todo.pop()
        found.append(p)
        todo.extend(kids.get(p, []))
    return found


def cpu_ns(pid: int) -> int:
    """On-CPU time of a process's live threads (/proc/PID/task/*/schedstat), in ns."""
    total = 0
    with contextlib.suppress(OSError):
        for task in Path(f"/proc/{pid}/task").iterdir():
            with contextlib.suppress(OSError, ValueError):
                total += int((task / "schedstat").read_text().split()[0])
    return total


def cpu_ticks(pid: int) -> tuple[int, int]:
    """(utime, stime) of a process, all its threads, exited ones included (/proc/PID/stat), in clock ticks."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]), int(fields[12])  # fields 14 and 15 of stat(5)
