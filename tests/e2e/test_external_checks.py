"""External checks through the real proxy: a command validator (tests/fixtures/check_validator.py) and
an HTTP one on 127.0.0.1 (tests/fakes/check_server.py) allow, deny and modify a sampling request and
its answer; a validator that hangs, crashes, answers garbage or cannot be reached denies (fail-closed),
unless its check says on_error: allow."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import mcp_types as types
import pytest
from fakes.check_server import Answer, CheckServer
from fakes.llm_server import FakeLLMServer
from helpers.support import (
    PROXY,
    PY,
    ROOT,
    RawHost,
    alive,
    free_port,
    openai_policy,
    proxy_command,
    proxy_env,
    sdk_host,
    tool_json,
)
from helpers.support import write_policy as write

KEY = "sk-test-key-never-logged-0123456789"
TOKEN = "check-token-0123456789abcdef"
VALIDATOR = str(ROOT / "tests" / "fixtures" / "check_validator.py")
PROMPT = "Is 42 prime?"


@pytest.fixture
def llm() -> Iterator[FakeLLMServer]:
    with FakeLLMServer("openai") as server:
        yield server


@pytest.fixture
def http_check() -> Iterator[CheckServer]:
    with CheckServer() as server:
        yield server


def command(record: Path, mode: str, text: str = "") -> str:
    return f"    command: {json.dumps([PY, VALIDATOR, str(record), mode, *([text] if text else [])])}\n"


def policy(llm: FakeLLMServer, tmp_path: Path, checks: dict[str, str], names: list[str]) -> str:
    """A policy whose one rule runs the `checks` (name -> the entry's lines) named in `names`."""
    section = "checks:\n" + "".join(f"  {name}:\n{lines}" for name, lines in checks.items())
    rules = f"rules:\n  - name: checked\n    check: {json.dumps(names)}\n    action: allow\n"
    audit = f"audit:\n  path: {tmp_path / 'audit.jsonl'}\n"
    return write(tmp_path, openai_policy(llm.base_url, extra=section + audit, rules=rules))


async def sample(tmp_path: Path, policy_file: str, prompt: str = PROMPT) -> dict[str, Any]:
    """What the server's `sample` tool got: {"content", ...} or {"error": {"code", "message"}}."""
    env = proxy_env(TEST_LLM_KEY=KEY, CHECK_TOKEN=TOKEN)
    async with sdk_host(proxy_command(policy_file), env, tmp_path / "stderr.log") as client:
        answer: dict[str, Any] = tool_json(await client.call_tool("sample", {"prompt": prompt, "max_tokens": 50}))
        return answer


def decision(tmp_path: Path) -> dict[str, Any]:
    """The one decision record of the run."""
    lines = (tmp_path / "audit.jsonl").read_text().splitlines()
    records = [r for r in map(json.loads, lines) if r.get("event") == "decision"]
    assert len(records) == 1
    record: dict[str, Any] = records[0]
    return record


def seen(record: Path) -> list[dict[str, Any]]:
    """What the command validator was given, one entry per run."""
    return [json.loads(line) for line in record.read_text().splitlines()]


@pytest.mark.anyio
async def test_allowing_checks_get_the_documented_request_and_no_keys(
    tmp_path: Path, llm: FakeLLMServer, http_check: CheckServer
) -> None:
    record = tmp_path / "seen.jsonl"
    llm.reply_text("No: 42 = 2 x 3 x 7.")
    checks = {
        "scan": command(record, "allow"),
        "remote": f"    url: {http_check.url}\n    headers: {{Authorization: 'Bearer ${{CHECK_TOKEN}}'}}\n",
    }
    answer = await sample(tmp_path, policy(llm, tmp_path, checks, ["scan", "remote"]))
    assert answer["content"]["text"] == "No: 42 = 2 x 3 x 7."
    audited = decision(tmp_path)
    (run,) = seen(record)
    document = run["document"]
    assert document["version"] == 1
    assert document["stage"] == "request"
    assert (document["server"], document["tool"], document["rule"]) == (audited["server"], "sample", "checked")
    assert document["request"]["messages"] == [{"role": "user", "content": {"type": "text", "text": PROMPT}}]
    assert document["request"]["maxTokens"] == 50
    assert "answer" not in document
    # the validator runs without the proxy's LLM key, and without the token its own policy entry names
    assert "TEST_LLM_KEY" not in run["env"]
    assert "CHECK_TOKEN" not in run["env"]
    (posted,) = http_check.received
    assert posted.headers["authorization"] == f"Bearer {TOKEN}"
    assert posted.body == document
    assert audited["decision"] == "allow"
    assert [(c["name"], c["stage"], c["verdict"]) for c in audited["checks"]] == [
        ("scan", "request", "allow"),
        ("remote", "request", "allow"),
    ]
    assert all(isinstance(c["duration_ms"], int) for c in audited["checks"])


@pytest.mark.anyio
async def test_a_deny_refuses_the_request_with_the_validators_reason(tmp_path: Path, llm: FakeLLMServer) -> None:
    record = tmp_path / "seen.jsonl"
    checks = {"scan": command(record, "deny", "the prompt holds a card number")}
    answer = await sample(tmp_path, policy(llm, tmp_path, checks, ["scan"]))
    assert answer["error"]["code"] == -1
    assert answer["error"]["message"] == "sampling denied by check 'scan': the prompt holds a card number"
    assert llm.requests == []  # the LLM never saw it
    audited = decision(tmp_path)
    assert audited["decision"] == "deny"
    assert audited["reason"] == answer["error"]["message"]
    assert audited["checks"][0]["verdict"] == "deny"
    assert audited["checks"][0]["reason"] == "the prompt holds a card number"
    tail = subprocess.run(
        [*PROXY, "audit", "tail", str(tmp_path / "audit.jsonl")], capture_output=True, text=True, check=True
    )
    assert "deny (rule checked)  checks scan deny  reason: sampling denied by check 'scan'" in tail.stdout


@pytest.mark.anyio
async def test_a_request_stage_modify_is_what_the_llm_sees(tmp_path: Path, llm: FakeLLMServer) -> None:
    record = tmp_path / "seen.jsonl"
    llm.reply_text("Yes.")
    checks = {"scan": command(record, "modify", "Is 43 prime?")}
    answer = await sample(tmp_path, policy(llm, tmp_path, checks, ["scan"]))
    assert answer["content"]["text"] == "Yes."
    assert llm.last.body["messages"] == [{"role": "user", "content": "Is 43 prime?"}]
    audited = decision(tmp_path)
    assert audited["prompt_edited_by"] == "check scan"
    assert audited["checks"][0]["verdict"] == "modify"


@pytest.mark.anyio
async def test_an_answer_stage_modify_is_what_the_server_gets(
    tmp_path: Path, llm: FakeLLMServer, http_check: CheckServer
) -> None:
    llm.reply_text("Your card is 4111 1111 1111 1111.")
    http_check.verdict({"verdict": "modify", "text": "Your card is [removed].", "reason": "card number"})
    checks = {"remote": f"    url: {http_check.url}\n    stage: answer\n"}
    answer = await sample(tmp_path, policy(llm, tmp_path, checks, ["remote"]))
    assert answer["content"] == {"type": "text", "text": "Your card is [removed]."}
    (posted,) = http_check.received  # stage answer: not asked about the request
    assert posted.body["stage"] == "answer"
    assert posted.body["answer"]["content"]["text"] == "Your card is 4111 1111 1111 1111."
    assert posted.body["request"]["messages"][0]["content"]["text"] == PROMPT
    audited = decision(tmp_path)
    assert audited["answer_edited_by"] == "check remote"
    assert audited["original_answer_sha256"]
    assert audited["checks"] == [
        {
            "name": "remote",
            "stage": "answer",
            "verdict": "modify",
            "reason": "card number",
            "duration_ms": audited["checks"][0]["duration_ms"],
        }
    ]


@pytest.mark.anyio
async def test_an_answer_stage_deny_keeps_the_answer_from_the_server(
    tmp_path: Path, llm: FakeLLMServer, http_check: CheckServer
) -> None:
    llm.reply_text("Here is how to pick the lock.")
    checks = {"remote": f"    url: {http_check.url}\n    stage: both\n"}
    http_check.answer(Answer())  # the request stage allows; the answer stage denies
    http_check.verdict({"verdict": "deny", "reason": "unsafe answer"})
    answer = await sample(tmp_path, policy(llm, tmp_path, checks, ["remote"]))
    assert "pick the lock" not in json.dumps(answer)
    assert answer["error"]["message"] == "sampling denied by check 'remote': unsafe answer"
    assert len(llm.requests) == 1
    audited = decision(tmp_path)
    assert (audited["decision"], audited["provider"]) == ("deny", "fake")
    assert audited["original_answer_sha256"]
    assert [(c["stage"], c["verdict"]) for c in audited["checks"]] == [("request", "allow"), ("answer", "deny")]


@pytest.mark.anyio
async def test_checks_apply_when_the_host_samples_itself(
    tmp_path: Path, llm: FakeLLMServer, http_check: CheckServer
) -> None:
    """A host that can sample answers the request itself: the checks still see its prompt and its answer."""
    asked: list[types.CreateMessageRequestParams] = []

    async def host_llm(context: Any, params: types.CreateMessageRequestParams) -> types.CreateMessageResult:
        asked.append(params)
        return types.CreateMessageResult(
            role="assistant", content=types.TextContent(text="Yes, 43 is prime."), model="host-model"
        )

    http_check.verdict({"verdict": "modify", "text": "Is 43 prime?"})
    http_check.verdict({"verdict": "modify", "text": "[checked] yes"})
    checks = {"remote": f"    url: {http_check.url}\n    stage: both\n"}
    env = proxy_env(TEST_LLM_KEY=KEY)
    policy_file = policy(llm, tmp_path, checks, ["remote"])
    async with sdk_host(proxy_command(policy_file), env, tmp_path / "stderr.log", sampling_callback=host_llm) as client:
        answer = tool_json(await client.call_tool("sample", {"prompt": PROMPT, "max_tokens": 50}))
    assert answer["content"] == {"type": "text", "text": "[checked] yes"}
    (message,) = asked[0].messages
    assert isinstance(message.content, types.TextContent) and message.content.text == "Is 43 prime?"
    assert http_check.received[1].body["answer"]["content"]["text"] == "Yes, 43 is prime."
    assert llm.requests == []
    audited = decision(tmp_path)
    assert (audited["provider"], audited["prompt_edited_by"], audited["answer_edited_by"]) == (
        "host",
        "check remote",
        "check remote",
    )


@pytest.mark.anyio
async def test_a_slow_check_keeps_the_hosts_tool_call_alive(tmp_path: Path, llm: FakeLLMServer) -> None:
    record = tmp_path / "seen.jsonl"
    llm.reply_text("No.")
    checks = {"scan": command(record, "slow")}
    section = "".join(f"  {name}:\n{lines}" for name, lines in checks.items())
    rules = "rules:\n  - name: checked\n    check: [scan]\n    action: allow\n"
    extra = f"sampling:\n  keepalive_seconds: 0.25\nchecks:\n{section}"
    policy_file = write(tmp_path, openai_policy(llm.base_url, extra=extra, rules=rules))
    messages: list[str | None] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        messages.append(message)

    async with sdk_host(proxy_command(policy_file), proxy_env(TEST_LLM_KEY=KEY), tmp_path / "stderr.log") as client:
        result = await client.call_tool("sample", {"prompt": PROMPT}, progress_callback=on_progress)
    assert tool_json(result)["content"]["text"] == "No."
    assert "waiting for check scan" in messages


@pytest.mark.anyio
async def test_a_validator_past_its_deadline_denies_and_its_process_group_is_killed(
    tmp_path: Path, llm: FakeLLMServer
) -> None:
    record = tmp_path / "seen.jsonl"
    checks = {"scan": command(record, "sleep") + "    timeout: 1s\n"}
    answer = await sample(tmp_path, policy(llm, tmp_path, checks, ["scan"]))
    assert answer["error"]["message"] == (
        "sampling denied: check 'scan' failed (did not answer within 1s and was stopped), "
        "and a failed check denies (on_error: deny)"
    )
    assert llm.requests == []
    validator, child = map(int, Path(f"{record}.pids").read_text().split())
    deadline = time.monotonic() + 5
    while (alive(validator) or alive(child)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(validator) and not alive(child)  # the validator and what it started
    audited = decision(tmp_path)
    assert (audited["checks"][0]["verdict"], audited["checks"][0]["on_error"]) == ("error", "deny")


@pytest.mark.anyio
async def test_on_error_allow_lets_the_request_through_a_failed_check(tmp_path: Path, llm: FakeLLMServer) -> None:
    record = tmp_path / "seen.jsonl"
    llm.reply_text("No.")
    checks = {"scan": command(record, "sleep") + "    timeout: 0.5s\n    on_error: allow\n"}
    answer = await sample(tmp_path, policy(llm, tmp_path, checks, ["scan"]))
    assert answer["content"]["text"] == "No."
    audited = decision(tmp_path)
    assert audited["decision"] == "allow"
    assert audited["checks"][0]["verdict"] == "error"
    assert audited["checks"][0]["on_error"] == "allow"
    assert "did not answer within 0.5s" in audited["checks"][0]["reason"]


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("kind", "why"),
    [
        ("garbage", "answered something that is not one JSON verdict: 'looks fine to me'"),
        ("crash", "exited with status 3: validator: cannot load its rules"),
        ("unknown-verdict", "its verdict 'maybe' is not one of allow, deny, modify"),
        ("text-on-allow", "its allow verdict has a text, which only a modify verdict takes"),
        ("redirect", "answered HTTP 302, a redirect, which is not followed"),
        ("unreachable", "cannot be reached: ConnectError"),
    ],
)
async def test_a_validator_without_a_valid_verdict_denies(
    tmp_path: Path, llm: FakeLLMServer, http_check: CheckServer, kind: str, why: str
) -> None:
    record = tmp_path / "seen.jsonl"
    if kind in ("garbage", "crash"):
        entry = command(record, kind)
    elif kind == "unreachable":
        entry = f"    url: http://127.0.0.1:{free_port()}/check\n"
    else:
        entry = f"    url: {http_check.url}\n"
        answers = {
            "unknown-verdict": Answer(body=b'{"verdict": "maybe"}'),
            "text-on-allow": Answer(body=b'{"verdict": "allow", "text": "x"}'),
            "redirect": Answer(status=302, body=b"", location="http://127.0.0.1:1/"),
        }
        http_check.answer(answers[kind])
    answer = await sample(tmp_path, policy(llm, tmp_path, {"scan": entry}, ["scan"]))
    assert answer["error"]["message"].startswith(f"sampling denied: check 'scan' failed ({why}")
    assert llm.requests == []
    assert decision(tmp_path)["checks"][0]["verdict"] == "error"


MODERN_SERVER = [PY, str(ROOT / "tests" / "fixtures" / "modern_raw_server.py")]
MODERN_HOST_THAT_SAMPLES = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientCapabilities": {"sampling": {}},
    "io.modelcontextprotocol/clientInfo": {"name": "modern-host", "version": "1"},
}


def test_a_checked_request_is_never_left_to_a_2026_host_that_could_sample(tmp_path: Path, llm: FakeLLMServer) -> None:
    """In the 2026-07-28 era the proxy may leave a round's sampling to a host that samples; a rule with
    checks keeps it, so the host cannot answer past them."""
    record = tmp_path / "seen.jsonl"
    checks = {"scan": command(record, "deny", "not with this prompt")}
    policy_file = policy(llm, tmp_path, checks, ["scan"])
    with open(policy_file, "a", encoding="utf-8") as f:
        f.write("upstream:\n  era: auto\n")
    with RawHost(
        proxy_command(policy_file, upstream=MODERN_SERVER), proxy_env(TEST_LLM_KEY=KEY), tmp_path / "stderr.log"
    ) as h:
        call = {"name": "mixed", "arguments": {}, "_meta": MODERN_HOST_THAT_SAMPLES}
        first = h.request("tools/call", call)
        assert set(first["result"]["inputRequests"]) == {"r"}  # the sampling request is not shown to the host
        retry = {**call, "requestState": first["result"]["requestState"], "inputResponses": {"r": {"roots": []}}}
        final = h.request("tools/call", retry)
    assert "sampling denied by check 'scan': not with this prompt" in final["error"]["message"]
    assert len(seen(record)) == 1
    assert llm.requests == []
