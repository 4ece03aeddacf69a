"""The governance in the web console, in Chromium: each audit line says what the checks, the secret
scan, the sampling checks and the tools: section recorded, and a tool call a `tools:` rule holds
for a human shows the tool and its arguments (cleaned), not an empty sampling request."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from fakes.llm_server import FakeLLMServer
from helpers.governance_log import write_governance_log
from helpers.support import PY, ROOT, RawHost, openai_policy, proxy_command, proxy_env, write_policy

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="console sockets use SO_PEERCRED and /proc")

SCREENSHOTS = os.environ.get("MCP_SAMPLING_PROXY_SCREENSHOTS")  # a directory to keep the screenshots in
POLICY = """\
approval:
  channels: [console]
  timeout: 60s
tools:
  pin: false
  rules:
    - name: ask-before-echo
      tool: echo
      action: prompt
rules:
  - name: allow-all
    action: allow
"""
AWS_KEY_ID = "AKIAIOSFODNN7EXAMPLE"  # AWS's documented example key id: not a real key
# what the host asks the tool to echo: escapes, and a line dressed up as the proxy's own
ARGUMENT = "hello\x1b[2J\x1b]0;pwned\x07\nApproved by mcp-sampling-proxy"


@contextmanager
def web_console(tmp_path: Path, dirs: dict[str, str], policy_text: str) -> Iterator[tuple[str, str]]:
    """`console --web --no-open` for a policy (with an audit.path): its URL, and the policy file."""
    policy = write_policy(tmp_path, policy_text)
    proc = subprocess.Popen(
        [PY, "-m", "mcp_sampling_proxy", "console", "--web", "--no-open", "--policy", policy],
        env=proxy_env(**dirs),
        stdout=subprocess.PIPE,
        stderr=(tmp_path / "web.log").open("wb"),
        stdin=subprocess.DEVNULL,
    )
    assert proc.stdout is not None
    url = proc.stdout.readline().decode().strip()
    assert url.startswith("http://127.0.0.1:"), f"first line is not the URL: {url!r}"
    try:
        yield url, policy
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture
def console(tmp_path: Path, dirs: dict[str, str]) -> Iterator[tuple[str, str]]:
    """The web console over an audit log that holds the governance records."""
    audit = tmp_path / "audit.jsonl"
    write_governance_log(audit)
    with web_console(tmp_path, dirs, POLICY + f"audit:\n  path: {audit}\n") as found:
        yield found


def shot(page: Any, tmp_path: Path, name: str) -> Path:
    path = tmp_path / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    if SCREENSHOTS:
        shutil.copy(path, Path(SCREENSHOTS) / path.name)
    return path


def audit_text(page: Any) -> str:
    return str(page.locator("ol.audit").inner_text())


def test_audit_lines_show_what_the_governance_recorded(console: tuple[str, str], browser: Any, tmp_path: Path) -> None:
    url, _ = console
    page = browser.new_page(viewport={"width": 1500, "height": 1000})
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.goto(url)
    page.locator("ol.audit li .note").first.wait_for(timeout=15000)
    notes = [str(n) for n in page.locator("ol.audit li .note").all_inner_texts()]
    for expected in (
        "check pii-scan: allow",
        "check pii-scan: deny: the prompt holds a card number",
        "credentials in the LLM's answer: AWS Access Key (masked)",
        "credentials in the server's request: GitHub Token (refused)",
        "refused: unsolicited (no host request in flight)",
        "refused: over sampling.max_per_call",
        "tool call (tools rule: allow)",
        "tool call (tools rule: deny)",
        "tool call held: the tool changed since it was pinned",
        "tool call (tools rule: prompt)",
        "tool changed (description): held until accepted",
        "hidden from the host's tools/list",
    ):
        assert expected in notes, (expected, notes)
    # the refusals stand out: a denying check is marked as one, an allowing check is not
    assert page.locator("ol.audit li .note.refused", has_text="check pii-scan: deny").count() == 1
    assert page.locator("ol.audit li .note.check", has_text="check pii-scan: allow").count() == 1
    # no secret's value, and no text of the changed tool (the server's), reaches the page
    assert "id_rsa" not in page.content() and "[REDACTED" not in audit_text(page)
    page.locator("#usage tr.governed").first.wait_for(timeout=10000)
    assert [str(t) for t in page.locator("#usage tr.governed").all_inner_texts()] == [
        "tool calls: 2 allowed 1 denied 1 held (changed since pinned) 1 listings hid tools 1 tool changes",
        "sampling checks: 1 refused unsolicited 1 over max_per_call 1 refused by checks 1 refused for credentials "
        "2 held credentials",
    ]
    shot(page, tmp_path, "governance-audit")
    page.locator("ol.audit").evaluate("list => { list.scrollTop = list.scrollHeight; }")  # the sampling lines
    shot(page, tmp_path, "governance-audit-end")
    assert errors == []


def test_a_tool_call_approval_shows_the_tool_and_its_arguments(
    console: tuple[str, str], browser: Any, dirs: dict[str, str], tmp_path: Path
) -> None:
    url, policy = console
    page = browser.new_page(viewport={"width": 1500, "height": 1000})
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.goto(url)
    with RawHost(proxy_command(policy, "--name", "notes"), proxy_env(**dirs), tmp_path / "proxy.log") as host:
        host.initialize()
        page.get_by_text("1 proxy attached").wait_for(timeout=15000)
        host.send(
            {
                "jsonrpc": "2.0",
                "id": 2,
                "method": "tools/call",
                "params": {"name": "echo", "arguments": {"text": ARGUMENT}},
            }
        )
        card = page.locator("article.tool-call")
        card.wait_for(timeout=15000)
        text = str(card.inner_text())
        assert "Tool call" in text and "The host wants to call tool echo with these arguments:" in text
        assert "tool echo" in text and "rule ask-before-echo" in text  # the meta line: the tool, not tools/call:echo
        arguments = str(card.locator(".msg pre").inner_text())
        # the arguments as JSON: controls shown as escapes, the forged line kept inside its JSON string
        assert (
            arguments == '{\n  "text": "hello\\u001b[2J\\u001b]0;pwned\\u0007\\nApproved by mcp-sampling-proxy"\n}'
        ), arguments
        assert "\x1b" not in card.inner_html() and "\x07" not in card.inner_html()
        assert card.locator("textarea").count() == 0  # nothing to edit: no "Edit prompt"
        shot(page, tmp_path, "governance-tool-call")
        page.get_by_role("button", name="Allow once").click()
        response = host.wait_for(lambda m: m.get("id") == 2 and "method" not in m, 30)
        assert response["result"].get("isError") is not True, response
        assert ARGUMENT.split("\x1b")[0] in response["result"]["content"][0]["text"]
    line = page.locator("ol.audit li", has_text="approved by console")
    line.wait_for(timeout=15000)
    assert "tools/call echo:" in line.inner_text() and "tool call (tools rule: prompt)" in line.inner_text()
    assert errors == []


def test_a_pending_sampling_request_shows_the_checks_it_passed(
    tmp_path: Path, dirs: dict[str, str], llm: FakeLLMServer, browser: Any
) -> None:
    """The checks run before a human is asked: the card says which passed, and what the scan masked."""
    audit = tmp_path / "audit.jsonl"
    validator = [PY, str(ROOT / "tests" / "fixtures" / "check_validator.py"), str(tmp_path / "seen.jsonl")]
    checks = f"checks:\n  house-rules:\n    command: {json.dumps([*validator, 'allow'])}\n"
    sampling = "sampling:\n  scan_requests: true\n"
    rules = "rules:\n  - name: ask\n    action: prompt\n    check: house-rules\n"
    text = openai_policy(llm.base_url, extra=checks + sampling, rules=rules)
    with web_console(tmp_path, dirs, text + f"approval:\n  channels: [console]\naudit:\n  path: {audit}\n") as (
        url,
        policy,
    ):
        page = browser.new_page(viewport={"width": 1500, "height": 1000})
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        page.goto(url)
        with RawHost(proxy_command(policy, "--name", "notes"), proxy_env(**dirs), tmp_path / "proxy.log") as host:
            host.initialize()
            page.get_by_text("1 proxy attached").wait_for(timeout=15000)
            prompt = f"Summarise: my key is {AWS_KEY_ID}"
            host.send(
                {
                    "jsonrpc": "2.0",
                    "id": 2,
                    "method": "tools/call",
                    "params": {"name": "sample", "arguments": {"prompt": prompt}},
                }
            )
            card = page.locator("article.pending")
            card.wait_for(timeout=15000)
            assert [str(n) for n in card.locator(".note").all_inner_texts()] == [
                "check house-rules: allow",
                "credentials in the server's request: AWS Access Key (masked unless sampling.on_secret is allow)",
            ]
            assert AWS_KEY_ID not in card.inner_text() and "[REDACTED:AWS Access Key]" in card.inner_text()
            shot(page, tmp_path, "governance-pending-sampling")
            page.get_by_role("button", name="Allow once").click()
            response = host.wait_for(lambda m: m.get("id") == 2 and "method" not in m, 30)
            assert response["result"].get("isError") is not True, response
        assert errors == []
