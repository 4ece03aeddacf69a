#!/usr/bin/env python3
"""A host's start: `--servers` wrapped servers launched at once (as a desktop host starts every entry of its
config), spawn to `initialize` of the slowest, through byte relays and through the proxy.

`sandbox_start.py` times one launch alone; a host starts them together, and on a machine of few cores the
launches share it. Modes, each a burst of `--servers` launches, in this order every round (each round in a
fresh scratch directory, so that a round's first burst finds nothing of the last):

- `byte relay`: bench/null_relay.py in front of each server: the floor.
- `proxy, first ever`: no record of an earlier start, no warm start server: every launch loads the proxy
  (the first also starts a warm start server, which waits before it loads).
- `proxy, forked warm`: a warm start server runs (from the burst before): each launch is a fork of it.
- `proxy, cold`: the records of the last start kept (each server spawned early), no warm start server (it
  exits after 30 idle minutes: the morning's first start of the host): MCP_SAMPLING_PROXY_WARM_START=off.

Prints, for each mode, the median over the rounds of the slowest launch's time, and its paired difference to
the byte relay's. Every server is bench/fast_server.py (30 ms to start) unless `--server-cmd` says otherwise;
the proxy's policy sandboxes it (`sandbox: required`).

    .venv/bin/python bench/host_start.py [--servers 5] [--rounds 7] [--server-cmd "..."]
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from sandbox_start import HELLO, ROOT  # (its initialize line, and the checkout)
from scratch_dirs import scratch_dirs

MODES = ("byte relay", "proxy, first ever", "proxy, forked warm", "proxy, cold")


def burst(command: list[str], env: dict[str, str], count: int) -> float:
    """Milliseconds from the first spawn to the last of `count` initialize answers."""
    started = time.perf_counter()
    launched = [
        subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, cwd=ROOT
        )
        for _ in range(count)
    ]
    slowest = 0.0
    for process in launched:
        assert process.stdin is not None and process.stdout is not None
        process.stdin.write(HELLO.encode())
        process.stdin.flush()
    for process in launched:
        assert process.stdin is not None and process.stdout is not None
        line = process.stdout.readline()
        slowest = (time.perf_counter() - started) * 1000
        if b'"result"' not in line:
            raise SystemExit(f"no initialize result from {shlex.join(command)}: {line[:200]!r}")
    for process in launched:
        assert process.stdin is not None
        process.stdin.close()
        process.wait(30)
    return slowest


def warm_servers_gone(scratch: Path) -> None:
    """End the round's warm start server (its socket is in the scratch runtime directory)."""
    found = subprocess.run(["pgrep", "-f", f"--warm-start-server {scratch}"], capture_output=True, text=True)
    for pid in found.stdout.split():
        os.kill(int(pid), signal.SIGTERM)


def one_round(server: list[str], count: int) -> dict[str, float]:
    scratch = Path(tempfile.mkdtemp(prefix="host-start-"))
    try:
        env = {**os.environ, **scratch_dirs(scratch)}
        policy = scratch / "policy.yaml"
        policy.write_text("sandbox: required\nrules: []\n")
        proxy = [sys.executable, "-m", "mcp_sampling_proxy", "--no-terminal", "--policy", str(policy), "--", *server]
        relay = [sys.executable, str(ROOT / "bench" / "null_relay.py"), "--mode", "select", "--", *server]
        found = {"byte relay": burst(relay, env, count), "proxy, first ever": burst(proxy, env, count)}
        run = Path(env["MCP_SAMPLING_PROXY_RUNTIME_DIR"]) / "warm"
        deadline = time.monotonic() + 20
        while not list(run.glob("*.sock")) and time.monotonic() < deadline:  # the warm server loads
            time.sleep(0.05)
        burst(proxy, env, count)  # the records kept, the page cache warm
        found["proxy, forked warm"] = burst(proxy, env, count)
        warm_servers_gone(scratch)
        found["proxy, cold"] = burst(proxy, {**env, "MCP_SAMPLING_PROXY_WARM_START": "off"}, count)
        return found
    finally:
        warm_servers_gone(scratch)
        shutil.rmtree(scratch, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--servers", type=int, default=5, help="launches at once (default 5)")
    parser.add_argument("--rounds", type=int, default=7, help="rounds (default 7)")
    parser.add_argument("--server-cmd", default=f"{sys.executable} {ROOT / 'bench' / 'fast_server.py'}")
    args = parser.parse_args()
    if shutil.which("bwrap") is None:
        print("bwrap is not installed (Debian: apt-get install bubblewrap): the policy sandboxes", file=sys.stderr)
        return 2
    server = shlex.split(args.server_cmd)
    rounds = [one_round(server, args.servers) for _ in range(args.rounds)]
    print(
        f"{args.servers} launches at once, the slowest one's spawn to initialize ({args.rounds} rounds, "
        f"{os.cpu_count()} cores; server: {args.server_cmd})"
    )
    for mode in MODES:
        values = [found[mode] for found in rounds]
        over = [found[mode] - found["byte relay"] for found in rounds]
        paired = "" if mode == "byte relay" else f"   over the byte relay (paired) {statistics.median(over):+7.1f} ms"
        print(f"  {mode:20s} median {statistics.median(values):7.1f} ms{paired}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
