"""`serve`'s client sessions played in process (helpers/played_serve.py `played_sessions`): the SDK's real
Client and raw HTTP against the endpoint `serve` builds, each session's server played in memory. What a
session gets (its calls, progress, sampling), that sessions never share a server, and how one ends (its
server exits, it idles, the cap refuses the next)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest
from fakes.llm_server import FakeLLMServer
from helpers.played_serve import ACCEPT, INITIALIZE, NO_SUCH_SESSION, played_sessions
from helpers.serving import ALICE, BOB, token_file
from helpers.support import first_text, openai_policy, tool_json, write_policy

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("llm_key")]


def sampling_policy(tmp_path: Path, llm: FakeLLMServer) -> str:
    return write_policy(tmp_path, openai_policy(llm.base_url, extra=f"audit:\n  path: {tmp_path / 'audit.jsonl'}\n"))


async def until(condition: object, timeout: float = 5.0) -> None:
    """Wait (in this loop) until `condition()` holds."""
    with anyio.fail_after(timeout):
        while not condition():  # type: ignore[operator]
            await anyio.sleep(0.01)


def with_session(session: str, token: str = ALICE) -> dict[str, str]:
    return {
        "Accept": ACCEPT,
        "Content-Type": "application/json",
        "Authorization": f"Bearer {token}",
        "Mcp-Session-Id": session,
    }


async def test_a_client_lists_calls_and_samples_through_the_endpoint(tmp_path: Path, llm: FakeLLMServer) -> None:
    llm.reply_text("four", model="fake-gpt-4o-mini")
    async with (
        played_sessions("--token-file", token_file(tmp_path), policy=sampling_policy(tmp_path, llm)) as served,
        served.client(ALICE) as client,
    ):
        names = {tool.name for tool in (await client.list_tools()).tools}
        assert {"echo", "sample"} <= names
        assert first_text(await client.call_tool("echo", {"text": "over http"})) == "over http"
        answer = tool_json(await client.call_tool("sample", {"prompt": "2+2?"}))
        assert answer["content"]["text"] == "four"
        assert answer["model"] == "fake-gpt-4o-mini"
        assert "2+2?" in json.dumps(llm.last.body["messages"][-1])
        (record,) = served.audit()
        assert record["client"] == "alice"
        assert record["decision"] == "allow"
        assert record["method"] == "sampling/createMessage"


async def test_progress_reaches_the_client_on_its_calls_stream(tmp_path: Path) -> None:
    seen: list[float] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append(progress)

    async with played_sessions("--token-file", token_file(tmp_path)) as served, served.client(ALICE) as client:
        result = await client.call_tool("progress", {"steps": 3}, progress_callback=on_progress)
    assert first_text(result) == "done 3 steps"
    assert seen == [1, 2, 3]


async def test_two_clients_get_two_separate_servers(tmp_path: Path) -> None:
    async with played_sessions("--token-file", token_file(tmp_path)) as served:
        async with served.client(ALICE) as alice, served.client(BOB) as bob:
            await alice.call_tool("echo", {"text": "a"})
            await bob.call_tool("echo", {"text": "b"})
            assert len(served.running()) == 2  # a server each
            calls = [
                [m["params"]["arguments"] for m in s.got if m.get("method") == "tools/call"] for s in served.servers
            ]
            assert calls == [[{"text": "a"}], [{"text": "b"}]]
        await until(lambda: served.running() == [])  # DELETE at the end ends each server


async def test_another_clients_session_id_is_not_found(tmp_path: Path) -> None:
    async with played_sessions("--token-file", token_file(tmp_path)) as served:
        opened = await served.initialize(ALICE)
        listing = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
        stolen = await served.http.post(
            served.url, json=listing, headers=with_session(opened.headers["mcp-session-id"], BOB)
        )
        assert opened.status_code == 200
        assert stolen.status_code == 404
        assert stolen.json()["error"]["message"] == NO_SUCH_SESSION
        assert [message["method"] for message in served.servers[0].got] == ["initialize"]  # bob's never reached it


async def test_a_server_that_exits_ends_its_session_only(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    async with (
        played_sessions("--token-file", token_file(tmp_path)) as served,
        served.client(ALICE) as alice,
        served.client(BOB) as bob,
    ):
        await alice.list_tools()
        await bob.list_tools()
        crashed, kept = served.servers
        with pytest.raises(Exception, match="exited with code 3"):
            await alice.call_tool("crash", {"code": 3})
        assert crashed.code == 3
        assert first_text(await bob.call_tool("echo", {"text": "still here"})) == "still here"
        assert served.running() == [kept]
    assert "exited with code 3" in capsys.readouterr().err


async def test_past_the_session_cap_a_new_session_gets_503(tmp_path: Path) -> None:
    async with played_sessions("--token-file", token_file(tmp_path), "--max-sessions", "1") as served:
        first = await served.initialize(ALICE)
        second = await served.initialize(ALICE)
        await served.http.delete(served.url, headers=with_session(first.headers["mcp-session-id"]))
        await until(lambda: served.running() == [] and not served.front.sessions)
        third = await served.initialize(ALICE)
    assert first.status_code == 200 and third.status_code == 200
    assert second.status_code == 503
    assert "--max-sessions" in second.json()["error"]["message"]
    assert len(served.servers) == 2  # the refused one started none


async def test_an_idle_session_ends_with_its_server(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    async with played_sessions("--token-file", token_file(tmp_path), "--idle-timeout", "0.3s") as served:
        opened = await served.initialize(ALICE)
        assert opened.status_code == 200
        (server,) = served.servers
        await until(lambda: not server.running)
        later = await served.http.post(
            served.url,
            json={"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
            headers=with_session(opened.headers["mcp-session-id"]),
        )
    assert later.status_code == 404
    assert "idle for 0.3 s (--idle-timeout)" in capsys.readouterr().err


async def test_a_session_that_is_used_does_not_idle_out(tmp_path: Path) -> None:
    """The idle timeout counts from the last request, not from the opening: a session in use keeps its server."""
    async with (
        played_sessions("--token-file", token_file(tmp_path), "--idle-timeout", "0.5s") as served,
        served.client(ALICE) as client,
    ):
        for _ in range(4):
            await anyio.sleep(0.2)
            assert first_text(await client.call_tool("echo", {"text": "here"})) == "here"
        assert len(served.servers) == 1 and served.servers[0].running


async def test_an_initialize_that_cannot_take_an_event_stream_gets_406_and_starts_no_server(tmp_path: Path) -> None:
    async with played_sessions("--token-file", token_file(tmp_path)) as served:
        refused = await served.http.post(
            served.url,
            json=INITIALIZE,
            headers={"Authorization": f"Bearer {ALICE}", "Accept": "application/json"},
        )
        opened = await served.initialize(ALICE)
    assert refused.status_code == 406
    assert refused.json()["error"]["message"] == (
        "Not Acceptable: Client must accept both application/json and text/event-stream"
    )
    assert opened.status_code == 200
    assert len(served.servers) == 1  # the refused request started none


async def test_a_rate_limit_counts_every_session_of_one_serve(tmp_path: Path, llm: FakeLLMServer) -> None:
    """Rate and concurrency limits count per proxy process (the policy reference): a rule's 2 a minute is
    2 for the whole `serve`, so neither a second client nor a new session of the same one gets a third."""
    rules = "rules:\n  - name: everyone\n    action: allow\n    rate_limit: {requests: 2, per: 1m}\n"
    audit = f"audit:\n  path: {tmp_path / 'audit.jsonl'}\n"
    policy = write_policy(tmp_path, openai_policy(llm.base_url, extra=audit, rules=rules))
    async with played_sessions("--token-file", token_file(tmp_path), policy=policy) as served:
        async with served.client(ALICE) as alice:
            for _ in range(2):
                assert "content" in tool_json(await alice.call_tool("sample", {"prompt": "hi"}))
        async with served.client(ALICE) as again, served.client(BOB) as bob:
            for client in (again, bob):
                refused = await client.call_tool("sample", {"prompt": "hi"})
                assert "rate limit of rule 'everyone'" in json.dumps(tool_json(refused)), tool_json(refused)
    assert [record["decision"] for record in served.audit()] == ["allow", "allow", "deny", "deny"]


async def test_the_llm_calls_at_once_are_bounded_for_the_whole_serve(tmp_path: Path, llm: FakeLLMServer) -> None:
    """`sampling.max_concurrent` is the LLM calls this proxy makes at once: for `serve`, across its
    sessions. With one slot and no queue, a second client's request while the first one's LLM call runs
    is refused as busy, not given a slot of its own."""
    llm.default_delay = 1.0
    extra = f"audit:\n  path: {tmp_path / 'audit.jsonl'}\nsampling:\n  max_concurrent: 1\n  max_queued: 0\n"
    policy = write_policy(tmp_path, openai_policy(llm.base_url, extra=extra))
    answers: dict[str, str] = {}

    async def sample(name: str, client: Any, after: float) -> None:
        await anyio.sleep(after)
        answers[name] = json.dumps(tool_json(await client.call_tool("sample", {"prompt": "hi"})))

    async with (
        played_sessions("--token-file", token_file(tmp_path), policy=policy) as served,
        served.client(ALICE) as alice,
        served.client(BOB) as bob,
        anyio.create_task_group() as tg,
    ):
        tg.start_soon(sample, "alice", alice, 0.0)
        tg.start_soon(sample, "bob", bob, 0.4)  # while alice's call is with the LLM
    assert "echo: hi" in answers["alice"]
    assert "LLM calls are in progress (sampling.max_concurrent)" in answers["bob"], answers["bob"]


class _Unreachable:
    """A server whose output cannot be read: attaching to it fails, as a broken pipe would."""

    label = "unreachable"
    reader = writer = None
    stopped = False

    async def attach(self, on_line: Any, on_eof: Any, *, max_line: int = 0, on_oversize: Any = None) -> None:
        raise OSError("its output cannot be read")

    def send(self, line: bytes) -> None:
        raise AssertionError("nothing is sent to a server whose session never started")

    async def wait(self, timeout: float) -> int | None:
        return None

    async def stop(self, grace: float, term_wait: float = 2.0) -> int | None:
        self.stopped = True
        return None

    def describe_end(self, code: int | None) -> str:
        return "was stopped"


async def test_a_session_that_fails_as_it_starts_gets_502_and_its_server_is_stopped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    broken = _Unreachable()
    headers = {"Accept": ACCEPT, "Content-Type": "application/json", "Authorization": f"Bearer {ALICE}"}
    async with played_sessions("--token-file", token_file(tmp_path)) as served:
        served.front._start_upstream = lambda: broken
        answer = await served.http.post(served.url, json=INITIALIZE, headers=headers)
        assert served.front.sessions == {}
    assert answer.status_code == 502 and "the session could not start" in answer.text
    assert broken.stopped
    err = capsys.readouterr().err
    assert "failed; ending it" in err and "its output cannot be read" in err
