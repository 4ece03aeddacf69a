"""How long a new proxy's environment (its keys, when they come in variables) is readable by a process
of the same user: from exec to the proxy's prctl(PR_SET_DUMPABLE, 0), after which /proc/PID/environ is
root's.

Watched from outside: the owner of /proc/PID/environ turns to root at that moment. Three cases, in turn:
Python alone making the same call first thing (the floor: the interpreter's own start-up, site-packages
included), the same with `-S` (no site: what the interpreter itself costs), and the proxy. As root the
processes run as `nobody` (setpriv), since root's files are root's from the start.

    .venv/bin/python bench/startup_window.py [--rounds 30]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PRCTL_FIRST = "import ctypes; ctypes.CDLL(None).prctl(4, 0, 0, 0, 0); import sys; sys.stdin.read()"


def window(command: list[str], env: dict[str, str], cwd: str) -> float | None:
    """Seconds from spawn until /proc/PID/environ is root's (None: it never was, within 5 s)."""
    drop = os.geteuid() == 0
    prefix = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups"] if drop else []
    started = time.perf_counter()
    process = subprocess.Popen(
        [*prefix, *command],
        env=env,
        cwd=cwd,
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    environ = f"/proc/{process.pid}/environ"
    ours = False  # as root: wait for setpriv's switch to nobody before watching for root
    found = None
    while time.perf_counter() - started < 5:
        try:
            owner = os.stat(environ).st_uid
        except FileNotFoundError:
            break
        ours = ours or owner != 0 or not drop
        if owner == 0 and ours:
            found = time.perf_counter() - started
            break
    process.kill()
    process.wait()
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=30)
    args = parser.parse_args()
    python = os.path.realpath(sys.executable) if os.geteuid() == 0 else sys.executable
    with tempfile.TemporaryDirectory(prefix="window-bench-") as scratch:
        os.chmod(scratch, 0o755)
        policy = Path(scratch) / "policy.yaml"
        policy.write_text("sandbox: off\nrules: []\n")
        policy.chmod(0o644)
        path = os.pathsep.join([str(ROOT), *[p for p in sys.path if p.endswith("site-packages")]])
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "PYTHONPATH": path,
            "HOME": scratch,
            "EXAMPLE_API_KEY": "sk-" + "x" * 40,
        }
        cases = {
            "python, prctl first": [python, "-c", PRCTL_FIRST],
            "python -S, prctl first": [python, "-S", "-c", PRCTL_FIRST],
            "mcp-sampling-proxy": [
                python,
                "-m",
                "mcp_sampling_proxy",
                "--no-terminal",
                "--policy",
                str(policy),
                "--",
                python,
                "-c",
                "import sys; sys.stdin.read()",
            ],
        }
        samples: dict[str, list[float]] = {name: [] for name in cases}
        for _ in range(args.rounds):
            for name, command in cases.items():
                found = window(command, env, scratch)
                if found is not None:
                    samples[name].append(found)
    print(f"environment readable after spawn, {args.rounds} rounds ({os.cpu_count()} cores)")
    for name, values in samples.items():
        if not values:
            print(f"  {name:24s} never turned root's (not Linux, or prctl failed)")
            continue
        print(
            f"  {name:24s} median {statistics.median(values) * 1000:6.1f} ms   "
            f"p90 {sorted(values)[int(len(values) * 0.9)] * 1000:6.1f} ms"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
