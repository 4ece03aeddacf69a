"""bench/serve_bench.py (serve under load) runs end to end and reports every mode side by side.

A smoke test with tiny counts (`--quick`): the direct server, one `serve`, three `serve` replicas behind
HAProxy and HAProxy in front of the direct server really start, and raw HTTP clients really call them in
sessions and with 2026-07-28 stateless requests. serve's sessions run the small server (`--server-cmd`),
not the SDK's kitchen sink, whose start would cost 1.2 s of CPU a session. It asserts the figures are
there and come from the processes they name, never their values (a loaded machine must not fail the
suite).
"""

from __future__ import annotations

import json
import math
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.bench_scripts import load_bench

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "serve_bench.py"
SMALL_SERVER = shlex.join([sys.executable, str(ROOT / "tests" / "fixtures" / "small_server.py")])
MODES = ("direct", "haproxy_direct", "serve1", "serve3")
ROLES = {
    "direct": {"server", "loadgen"},
    "haproxy_direct": {"haproxy", "server", "loadgen"},
    "serve1": {"proxy", "server", "loadgen"},
    "serve3": {"haproxy", "proxy", "server", "loadgen"},
}


@pytest.mark.skipif(shutil.which("haproxy") is None, reason="haproxy is not installed (apt-get install haproxy)")
def test_quick_run_reports_every_mode_side_by_side() -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--json", "--quiet", "--server-cmd", SMALL_SERVER],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=100,
    )
    assert done.returncode == 0, f"exit {done.returncode}; stderr:\n{done.stderr[-3000:]}"
    result = json.loads(done.stdout)

    calls = result["settings"]["calls"]
    for kind, clients in (("single", 1), ("session", result["settings"]["sessions"]), ("stateless", 3)):
        for mode in MODES:
            (one,) = result[kind]["runs"][mode]
            assert one["n"] == clients * calls, (kind, mode)  # every call answered with its own echo (else exit 2)
            assert one["rps"] > 0 and 0 < one["p50_ms"] <= one["p99_ms"], (kind, mode, one)
            cpu = one["cpu_us_per_call"]
            assert set(cpu) == ROLES[mode], (kind, mode, cpu)
            # the calls went through the processes the row names: each of them worked for them
            assert all(cpu[role] > 0 for role in ROLES[mode] - {"loadgen"}), (kind, mode, cpu)
            row = result[kind]["summary"][mode]
            if mode != "direct":
                assert math.isfinite(row["added_p50_ms"]["median"]) and row["rps_ratio"]["median"] > 0

    # HAProxy spread the three sessions over the three replicas, and each session's calls reached the
    # replica holding it (a call sent to another replica is answered 404, and the run fails)
    assert result["sessions_per_replica"] == [1, 1, 1]

    memory = result["memory"]
    assert memory["sessions"] == [1, 3]
    assert memory["points"]["3"]["proxy_processes"] >= 1  # serve (and its session guards, while they exist)
    assert memory["server_processes_per_session"] >= 1 and memory["per_session_mb"]["servers_uss"] > 1
    assert memory["points"]["3"]["proxy_rss_kb"] > memory["points"]["1"]["proxy_rss_kb"] > 1000

    table = load_bench("serve_bench").render(result)
    for label in ("direct", "HAProxy > direct", "serve x1", "HAProxy > serve x3"):
        assert sum(line.split("  ")[0] == label for line in table.splitlines()) == 3, (label, table)
    for text in ("2 CPUs" if result["machine"]["cpus"] == 2 else "CPUs", "memory per session", "load average"):
        assert text in table


def test_serve_floor_runs_serve_and_the_floor_of_its_stack_in_turns() -> None:
    """bench/serve_floor.py: serve and bench/null_serve.py (a bare uvicorn app relaying each POST to the same
    server) both answer every 2026-07-28 call with its echo (serve_bench's clients check each), and each
    one's CPU per call is printed. The figures' values are not asserted."""
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "serve_floor.py"), "--rounds", "1", "--calls", "5", "--clients", "1"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=100,
    )
    assert done.returncode == 0, f"exit {done.returncode}; stderr:\n{done.stderr[-3000:]}"
    lines = done.stdout.splitlines()
    assert lines[0] == "CPU per stateless call, median of 1 rounds of 1 x 5:"
    assert lines[1].split()[0] == "serve" and lines[2].split()[0] == "floor", done.stdout
    assert lines[3].startswith("  serve x"), done.stdout
