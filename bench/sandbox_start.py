"""Spawn to initialize: direct, through a byte relay, through the proxy unconfined, and through the proxy
with the server in its bubblewrap sandbox, in turn, round by round.

The sandbox's cost is the paired difference of the two proxied modes (the same policy but for its
`sandbox:` line, so both take the same start-up path): bwrap's exec, its namespaces and mounts, the
network relay's listener in the server's namespace, the grants worked out, and the proxy's check that
bwrap works here. A whole proxy start varies by tens of milliseconds from one run to the next, so the
same is measured a second way, without the proxy's own start-up: the server alone, started in this
process as the proxy starts it (the sandbox plan, the spawn, the relay's listener) until it answers
`initialize`, unconfined and sandboxed in turn. Prints the medians, the paired differences and a
bootstrap 90% interval of their median. The proxy runs as installed: from the second launch on, forked by the
warm start server (system/warm_start.py); "cold" is the same proxy with the warm start off.

    .venv/bin/python bench/sandbox_start.py [--rounds 60] [--server-cmd "python bench/fast_server.py"]
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

from scratch_dirs import scratch_dirs

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
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


def server_alone(server: list[str], sandboxed: bool) -> float:
    """Seconds from the sandbox plan to the server's initialize answer, as the proxy starts it."""
    from mcp_sampling_proxy.config.sandbox_settings import SandboxSettings
    from mcp_sampling_proxy.transport.sandbox import contain
    from mcp_sampling_proxy.transport.stdio import egress_listener, spawn, stop_process

    started = time.perf_counter()
    plan = contain(SandboxSettings(mode="required" if sandboxed else "off"), None, [], name="bench", command=server)
    process = spawn(server, dict(os.environ), sandbox=plan)
    assert process.stdin is not None and process.stdout is not None
    process.stdin.write(HELLO.encode())
    process.stdin.flush()
    line = process.stdout.readline()
    elapsed = time.perf_counter() - started
    listener = egress_listener(process)
    if listener is not None:
        listener.close()
    stop_process(process)
    if b'"result"' not in line:
        raise SystemExit(f"no initialize result from the server alone: {line[:200]!r}")
    return elapsed


def interval(paired: list[float], draws: int = 2000) -> tuple[float, float]:
    """A bootstrap 90% interval of the median of `paired`."""
    import random

    rng = random.Random(7)
    medians = sorted(statistics.median(rng.choices(paired, k=len(paired))) for _ in range(draws))
    return medians[int(draws * 0.05)], medians[int(draws * 0.95)]


def report(title: str, samples: dict[str, list[float]], on: str, off: str) -> None:
    print(title)
    for mode, values in samples.items():
        print(
            f"  {mode:20s} median {statistics.median(values) * 1000:7.1f} ms   "
            f"p90 {sorted(values)[int(len(values) * 0.9)] * 1000:7.1f} ms"
        )
    paired = [a - b for a, b in zip(samples[on], samples[off], strict=True)]
    low, high = interval(paired)
    print(
        f"  the sandbox adds (paired, per round): median {statistics.median(paired) * 1000:+.1f} ms "
        f"(90% interval {low * 1000:+.1f} .. {high * 1000:+.1f} ms; target: at most +15 ms)"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=60)
    parser.add_argument("--server-cmd", default=f"{sys.executable} {ROOT / 'bench' / 'fast_server.py'}")
    args = parser.parse_args()
    if shutil.which("bwrap") is None:
        print("bwrap is not installed (Debian: apt-get install bubblewrap): nothing to compare", file=sys.stderr)
        return 2
    server = shlex.split(args.server_cmd)
    with tempfile.TemporaryDirectory(prefix="sandbox-bench-") as scratch:
        env = {**os.environ, **scratch_dirs(Path(scratch))}
        relay = [sys.executable, str(ROOT / "bench" / "null_relay.py"), "--mode", "select", "--", *server]
        modes: dict[str, tuple[list[str], dict[str, str]]] = {"direct": (server, env), "byte relay": (relay, env)}
        cold = {**env, "MCP_SAMPLING_PROXY_WARM_START": "off"}
        for mode, line, mode_env in (
            ("proxy, sandbox off", "sandbox: off", env),
            ("proxy, sandboxed", "sandbox: required", env),
            ("proxy, sandboxed, cold", "sandbox: required", cold),
        ):
            policy = Path(scratch) / f"{line.split()[-1]}.yaml"
            policy.write_text(f"{line}\nrules: []\n")
            command = [sys.executable, "-m", "mcp_sampling_proxy", "--no-terminal", "--policy", str(policy)]
            modes[mode] = ([*command, "--", *server], mode_env)
        for command, mode_env in modes.values():  # warm the page cache and the .pyc files
            spawn_to_initialize(command, mode_env)
        warm = Path(env["MCP_SAMPLING_PROXY_RUNTIME_DIR"]) / "warm"
        deadline = time.monotonic() + 20
        while not list(warm.glob("*.sock")) and time.monotonic() < deadline:  # the warm server loads
            time.sleep(0.05)
        samples: dict[str, list[float]] = {mode: [] for mode in modes}
        names = list(modes)
        for round_number in range(args.rounds):
            turn = round_number % len(names)
            order = names[turn:] + names[:turn]  # rotate: no mode always goes first
            for mode in order:
                samples[mode].append(spawn_to_initialize(*modes[mode]))
        alone: dict[str, list[float]] = {"server, unconfined": [], "server, sandboxed": []}
        os.environ.update({k: v for k, v in env.items() if k.startswith(("XDG_", "MCP_SAMPLING_PROXY_"))})
        server_alone(server, True)  # the first plan imports what later ones find loaded, as one proxy's would
        for round_number in range(args.rounds):
            for sandboxed in (True, False) if round_number % 2 else (False, True):
                mode = "server, sandboxed" if sandboxed else "server, unconfined"
                alone[mode].append(server_alone(server, sandboxed))
    header = f"{args.rounds} rounds ({os.cpu_count()} cores; server: {args.server_cmd})"
    report(f"spawn to initialize through the proxy, {header}", samples, "proxy, sandboxed", "proxy, sandbox off")
    for mode, said in (
        ("proxy, sandboxed", "forked by the warm start server, from the second launch"),
        ("proxy, sandboxed, cold", "MCP_SAMPLING_PROXY_WARM_START=off: the server starts early, the proxy loads"),
    ):
        over = [a - b for a, b in zip(samples[mode], samples["byte relay"], strict=True)]
        print(
            f"  {mode} over the byte relay (paired, per round): median {statistics.median(over) * 1000:+.1f} ms"
            f" (target: at most +30 ms; {said})"
        )
    report(f"the server alone, as the proxy starts it, {header}", alone, "server, sandboxed", "server, unconfined")
    return 0


if __name__ == "__main__":
    sys.exit(main())
