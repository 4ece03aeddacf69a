"""Spawn to initialize: direct, through the proxy unconfined, and through the proxy with the server in
its bubblewrap sandbox, in turn, round by round.

The sandbox's cost is the paired difference of the two proxied modes (the same policy but for its
`sandbox:` line, so both take the same start-up path): bwrap's exec, its namespaces and mounts, and
the proxy's check that bwrap works here. Prints the medians and the paired differences.

    .venv/bin/python bench/sandbox_start.py [--rounds 30] [--server-cmd "python bench/fast_server.py"]
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HELLO = (
    json.dumps(
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "clientInfo": {"name": "bench", "version": "1"},
            },
        }
    )
    + "\n"
)


def spawn_to_initialize(command: list[str], env: dict[str, str]) -> float:
    """Seconds from spawn to the initialize response's line; then stdin closed and the exit awaited."""
    started = time.perf_counter()
    process = subprocess.Popen(
        command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, cwd=ROOT
    )
    assert process.stdin is not None and process.stdout is not None
    process.stdin.write(HELLO.encode())
    process.stdin.flush()
    line = process.stdout.readline()
    elapsed = time.perf_counter() - started
    if b'"result"' not in line:
        raise SystemExit(f"no initialize result from {shlex.join(command)}: {line[:200]!r}")
    process.stdin.close()
    process.wait(30)
    return elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--server-cmd", default=f"{sys.executable} {ROOT / 'bench' / 'fast_server.py'}")
    args = parser.parse_args()
    if shutil.which("bwrap") is None:
        print("bwrap is not installed (Debian: apt-get install bubblewrap): nothing to compare", file=sys.stderr)
        return 2
    server = shlex.split(args.server_cmd)
    with tempfile.TemporaryDirectory(prefix="sandbox-bench-") as scratch:
        env = {
            **os.environ,
            "XDG_CONFIG_HOME": f"{scratch}/config",
            "XDG_STATE_HOME": f"{scratch}/state",
            "MCP_SAMPLING_PROXY_RUNTIME_DIR": f"{scratch}/run",
        }
        for name in ("config", "state", "run"):
            os.makedirs(f"{scratch}/{name}", mode=0o700)
        modes: dict[str, list[str]] = {"direct": server}
        for mode, line in (("proxy, sandbox off", "sandbox: off"), ("proxy, sandboxed", "sandbox: required")):
            policy = Path(scratch) / f"{mode.split()[-1]}.yaml"
            policy.write_text(f"{line}\nrules: []\n")
            modes[mode] = [
                sys.executable,
                "-m",
                "mcp_sampling_proxy",
                "--no-terminal",
                "--policy",
                str(policy),
                "--",
                *server,
            ]
        for command in modes.values():  # warm the page cache and the .pyc files
            spawn_to_initialize(command, env)
        samples: dict[str, list[float]] = {mode: [] for mode in modes}
        names = list(modes)
        for round_number in range(args.rounds):
            order = names[round_number % 3 :] + names[: round_number % 3]  # rotate: no mode always goes first
            for mode in order:
                samples[mode].append(spawn_to_initialize(modes[mode], env))
    print(f"spawn to initialize, {args.rounds} rounds ({os.cpu_count()} cores; server: {args.server_cmd})")
    for mode, values in samples.items():
        print(
            f"  {mode:20s} median {statistics.median(values) * 1000:7.1f} ms   "
            f"p90 {sorted(values)[int(len(values) * 0.9)] * 1000:7.1f} ms"
        )
    paired = [on - off for on, off in zip(samples["proxy, sandboxed"], samples["proxy, sandbox off"], strict=True)]
    quartiles = statistics.quantiles(paired, n=4)
    print(
        f"  the sandbox adds (paired, per round): median {statistics.median(paired) * 1000:+.1f} ms, "
        f"IQR {quartiles[0] * 1000:+.1f} .. {quartiles[2] * 1000:+.1f} ms (target: at most +15 ms)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
