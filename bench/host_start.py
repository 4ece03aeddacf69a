#!/usr/bin/env python3
"""A host's start: `--servers` wrapped servers launched at once (as a desktop host starts every entry of its
config), spawn to `initialize` of the slowest (with `--tools`, to its `tools/list` answer, which a host waits
for before it shows the server's tools), through byte relays and through the proxy.

`sandbox_start.py` times one launch alone; a host starts them together, and on a machine of few cores the
launches share it. Modes, each a burst of `--servers` launches, in this order every round (each round in a
fresh scratch directory, so that a round's first burst finds nothing of the last):

- `byte relay`: bench/null_relay.py in front of each server: the floor.
- `proxy, first ever`: no record of an earlier start, no warm start server: the first launch starts one and
  loads the proxy itself; the others wait for the warm server and are forked by it.
- `proxy, forked warm`: a warm start server runs (from the burst before): each launch is a fork of it.
- `proxy, no warm server`: the records of the last start kept (each server spawned early), no warm start
  server: a desktop host's start (its warm server lived in the app's last session) or the first after 30 idle
  minutes. As `first ever`, but for the records.
- `proxy, warm start off`: the same, with MCP_SAMPLING_PROXY_WARM_START=off: every launch loads the proxy.

Prints, for each mode, the median over the rounds of the slowest launch's time, and its paired difference to
the byte relay's. Every server is bench/fast_server.py (30 ms to start) unless `--server-cmd` says otherwise;
the proxy's policy sandboxes it (`sandbox: required`).

    .venv/bin/python bench/host_start.py [--servers 5] [--rounds 7] [--tools] [--server-cmd "..."]
"""

from __future__ import annotations

import argparse
import contextlib
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

MODES = ("byte relay", "proxy, first ever", "proxy, forked warm", "proxy, no warm server", "proxy, warm start off")
INITIALIZED = b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n'
TOOLS_LIST = b'{"jsonrpc":"2.0","id":2,"method":"tools/list"}\n'


def burst(command: list[str], env: dict[str, str], count: int, tools: bool) -> float:
    """Milliseconds from the first spawn to the last of `count` initialize answers (`tools`: tools/list
    answers, asked once initialize is answered)."""
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
        if tools:
            process.stdin.write(INITIALIZED + TOOLS_LIST)
            process.stdin.flush()
    for process in launched if tools else ():
        assert process.stdout is not None
        line = process.stdout.readline()
        slowest = (time.perf_counter() - started) * 1000
        if b'"tools"' not in line:
            raise SystemExit(f"no tools/list result from {shlex.join(command)}: {line[:200]!r}")
    for process in launched:
        assert process.stdin is not None
        process.stdin.close()
        process.wait(30)
    return slowest


def warm_servers_gone(scratch: Path) -> None:
    """End the round's warm start server (its socket is in the scratch runtime directory), and wait for its end."""
    pattern = ["pgrep", "-f", "--", f"--warm-start-server {scratch}"]
    for pid in subprocess.run(pattern, capture_output=True, text=True).stdout.split():
        with contextlib.suppress(ProcessLookupError):
            os.kill(int(pid), signal.SIGTERM)
    deadline = time.monotonic() + 10
    while subprocess.run(pattern, capture_output=True).stdout and time.monotonic() < deadline:
        time.sleep(0.02)


def one_round(server: list[str], count: int, tools: bool) -> dict[str, float]:
    scratch = Path(tempfile.mkdtemp(prefix="host-start-"))
    try:
        env = {**os.environ, **scratch_dirs(scratch)}
        policy = scratch / "policy.yaml"
        policy.write_text("sandbox: required\nrules: []\n")
        proxy = [sys.executable, "-m", "mcp_sampling_proxy", "--no-terminal", "--policy", str(policy), "--", *server]
        relay = [sys.executable, str(ROOT / "bench" / "null_relay.py"), "--mode", "select", "--", *server]
        found = {"byte relay": burst(relay, env, count, tools), "proxy, first ever": burst(proxy, env, count, tools)}
        run = Path(env["MCP_SAMPLING_PROXY_RUNTIME_DIR"]) / "warm"
        deadline = time.monotonic() + 20
        while not list(run.glob("*.sock")) and time.monotonic() < deadline:  # the warm server loads
            time.sleep(0.05)
        time.sleep(1.0)  # and then what a proxy loads at its first request
        burst(proxy, env, count, tools)  # the records kept, the page cache warm
        found["proxy, forked warm"] = burst(proxy, env, count, tools)
        warm_servers_gone(scratch)
        found["proxy, no warm server"] = burst(proxy, env, count, tools)
        warm_servers_gone(scratch)
        off = {**env, "MCP_SAMPLING_PROXY_WARM_START": "off"}
        found["proxy, warm start off"] = burst(proxy, off, count, tools)
        return found
    finally:
        warm_servers_gone(scratch)
        shutil.rmtree(scratch, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--servers", type=int, default=5, help="launches at once (default 5)")
    parser.add_argument("--rounds", type=int, default=7, help="rounds (default 7)")
    parser.add_argument("--server-cmd", default=f"{sys.executable} {ROOT / 'bench' / 'fast_server.py'}")
    parser.add_argument("--tools", action="store_true", help="time to each server's tools/list answer")
    args = parser.parse_args()
    if shutil.which("bwrap") is None:
        print("bwrap is not installed (Debian: apt-get install bubblewrap): the policy sandboxes", file=sys.stderr)
        return 2
    server = shlex.split(args.server_cmd)
    rounds = [one_round(server, args.servers, args.tools) for _ in range(args.rounds)]
    answer = "tools/list" if args.tools else "initialize"
    print(
        f"{args.servers} launches at once, the slowest one's spawn to {answer} ({args.rounds} rounds, "
        f"{os.cpu_count()} cores; server: {args.server_cmd})"
    )
    for mode in MODES:
        values = [found[mode] for found in rounds]
        over = [found[mode] - found["byte relay"] for found in rounds]
        paired = "" if mode == "byte relay" else f"   over the byte relay (paired) {statistics.median(over):+7.1f} ms"
        print(f"  {mode:22s} median {statistics.median(values):7.1f} ms{paired}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
