"""`state: redis` with nobody listening at its URL, played in memory (tests/helpers/playbook.py): by default a
request a shared limit governs is refused, naming the URL without its password and the setting that lets it
through; with `on_state_error: allow_local` it is served under this proxy's own limits. The real relay and
services, the real Redis client reaching a closed port on 127.0.0.1. Limits shared by proxies on a real
Redis: tests/e2e/test_state_redis.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fakes.llm_server import FakeLLMServer
from helpers.playbook import Playbook
from helpers.support import free_port, openai_policy
from structlog.testing import capture_logs

pytestmark = pytest.mark.anyio
SAMPLE = {"messages": [{"role": "user", "content": {"type": "text", "text": "hi"}}], "maxTokens": 20}


@pytest.fixture(autouse=True)
def llm_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TEST_LLM_KEY", "k")


def state(url: str, on_error: str) -> str:
    return f"state:\n  backend: redis\n  url: {url}\n  prefix: 'test:'\n  on_state_error: {on_error}\n"


async def one_request(play: Playbook) -> tuple[dict[str, Any], dict[str, Any]]:
    """One sampling request, then the host's ping: (the server's answer, the host's)."""
    await play.handshake({})
    answer = await play.sample(SAMPLE)
    play.serve_with(lambda message: [{"jsonrpc": "2.0", "id": message["id"], "result": {}}])
    return answer, await play.host_asks("ping", {})


async def test_redis_unreachable_denies_by_default_and_names_the_url(tmp_path: Path, llm: FakeLLMServer) -> None:
    url = f"redis://:hunter2-secret@127.0.0.1:{free_port()}/0"  # nothing listens there
    rules = "rules:\n  - name: shared\n    action: allow\n    rate_limit: {requests: 5, per: 1m}\n"
    with capture_logs() as logs:
        async with Playbook(tmp_path, openai_policy(llm.base_url, extra=state(url, "deny"), rules=rules)) as play:
            answer, ping = await one_request(play)
    message = answer["error"]["message"]
    assert f"redis://:***@127.0.0.1:{url.rsplit(':', 1)[1]}" in message  # the URL, without its password
    assert "hunter2-secret" not in message
    assert "state.on_state_error: deny" in message and "allow_local" in message
    assert ping["result"] == {}  # everything else is still relayed
    assert llm.requests == []
    assert "hunter2-secret" not in repr(logs) + repr(play.audit())


async def test_redis_unreachable_with_allow_local_uses_this_proxys_own_limits(
    tmp_path: Path, llm: FakeLLMServer
) -> None:
    url = f"redis://127.0.0.1:{free_port()}/0"
    rules = (
        "rules:\n  - name: shared\n    action: allow\n    rate_limit: {requests: 5, per: 1m}\n    "
        "budget: {tokens: 10000, per: 1d}\n"
    )
    with capture_logs() as logs:
        async with Playbook(
            tmp_path, openai_policy(llm.base_url, extra=state(url, "allow_local"), rules=rules)
        ) as play:
            answer, _ = await one_request(play)
    assert answer["result"]["content"]["text"].startswith("echo:")
    assert any("shared limits store unavailable" in str(entry.get("event")) for entry in logs), logs
