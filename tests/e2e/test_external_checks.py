"""External checks through the real proxy: a command validator (tests/fixtures/check_validator.py) and
an HTTP one on 127.0.0.1 (tests/fakes/check_server.py) allow a sampling request; a command validator runs
without the proxy's keys, and one that crashes or runs past its deadline denies (its process group killed).
The verdicts at each stage, the keep-alive, and every other way a check fails, played in memory:
tests/unit/services/test_external_checks_played.py.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fakes.check_server import CheckServer
from fakes.llm_server import FakeLLMServer
from helpers.support import (
    PY,
    ROOT,
    alive,
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
async def test_a_validator_that_crashes_denies_with_its_status_and_stderr(tmp_path: Path, llm: FakeLLMServer) -> None:
    record = tmp_path / "seen.jsonl"
    answer = await sample(tmp_path, policy(llm, tmp_path, {"scan": command(record, "crash")}, ["scan"]))
    assert answer["error"]["message"].startswith(
        "sampling denied: check 'scan' failed (exited with status 3: validator: cannot load its rules"
    )
    assert llm.requests == []
    assert decision(tmp_path)["checks"][0]["verdict"] == "error"
