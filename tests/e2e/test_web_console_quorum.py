"""A quorum of two in a real headless Chromium: two people (two browser contexts, each with the name it
gave the page) approve one request through `console --web`, against a real proxy with `approval.quorum: 2`.
One approval leaves it waiting, the same person cannot approve twice, the second person runs it, and
the audit names both."""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest
from fakes.llm_server import FakeLLMServer
from helpers.support import RawHost, openai_policy, proxy_command, proxy_env, write_policy
from helpers.web_console import WebConsole

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="console sockets use SO_PEERCRED and /proc")

RULES = "rules:\n  - name: two-people\n    action: prompt\n"
SCREENSHOTS = os.environ.get("MCP_SAMPLING_PROXY_SCREENSHOTS")  # a directory to keep the screenshots in


def person(browser: Any, url: str, name: str | None) -> Any:
    """One person's page, in a browser context of its own, with the name they typed at the top."""
    page = browser.new_context(viewport={"width": 1400, "height": 900}).new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.errors = errors
    page.goto(url)
    if name is not None:
        page.fill("#approver", name)
        page.press("#approver", "Tab")  # the change event keeps it for this tab
    return page


def shot(page: Any, tmp_path: Path, name: str) -> Path:
    path = tmp_path / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    if SCREENSHOTS:
        shutil.copy(path, Path(SCREENSHOTS) / path.name)
    return path


def test_a_quorum_of_two_in_chromium(tmp_path: Path, dirs: dict[str, str], llm: FakeLLMServer, browser: Any) -> None:
    from playwright.sync_api import expect

    audit = tmp_path / "audit.jsonl"
    approval = "approval:\n  quorum: 2\n  channels: [console]\n  timeout: 60s\n"
    policy = write_policy(tmp_path, openai_policy(llm.base_url, rules=RULES) + approval + f"audit:\n  path: {audit}\n")
    web = WebConsole(dirs, "--policy", policy, stderr=tmp_path / "web.log")
    try:
        alice = person(browser, web.url, "alice")
        bob = person(browser, web.url, "bob")
        nameless = person(browser, web.url, None)
        with RawHost(proxy_command(policy), proxy_env(**dirs), tmp_path / "proxy.log") as host:
            host.initialize()
            for page in (alice, bob, nameless):
                page.get_by_text("1 proxy attached").wait_for(timeout=15000)
            host.send(
                {
                    "jsonrpc": "2.0",
                    "id": 2,
                    "method": "tools/call",
                    "params": {"name": "sample", "arguments": {"prompt": "ship the release to production"}},
                }
            )
            card = alice.locator("article.pending")
            expect(card).to_contain_text("Needs 2 different approvers: 0 of 2 so far", timeout=15000)
            expect(card).to_contain_text("you approve as alice")
            # a quorum offers no "for this session" or "always", and no edit: every approver sees what runs
            assert alice.get_by_role("button", name="Allow for this session").count() == 0
            assert alice.get_by_role("button", name="Edit prompt…").count() == 0

            # without a name, a person cannot be told apart from the others: refused with what to do
            nameless.get_by_role("button", name="Approve").click()
            expect(nameless.locator("article.pending .error")).to_contain_text("enter your name at the top first")

            alice.get_by_role("button", name="Approve").click()
            # one approval is not enough: the proxy asks again, naming who approved, and the call waits
            waiting = bob.locator("article.pending")
            expect(waiting).to_contain_text("1 of 2 so far (approved by console:alice)", timeout=15000)
            assert llm.requests == []

            # alice again does not count: her page refuses it and says why
            again = alice.locator("article.pending")
            expect(again).to_contain_text("1 of 2 so far", timeout=15000)
            alice.get_by_role("button", name="Approve").click()
            expect(again.locator(".error")).to_contain_text("alice approved this already")
            assert llm.requests == []

            screenshot = shot(bob, tmp_path, "quorum-one-of-two")
            assert screenshot.stat().st_size > 10_000
            bob.get_by_role("button", name="Approve").click()
            response = host.wait_for(lambda m: m.get("id") == 2 and "method" not in m, 30)
        answer = json.loads(response["result"]["content"][0]["text"])
        assert answer["content"]["text"] == "echo: ship the release to production"
        [record] = [r for line in audit.read_text().splitlines() if (r := json.loads(line)).get("event") == "decision"]
        assert record["decision"] == "approved"
        assert record["approved_by"] == ["console:alice", "console:bob"]
        line = bob.locator("ol.audit li").first
        expect(line).to_contain_text("approved by console [console:alice, console:bob]", timeout=15000)
        shot(bob, tmp_path, "quorum-approved")
        assert alice.errors == [] and bob.errors == []
    finally:
        web.close()
