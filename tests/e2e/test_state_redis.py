"""Limits shared on Redis (`state: {backend: redis}`): a real redis-server, real proxy processes.

Three proxies of the same server, each flooded with 200 concurrent sampling requests by a
hostile server (tests/fixtures/hostile/sampling_flood.py), share one rate limit, one concurrency
limit or one token budget through Redis: the counts are exact and the budget is never overrun.
When Redis cannot be reached, the policy decides (deny, naming the URL, or this proxy's own limits)
and everything else is still relayed: played in memory, tests/unit/quotas/test_redis_unreachable_played.py.
A usd budget on Redis is kept apart from the token budget of the
same key. The `state:` section's mistakes, in process: tests/unit/quotas/test_state_section.py.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any

import anyio
import pytest
from fakes.llm_server import FakeLLMServer
from helpers.support import PY, ROOT, RawHost, openai_policy, proxy_command, proxy_env, write_policy

from mcp_sampling_proxy.quotas.limiters import usd_micros
from mcp_sampling_proxy.quotas.redis_store import RedisQuotas, read_budgets
from mcp_sampling_proxy.quotas.refusals import USD, Refusal, Reservation

FLOOD = str(ROOT / "tests" / "fixtures" / "hostile" / "sampling_flood.py")
HANG = 120.0  # only stops a hang; no test asserts a timing
SAMPLE = {"messages": [{"role": "user", "content": {"type": "text", "text": "hi"}}], "maxTokens": 20}
# a 2026-07-28 era host that can sample (tests/fixtures/modern_raw_server.py asks for input in rounds)
MODERN_SERVER = [PY, str(ROOT / "tests" / "fixtures" / "modern_raw_server.py")]
MODERN_META = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientCapabilities": {"sampling": {}},
    "io.modelcontextprotocol/clientInfo": {"name": "modern-host", "version": "1"},
}
# the per-proxy queue must not refuse first, nor the cap per call (each flood is one tool call)
GATE = "sampling:\n  max_concurrent: 16\n  max_queued: 512\n  max_per_call: 1000\n"


def state(url: str, on_error: str = "deny") -> str:
    return f"state:\n  backend: redis\n  url: {url}\n  prefix: 'test:'\n  on_state_error: {on_error}\n"


def start(tmp_path: Path, policy: str, name: str) -> RawHost:
    path = write_policy(tmp_path, policy, f"{name}.yaml")
    env = proxy_env(
        TEST_LLM_KEY="k",
        MCP_SAMPLING_PROXY_STATE_DIR=str(tmp_path / name / "state"),
        MCP_SAMPLING_PROXY_RUNTIME_DIR=str(tmp_path / name / "run"),
    )
    host = RawHost(proxy_command(path, upstream=[PY, FLOOD]), env, tmp_path / f"{name}.stderr.log")
    host.initialize()
    return host


def flood_all(tmp_path: Path, policy: str, proxies: int = 3, count: int = 200) -> list[dict[str, Any]]:
    """`count` concurrent sampling requests from each of `proxies` proxies (separate state dirs, as
    on separate machines); their summaries: ok, error codes and messages."""
    hosts = [start(tmp_path, policy, f"proxy{n}") for n in range(proxies)]
    try:
        for n, host in enumerate(hosts):
            host.send(
                {
                    "jsonrpc": "2.0",
                    "id": f"flood-{n}",
                    "method": "tools/call",
                    "params": {"name": "flood", "arguments": {"count": count, "params": SAMPLE}},
                }
            )
        return [
            json.loads(host.wait_for(lambda m, n=n: m.get("id") == f"flood-{n}", HANG)["result"]["content"][0]["text"])
            for n, host in enumerate(hosts)
        ]
    finally:
        for host in hosts:
            host.close()


def redis_cli(url: str, *args: str) -> str:
    from redis import Redis

    client = Redis.from_url(url, decode_responses=True)
    try:
        return str(client.execute_command(*args))  # type: ignore[no-untyped-call]
    finally:
        client.close()


def test_a_rate_limit_admits_exactly_its_count_across_three_proxies(
    tmp_path: Path, redis_url: str, llm: FakeLLMServer
) -> None:
    rules = "rules:\n  - name: shared\n    action: allow\n    rate_limit: {requests: 50, per: 1h}\n"
    summaries = flood_all(tmp_path, openai_policy(llm.base_url, extra=GATE + state(redis_url), rules=rules))
    assert sum(s["ok"] for s in summaries) == 50
    assert sum(int(c) for s in summaries for c in s["codes"].values()) == 550
    messages = [m for s in summaries for m in s["messages"]]
    assert all("rate limit of rule 'shared' exceeded: 50 requests per 1h" in m for m in messages), messages[:3]
    assert len(llm.requests) == 50


def test_a_token_budget_is_never_overrun_across_three_proxies(
    tmp_path: Path, redis_url: str, llm: FakeLLMServer
) -> None:
    llm.usage_mode = "chars"  # input characters + maxTokens: close to the reservation, so overruns would show
    llm.default_delay = 0.05
    budget = 3000
    rules = f"rules:\n  - name: shared\n    action: allow\n    budget: {{tokens: {budget}, per: 1d}}\n"
    summaries = flood_all(tmp_path, openai_policy(llm.base_url, extra=GATE + state(redis_url), rules=rules))
    served = sum(s["ok"] for s in summaries)
    assert served >= 1
    assert served + sum(int(c) for s in summaries for c in s["codes"].values()) == 600
    assert all("token budget of rule 'shared'" in m for s in summaries for m in s["messages"])
    key = "test:{budget:shared@sampling_flood}"
    used = int(redis_cli(redis_url, "HGET", key, "used"))
    assert used == served * 22  # what the fake LLM reported: 2 characters read + 20 output
    assert used <= budget
    assert redis_cli(redis_url, "HLEN", key + ":tok") == "0"  # every reservation settled or released
    assert len(llm.requests) == served


def test_a_concurrency_limit_holds_across_three_proxies(tmp_path: Path, redis_url: str, llm: FakeLLMServer) -> None:
    llm.default_delay = 0.2  # calls overlap
    rules = "rules:\n  - name: shared\n    action: allow\n    rate_limit: {concurrent: 2}\n"
    summaries = flood_all(tmp_path, openai_policy(llm.base_url, extra=GATE + state(redis_url), rules=rules), count=20)
    assert sum(s["ok"] for s in summaries) >= 2
    assert llm.max_open <= 2  # never more than two LLM calls at once, whichever proxy made them
    assert all("concurrency limit of rule 'shared' reached" in m for s in summaries for m in s["messages"])
    assert redis_cli(redis_url, "EXISTS", "test:{slots:shared@sampling_flood}") in ("0", "1")
    assert redis_cli(redis_url, "ZCARD", "test:{slots:shared@sampling_flood}") == "0"  # every slot given back


def test_a_dead_proxys_reservation_and_slot_expire(redis_url: str) -> None:
    """A proxy that dies mid-call never settles: its reservation and its slot stop counting once
    they expire, so nothing leaks forever."""
    from mcp_sampling_proxy.quotas import redis_store
    from mcp_sampling_proxy.quotas.refusals import Refusal, Reservation

    async def scenario() -> None:
        store = redis_store.RedisQuotas(redis_url, "dead:", reservation_ttl=0.5)
        held = await store.reserve("k", 100, 3600, 80, rule="r")
        assert isinstance(held, Reservation)
        refused = await store.reserve("k", 100, 3600, 80, rule="r")
        assert isinstance(refused, Refusal) and "80 reserved by requests in progress" in refused.message
        await anyio.sleep(0.7)
        assert isinstance(await store.reserve("k", 100, 3600, 80, rule="r"), Reservation)
        await store.aclose()

    anyio.run(scenario)


def test_a_missing_url_env_stops_the_proxy_with_what_to_set(tmp_path: Path) -> None:
    path = write_policy(tmp_path, "state:\n  backend: redis\n  url_env: TEAM_REDIS_URL\n")
    done = subprocess.run(
        proxy_command(path, upstream=[PY, FLOOD]),
        capture_output=True,
        text=True,
        timeout=60,
        env=proxy_env(),
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 2
    assert "TEAM_REDIS_URL is not set" in done.stderr and "redis://HOST:6379/0" in done.stderr
    assert done.stdout == ""


def test_sampling_hosts_answer_counts_in_the_shared_rate_window(
    tmp_path: Path, llm: FakeLLMServer, redis_url: str
) -> None:
    """With `state: redis`, sampling a 2026-era host answers is admitted by the proxy's own window
    (that check cannot wait for Redis) and then counted in the shared one, so the fleet's limit sees
    it: another proxy for the same server (handshake era, the proxy's own LLM) finds the window full."""
    from helpers.support import sdk_host, tool_json

    rules = (
        "rules:\n  - name: two-a-minute\n    when: {method: sampling}\n    action: allow\n"
        "    rate_limit: {requests: 2, per: 1m}\n"
    )
    state = f"state:\n  backend: redis\n  url: {redis_url}\n  prefix: 'fleet:'\n"
    modern = tmp_path / "modern"
    modern.mkdir()
    modern_policy = write_policy(
        modern,
        openai_policy(llm.base_url, rules=rules)
        + state
        + "elicitation: {non_interactive: accept_defaults}\nupstream:\n  era: any\n",
    )
    modern_env = proxy_env(TEST_LLM_KEY="k", MCP_SAMPLING_PROXY_STATE_DIR=str(modern / "state"))
    with RawHost(
        proxy_command(modern_policy, "--name", "shared", upstream=MODERN_SERVER), modern_env, modern / "stderr.log"
    ) as h:
        rounds = [h.request("tools/call", {"name": "mixed", "arguments": {}, "_meta": MODERN_META}) for _ in range(2)]
        h.close_stdin()  # a clean end: the counts still on their way to Redis are waited for
        assert h.wait() == 0
    assert all("s" in r["result"]["inputRequests"] for r in rounds)  # both shown to the host
    assert redis_cli(redis_url, "ZCARD", "fleet:{rate:two-a-minute@shared}") == "2"

    classic = tmp_path / "classic"
    classic.mkdir()
    policy = write_policy(classic, openai_policy(llm.base_url, rules=rules) + state)
    env = proxy_env(TEST_LLM_KEY="k", MCP_SAMPLING_PROXY_STATE_DIR=str(classic / "state"))

    async def sample() -> Any:
        async with sdk_host(proxy_command(policy, "--name", "shared"), env, classic / "stderr.log") as client:
            return tool_json(await client.call_tool("sample", {"prompt": "hi"}))

    result = anyio.run(sample)
    assert "rate limit of rule 'two-a-minute' exceeded" in result["error"]["message"]
    assert llm.requests == []

    # A new proxy whose own window is empty: it lets the host answer one (its check cannot wait for
    # Redis), learns from the count that the shared window is full, and admits no more until it has room.
    again = modern / "again.log"
    with RawHost(proxy_command(modern_policy, "--name", "shared", upstream=MODERN_SERVER), modern_env, again) as h:
        first = h.request("tools/call", {"name": "mixed", "arguments": {}, "_meta": MODERN_META})
        deadline = time.monotonic() + 10
        while "the shared rate window was full" not in again.read_text() and time.monotonic() < deadline:
            time.sleep(0.05)
        second = h.request("tools/call", {"name": "mixed", "arguments": {}, "_meta": MODERN_META})
    assert "s" in first["result"]["inputRequests"]
    assert "s" not in second["result"]["inputRequests"]  # the proxy kept it, and refuses it with the limit


@pytest.mark.anyio
async def test_a_usd_budget_on_redis_is_kept_apart_and_read_back_for_the_console(redis_url: str) -> None:
    store = RedisQuotas(redis_url, "money:")
    try:
        tokens = await store.reserve("r@s", 1000, 86400, 900, rule="r")
        money = await store.reserve("r@s", usd_micros(5), 86400, usd_micros(4.5), rule="r", unit=USD)
        assert isinstance(tokens, Reservation) and isinstance(money, Reservation)
        await store.settle(money, usd_micros(0.25))
        await store.settle(tokens, 300)
        refused = await store.reserve("r@s", usd_micros(5), 86400, usd_micros(4.8), rule="r", unit=USD)
        assert isinstance(refused, Refusal)
        assert refused.message.startswith(
            "usd budget of rule 'r' exhausted: $0.25 of $5.00 spent in this 1d window; $4.75 left"
        )
    finally:
        await store.aclose()
    assert read_budgets(redis_url, "money:", unit=USD)["r@s"]["used"] == 250_000
    assert read_budgets(redis_url, "money:")["r@s"]["used"] == 300
