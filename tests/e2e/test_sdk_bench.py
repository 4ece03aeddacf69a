"""bench/sdk_bench.py (issue #14's speed table) runs end to end and reports every row.

A smoke test with tiny sizes (`--quick`): the three modes really start (in front of the small server,
`--server-cmd`: the kitchen sink's SDK start would be most of the run's CPU), the SDK host really calls
them, the sampling requests really go through the proxy to the loopback LLM with the audit log
fsync'd. It asserts the rows and their targets are there, never the timing values (a loaded
machine must not fail the suite).
"""

from __future__ import annotations

import json
import math
import os
import shlex
import subprocess
import sys
from pathlib import Path

from helpers.bench_scripts import load_bench

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "sdk_bench.py"
SMALL_SERVER = ROOT / "tests" / "fixtures" / "small_server.py"  # echo and big, as the kitchen sink answers them
ROWS = {
    "spawn_added_ms": "spawn to initialize",
    "spawn_over_relay_ms": "spawn to initialize, proxy over byte relay",
    "echo_p50_added_ms": "sequential echo p50",
    "first_p99_ratio": "echo p99, first 10 calls after start",
    "concurrent_ratio": "10 concurrent calls",
    "rss_idle_mb": "RSS idle / peak",
    "rss_peak_mb": "RSS idle / peak",
    "sampling_added_ms": "sampling round trip over the LLM call",
    "sampling_burst_ratio": "5 sampling requests at once",
}


def test_quick_run_reports_every_row_with_its_target() -> None:
    done = subprocess.run(
        [
            sys.executable,
            str(SCRIPT),
            "--quick",
            "--json",
            "--quiet",
            "--server-cmd",
            shlex.join([sys.executable, str(SMALL_SERVER)]),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=100,
    )
    assert done.returncode in (0, 1), f"exit {done.returncode}; stderr:\n{done.stderr[-3000:]}"
    result = json.loads(done.stdout)

    verdict = result["verdict"]
    assert set(verdict) == set(ROWS)
    for key, row in verdict.items():
        assert isinstance(row["value"], float) and math.isfinite(row["value"]), (key, row)
        assert row["target"] > 0 and row["pass"] is (row["value"] <= row["target"]), (key, row)
    assert (done.returncode == 0) == all(row["pass"] for row in verdict.values())

    # every mode measured in one run, and the proxy's pid was found for /proc
    for mode in ("direct", "relay", "proxy"):
        assert len(result["spawn"][mode]["runs_ms"]) == 1
        assert result["echo"][mode]["n"] == 10
    assert result["memory"]["proxy"]["peak_mb"] >= result["memory"]["proxy"]["idle_mb"] > 1
    # the sampling requests went through the proxy and each left an fsync'd audit record
    sampling = result["sampling"]
    assert sampling["n"] == 4 and sampling["audit_records"] >= 4 and sampling["audit_fsync"] is True
    # one burst of 5 at once per round (after a warm one), through the proxy and direct alike
    assert (
        sampling["burst"]["size"] == 5
        and len(sampling["burst"]["proxy_ms"]) == len(sampling["burst"]["direct_ms"]) == 1
    )
    assert len(result["machine"]["loadavg_start"]) == 3 and len(result["machine"]["loadavg_end"]) == 3
    assert result["stderr_logs"] is None  # a clean run leaves no temporary directory

    table = load_bench("sdk_bench").render(result)
    for label in set(ROWS.values()):
        line = next((x for x in table.splitlines() if x.startswith(label)), None)
        assert line is not None, f"no row {label!r} in:\n{table}"
        assert "PASS" in line or "FAIL" in line, line
    assert "load average" in table and "overall:" in table


def test_direct_sampling_calls_send_the_body_the_proxy_sends() -> None:
    """The sampling row compares like with like: the direct httpx calls post exactly the Chat
    Completions body the proxy's OpenAI adapter builds from the server's sampling request."""
    from mcp_sampling_proxy.config.providers import ProviderConfig
    from mcp_sampling_proxy.providers.openai import OpenAIAdapter

    bench = load_bench("sdk_bench")
    adapter = OpenAIAdapter(ProviderConfig(name="fake", type="openai", base_url="http://127.0.0.1:9/v1"))
    assert adapter.build_request(bench.SAMPLING_PARAMS, bench.LLM_MODEL) == bench.DIRECT_BODY


def test_the_patched_proxy_experiment_still_relays() -> None:
    """bench/patched_proxy.py --coalesce patches the real framing classes: it must still relay (a patch of
    something renamed would fail here, not in the middle of a measurement)."""
    initialize = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "b", "version": "1"}},
    }
    listing = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
    lines = [json.dumps(m) for m in (initialize, {"jsonrpc": "2.0", "method": "notifications/initialized"}, listing)]
    server = SMALL_SERVER
    proxy = [sys.executable, str(ROOT / "bench" / "patched_proxy.py"), "--coalesce", "--no-terminal"]
    done = subprocess.run(
        [*proxy, "--", sys.executable, str(server)],
        input="\n".join(lines) + "\n",
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "MCP_SAMPLING_PROXY_CONFIG_DIR": "/nonexistent/mcp-sampling-proxy-tests"},
    )
    answers = {m.get("id"): m for m in map(json.loads, done.stdout.splitlines())}
    assert "tools" in answers[2]["result"], done.stderr[-2000:]
