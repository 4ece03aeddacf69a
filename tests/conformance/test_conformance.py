"""The official MCP conformance suite's client scenarios, run direct and through the proxy.

Two hosts: the official TypeScript SDK client (tests/conformance/host.mjs; handshake era only) and the
`mcp` 2.x SDK's Client in auto mode (tests/conformance/host.py; it goes to 2026-07-28 where the server
offers it). The suite (npm @modelcontextprotocol/conformance 0.2.0-alpha.12, on Node 22) starts each
scenario's server and judges what reaches it. Direct, the host speaks Streamable HTTP to the scenario's
server; proxied, it starts `mcp-sampling-proxy --url URL` over stdio. Every check that passes direct
must pass proxied; the scenarios that pass only proxied are the proxy's additions (docs/eras.md):
elicitation defaults for a host without forms, the 2026 multi-round-trip requests answered for a
handshake host, and results completed for an SDK that refuses a result without `resultType`.
The auth/* scenarios test an HTTP client's interactive OAuth, which the proxy does not do.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from helpers.npm_support import NODE_MODULES, node22, package_file
from helpers.support import PY, ROOT, proxy_env, write_policy

HOSTS = {"ts": ROOT / "tests" / "conformance" / "host.mjs", "py": ROOT / "tests" / "conformance" / "host.py"}

# A host without forms gets the schema's defaults only if the proxy may answer for nobody.
POLICY = "elicitation:\n  non_interactive: accept_defaults\n"

# (scenario, host, host options, passes direct, passes proxied)
CASES = [
    ("initialize", "ts", [], True, True),
    ("tools_call", "ts", [], True, True),
    ("sse-retry", "ts", [], True, True),
    ("elicitation-sep1034-client-defaults", "ts", ["--elicitation"], True, True),
    # a host that declares no elicitation: only the proxy can answer the form (with its defaults)
    ("elicitation-sep1034-client-defaults", "ts", [], False, True),
    # a handshake host cannot retry input_required rounds: the proxy does it for it
    ("sep-2322-client-request-state", "ts", [], False, True),
    # the host's own initialize reaches the 2026 server first (the proxy speaks the host's era first)
    ("request-metadata", "ts", [], False, False),
    ("tools_call", "py", [], True, True),
    ("request-metadata", "py", [], True, True),
    # the SDK refuses a final result without resultType (which clients must read as complete); the proxy
    # completes it
    ("sep-2322-client-request-state", "py", [], False, True),
    ("http-standard-headers", "py", [], True, True),
    ("http-invalid-tool-headers", "py", [], True, True),
    # one check is never emitted for this host's arguments, direct or proxied; the rest must match
    ("http-custom-headers", "py", [], False, False),
    ("json-schema-2020-12-preservation", "py", [], False, False),
]


def run_scenario(
    scenario: str, host: str, host_options: list[str], via: str, tmp_path: Path
) -> tuple[bool, set[str], str]:
    """Run one scenario with the suite's CLI; (passed, the checks that passed, what the suite and the host printed)."""
    conformance = package_file("@modelcontextprotocol/conformance", "dist/index.js")
    node = node22()
    policy = write_policy(tmp_path, POLICY)
    proxy = [PY, "-m", "mcp_sampling_proxy", "--log-format", "json", "--no-terminal", "--policy", policy]
    env = proxy_env(
        MCP_CONFORMANCE_NODE_MODULES=str(NODE_MODULES),
        MCP_CONFORMANCE_PROXY=json.dumps(proxy),
        MCP_SAMPLING_PROXY_RUNTIME_DIR=str(tmp_path / "run"),
        MCP_SAMPLING_PROXY_STATE_DIR=str(tmp_path / "state"),
        PYTHONWARNINGS="ignore",
        PATH=f"{Path(node).parent}{os.pathsep}{os.environ.get('PATH', '')}",
    )
    interpreter = node if host == "ts" else PY
    command = " ".join([interpreter, str(HOSTS[host]), "--via", via, *host_options])
    out = tmp_path / f"results-{host}-{via}"
    done = subprocess.run(
        [
            node,
            conformance,
            "client",
            "--command",
            command,
            "--scenario",
            scenario,
            "--timeout",
            "60000",
            "-o",
            str(out),
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=110,
    )
    checks = [c for p in out.rglob("checks.json") for c in json.loads(p.read_text())]
    failed = [c for c in checks if c.get("status") == "FAILURE"]
    passed = {c["id"] for c in checks if c.get("status") == "SUCCESS"}
    logs = "".join(p.read_text(errors="replace") for p in out.rglob("std*.txt"))
    report = f"{done.stdout[-3000:]}\n{done.stderr[-2000:]}\n--- host/proxy output ---\n{logs[-4000:]}"
    return done.returncode == 0 and bool(checks) and not failed, passed, report


@pytest.mark.parametrize(
    ("scenario", "host", "host_options", "direct", "proxied"),
    CASES,
    ids=[f"{c[0]}-{c[1]}{'-host-forms' if c[2] else ''}" for c in CASES],
)
def test_client_scenario_direct_and_proxied(
    scenario: str, host: str, host_options: list[str], direct: bool, proxied: bool, tmp_path: Path
) -> None:
    passed_direct, checks_direct, report_direct = run_scenario(scenario, host, host_options, "direct", tmp_path)
    assert passed_direct == direct, f"direct: expected {'pass' if direct else 'fail'}\n{report_direct}"
    passed_proxied, checks_proxied, report_proxied = run_scenario(scenario, host, host_options, "proxy", tmp_path)
    assert passed_proxied == proxied, f"proxied: expected {'pass' if proxied else 'fail'}\n{report_proxied}"
    # check by check: whatever passes direct passes through the proxy
    lost = checks_direct - checks_proxied
    assert not lost, f"lost through the proxy: {lost}\n{report_proxied}"
