"""`serve` past one machine: three replicas behind HAProxy, their limits shared on Redis.

Real parts only: three `serve` processes (each on an address of its own, 127.0.0.2-4, as three
machines would be, each with its own `--replica` name, `--audit` file, state and runtime dirs),
HAProxy running `deploy/haproxy.cfg` (the documented file, with the test's addresses put in), a
private redis-server holding the policy's rate limit, the `mcp` SDK's Streamable HTTP client through
the balancer, the small server sampling behind each replica, and a loopback LLM.
"""

from __future__ import annotations

import json
import re
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import AsyncExitStack, asynccontextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from fakes.llm_server import FakeLLMServer
from helpers.support import (
    PROXY,
    PY,
    ROOT,
    SMALL_SERVER,
    first_text,
    openai_policy,
    proxy_env,
    server_children,
    tool_json,
    write_policy,
)
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp_types import ElicitResult

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.skipif(
        shutil.which("haproxy") is None, reason="haproxy is not installed (.ci/run installs the Debian package haproxy)"
    ),
]

TEMPLATE = ROOT / "deploy" / "haproxy.cfg"
ADDRESSES = ("127.0.0.2", "127.0.0.3", "127.0.0.4")  # three "machines" on loopback
CALLERS = [f"c{i}" for i in range(6)]
LIMIT = 5  # sampling requests per hour, shared by every replica through Redis


def token(caller: str) -> str:
    return f"{caller}-token-0123456789abcdef"


@dataclass
class Replica:
    name: str
    process: subprocess.Popen[bytes]
    address: str
    port: int
    audit: Path
    errlog: Path

    def records(self) -> list[dict[str, Any]]:
        if not self.audit.exists():
            return []
        return [r for r in map(json.loads, self.audit.read_text().splitlines()) if r.get("event") == "decision"]


@dataclass
class Cluster:
    url: str
    replicas: list[Replica]
    haproxy_log: Path

    def holder(self) -> Replica:
        """The one replica running a session's server (for tests with one session open)."""
        (found,) = [r for r in self.replicas if r.process.poll() is None and server_children(r.process.pid)]
        return found


def port_on(address: str) -> int:
    with socket.socket() as s:
        s.bind((address, 0))
        return int(s.getsockname()[1])


def wait_for(check: Any, what: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def healthy(url: str) -> bool:
    try:
        return httpx2.get(url, timeout=1).status_code == 200
    except httpx2.HTTPError:
        return False


def haproxy_config(port: int, replicas: list[Replica]) -> str:
    """deploy/haproxy.cfg with the test's frontend address and servers in place of the example's."""
    text = TEMPLATE.read_text(encoding="utf-8")
    binds = re.findall(r"(?m)^\s+bind \S+$", text)
    assert len(binds) == 1, "deploy/haproxy.cfg: one bind line"
    text = text.replace(binds[0], f"    bind 127.0.0.1:{port}")
    by_name = {r.name: f"{r.address}:{r.port}" for r in replicas}
    named = re.findall(r"(?m)^\s+server (\S+) \S+$", text)
    assert sorted(set(named)) == sorted(by_name), f"deploy/haproxy.cfg names servers {named}"
    return re.sub(r"(?m)^(\s+server (\S+)) \S+$", lambda m: f"{m[1]} {by_name[m[2]]}", text)


@asynccontextmanager
async def cluster(tmp_path: Path, policy: str) -> AsyncIterator[Cluster]:
    """Three `serve` replicas and HAProxy in front of them; everything stopped at the end."""
    for address in ADDRESSES:
        try:
            port_on(address)
        except OSError as exc:
            pytest.skip(f"cannot bind {address} (all of 127.0.0.0/8 is loopback on Linux): {exc}")
    tokens = tmp_path / "tokens"
    tokens.write_text("".join(f"{c}:{token(c)}\n" for c in CALLERS), encoding="utf-8")
    tokens.chmod(0o600)
    replicas: list[Replica] = []
    balancer: subprocess.Popen[bytes] | None = None
    front = port_on("127.0.0.1")  # the balancer's: the Host its callers send, which each replica must accept
    try:
        for index, address in enumerate(ADDRESSES, 1):
            name, port = f"r{index}", port_on(address)
            home = tmp_path / name
            home.mkdir()
            errlog = home / "serve.log"
            command = [*PROXY, "serve", "--log-format", "json", "--listen", f"{address}:{port}"]
            command += ["--replica", name, "--audit", str(home / "audit.jsonl"), "--token-file", str(tokens)]
            command += ["--allow-host", f"127.0.0.1:{front}"]  # on loopback, Host is checked (DNS rebinding)
            command += ["--policy", policy, "--", PY, SMALL_SERVER]
            env = proxy_env(
                TEST_LLM_KEY="sk-test",
                MCP_SAMPLING_PROXY_STATE_DIR=str(home / "state"),
                MCP_SAMPLING_PROXY_RUNTIME_DIR=str(home / "run"),
            )
            with open(errlog, "ab") as err:
                process = subprocess.Popen(command, env=env, stdout=err, stderr=err)
            replicas.append(Replica(name, process, address, port, home / "audit.jsonl", errlog))
        for r in replicas:
            wait_for(
                lambda r=r: r.process.poll() is not None or healthy(f"http://{r.address}:{r.port}/healthz"),
                f"{r.name} to listen",
            )
            assert r.process.poll() is None, f"{r.name} exited: {r.errlog.read_text()}"
        config = tmp_path / "haproxy.cfg"
        config.write_text(haproxy_config(front, replicas), encoding="utf-8")
        haproxy_log = tmp_path / "haproxy.log"
        with open(haproxy_log, "ab") as out:
            balancer = subprocess.Popen(["haproxy", "-f", str(config), "-db"], stdout=out, stderr=out)
        wait_for(
            lambda: (
                balancer is not None and (balancer.poll() is not None or healthy(f"http://127.0.0.1:{front}/healthz"))
            ),
            "haproxy to listen",
        )
        assert balancer.poll() is None, f"haproxy exited: {haproxy_log.read_text()}"
        yield Cluster(f"http://127.0.0.1:{front}/mcp", replicas, haproxy_log)
    finally:
        if balancer is not None:
            balancer.terminate()
            balancer.wait(10)
        for r in replicas:
            if r.process.poll() is None:
                r.process.send_signal(signal.SIGTERM)
        for r in replicas:
            with suppress(subprocess.TimeoutExpired):
                r.process.wait(15)
            if r.process.poll() is None:
                r.process.kill()


@asynccontextmanager
async def session(url: str, caller: str) -> AsyncIterator[Client]:
    """A handshake-era SDK session through the balancer, as `caller`."""
    async with (
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {token(caller)}"}, timeout=30) as http,
        Client(streamable_http_client(url, http_client=http), mode="legacy") as client,
    ):
        yield client


def policy(tmp_path: Path, llm: FakeLLMServer, redis_url: str, rule: str) -> str:
    extra = (
        "audit:\n  path: unused.jsonl\n  content: full\n"  # each replica's --audit replaces the path
        f"state:\n  backend: redis\n  url: {redis_url}\n  prefix: 'replicas-test:'\n"
    )
    return write_policy(tmp_path, openai_policy(llm.base_url, extra=extra, rules=f"rules:\n{rule}"))


@pytest.fixture
def llm() -> Iterator[FakeLLMServer]:
    with FakeLLMServer("openai") as server:
        yield server


def outcome(result: Any) -> str:
    """What the client saw of one `sample` call: allow (an answer) or the refusal's limit."""
    payload = tool_json(result)
    if "error" in payload:
        return f"deny:{payload['error'].get('data', {}).get('limit')}"
    return "allow"


def prompt_of(record: dict[str, Any]) -> str:
    (message,) = record["content"]["messages"]
    return str(message["message"]["content"]["text"])


async def test_sessions_and_callers_stick_limits_are_exact_and_every_decision_is_audited_once(
    tmp_path: Path, llm: FakeLLMServer, redis_url: str
) -> None:
    handshake, modern = CALLERS[:3], CALLERS[3:]
    rules = (
        f"  - name: ask\n    when: {{client: [{', '.join(modern)}]}}\n    action: prompt\n"
        f"  - name: metered\n    action: allow\n    rate_limit: {{requests: {LIMIT}, per: 1h}}\n"
        "approval:\n  channels: [host]\nupstream:\n  era: handshake\n"
    )
    seen: dict[str, str] = {}  # prompt -> what its client saw
    asked: list[str] = []

    async def approver(context: Any, params: Any) -> ElicitResult:
        asked.append(params.message)
        return ElicitResult(action="accept", content={"approve": True})

    async def sample(client: Client, prompt: str) -> None:
        seen[prompt] = outcome(await client.call_tool("sample", {"prompt": prompt}))

    async def modern_caller(name: str) -> None:
        """A 2026-07-28 client: no session, but each approval is an input_required round whose retry
        only the asking replica knows (round robin here fails: 'Invalid or expired requestState')."""
        async with (
            httpx2.AsyncClient(headers={"Authorization": f"Bearer {token(name)}"}, timeout=30) as http,
            Client(streamable_http_client(served.url, http_client=http), elicitation_callback=approver) as client,
        ):
            assert client.session.protocol_version == "2026-07-28"
            for n in range(2):
                await sample(client, f"{name}-{n}")

    async with cluster(tmp_path, policy(tmp_path, llm, redis_url, rules)) as served:
        async with AsyncExitStack() as stack:
            clients = [await stack.enter_async_context(session(served.url, c)) for c in handshake]
            # (a) many requests of each session, interleaved: each reaches the replica holding it
            for round_ in range(10):
                for caller, client in zip(handshake, clients, strict=True):
                    result = await client.call_tool("echo", {"text": f"{caller} {round_}"})
                    assert not result.is_error and first_text(result) == f"{caller} {round_}"
            holders = {r.name for r in served.replicas if server_children(r.process.pid)}
            assert len(holders) >= 2, f"the balancer spread no sessions: {holders}"

            # (b) LIMIT + 4 sampling requests at once, from sessions on different replicas: exactly LIMIT pass
            async with anyio.create_task_group() as tg:
                for caller, client in zip(handshake, clients, strict=True):
                    for n in range(3):
                        tg.start_soon(sample, client, f"{caller}-{n}")
        # 2026-07-28 callers, each with approval rounds: every round comes back to the replica asking
        async with anyio.create_task_group() as tg:
            for name in modern:
                tg.start_soon(modern_caller, name)
    metered = [seen[p] for p in seen if p.split("-")[0] in handshake]
    assert metered.count("allow") == LIMIT and metered.count("deny:rate_limit") == len(metered) - LIMIT, seen
    assert [seen[p] for p in seen if p.split("-")[0] in modern] == ["allow"] * 6 and len(asked) == 6
    assert len(llm.requests) == LIMIT + 6

    # (d) every decision a client saw is in exactly one replica's audit file, naming that replica
    found: dict[str, list[tuple[str, dict[str, Any]]]] = {}
    for replica in served.replicas:
        for record in replica.records():
            assert record["replica"] == replica.name
            found.setdefault(prompt_of(record), []).append((replica.name, record))
    assert set(found) == set(seen)
    for prompt, where in found.items():
        assert len(where) == 1, f"{prompt} recorded {len(where)} times"
        (_, record), decision = where[0], seen[prompt]
        assert record["client"] == prompt.split("-")[0]
        expected = {"allow": "allow", "approved": "allow"}.get(record["decision"], f"deny:{record.get('limit')}")
        assert expected == decision
        assert record["decision"] == ("approved" if record["client"] in modern else record["decision"])
    replicas_used = {where[0][0] for where in found.values()}
    assert len(replicas_used) >= 2
    by_caller = {record["client"]: name for where in found.values() for name, record in where}
    assert all(by_caller[c] == name for where in found.values() for name, r in where for c in [r["client"]])

    # `audit summary` over the three files: a table per replica, adding up to what the clients saw
    files = [str(r.audit) for r in served.replicas]
    summarised = subprocess.run([*PROXY, "audit", "summary", "--json", *files], capture_output=True, text=True)
    summary = json.loads(summarised.stdout)
    assert sum(entry["allowed"] for entry in summary["replicas"].values()) == LIMIT + 6
    assert set(summary["replicas"]) == replicas_used
    verified = subprocess.run([*PROXY, "audit", "verify", *files], capture_output=True, text=True)
    assert verified.returncode == 0, verified.stdout + verified.stderr


async def test_a_dead_replica_gives_its_session_a_clear_error_and_new_sessions_go_elsewhere(
    tmp_path: Path, llm: FakeLLMServer, redis_url: str
) -> None:
    rule = "  - name: open\n    action: allow\n"
    async with cluster(tmp_path, policy(tmp_path, llm, redis_url, rule)) as served:
        async with session(served.url, "c0") as client:
            assert first_text(await client.call_tool("echo", {"text": "before"})) == "before"
            holder = served.holder()
            llm.reply_text("never sent", delay=60)  # the LLM holds the call: it is in flight on the holder
            failure: list[BaseException] = []

            async def in_flight() -> None:
                try:
                    await client.call_tool("sample", {"prompt": "mid-call"})
                except Exception as exc:
                    failure.append(exc)

            with anyio.fail_after(30):  # a hang fails the test here, not at pytest's timeout
                async with anyio.create_task_group() as tg:
                    tg.start_soon(in_flight)
                    await anyio.to_thread.run_sync(lambda: wait_for(lambda: len(llm.requests) == 1, "the LLM call"))
                    holder.process.kill()
            (error,) = failure  # the SDK's words: its answer's stream broke off, and resuming it elsewhere failed
            assert isinstance(error, MCPError) and "SSE stream ended" in str(error), repr(error)
            with anyio.fail_after(30), pytest.raises(MCPError, match=r"no such session .* initialize again"):
                await client.call_tool("echo", {"text": "after"})  # another replica: the session is gone
        # a new session works through the balancer, on a live replica
        async with session(served.url, "c1") as client:
            assert first_text(await client.call_tool("echo", {"text": "again"})) == "again"
            assert served.holder() is not holder
