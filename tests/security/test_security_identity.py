"""Issue #10, borrowed identity: a server's own serverInfo.name never picks its rules.

Each test starts the real proxy in front of a hostile server (tests/fixtures/hostile/sampler.py)
that reports a name of its choosing and asks for a sample; the fake LLM shows whether the
proxy fulfilled it.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fakes.llm_server import FakeLLMServer
from helpers.support import PROXY, PY, ROOT, RawHost, openai_policy, proxy_command, proxy_env, write_policy

HOSTILE = ROOT / "tests" / "fixtures" / "hostile" / "sampler.py"
LOOKALIKES = ["summarizer", " summarizer", "\u0455ummarizer", "summ\u200barizer", "SUMMARIZER\u00a0"]


@pytest.fixture
def llm() -> Iterator[FakeLLMServer]:
    with FakeLLMServer("openai") as server:
        yield server


def sample_through_proxy(
    tmp_path: Path,
    llm: FakeLLMServer,
    rules: str,
    script: Path,
    reported: str,
    *options: str,
    env: dict[str, str] | None = None,
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Call the hostile server's `sample` tool through the proxy; (the server's sampling answer, audit)."""
    audit = tmp_path / "audit.jsonl"
    policy = write_policy(tmp_path, openai_policy(llm.base_url, rules=rules) + f"audit:\n  path: {audit}\n")
    command = proxy_command(policy, *options, upstream=[PY, str(script), reported])
    with RawHost(command, env or proxy_env(TEST_LLM_KEY="k"), tmp_path / "stderr.log") as host:
        host.initialize()
        response = host.request("tools/call", {"name": "sample", "arguments": {}})
    answer = json.loads(response["result"]["content"][0]["text"])
    records = [json.loads(line) for line in audit.read_text().splitlines()] if audit.exists() else []
    return answer, records


ALLOW_SUMMARIZER = (
    "rules:\n  - name: summarizer-ok\n    when: {server: summarizer}\n    action: allow\n"
    "  - name: others-no\n    action: deny\n"
)
DENY_EVIL = (
    "rules:\n  - name: no-evil\n    when: {server: evil}\n    action: deny\n  - name: rest-ok\n    action: allow\n"
)


@pytest.mark.parametrize("reported", LOOKALIKES, ids=["exact", "space", "cyrillic", "zwsp", "nbsp"])
def test_a_server_calling_itself_summarizer_gets_no_summarizer_rule(
    tmp_path: Path, llm: FakeLLMServer, reported: str
) -> None:
    llm.reply_text("should not happen")
    answer, records = sample_through_proxy(tmp_path, llm, ALLOW_SUMMARIZER, HOSTILE, reported)
    assert answer["error"]["code"] == -1
    assert not llm.requests
    assert records[-1]["server"] == "sampler"  # derived from the script, not the reported name
    assert records[-1]["rule"] == "others-no"


@pytest.mark.parametrize(
    "reported",
    ["evil ", " evil", "\u0435vil", "ev\u200bil", "summarizer"],
    ids=["trailing-space", "leading-space", "cyrillic", "zwsp", "borrowed"],
)
def test_a_denied_server_cannot_dodge_its_rule_by_renaming_itself(
    tmp_path: Path, llm: FakeLLMServer, reported: str
) -> None:
    evil = tmp_path / "evil.py"
    shutil.copy(HOSTILE, evil)
    llm.reply_text("should not happen")
    answer, records = sample_through_proxy(tmp_path, llm, DENY_EVIL, evil, reported)
    assert answer["error"]["code"] == -1
    assert not llm.requests
    assert records[-1]["rule"] == "no-evil"
    assert records[-1]["server"] == "evil"
    assert "\u200b" not in json.dumps(records[-1], ensure_ascii=False)  # the reported name is shown sanitised


def test_the_operator_name_picks_the_rule_and_the_reported_name_is_recorded(tmp_path: Path, llm: FakeLLMServer) -> None:
    llm.reply_text("fine")
    answer, records = sample_through_proxy(
        tmp_path, llm, ALLOW_SUMMARIZER, HOSTILE, "something-else", "--name", " Summarizer"
    )
    assert answer["result"]["content"]["text"] == "fine"
    assert records[-1]["server"] == "Summarizer"
    assert records[-1]["server_reported"] == "something-else"


def test_server_reported_condition_never_matches_invisible_characters(tmp_path: Path, llm: FakeLLMServer) -> None:
    rules = (
        "rules:\n  - name: narrow\n    when: {server_reported: summarizer}\n    action: allow\n"
        "  - name: others-no\n    action: deny\n"
    )
    llm.reply_text("fine")
    answer, _ = sample_through_proxy(tmp_path, llm, rules, HOSTILE, "Summarizer")
    assert answer["result"]["content"]["text"] == "fine"
    answer, records = sample_through_proxy(tmp_path, llm, rules, HOSTILE, "summ\u200barizer")
    assert answer["error"]["code"] == -1
    assert records[-1]["rule"] == "others-no"


def test_remembered_approvals_are_not_borrowed(tmp_path: Path, llm: FakeLLMServer) -> None:
    """An `always` approval for summarizer's `sample` tool does not cover a server calling itself summarizer."""
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    (state / "approvals.json").write_text(json.dumps({"always": [["summarizer", "sample"]]}))
    env = proxy_env(TEST_LLM_KEY="k", MCP_SAMPLING_PROXY_STATE_DIR=str(state))
    rules = "rules:\n  - name: ask\n    action: prompt\n"
    llm.reply_text("remembered")
    answer, _ = sample_through_proxy(tmp_path, llm, rules, HOSTILE, "anything", "--name", "summarizer", env=env)
    assert answer["result"]["content"]["text"] == "remembered"  # the real summarizer: approval remembered
    answer, _ = sample_through_proxy(tmp_path, llm, rules, HOSTILE, "summarizer", env=env)
    assert answer["error"]["code"] == -1  # nobody to ask: the borrowed name bought nothing
    assert len(llm.requests) == 1


@pytest.mark.parametrize("name", ["summ\u200barizer", "evil\x1b[2J", "", "a\u202eb"])
def test_name_with_invisible_characters_is_refused_on_the_command_line(tmp_path: Path, name: str) -> None:
    import subprocess

    done = subprocess.run(
        [*PROXY, "--name", name, "--", PY, str(HOSTILE)],
        env=proxy_env(),
        capture_output=True,
        text=True,
        timeout=30,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode != 0
    assert "--name" in done.stderr and "visible characters" in done.stderr


def test_server_rule_with_invisible_characters_is_refused_with_file_line_col(tmp_path: Path) -> None:
    from mcp_sampling_proxy.config.settings import load_settings
    from mcp_sampling_proxy.notation.yamlnodes import PolicyError

    path = write_policy(tmp_path, 'rules:\n  - name: r\n    when: {server: "summ\\u200barizer"}\n    action: allow\n')
    with pytest.raises(PolicyError) as caught:
        load_settings(path)
    assert "policy.yaml:3:" in str(caught.value) and "U+200B" in str(caught.value)


@pytest.mark.parametrize(
    ("command", "name"),
    [
        (["npx", "-y", "@acme/foo-server"], "@acme/foo-server"),
        (["python", "/srv/summarizer.py"], "summarizer"),
        (["uvx", "pkg@1.2"], "pkg"),
        (["python3", "-m", "pkg.server"], "pkg.server"),
        (["/usr/local/bin/foo-mcp", "--stdio"], "foo-mcp"),
    ],
)
def test_names_derived_from_the_command(command: list[str], name: str) -> None:
    from mcp_sampling_proxy.text.identity import derive_from_command, derive_from_url

    assert derive_from_command(command) == name
    assert derive_from_url("https://mcp.example.com/tools/mcp/") == "mcp.example.com/tools/mcp"
