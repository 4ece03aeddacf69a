"""Both protocol eras, both directions: real hosts and real servers, direct and through the proxy.

Five hosts (`mcp` 1.x: handshake only; `mcp` 2.x in auto mode and pinned to 2026-07-28; FastMCP 4's
client in auto mode; the TypeScript SDK 1.x client: handshake only) meet four servers (FastMCP 3:
handshake only, sampling and elicitation by requests of its own; FastMCP 4: both eras, sampling only
by input_required rounds; a 2026-only server on the `mcp` 2.x SDK; the reference server-everything:
handshake only). Every host declares elicitation (and answers forms with "Grace") but not sampling,
like most hosts, so in every cell the proxy's LLM should answer sampling and the host elicitation.

What must hold, cell by cell: a host that works directly works through the proxy, in the era it
speaks directly; a host that cannot connect directly (the eras do not meet) works through the proxy;
sampling reaches the proxy's LLM and elicitation reaches the host. A handshake host and a FastMCP 4
server meet in the handshake era, where FastMCP 4 cannot sample (directly its sampling tool fails):
through the proxy the call runs again over a second, 2026-07-28 connection, and elicitation by a
request of the server's own (`ctx.elicit`, handshake only) keeps working on the first: in that cell the
host's elicitation step is `ask_name_imperative`, which elicits by `ctx.elicit` alone.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from fakes.llm_server import FakeLLMServer
from helpers.npm_support import NODE_MODULES, node, node22, package_file
from helpers.peers import peer_python
from helpers.serving import Served, start_serve, stop
from helpers.support import PY, ROOT, openai_policy, proxy_env, write_policy

ERAS = ROOT / "tests" / "fixtures" / "eras"
STANDARD = {
    "plain": ["echo", {"message": "hi"}],
    "sample": ["summarize", {"text": "the sea"}],
    "elicit": ["ask_name", {}],
}
EVERYTHING = {
    "plain": ["echo", {"message": "hi"}],
    "sample": ["trigger-sampling-request", {"prompt": "the sea"}],
    "elicit": ["trigger-elicitation-request", {}],
}
HOSTS = ["mcp1", "mcp2-auto", "mcp2-2026", "fastmcp", "ts"]
SERVERS = ["fastmcp3", "fastmcp4", "modern", "everything"]
HANDSHAKE_ONLY_HOSTS = {"mcp1", "ts"}
CROSS_ERA = {("mcp1", "modern"), ("ts", "modern"), ("mcp2-2026", "fastmcp3"), ("mcp2-2026", "everything")}
"""The cells where host and server share no era: they fail directly."""
IMPERATIVE_ANSWER = (
    "elicitation:\n  auto_answers:\n"
    '    - {server: "*", tool: ask_name_imperative, action: accept, content: {name: Grace}}\n'
)
"""The policy's answer to FastMCP 4's `ctx.elicit` for a host without forms."""
IMPERATIVE = {"elicit": ["ask_name_imperative", {}]}
"""The elicitation step that asks by `ctx.elicit` alone (FastMCP 4 refuses it on a 2026-07-28 connection)."""
SAMPLED = "the sea"  # the fake LLM echoes the prompt, which quotes the tool's argument


def host_command(host: str) -> list[str]:
    if host == "mcp1":
        return [peer_python("mcp1"), str(ERAS / "mcp1_host.py")]
    if host == "fastmcp":
        return [peer_python("fastmcp4"), str(ERAS / "fastmcp_host.py")]
    if host == "ts":
        package_file("@modelcontextprotocol/sdk", "package.json")
        return [node(), str(ERAS / "ts_host.mjs")]
    return [PY, str(ERAS / "mcp2_host.py"), "--mode", "auto" if host == "mcp2-auto" else "2026-07-28"]


def server_command(server: str) -> tuple[list[str], dict[str, Any]]:
    if server == "fastmcp3":
        return [peer_python("fastmcp3"), str(ERAS / "fastmcp3_server.py")], STANDARD
    if server == "fastmcp4":
        return [peer_python("fastmcp4"), str(ERAS / "fastmcp4_server.py")], STANDARD
    if server == "modern":
        return [PY, str(ERAS / "modern_only_server.py")], STANDARD
    entry = package_file("@modelcontextprotocol/server-everything", "dist/index.js")
    return [node(), entry, "stdio"], EVERYTHING


@dataclass(frozen=True)
class Session:
    """One session of a host: its target (a server's command, a proxy's command, or a `serve` URL), the
    script it runs there, and the environment the target's process runs in (and whether the host
    declares forms: ERA_HOST_FORMS)."""

    target: list[str]
    script: dict[str, Any]
    env: dict[str, str]


def run_host(host: str, sessions: list[Session], workdir: Path) -> list[dict[str, Any]]:
    """One host process, one session (a fresh connection) per entry of `sessions`, two at a time; a
    transcript (tools, and each step's text or error) per session, in their order. The SDK is imported
    once for them all."""
    workdir.mkdir(parents=True, exist_ok=True)
    specs: list[dict[str, Any]] = [
        {"target": s.target, "script": s.script, "env": s.env, "errlog": str(workdir / f"session-{i}.log")}
        for i, s in enumerate(sessions)
    ]
    listed = workdir / "sessions.json"
    listed.write_text(json.dumps(specs), encoding="utf-8")
    done = subprocess.run(
        [*host_command(host), "--sessions", str(listed)],
        capture_output=True,
        text=True,
        env=host_env(workdir),
        cwd=ROOT,
        timeout=90 + 45 * len(sessions),
    )
    lines = done.stdout.strip().splitlines()[-len(sessions) :]
    transcripts: list[dict[str, Any]] = []
    for spec, line in zip(specs, [*lines, *[""] * (len(sessions) - len(lines))], strict=True):
        try:
            transcript: dict[str, Any] = json.loads(line)
        except ValueError:
            transcript = {"connect_error": f"no transcript (exit {done.returncode})"}
        errlog = Path(spec["errlog"])
        session_stderr = errlog.read_text(encoding="utf-8", errors="replace") if errlog.exists() else ""
        transcript["stderr"] = (session_stderr + done.stderr)[-3000:]
        transcripts.append(transcript)
    return transcripts


def host_env(tmp_path: Path, state: Path | None = None, forms: bool = True) -> dict[str, str]:
    """The environment every host (and the stdio proxy it starts) runs in."""
    return proxy_env(
        TEST_LLM_KEY="k",
        MCP_NODE_MODULES=str(NODE_MODULES),
        PYTHONWARNINGS="ignore",
        MCP_SAMPLING_PROXY_RUNTIME_DIR=str(tmp_path / "run"),
        MCP_SAMPLING_PROXY_STATE_DIR=str(state or tmp_path / "state"),
        PATH=f"{Path(node()).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        ERA_HOST_FORMS="form" if forms else "none",
    )


def direct_session(server: str, tmp_path: Path, steps: dict[str, Any] | None = None, forms: bool = True) -> Session:
    """The host straight to the server (no proxy: the directories its environment names stay unmade)."""
    command, script = server_command(server)
    return Session(command, {**script, **(steps or {})}, host_env(tmp_path / "direct", forms=forms))


def proxy_through_stdio(server: str, tmp_path: Path, llm: FakeLLMServer, extra: str = "") -> list[str]:
    """The stdio proxy's command in front of `server`, with the loopback LLM and `extra` in its policy."""
    command, _ = server_command(server)
    policy = write_policy(tmp_path, openai_policy(llm.base_url) + extra)
    return [PY, "-m", "mcp_sampling_proxy", "--log-format", "json", "--policy", policy, "--", *command]


def direct_and_proxied(
    host: str,
    server: str,
    tmp_path: Path,
    llm: FakeLLMServer,
    extra: str = "",
    steps: dict[str, Any] | None = None,
    forms: bool = True,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The host's transcript direct and through the stdio proxy (two sessions of one host process)."""
    direct = direct_session(server, tmp_path, steps, forms)
    proxy = proxy_through_stdio(server, tmp_path, llm, extra)
    proxied = Session(proxy, direct.script, host_env(tmp_path, forms=forms))
    first, second = run_host(host, [direct, proxied], tmp_path / "host")
    return first, second


def works(transcript: dict[str, Any]) -> bool:
    plain = transcript.get("plain") or {}
    return (
        "connect_error" not in transcript
        and isinstance(transcript.get("tools"), list)
        and "echo" in plain.get("text", "").lower()
        and not plain.get("is_error")
    )


def step_text(transcript: dict[str, Any], step: str) -> str:
    outcome = transcript.get(step) or {}
    return str(outcome.get("text") or outcome.get("error") or "")


@pytest.fixture(scope="module")
def one_users_state(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The state directory (the tool pins) every host of the matrix shares, as one user's hosts do: a
    tool a server offers only to some clients must not be held from the others as one that appeared."""
    return tmp_path_factory.mktemp("one-users-state")


def assert_cell(host: str, server: str, direct: dict[str, Any], proxied: dict[str, Any]) -> None:
    """What must hold for one host and server, direct and through a front of the proxy."""
    report = f"direct: {json.dumps(direct)[:2500]}\nproxied: {json.dumps(proxied)[:4000]}"
    if (host, server) in CROSS_ERA:
        assert not works(direct), f"a cross-era cell that works directly?\n{report}"
    else:
        assert works(direct), report
        # the host lands in the era it speaks directly (the proxy translates only where the eras differ)
        assert proxied.get("version") == direct.get("version"), report
        assert set(direct["tools"]) <= set(proxied["tools"]), report
    assert works(proxied), report
    # elicitation reaches the host, which answers "Grace"
    assert "Grace" in step_text(proxied, "elicit"), report
    # sampling reaches the proxy's LLM (the host cannot sample: directly it never gets an answer)
    assert SAMPLED not in step_text(direct, "sample"), report
    if host in HANDSHAKE_ONLY_HOSTS and server == "fastmcp4":
        assert "only exists at MCP 2026-07-28" in step_text(direct, "sample"), report
        # `ctx.elicit` reaches the host directly too: its handshake connection is the server's to ask on
        assert "Grace" in step_text(direct, "elicit"), report
    assert SAMPLED in step_text(proxied, "sample") and not proxied["sample"].get("is_error"), report


USER_DIRS = (
    ("XDG_CONFIG_HOME", "config"),
    ("XDG_STATE_HOME", "state"),
    ("XDG_RUNTIME_DIR", "run"),
    ("XDG_DATA_HOME", "data"),
)


class Fronts:
    """One `serve` per server, started at its first use, in front of which every host of the module goes:
    one policy, and one state directory (the tool pins) shared by every host, as one user's are."""

    def __init__(self, directory: Path, home: Path, llm: FakeLLMServer):
        self.directory, self.llm, self.served = directory, llm, dict[str, Served]()
        # the module's own user directories (the autouse ones are each test's, removed after it, while
        # a sandboxed server's data directory must outlive the test that started its `serve`)
        self.env = {variable: str(home / name) for variable, name in USER_DIRS}
        self.env |= {
            "MCP_SAMPLING_PROXY_RUNTIME_DIR": str(home / "run"),
            "MCP_SAMPLING_PROXY_STATE_DIR": str(home / "state"),
            "MCP_NODE_MODULES": str(NODE_MODULES),
            "PYTHONWARNINGS": "ignore",
            "PATH": f"{Path(node()).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        }

    def url(self, server: str) -> str:
        if server not in self.served:
            place = self.directory / server
            place.mkdir(exist_ok=True)  # a serve that did not start is started again by the next cell
            policy = write_policy(place, openai_policy(self.llm.base_url))
            command, _ = server_command(server)
            self.served[server] = start_serve(
                place, tokens=False, policy=policy, upstream=["--", *command], env=self.env
            )
        return self.served[server].url


@pytest.fixture(scope="module")
def fronts(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fronts]:
    home = Path(tempfile.mkdtemp(prefix="msp-"))  # short: console sockets live in the runtime directory
    for _, name in USER_DIRS:
        (home / name).mkdir(mode=0o700)
    with FakeLLMServer("openai") as llm:
        made = Fronts(tmp_path_factory.mktemp("fronts"), home, llm)
        try:
            yield made
        finally:
            for served in made.served.values():
                stop(served)
            shutil.rmtree(home, ignore_errors=True)


@pytest.mark.parametrize(("host", "server"), [(h, s) for h in HOSTS for s in SERVERS])
def test_era_matrix_direct_and_through_each_front(
    host: str, server: str, tmp_path: Path, llm: FakeLLMServer, one_users_state: Path, fronts: Fronts
) -> None:
    """One cell: the host straight to the server, through the stdio proxy, and over Streamable HTTP to the
    server's long-running `serve` (the host's auto mode included: it must land in the era it lands in
    directly); each front compared with the one direct transcript."""
    steps = IMPERATIVE if host in HANDSHAKE_ONLY_HOSTS and server == "fastmcp4" else None
    direct = direct_session(server, tmp_path, steps)
    stdio = Session(
        proxy_through_stdio(server, tmp_path, llm), direct.script, host_env(tmp_path, state=one_users_state)
    )
    served = Session([fronts.url(server)], direct.script, proxy_env(TEST_LLM_KEY="k", **fronts.env))
    # one host process, three sessions: each a fresh connection (and a fresh server) of its own
    transcripts = run_host(host, [direct, stdio, served], tmp_path / "host")
    failed = []
    for front, transcript in zip(["the stdio proxy", "serve"], transcripts[1:], strict=True):
        try:
            assert_cell(host, server, transcripts[0], transcript)
        except AssertionError as failure:
            failed.append(f"through {front}: {failure}")
    assert not failed, "\n\n".join(failed)


@pytest.mark.parametrize("host", sorted(HANDSHAKE_ONLY_HOSTS))
def test_handshake_hosts_without_forms_get_fastmcp4_sampling_and_imperative_elicitation_with_no_setting(
    host: str, tmp_path: Path, llm: FakeLLMServer
) -> None:
    """FastMCP 4 samples only by input_required rounds (2026-07-28) and `ctx.elicit`s only on a
    handshake connection. With no `upstream:` section a handshake host that declares no forms gets both:
    the sampling tool runs again over a 2026 connection, where the proxy's LLM answers its round; the
    elicitation goes to the policy (here an auto-answer). (With forms, the matrix's cell of the host and
    FastMCP 4: the elicitation stays a request to the host.)"""
    direct, proxied = direct_and_proxied(host, "fastmcp4", tmp_path, llm, IMPERATIVE_ANSWER, IMPERATIVE, False)
    report = f"direct: {json.dumps(direct)[:2500]}\nproxied: {json.dumps(proxied)[:4000]}"
    assert works(direct) and works(proxied), report
    assert proxied.get("version") == direct.get("version"), report
    assert "only exists at MCP 2026-07-28" in step_text(direct, "sample"), report
    assert SAMPLED in step_text(proxied, "sample") and not proxied["sample"].get("is_error"), report
    assert "Grace" in step_text(proxied, "elicit"), report
    assert "Grace" not in step_text(direct, "elicit"), report


@pytest.mark.parametrize("host", sorted(HANDSHAKE_ONLY_HOSTS))
def test_modern_pin_lets_handshake_hosts_use_a_fastmcp4_servers_sampling(
    host: str, tmp_path: Path, llm: FakeLLMServer
) -> None:
    """`upstream.era: modern`: the proxy speaks 2026-07-28 to the server and bridges the handshake host,
    so FastMCP 4's input_required sampling reaches the proxy's LLM and its elicitation the host."""
    direct, proxied = direct_and_proxied(host, "fastmcp4", tmp_path, llm, "upstream:\n  era: modern\n")
    report = f"direct: {json.dumps(direct)[:2500]}\nproxied: {json.dumps(proxied)[:4000]}"
    assert works(direct) and works(proxied), report
    assert proxied.get("version") == direct.get("version"), report
    assert SAMPLED in step_text(proxied, "sample") and not proxied["sample"].get("is_error"), report
    assert "Grace" in step_text(proxied, "elicit"), report


def test_inspector_cli_gets_fastmcp4_sampling_and_elicitation_with_no_setting(
    tmp_path: Path, llm: FakeLLMServer
) -> None:
    """MCP Inspector's CLI, a handshake host (its default), in front of FastMCP 4 over stdio: directly the
    sampling tool fails; through the proxy with no `upstream:` section it gets the proxy's LLM answer,
    and `ctx.elicit` the policy's answer (the CLI has no forms of its own)."""
    policy = write_policy(tmp_path, openai_policy(llm.base_url) + IMPERATIVE_ANSWER)
    server, _ = server_command("fastmcp4")
    launcher = package_file("@modelcontextprotocol/inspector", "clients/launcher/build/index.js")
    env = proxy_env(
        HOME=str(tmp_path),
        TEST_LLM_KEY="k",
        MCP_SAMPLING_PROXY_RUNTIME_DIR=str(tmp_path / "run"),
        MCP_SAMPLING_PROXY_STATE_DIR=str(tmp_path / "state"),
    )

    def call(target: list[str], tool: str, *arguments: str) -> subprocess.CompletedProcess[str]:
        command = [node22(), launcher, "--cli", *target, "--format", "json", "--method", "tools/call"]
        return subprocess.run(
            [*command, "--tool-name", tool, *arguments], capture_output=True, text=True, env=env, timeout=90
        )

    proxied = [PY, "-m", "mcp_sampling_proxy", "--policy", policy, "--", *server]
    direct = call(server, "summarize", "--tool-arg", "text=the sea")
    assert "only exists at MCP 2026-07-28" in direct.stdout + direct.stderr
    sampled = call(proxied, "summarize", "--tool-arg", "text=the sea")
    assert sampled.returncode == 0, sampled.stderr
    assert json.loads(sampled.stdout)["result"]["content"][0]["text"] == f"summary: echo: Summarize: {SAMPLED}"
    asked = call(proxied, "ask_name_imperative")
    assert asked.returncode == 0, asked.stderr
    assert json.loads(asked.stdout)["result"]["content"][0]["text"] == "name: Grace"
