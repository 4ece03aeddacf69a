"""The web console's page as a person sees it, in a real headless Chromium against a real `console --web`
and real proxies: at 1400x900 it fits without scrolling sideways with every column in view, an empty
Budgets table says so, a request whose LLM call failed (a 401) is coloured like the other errors, and
the docs' picture of the page (docs/web-console.png) is taken here from the live page.

The picture cannot go stale: the test takes it every run and stamps it (a PNG text chunk) with a
fingerprint of what it shows: the page's stylesheet and markup, and the structure and labels of the
page as drawn (no timestamps, process ids or paths, so the fingerprint is the same on every machine).
When the stamp in docs/web-console.png differs, the test fails and says how to take it again:

    MCP_SAMPLING_PROXY_REFRESH_PICTURES=1 .venv/bin/python -m pytest -n 0 tests/e2e/test_web_console_page.py
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import struct
import sys
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fakes.llm_server import FakeLLMServer
from helpers.support import ROOT, RawHost, openai_policy, proxy_command, proxy_env, write_policy
from helpers.web_console import WebConsole

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="console sockets use SO_PEERCRED and /proc")

PICTURE = ROOT / "docs" / "web-console.png"
WEB = ROOT / "mcp_sampling_proxy" / "front" / "web_console" / "page"
REFRESH = os.environ.get("MCP_SAMPLING_PROXY_REFRESH_PICTURES") == "1"
REFRESH_COMMAND = (
    "MCP_SAMPLING_PROXY_REFRESH_PICTURES=1 .venv/bin/python -m pytest -n 0 tests/e2e/test_web_console_page.py"
)
STAMP = b"mcp-sampling-proxy-page"  # the PNG tEXt keyword of the fingerprint
VIEWPORT = {"width": 1400, "height": 900}
RULES = "rules:\n  - name: ask-first\n    action: prompt\n    budget: {tokens: 200000, per: 1d}\n"
NO_BUDGET = "rules:\n  - name: ask-first\n    action: prompt\n"

# the page's structure as drawn: each visible element's tag and classes, and the labels a person reads
# (headings, column heads, buttons, chips), digits as '#'; never timestamps, process ids or paths
SKELETON = """() => {
  const labelled = new Set(["H1", "H2", "H3", "TH", "BUTTON", "LABEL", "SUMMARY"]);
  const out = [];
  const walk = (node, depth) => {
    for (const child of node.children) {
      if (child.tagName === "SCRIPT" || child.offsetParent === null && child.tagName !== "BODY" &&
          getComputedStyle(child).position !== "fixed") continue;
      let line = "  ".repeat(depth) + child.tagName.toLowerCase() +
        [...child.classList].sort().map((c) => "." + c).join("");
      if (labelled.has(child.tagName) || child.classList.contains("chip") || child.classList.contains("role")) {
        const own = [...child.childNodes].filter((n) => n.nodeType === 3).map((n) => n.textContent).join("");
        line += " " + JSON.stringify(own.trim().replace(/[0-9]/g, "#"));
      }
      out.push(line);
      walk(child, depth + 1);
    }
  };
  walk(document.body, 0);
  return out.join("\\n");
}"""


def gradient_png(width: int = 220, height: int = 110) -> bytes:
    """A PNG of a blue-to-pink gradient, made here (no imaging library): what a chart a server sends looks like."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    rows = []
    for y in range(height):
        row = bytearray(b"\x00")
        for x in range(width):
            t, u = x / (width - 1), y / (height - 1)
            row += bytes((int(40 + 180 * t), int(80 + 120 * u * (1 - t)), int(200 + 20 * t - 40 * u)))
        rows.append(bytes(row))
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(b"".join(rows)))
        + chunk(b"IEND", b"")
    )


def png_chunks(data: bytes) -> Iterator[tuple[bytes, bytes]]:
    """Each chunk of a PNG as (type, data)."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    offset = 8
    while offset < len(data):
        (length,) = struct.unpack(">I", data[offset : offset + 4])
        yield data[offset + 4 : offset + 8], data[offset + 8 : offset + 8 + length]
        offset += 12 + length


def png_size(data: bytes) -> tuple[int, int]:
    kind, header = next(png_chunks(data))
    assert kind == b"IHDR"
    width, height = struct.unpack(">II", header[:8])
    return width, height


def png_stamp(data: bytes) -> str | None:
    """The fingerprint a picture was stamped with (None: not stamped)."""
    for kind, body in png_chunks(data):
        if kind == b"tEXt" and body.startswith(STAMP + b"\x00"):
            return body[len(STAMP) + 1 :].decode("latin-1")
    return None


def stamped(data: bytes, fingerprint: str) -> bytes:
    """The PNG with a tEXt chunk holding the fingerprint, right after its header."""
    body = STAMP + b"\x00" + fingerprint.encode("latin-1")
    text = struct.pack(">I", len(body)) + b"tEXt" + body + struct.pack(">I", zlib.crc32(b"tEXt" + body))
    end_of_header = 8 + 12 + 13  # the signature, then IHDR (length, type, 13 bytes, crc)
    return data[:end_of_header] + text + data[end_of_header:]


def fingerprint(page: Any) -> str:
    """What the picture shows, as text that is the same on every machine and every run."""
    digest = hashlib.sha256()
    for name in ("index.html", "style.css"):
        digest.update((WEB / name).read_bytes())
    digest.update(json.dumps(VIEWPORT).encode())
    digest.update(page.evaluate(SKELETON).encode())
    return digest.hexdigest()


def open_page(browser: Any, web: WebConsole) -> Any:
    page = browser.new_page(viewport=VIEWPORT)
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
    page.errors = errors
    page.goto(web.url)
    page.get_by_text("no proxy attached yet").wait_for(timeout=15000)
    return page


def ask(host: RawHost, request_id: int, params: dict[str, Any]) -> None:
    host.send(
        {
            "jsonrpc": "2.0",
            "id": request_id,
            "method": "tools/call",
            "params": {"name": "sample_raw", "arguments": {"params_json": json.dumps(params)}},
        }
    )


def answered(host: RawHost, request_id: int) -> dict[str, Any]:
    return host.wait_for(lambda m: m.get("id") == request_id and "method" not in m, 30)


def text_request(text: str) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": {"type": "text", "text": text}}], "maxTokens": 300}


def no_sideways_scroll(page: Any) -> None:
    """Nothing on the page reaches past the window's right edge, and the window does not scroll sideways."""
    width = page.evaluate("document.documentElement.clientWidth")
    assert page.evaluate("document.documentElement.scrollWidth") <= width, "the page scrolls sideways"
    past = page.evaluate(
        """(width) => [...document.querySelectorAll('body *')]
             .filter((e) => e.offsetParent !== null && e.getBoundingClientRect().right > width + 0.5)
             .map((e) => e.tagName.toLowerCase() + (e.id ? '#' + e.id : '') + ' '
                         + (e.textContent || '').slice(0, 30))""",
        width,
    )
    assert past == [], f"cut off at the window's right edge: {past}"


@pytest.fixture
def console(tmp_path: Path, dirs: dict[str, str], llm: FakeLLMServer) -> Iterator[tuple[WebConsole, str]]:
    """`console --web` over a policy whose one rule asks first under a token budget, priced (gpt-4o); the
    policy and the audit log where a user keeps them, in the test's own home (the page shows `~/...`)."""
    config = Path.home() / ".config" / "mcp-sampling-proxy"
    config.mkdir(parents=True, exist_ok=True)
    audit = Path.home() / ".local" / "state" / "mcp-sampling-proxy" / "audit.jsonl"
    policy = write_policy(
        config, openai_policy(llm.base_url, model="gpt-4o", rules=RULES) + f"audit:\n  path: {audit}\n"
    )
    with WebConsole(dirs, "--policy", policy, stderr=tmp_path / "web.log") as web:
        yield web, policy


@pytest.mark.usefixtures("browser")
def test_the_page_fits_the_window_colours_a_failed_call_and_is_the_docs_picture(
    console: tuple[WebConsole, str], browser: Any, dirs: dict[str, str], llm: FakeLLMServer, tmp_path: Path
) -> None:
    web, policy = console
    page = open_page(browser, web)
    command = proxy_command(policy, "--name", "image-describer")
    env = proxy_env(**{**dirs, "TEST_LLM_KEY": "sk-docs-0123456789abcdef"})  # a key that looks like one
    with RawHost(command, env, tmp_path / "proxy.log") as host:
        host.initialize(name="claude-desktop")
        page.get_by_text("1 proxy attached").wait_for(timeout=15000)
        card = page.locator("article.pending")
        # one approved and answered, priced: its cost shows in the usage table
        llm.reply_text("A rising line: sales up 12% over the quarter, one dip in week 6.", usage=(1850, 240))
        ask(host, 2, text_request("Summarise this week's sales chart in one sentence."))
        card.wait_for(timeout=15000)
        page.get_by_role("button", name="Allow once").click()
        assert answered(host, 2)["result"].get("isError") is not True
        card.wait_for(state="detached", timeout=10000)
        # one denied
        ask(host, 3, text_request("Write a poem about the chart."))
        card.wait_for(timeout=15000)
        page.get_by_role("button", name="Deny").click()
        answered(host, 3)
        card.wait_for(state="detached", timeout=10000)
        # one approved whose LLM call fails: the provider refuses the key
        llm.reply_error(401, "Incorrect API key provided.")
        ask(host, 4, text_request("Name the outlier."))
        card.wait_for(timeout=15000)
        page.get_by_role("button", name="Allow once").click()
        assert answered(host, 4)["result"].get("isError") is True
        card.wait_for(state="detached", timeout=10000)
        page.locator("ol.audit li").nth(2).wait_for(timeout=15000)
        # and one waiting, in full: the system prompt, the text, the image, the model's hints
        image = base64.b64encode(gradient_png()).decode()
        ask(
            host,
            5,
            {
                "messages": [
                    {
                        "role": "user",
                        "content": [
                            {"type": "text", "text": "Describe this chart for the weekly report. Mention the trend."},
                            {"type": "image", "data": image, "mimeType": "image/png"},
                        ],
                    }
                ],
                "systemPrompt": "You write short, factual captions.",
                "maxTokens": 400,
                "modelPreferences": {"hints": [{"name": "gpt-4o"}], "intelligencePriority": 0.8},
            },
        )
        card.wait_for(timeout=15000)
        card.locator("img").evaluate("i => i.decode()")
        page.locator("#usage tbody tr").first.wait_for(timeout=10000)
        page.locator("#budgets tbody tr td.num").first.wait_for(timeout=10000)
        # the files as a person types them: under the home directory as ~/
        assert "budgets of ~/.config/mcp-sampling-proxy/policy.yaml" in page.locator("#usage-note").inner_text()
        assert page.locator("#audit-note").inner_text() == "~/.local/state/mcp-sampling-proxy/audit.jsonl"

        # every column of both tables in view, nothing past the right edge, no sideways scrolling
        no_sideways_scroll(page)
        cost = page.locator("#usage th", has_text="cost")
        box = cost.bounding_box()
        assert box is not None and box["x"] + box["width"] <= VIEWPORT["width"], box
        assert "$" in page.locator("#usage tbody tr").first.inner_text()
        # the failed call is coloured as errors are, the approved one is not
        lines = page.locator("ol.audit li")
        # (by its error's words: "401" alone may be in another line's time, tokens, cost or milliseconds)
        failed = lines.filter(has_text="Incorrect API key provided")
        assert failed.count() == 1, lines.all_inner_texts()
        colour = failed.evaluate("e => getComputedStyle(e).color")
        error_colour = page.evaluate("getComputedStyle(document.documentElement).getPropertyValue('--warn').trim()")
        assert colour == css_rgb(error_colour), (colour, error_colour)
        fine = lines.filter(has_text="tokens").filter(has_not_text="Incorrect API key provided").first
        assert fine.evaluate("e => getComputedStyle(e).color") != colour

        shot = stamped(page.screenshot(), fingerprint(page))
        (tmp_path / "web-console.png").write_bytes(shot)
        if os.environ.get("MCP_SAMPLING_PROXY_SCREENSHOTS"):
            (Path(os.environ["MCP_SAMPLING_PROXY_SCREENSHOTS"]) / "web-console.png").write_bytes(shot)
        page.get_by_role("button", name="Deny").click()
        answered(host, 5)
    assert page.errors == []
    assert png_size(shot) == (VIEWPORT["width"], VIEWPORT["height"])
    if REFRESH:
        PICTURE.write_bytes(shot)
    kept = PICTURE.read_bytes()
    assert png_size(kept) == png_size(shot), (
        f"{PICTURE} is not a {VIEWPORT} picture: take it again with {REFRESH_COMMAND}"
    )
    assert png_stamp(kept) == png_stamp(shot), (
        f"{PICTURE.relative_to(ROOT)} no longer shows the page as it is: take it again with {REFRESH_COMMAND}"
    )


def css_rgb(hex_colour: str) -> str:
    """'#9a6700' as getComputedStyle gives it: 'rgb(154, 103, 0)'."""
    value = hex_colour.lstrip("#")
    return "rgb({}, {}, {})".format(*(int(value[i : i + 2], 16) for i in (0, 2, 4)))


def test_an_empty_budgets_table_says_why(
    tmp_path: Path, dirs: dict[str, str], llm: FakeLLMServer, browser: Any
) -> None:
    """No budget row: the Budgets table says why in one row across it, rather than showing only its heads.
    What it says for each policy: tests/unit/front/test_web_console_state.py."""
    policy = write_policy(tmp_path, openai_policy(llm.base_url, rules=RULES))
    with WebConsole(dirs, "--policy", policy, stderr=tmp_path / "web.log") as web:
        page = open_page(browser, web)
        row = page.locator("#budgets tbody tr")
        row.first.wait_for(timeout=15000)
        assert row.count() == 1
        assert row.inner_text().strip() == "none used yet: 1 rule with a budget (ask-first)"
        usage = page.locator("#usage tbody tr")
        assert usage.count() == 1 and usage.inner_text().strip() == "none yet: no request in the audit log"
        no_sideways_scroll(page)
