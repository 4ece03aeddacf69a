"""Money in the web console, in Chromium: a pending request under a usd budget shows what is left of it
(its own worst case already reserved), and once approved its cost shows in the audit line, the
per-server usage and the budgets table."""

from __future__ import annotations

import re
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from fakes.llm_server import FakeLLMServer
from helpers.browser import CHROMIUM
from helpers.support import PY, RawHost, openai_policy, proxy_command, proxy_env, write_policy

pytestmark = pytest.mark.skipif(
    CHROMIUM is None,
    reason="no chromium on PATH: install the Debian package (apt-get install -y chromium; .ci/run "
    "does) to drive the web console in a real browser",
)

RULES = "rules:\n  - name: ask\n    action: prompt\n    budget: {usd: 2, per: 1d}\n"


@pytest.fixture
def console(tmp_path: Path, dirs: dict[str, str], llm: FakeLLMServer) -> Iterator[tuple[str, Path]]:
    """`console --web --no-open` for a policy with a usd budget: its URL, and the policy file."""
    audit = tmp_path / "audit.jsonl"
    policy = write_policy(
        tmp_path, openai_policy(llm.base_url, model="gpt-4o", rules=RULES) + f"audit:\n  path: {audit}\n"
    )
    proc = subprocess.Popen(
        [PY, "-m", "mcp_sampling_proxy", "console", "--web", "--no-open", "--policy", policy],
        env=proxy_env(**dirs),
        stdout=subprocess.PIPE,
        stderr=(tmp_path / "web.log").open("wb"),
        stdin=subprocess.DEVNULL,
    )
    assert proc.stdout is not None
    url = proc.stdout.readline().decode().strip()
    assert urlsplit(url).hostname == "127.0.0.1", url
    try:
        yield url, Path(policy)
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_the_console_shows_the_money_left_and_what_the_request_cost(
    console: tuple[str, Path], browser: Any, dirs: dict[str, str], llm: FakeLLMServer, tmp_path: Path
) -> None:
    url, policy = console
    llm.reply_text("Paris.", usage=(20_000, 10_000))  # gpt-4o: 20,000 x $2.50 + 10,000 x $10 per million = $0.15
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.goto(url)
    with RawHost(proxy_command(str(policy)), proxy_env(**dirs), tmp_path / "proxy.log") as host:
        host.initialize()
        page.get_by_text("1 proxy attached").wait_for(timeout=15000)
        host.send(
            {
                "jsonrpc": "2.0",
                "id": 2,
                "method": "tools/call",
                "params": {"name": "sample", "arguments": {"prompt": "Capital?", "max_tokens": 100_000}},
            }
        )
        card = page.locator("article.pending")
        card.wait_for(timeout=15000)
        # its worst case (100,000 output tokens at $10 per million, and its input) is reserved already
        text = card.inner_text()
        assert re.search(r"budget left \$1\.00 of \$2\.00 per 1d \(\$1\.00 reserved by requests in progress\)", text), (
            text
        )
        page.get_by_role("button", name="Allow once").click()
        response = host.wait_for(lambda m: m.get("id") == 2 and "method" not in m, 30)
        assert response["result"].get("isError") is not True, response
        line = page.locator("ol.audit li").first
        line.wait_for(timeout=15000)
        assert "fake/gpt-4o 20000+10000 tokens $0.15 " in line.inner_text()  # (the page collapses spaces)
        page.locator("#usage tbody tr").first.wait_for(timeout=10000)
        assert "$0.15" in page.locator("#usage").inner_text()
        page.reload()
        row = page.locator("#budgets tbody tr").first
        row.wait_for(timeout=10000)
        assert re.search(r"ask\s+\$0\.15\s+\$0\.00\s+\$2\.00 / 1d\s+\$1\.85", row.inner_text()), row.inner_text()
    assert errors == []
