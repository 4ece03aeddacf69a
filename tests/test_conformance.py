"""The official MCP conformance suite's client scenarios, run direct and through the proxy.

The host is the official TypeScript SDK client (tests/conformance/host.mjs); the suite
(npm @modelcontextprotocol/conformance, on Node 22) starts each scenario's server and judges what
reaches it. Direct, the host speaks Streamable HTTP to the scenario's server; proxied, it starts
`mcp-sampling-proxy --url URL` over stdio. Every scenario that passes direct must pass proxied; the
ones that pass only proxied are the proxy's additions (elicitation defaults for a host without forms).
The auth/* scenarios test an HTTP client's OAuth, which the proxy does not have (README, Conformance).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from npm_support import NODE_MODULES, node22, package_file
from support import PY, ROOT, proxy_env, write_policy

HOST = ROOT / "tests" / "conformance" / "host.mjs"

# A host without forms gets the schema's defaults only if the proxy may answer for nobody.
POLICY = "elicitation:\n  non_interactive: accept_defaults\n"

# (scenario, host options, passes direct, passes proxied)
CASES = [
    ("initialize", [], True, True),
    ("tools_call", [], True, True),
    ("sse-retry", [], True, True),
    ("elicitation-sep1034-client-defaults", ["--elicitation"], True, True),
    # a host that declares no elicitation: only the proxy can answer the form (with its defaults)
    ("elicitation-sep1034-client-defaults", [], False, True),
]


def run_scenario(scenario: str, host_options: list[str], via: str, tmp_path: Path) -> tuple[bool, str]:
    """Run one scenario with the suite's CLI; (passed, what the suite and the host printed)."""
    conformance = package_file("@modelcontextprotocol/conformance", "dist/index.js")
    node = node22()
    policy = write_policy(tmp_path, POLICY)
    proxy = [PY, "-m", "mcp_sampling_proxy", "--log-format", "json", "--no-terminal", "--policy", policy]
    env = proxy_env(MCP_CONFORMANCE_NODE_MODULES=str(NODE_MODULES), MCP_CONFORMANCE_PROXY=json.dumps(proxy),
                    MCP_SAMPLING_PROXY_RUNTIME_DIR=str(tmp_path / "run"),
                    MCP_SAMPLING_PROXY_STATE_DIR=str(tmp_path / "state"),
                    PATH=f"{Path(node).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    command = " ".join([node, str(HOST), "--via", via, *host_options])
    out = tmp_path / f"results-{via}"
    done = subprocess.run([node, conformance, "client", "--command", command, "--scenario", scenario,
                           "--timeout", "60000", "-o", str(out)],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=110)
    checks = [json.loads(p.read_text()) for p in out.rglob("checks.json")]
    failed = [c for batch in checks for c in batch if c.get("status") == "FAILURE"]
    logs = "".join(p.read_text(errors="replace") for p in out.rglob("std*.txt"))
    report = f"{done.stdout[-3000:]}\n{done.stderr[-2000:]}\n--- host/proxy output ---\n{logs[-4000:]}"
    return done.returncode == 0 and bool(checks) and not failed, report


@pytest.mark.parametrize(("scenario", "host_options", "direct", "proxied"), CASES,
                         ids=[f"{c[0]}{'-host-forms' if c[1] else ''}" for c in CASES])
def test_client_scenario_direct_and_proxied(scenario: str, host_options: list[str], direct: bool, proxied: bool,
                                            tmp_path: Path) -> None:
    passed_direct, report_direct = run_scenario(scenario, host_options, "direct", tmp_path)
    assert passed_direct == direct, f"direct: expected {'pass' if direct else 'fail'}\n{report_direct}"
    passed_proxied, report_proxied = run_scenario(scenario, host_options, "proxy", tmp_path)
    assert passed_proxied == proxied, f"proxied: expected {'pass' if proxied else 'fail'}\n{report_proxied}"
