"""getting-started's sample of `audit tail` has the columns the command prints.

The proxy, a real process, answers the summarizer's sampling request with a loopback LLM speaking
OpenAI's format as gpt-4o-mini (which the proxy has a price for); then `audit tail` runs as the page
says. The page's line and the printed one must hold the same columns in the same order: the values
(time, decision, numbers) differ, their kinds do not.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from fakes.llm_server import FakeLLMServer
from helpers.support import EXAMPLES, PROXY, PY, ROOT, proxy_command, proxy_env, sdk_host, write_policy

pytestmark = pytest.mark.anyio

PAGE = ROOT / "docs" / "getting-started.md"
TAIL = "mcp-sampling-proxy audit tail ~/.local/state/mcp-sampling-proxy/audit.jsonl"


def columns(line: str) -> list[str]:
    """The kinds of a line's columns: digits made `N`, the time and the decision (whose words differ
    with who decided) left out."""
    parts = line.split("  ")
    return [re.sub(r"[0-9][0-9.]*", "N", part) for i, part in enumerate(parts) if i not in (0, 3)]


async def test_the_pages_audit_line_has_the_columns_audit_tail_prints(tmp_path: Path) -> None:
    page = PAGE.read_text()
    shown = page.split(f"```sh\n{TAIL}\n```\n\n```text\n", 1)[1].split("\n```", 1)[0]
    audit = tmp_path / "audit.jsonl"
    with FakeLLMServer("openai", models=("gpt-4o-mini",)) as llm:
        llm.reply_text("A summary.", model="gpt-4o-mini")
        policy = write_policy(
            tmp_path,
            "llm:\n  providers:\n    openai:\n      type: openai\n"
            f"      base_url: {llm.base_url}\n      api_key_env: TEST_LLM_KEY\n      models: [gpt-4o-mini]\n"
            f"audit:\n  path: {audit}\n"
            "rules:\n  - name: allow-all\n    action: allow\n",
        )
        command = proxy_command(policy, upstream=[PY, str(EXAMPLES / "summarizer.py")])
        async with sdk_host(command, proxy_env(TEST_LLM_KEY="sk-test"), tmp_path / "stderr.log") as client:
            result = await client.call_tool("summarize", {"text": "A long text."})
    assert not result.is_error
    printed = subprocess.run(
        [*PROXY, "audit", "tail", str(audit)], env=proxy_env(), capture_output=True, text=True, timeout=60
    )
    assert printed.returncode == 0, printed.stderr
    [line] = [line for line in printed.stdout.splitlines() if "tool=summarize" in line]
    assert re.search(r"  \$[0-9.]+  ", line), line  # the cost column, which the page's sample lacked
    assert columns(shown.strip()) == columns(line), (shown, line)
