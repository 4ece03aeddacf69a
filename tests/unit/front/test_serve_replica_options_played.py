"""`serve`'s options for running as one of several replicas, played in process (helpers/played_serve.py):
`--replica` (and its variable, and its default) and `--audit` (each replica's own file) in the audit record
of a sampling the session's server asks for, and `/healthz` for the balancer's checks. That the replica
reaches the telemetry spans, and a refused name's exit, are tests/e2e/test_serve_replica_options.py's.
"""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from fakes.llm_server import FakeLLMServer
from helpers.played_serve import played_serve, played_sessions
from helpers.serving import ALICE, decisions, token_file
from helpers.support import openai_policy, tool_json, write_policy

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("llm_key")]


async def sampled_once(tmp_path: Path, policy: str, *options: str) -> None:
    """One session of alice's whose server samples once, through `serve OPTIONS`."""
    async with (
        played_sessions("--token-file", token_file(tmp_path), *options, policy=policy) as served,
        served.client(ALICE) as client,
    ):
        assert "content" in tool_json(await client.call_tool("sample", {"prompt": "hi"}))


async def test_replica_and_audit_options_name_the_writer_and_its_file(tmp_path: Path, llm: FakeLLMServer) -> None:
    in_policy = tmp_path / "policy-audit.jsonl"
    policy = write_policy(tmp_path, openai_policy(llm.base_url, extra=f"audit:\n  path: {in_policy}\n"))
    own = tmp_path / "r1" / "audit.jsonl"
    own.parent.mkdir()
    await sampled_once(tmp_path, policy, "--replica", "eu-1", "--audit", str(own))
    (record,) = decisions(own)
    assert (record["replica"], record["client"], record["decision"]) == ("eu-1", "alice", "allow")
    assert not in_policy.exists()  # --audit replaces the policy's path


async def test_the_replica_defaults_to_the_variable_then_hostname_and_port(
    tmp_path: Path, llm: FakeLLMServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    audit = tmp_path / "audit.jsonl"
    policy = write_policy(tmp_path, openai_policy(llm.base_url, extra=f"audit:\n  path: {audit}\n"))
    monkeypatch.setenv("MCP_SAMPLING_PROXY_REPLICA", "from-env")
    await sampled_once(tmp_path, policy, "--listen", "127.0.0.1:8411")
    monkeypatch.delenv("MCP_SAMPLING_PROXY_REPLICA")
    await sampled_once(tmp_path, policy, "--listen", "127.0.0.1:8411")
    assert [r["replica"] for r in decisions(audit)] == ["from-env", f"{socket.gethostname()}:8411"]


async def test_healthz_answers_without_a_token_and_tells_nothing(tmp_path: Path) -> None:
    async with played_serve("--token-file", token_file(tmp_path), "--replica", "secret-name") as served:
        health = await served.http.get("/healthz")
        head = await served.http.head("/healthz")
        mcp = await served.http.get("/mcp")
        posted = await served.http.post("/healthz", content=b"{}")
    assert (health.status_code, health.text, head.status_code) == (200, "ok\n", 200)
    assert "secret-name" not in health.text + str(health.headers) + str(head.headers)
    assert health.headers["cache-control"] == "no-store"
    assert mcp.status_code == 401  # the endpoint itself still wants the token
    assert posted.status_code == 404
