#!/usr/bin/env python3
"""`serve`'s CPU per 2026-07-28 stateless call against the floor of its stack (`null_serve.py`), in turns.

Both front the same stdio server; the same raw HTTP clients (serve_bench.py's) send `tools/call echo`
one after another on `--clients` keep-alive connections, first a warm-up, then `--calls` each. The CPU
counted is the front's own process (from /proc, not its server's), per call. The rounds alternate the two
fronts, so the machine's drift falls on both; the figures are each front's median over the rounds, and
the ratio of the medians. `serve` runs as serve_bench.py starts it: no policy, so its defaults (the server
in the bubblewrap sandbox where it works).

Usage: .venv/bin/python bench/serve_floor.py [--rounds 5] [--calls 500] [--clients 4] [--server-cmd "..."]
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import shlex
import signal
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import serve_bench as sb
from procstat import cpu_ticks
from scratch_dirs import scratch_dirs

HERE = Path(__file__).resolve().parent
TICKS = os.sysconf("SC_CLK_TCK")


def own_cpu_seconds(pid: int) -> float:
    """utime + stime of `pid` alone (its children are not counted)."""
    return sum(cpu_ticks(pid)) / TICKS


def front_command(front: str, python: str, port: int, server: list[str]) -> list[str]:
    if front == "serve":
        return sb.serve_command(python, port, server)
    return [python, str(HERE / "null_serve.py"), "--listen", f"127.0.0.1:{port}", "--", *server]


async def calls(port: int, clients: int, count: int, ids: itertools.count[int]) -> None:
    conns = [await sb.Conn.open(port) for _ in range(clients)]
    try:
        await asyncio.gather(*(sb.client_loop(conn, None, count, ids) for conn in conns))
    finally:
        for conn in conns:
            conn.close()


def one_round(front: str, args: argparse.Namespace, work: Path) -> float:
    """The front's CPU per call, in microseconds, for one round."""
    port = sb.free_port()
    log = work / f"{front}.log"
    env = dict(os.environ, MCP_SAMPLING_PROXY_NO_TERMINAL="1", **scratch_dirs(work / "dirs"))
    server = shlex.split(args.server_cmd)
    with open(log, "wb") as errors:
        proc = subprocess.Popen(front_command(front, args.python, port, server), env=env, stderr=errors)
    try:
        sb.wait_listening(port, proc, log)
        ids = itertools.count(1)
        asyncio.run(calls(port, args.clients, 20, ids))  # warm-up: serve's lane starts its server here
        before = own_cpu_seconds(proc.pid)
        asyncio.run(calls(port, args.clients, args.calls, ids))
        return (own_cpu_seconds(proc.pid) - before) / (args.clients * args.calls) * 1e6
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5, help="rounds, the two fronts in turns (default 5)")
    parser.add_argument("--calls", type=int, default=500, help="calls per client per round (default 500)")
    parser.add_argument("--clients", type=int, default=4, help="keep-alive connections at once (default 4)")
    parser.add_argument("--python", default=sys.executable, help="interpreter for the fronts and the server")
    default_server = f"{shlex.quote(sys.executable)} {HERE.parent / 'tests' / 'fixtures' / 'kitchen_sink_server.py'}"
    parser.add_argument("--server-cmd", default=default_server, help="the stdio server (it needs `echo`)")
    args = parser.parse_args()
    cpu: dict[str, list[float]] = {"serve": [], "floor": []}
    with tempfile.TemporaryDirectory(prefix="serve-floor-") as scratch:
        for index in range(args.rounds):
            for front in sb.rotated(("serve", "floor"), index):
                cpu[front].append(one_round(front, args, Path(scratch)))
    serve, floor = statistics.median(cpu["serve"]), statistics.median(cpu["floor"])
    print(f"CPU per stateless call, median of {args.rounds} rounds of {args.clients} x {args.calls}:")
    print(f"  serve  {serve:6.0f} us  {[round(x) for x in cpu['serve']]}")
    print(f"  floor  {floor:6.0f} us  {[round(x) for x in cpu['floor']]}  (bench/null_serve.py)")
    if floor > 0:
        print(f"  serve x{serve / floor:.2f} the floor; serve's own share over it {serve - floor:.0f} us")
    else:  # /proc counts CPU in ticks (10 ms here): a few calls may not reach one
        print("  serve x? the floor: too few calls to count (raise --calls)")


if __name__ == "__main__":
    main()
