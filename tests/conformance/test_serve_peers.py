"""`serve` against clients we did not write: the MCP conformance suite's server scenarios, the official
TypeScript SDK's client (1.x in the handshake era, 2.x pinned to 2026-07-28), and MCP Inspector's CLI
(in both eras).

The server behind the endpoint is @modelcontextprotocol/server-everything (the suite's own
"everything" conformance server is not published: the conformance package ships only its runner).
The suite runs twice, against server-everything's own Streamable HTTP endpoint (direct) and against
`serve -- node server-everything stdio` (through the proxy), and every scenario that passes direct
must pass through the proxy. Both results are recorded here and in docs/reference/behaviour.md.
The clients call server-everything's `trigger-sampling-request` with a bearer token; its sampling
request is answered by the loopback LLM (tests/fakes/llm_server.py) under the proxy's policy.
"""

from __future__ import annotations

import json
import re
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import pytest
from fakes.llm_server import FakeLLMServer
from helpers.npm_support import NODE_MODULES, node22, package_file, server_command
from helpers.support import PROXY, ROOT, free_port, openai_policy, proxy_env, write_policy

EVERYTHING = "@modelcontextprotocol/server-everything"
CONFORMANCE = "@modelcontextprotocol/conformance"
INSPECTOR = "@modelcontextprotocol/inspector"
TS_CLIENT = ROOT / "tests" / "conformance" / "serve_client.mjs"
ALICE = "alice-token-0123456789abcdef"

# What @modelcontextprotocol/conformance 0.2.0-alpha.12 says of server-everything 2026.8.31. Most failing
# scenarios call tools, prompts and resources of the suite's own server (`test_simple_prompt`, ...).
HANDSHAKE_DIRECT = {
    "server-initialize",
    "logging-set-level",
    "ping",
    "tools-list",
    "tools-call-simple-text",
    "tools-call-error",
    "server-sse-multiple-streams",
    "resources-list",
    "resources-subscribe",
    "resources-unsubscribe",
    "prompts-list",
}
# the endpoint's own HTTP: 404 for an ended session (server-everything: 400), and a Host header
# naming another machine refused (server-everything answers it)
HANDSHAKE_ONLY_PROXIED = {"server-session-lifecycle", "dns-rebinding-protection"}
# server-everything speaks no 2026-07-28: it refuses every such request (400, "Server not initialized"),
# so the scenarios that pass direct are those satisfied by a refusal
MODERN_DIRECT = {"input-required-result-validate-input", "tasks-status-notifications"}
# through serve, the era bridge answers the 2026-07-28 requests from the handshake server
MODERN_PROXIED = MODERN_DIRECT | {
    "tools-list",
    "tools-call-simple-text",
    "tools-call-error",
    "server-sse-multiple-streams",
    "resources-list",
    "sep-2164-resource-not-found",
    "prompts-list",
    "dns-rebinding-protection",
    "caching",
    "input-required-result-missing-input-response",
    "input-required-result-unsupported-methods",
    "input-required-result-ignore-extra-params",
}
# what serve's 2026-07-28 endpoint does itself: subscriptions/listen as an SSE stream (its acknowledgement,
# then what it asked for); a request without its _meta refused (400, -32602, the request's id), one whose
# _meta contradicts its header (400, -32020), a removed or unknown method 404 with -32601, an unknown
# version 400 with -32022 and the versions it can ask for; each error with the request's id
MODERN_SERVE_CHECKS = {
    ("server-stateless", f"sep-2575-{check}")
    for check in (
        "server-sends-subscription-ack",
        "server-tags-subscription-id",
        "server-honors-notification-filter",
        "http-server-meta-invalid-400",
        "request-meta-invalid-missing-meta",
        "request-meta-invalid-missing-protocol-version",
        "request-meta-invalid-missing-client-capabilities",
        "http-server-header-mismatch-400",
        "http-server-method-not-found-404",
        "http-server-method-not-found-404-initialize",
        "http-server-method-not-found-404-ping",
        "http-server-method-not-found-404-logging-setlevel",
        "http-server-method-not-found-404-resources-subscribe",
        "http-server-method-not-found-404-resources-unsubscribe",
        "server-unsupported-version-error",
        "http-server-error-jsonrpc-id",
    )
}
# checks that pass direct only because server-everything refuses every 2026-07-28 request; through
# serve the request is answered
MODERN_REFUSAL_ONLY = {
    ("input-required-result-validate-input", "sep-2322-error-on-protocol-error"),  # SHOULD: a warning
    ("input-required-result-validate-input", "sep-2322-validate-input-responses"),  # SHOULD: a warning
}
SUITES = {"2025-11-25": [], "2026-07-28": ["--requirements", "2026-07-28"]}
BRIDGE_2026_CALLERS = "upstream:\n  era: handshake\n"
"""server-everything speaks only the handshake era. By default a 2026-07-28 caller's server/discover gets its
refusal, as directly (a client in auto mode then falls back to initialize, and lands where it lands
directly); with this pin the proxy answers server/discover from the handshake and bridges every 2026 caller,
which clients pinned to 2026-07-28 that probe first (the suite, the TypeScript SDK 2.x, Inspector's
`--protocol-era modern`) need."""


@dataclass
class Endpoint:
    process: subprocess.Popen[bytes]
    url: str
    log: Path


@dataclass(frozen=True)
class Scenario:
    passed: bool  # no check failed (warnings and skips do not fail a scenario, as the suite counts)
    checks: dict[str, list[str]]  # check id -> its statuses, in order


def _listening(process: subprocess.Popen[bytes], port: int, log: Path) -> None:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and process.poll() is None:
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise AssertionError(f"nothing listens on {port}: {log.read_text(errors='replace')[-3000:]}")


def start_everything_http(tmp_path: Path) -> Endpoint:
    """server-everything's own Streamable HTTP endpoint (the direct runs)."""
    command = server_command(EVERYTHING, "streamableHttp")
    port = free_port()
    log = tmp_path / "everything-http.log"
    with open(log, "ab") as out:
        process = subprocess.Popen(command, env=proxy_env(PORT=str(port)), stdout=out, stderr=out)
    _listening(process, port, log)
    return Endpoint(process, f"http://127.0.0.1:{port}/mcp", log)


def start_serve(tmp_path: Path, *options: str) -> Endpoint:
    """`serve` in front of server-everything over stdio."""
    command = server_command(EVERYTHING, "stdio")
    port = free_port()
    log = tmp_path / "serve.log"
    argv = [*PROXY, "serve", "--log-format", "json", "--listen", f"127.0.0.1:{port}", *options, "--", *command]
    env = proxy_env(
        TEST_LLM_KEY="sk-test",
        MCP_SAMPLING_PROXY_RUNTIME_DIR=str(tmp_path / "run"),
        MCP_SAMPLING_PROXY_STATE_DIR=str(tmp_path / "state"),
    )
    with open(log, "ab") as out:
        process = subprocess.Popen(argv, env=env, stdout=out, stderr=out)
    _listening(process, port, log)
    return Endpoint(process, f"http://127.0.0.1:{port}/mcp", log)


def stop(endpoint: Endpoint) -> None:
    if endpoint.process.poll() is None:
        endpoint.process.send_signal(signal.SIGTERM)
    try:
        endpoint.process.wait(15)
    except subprocess.TimeoutExpired:
        endpoint.process.kill()
        endpoint.process.wait(5)


def run_server_suite(url: str, selection: list[str], out: Path) -> dict[str, Scenario]:
    """The suite's server scenarios against `url`: scenario -> its checks, from the suite's checks.json."""
    conformance = package_file(CONFORMANCE, "dist/index.js")
    done = subprocess.run(
        [node22(), conformance, "server", "--url", url, *selection, "-o", str(out)],
        env=proxy_env(),
        capture_output=True,
        text=True,
        timeout=100,
    )
    found: dict[str, Scenario] = {}
    for path in out.rglob("checks.json"):
        name = re.sub(r"^server-|-\d{4}-\d\d-\d\dT[\d-]+Z$", "", path.parent.name)
        checks: dict[str, list[str]] = {}
        for check in json.loads(path.read_text()):
            checks.setdefault(check["id"], []).append(check["status"])
        found[name] = Scenario(not any("FAILURE" in s for s in checks.values()), checks)
    assert found, f"the suite ran no scenario:\n{done.stdout[-3000:]}\n{done.stderr[-2000:]}"
    return found


def passing(results: dict[str, Scenario]) -> set[str]:
    return {name for name, scenario in results.items() if scenario.passed}


def succeeded(results: dict[str, Scenario]) -> set[tuple[str, str]]:
    return {
        (name, check)
        for name, s in results.items()
        for check, statuses in s.checks.items()
        if statuses == ["SUCCESS"] * len(statuses)
    }


def checks_lost(direct: dict[str, Scenario], proxied: dict[str, Scenario]) -> set[tuple[str, str]]:
    """The checks that passed every time direct and not every time through the proxy."""
    lost = set()
    for name, scenario in direct.items():
        for check, statuses in scenario.checks.items():
            through = proxied[name].checks.get(check, []) if name in proxied else []
            if set(statuses) == {"SUCCESS"} and set(through) != {"SUCCESS"}:
                lost.add((name, check))
    return lost


@pytest.mark.parametrize("suite", SUITES)
def test_server_scenarios_pass_through_serve_as_they_do_direct(suite: str, tmp_path: Path) -> None:
    direct_endpoint = start_everything_http(tmp_path)
    try:
        direct = run_server_suite(direct_endpoint.url, SUITES[suite], tmp_path / "direct")
    finally:
        stop(direct_endpoint)
    # the suite's 2026-07-28 client probes server/discover and stops at a refusal: the pin has the proxy answer
    # it from the handshake (by default a handshake server's refusal is passed on, as directly)
    pinned = ["--policy", write_policy(tmp_path, BRIDGE_2026_CALLERS)] if SUITES[suite] else []
    served = start_serve(tmp_path, *pinned)
    try:
        proxied = run_server_suite(served.url, SUITES[suite], tmp_path / "proxied")
    finally:
        stop(served)
    report = f"direct: {sorted(passing(direct))}\nproxied: {sorted(passing(proxied))}\nserve's log: {served.log}"
    assert passing(direct) <= passing(proxied), f"a scenario fails only through the proxy\n{report}"
    if suite == "2025-11-25":
        assert passing(direct) == HANDSHAKE_DIRECT, report
        assert passing(proxied) >= HANDSHAKE_DIRECT | HANDSHAKE_ONLY_PROXIED, report
        assert not checks_lost(direct, proxied), report  # check by check, too
    else:
        assert passing(direct) == MODERN_DIRECT, report
        assert passing(proxied) >= MODERN_PROXIED, report
        assert checks_lost(direct, proxied) <= MODERN_REFUSAL_ONLY, report
        assert succeeded(proxied) >= MODERN_SERVE_CHECKS, report


@pytest.fixture(scope="module")
def llm() -> Iterator[FakeLLMServer]:
    with FakeLLMServer("openai") as server:
        yield server


@dataclass
class Served:
    """The module's `serve`, as one test sees it: the decisions in its audit log before the test began
    are other tests'."""

    endpoint: Endpoint
    audit: Path
    before: int

    @property
    def url(self) -> str:
        return self.endpoint.url

    @property
    def log(self) -> Path:
        return self.endpoint.log

    def audited_clients(self) -> list[object]:
        """The `client` of each sampling decision this test caused, from the audit log."""
        return [r.get("client") for r in sampling_decisions(self.audit)[self.before :]]


def sampling_decisions(audit: Path) -> list[dict[str, Any]]:
    """The audit's decisions on sampling requests (not the tool pins' records of a tool offered to one
    client and not the next, which one serve for every client writes too)."""
    lines = audit.read_text().splitlines() if audit.exists() else []
    records = map(json.loads, lines)
    return [r for r in records if r.get("event") == "decision" and r.get("method") == "sampling/createMessage"]


@pytest.fixture(scope="module")
def one_serve(tmp_path_factory: pytest.TempPathFactory, llm: FakeLLMServer) -> Iterator[Endpoint]:
    """`serve` with a bearer token for alice and the loopback LLM answering the server's sampling: one for
    the module, as one deployment serves every client in turn."""
    place = tmp_path_factory.mktemp("served")
    tokens = place / "tokens"
    tokens.write_text(f"alice:{ALICE}\n", encoding="utf-8")
    tokens.chmod(0o600)
    audit = f"audit:\n  path: {place / 'audit.jsonl'}\n{BRIDGE_2026_CALLERS}"
    policy = write_policy(place, openai_policy(llm.base_url, model="fake-gpt-4o-mini", extra=audit))
    endpoint = start_serve(place, "--token-file", str(tokens), "--policy", policy)
    yield endpoint
    stop(endpoint)


@pytest.fixture
def served(one_serve: Endpoint) -> Served:
    audit = one_serve.log.parent / "audit.jsonl"
    return Served(one_serve, audit, len(sampling_decisions(audit)))


def sampled(text: str) -> dict[str, Any]:
    """The sampling result server-everything's trigger-sampling-request returns as its text."""
    head, _, body = text.partition("\n")
    assert head.startswith("LLM sampling result:"), text
    return cast(dict[str, Any], json.loads(body))


# the TypeScript SDK 1.x speaks the handshake era only (its newest version is 2025-11-25); 2.x, a package of
# its own, speaks 2026-07-28 (pinned here: server/discover, and no fallback to initialize)
TS_SDKS = {
    "2025-11-25": ("@modelcontextprotocol/sdk", []),
    "2026-07-28": ("@modelcontextprotocol/client", ["2026-07-28"]),
}


@pytest.mark.parametrize("era", TS_SDKS)
def test_the_typescript_sdk_client_lists_calls_and_samples_through_serve(
    era: str, served: Served, llm: FakeLLMServer
) -> None:
    package, pin = TS_SDKS[era]
    package_file(package, "package.json")
    llm.reply_text("four", model="fake-gpt-4o-mini")
    done = subprocess.run(
        [node22(), str(TS_CLIENT), served.url, ALICE, "2+2?", *pin],
        env=proxy_env(MCP_CONFORMANCE_NODE_MODULES=str(NODE_MODULES)),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, f"{done.stderr[-3000:]}\nserve's log: {served.log.read_text()[-3000:]}"
    answer = json.loads(done.stdout.strip().splitlines()[-1])
    assert answer["version"] == era
    assert (answer["session"] is None) == (era == "2026-07-28")  # 2026-07-28 has no sessions
    assert {"echo", "trigger-sampling-request"} <= set(answer["tools"])  # the proxy declared sampling
    result = sampled(answer["result"]["content"][0]["text"])
    assert result["content"]["text"] == "four"
    assert result["model"] == "fake-gpt-4o-mini"
    assert "2+2?" in json.dumps(llm.last.body["messages"])
    assert served.audited_clients() == ["alice"]  # the token's name, in the audit


def inspector(url: str, home: Path, *arguments: str, token: str = ALICE) -> subprocess.CompletedProcess[str]:
    """MCP Inspector's CLI: one method against `url`, JSON on stdout (its error envelope on stderr)."""
    launcher = package_file(INSPECTOR, "clients/launcher/build/index.js")
    command = [node22(), launcher, "--cli", url, "--transport", "http", "--format", "json", "--stored-auth-only"]
    command += ["--header", f"Authorization: Bearer {token}", *arguments]
    home.mkdir(exist_ok=True)  # its catalog and client config go under HOME/.mcp-inspector
    return subprocess.run(command, env=proxy_env(HOME=str(home)), capture_output=True, text=True, timeout=60)


def test_mcp_inspector_cli_lists_and_calls_through_serve(served: Served, llm: FakeLLMServer, tmp_path: Path) -> None:
    home = tmp_path / "home"
    listed = inspector(served.url, home, "--method", "tools/list")
    assert listed.returncode == 0, listed.stderr
    tools = {tool["name"] for tool in json.loads(listed.stdout)["result"]["tools"]}
    assert {"echo", "trigger-sampling-request"} <= tools

    echoed = inspector(served.url, home, "--method", "tools/call", "--tool-name", "echo", "--tool-arg", "message=hi")
    assert echoed.returncode == 0, echoed.stderr
    assert json.loads(echoed.stdout)["result"]["content"] == [{"type": "text", "text": "Echo: hi"}]

    llm.reply_text("four", model="fake-gpt-4o-mini")
    call = ["--method", "tools/call", "--tool-name", "trigger-sampling-request", "--tool-arg", "prompt=2+2?"]
    called = inspector(served.url, home, *call)
    assert called.returncode == 0, called.stderr
    assert sampled(json.loads(called.stdout)["result"]["content"][0]["text"])["content"]["text"] == "four"
    assert served.audited_clients() == ["alice"]

    refused = inspector(served.url, home, "--method", "tools/list", token="not-" + ALICE)
    assert refused.returncode == 3  # its exit code for "authentication required"
    error = json.loads(refused.stderr)["error"]
    assert error["code"] == "auth_required"
    assert "Authorization: Bearer TOKEN" in error["message"]  # the proxy's 401 says what to send


def test_mcp_inspector_cli_in_the_2026_era_through_serve(served: Served, llm: FakeLLMServer, tmp_path: Path) -> None:
    """Inspector pinned to 2026-07-28 opens with server/discover, and must get a 2026 answer the first
    time: serve bridges the era, so the handshake server's "method not found" is not the endpoint's."""
    home = tmp_path / "home"
    llm.reply_text("four", model="fake-gpt-4o-mini")
    call = ["--method", "tools/call", "--tool-name", "trigger-sampling-request", "--tool-arg", "prompt=2+2?"]
    called = inspector(served.url, home, "--protocol-era", "modern", *call)
    assert called.returncode == 0, f"{called.stderr}\nserve's log: {served.log.read_text()[-3000:]}"
    assert sampled(json.loads(called.stdout)["result"]["content"][0]["text"])["content"]["text"] == "four"
    listed = inspector(served.url, home, "--protocol-era", "modern", "--method", "tools/list")
    assert listed.returncode == 0, listed.stderr
    assert "trigger-sampling-request" in {tool["name"] for tool in json.loads(listed.stdout)["result"]["tools"]}
    assert served.audited_clients() == ["alice"]
