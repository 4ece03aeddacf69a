"""`mcp-sampling-proxy console --web` as a person uses it: a real headless Chromium on the page of a real
`console --web`, real proxies asking; and what only the process shows (loopback only, its options, its
quitting, a broken default policy). What the page's server decides (the answers it takes, what it shows
and refuses) is played in process: tests/unit/front/test_web_console_*.py."""

from __future__ import annotations

import base64
import http.client
import json
import os
import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from fakes.llm_server import FakeLLMServer
from helpers.browser import CHROMIUM
from helpers.support import PY, RawHost, openai_policy, proxy_command, proxy_env, write_policy
from helpers.web_console import WebConsole

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="console sockets use SO_PEERCRED and /proc")

SCREENSHOTS = os.environ.get("MCP_SAMPLING_PROXY_SCREENSHOTS")  # a directory to keep the screenshots in
needs_browser = pytest.mark.skipif(
    CHROMIUM is None,
    reason="no chromium on PATH: install the Debian package (apt-get install -y chromium; .ci/run "
    "does) to drive the web console in a real browser",
)

RULES = "rules:\n  - name: ask\n    action: prompt\n    budget: {tokens: 50000, per: 1d}\n"
# the smallest PNG: one red pixel
PNG = base64.b64encode(
    bytes.fromhex(
        "89504e470d0a1a0a0000000d4948445200000001000000010802000000907753de0000000c4944415408d763f8cfc000000301010018dd8db0"
        "0000000049454e44ae426082"
    )
).decode()
# Chromium's own Notification, recorded: headless Chromium has no desktop to show one on
RECORD_NOTIFICATIONS = """
    window.__shown = [];
    const Real = window.Notification;
    class Recorded { constructor(title, options) { window.__shown.push({title, body: options.body}); }
                     close() {} static get permission() { return Real.permission; }
                     static requestPermission() { return Real.requestPermission(); } }
    window.Notification = Recorded;
"""


@pytest.fixture
def setup(tmp_path: Path, dirs: dict[str, str], llm: FakeLLMServer) -> Iterator[dict[str, Any]]:
    audit = tmp_path / "audit.jsonl"
    policy = write_policy(tmp_path, openai_policy(llm.base_url, rules=RULES) + f"audit:\n  path: {audit}\n")
    web = WebConsole(dirs, "--policy", policy, stderr=tmp_path / "web.log")
    try:
        yield {"web": web, "policy": policy, "audit": audit, "dirs": dirs, "llm": llm, "tmp": tmp_path}
    finally:
        web.close()


def proxy(setup: dict[str, Any], policy: str | None = "") -> RawHost:
    policy = setup["policy"] if policy == "" else policy
    return RawHost(proxy_command(policy), proxy_env(**setup["dirs"]), setup["tmp"] / "proxy.log")


def call(host: RawHost, request_id: int, name: str, arguments: dict[str, Any]) -> None:
    host.send(
        {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": {"name": name, "arguments": arguments}}
    )


def result_of(host: RawHost, request_id: int) -> Any:
    """What the small server's tool returned: the sampling result (or error) it got, as JSON."""
    response = host.wait_for(lambda m: m.get("id") == request_id and "method" not in m, 30)
    return json.loads(response["result"]["content"][0]["text"])


@needs_browser
def test_a_person_answers_each_kind_of_question_on_the_page(setup: dict[str, Any], browser: Any) -> None:
    """The real page in Chromium: a request shown in full (server markup as text, its image drawn, the budget
    line) approved once and its answer sent after review; a prompt edited and an answer replaced; an SVG
    not drawn and the request denied, the audit filters narrowing the tail; a form re-asked then filled.
    Each new question raises a desktop notification naming its server."""
    from playwright.sync_api import expect

    web, llm = setup["web"], setup["llm"]
    review = write_policy(
        setup["tmp"],
        openai_policy(llm.base_url, rules=RULES)
        + f"approval:\n  review_response: true\naudit:\n  path: {setup['audit']}\n",
        name="review.yaml",
    )
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    context.grant_permissions(["notifications"], origin=f"http://127.0.0.1:{web.port}")
    context.add_init_script(RECORD_NOTIFICATIONS)
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
    page.goto(web.url)
    assert page.evaluate("Notification.permission") == "granted"
    with proxy(setup, policy=review) as host:
        host.initialize()
        page.get_by_text("1 proxy attached").wait_for(timeout=15000)

        # a request in full, approved once; its answer reviewed and sent as it is
        image = {"type": "image", "data": PNG, "mimeType": "image/png"}
        markup = "<b>describe</b> this <img src=x onerror=alert(1)>"
        params = {
            "messages": [{"role": "user", "content": [{"type": "text", "text": markup}, image]}],
            "systemPrompt": "You are terse.",
            "maxTokens": 120,
            "modelPreferences": {"hints": [{"name": "gpt-test"}]},
        }
        call(host, 2, "sample_raw", {"params_json": json.dumps(params)})
        card = page.locator("article.pending")
        card.wait_for(timeout=15000)
        assert markup in card.inner_text()  # server text is text: the markup shows as typed, no element
        assert card.locator("b:text('describe')").count() == 0
        img = card.locator("img")
        assert img.get_attribute("src").startswith("data:image/png;base64,")
        assert img.evaluate("i => i.complete && i.naturalWidth") == 1
        text = card.inner_text()
        assert "You are terse." in text and "maxTokens 120" in text and "gpt-test" in text
        assert re.search(r"budget left 49,\d{3} of 50,000 tokens per 1d \(\d+ reserved", text), text
        shot(page, setup["tmp"], "web-console-pending")
        page.get_by_role("button", name="Allow once").click()
        page.locator("article.review").wait_for(timeout=15000)
        page.get_by_role("button", name="Send to the server").click()
        assert result_of(host, 2)["result"]["role"] == "assistant"
        assert "describe" in json.dumps(llm.last.body)
        page.locator("article.review").wait_for(state="detached", timeout=10000)
        line = page.locator("ol.audit li").first
        line.wait_for(timeout=15000)
        assert "approved by console (rule ask)" in line.inner_text()
        page.locator("#usage tbody tr").first.wait_for(timeout=10000)  # its token use, counted for its server
        assert "small_server" in page.locator("#usage").inner_text()

        # the prompt edited, then the answer replaced
        call(host, 3, "sample", {"prompt": "the server's words"})
        page.get_by_role("button", name="Edit prompt…").click()
        box = page.get_by_label("edited prompt")
        assert box.input_value() == "the server's words"
        box.fill("the operator's words")
        page.get_by_role("button", name="Approve with this prompt").click()
        review_card = page.locator("article.review")
        review_card.wait_for(timeout=15000)
        assert "echo: the operator's words" in review_card.inner_text()
        page.get_by_role("button", name="Edit answer…").click()
        page.get_by_label("replacement answer").fill("the operator's answer")
        page.get_by_role("button", name="Send this answer").click()
        assert result_of(host, 3)["content"]["text"] == "the operator's answer"
        assert "the server's words" not in json.dumps(llm.last.body)
        page.locator("ol.audit li", has_text="prompt edited by console").wait_for(timeout=15000)

        # an SVG is not drawn; Deny; the filters narrow the tail
        svg = base64.b64encode(b'<svg xmlns="http://www.w3.org/2000/svg" onload="alert(1)"/>').decode()
        svgs = [{"type": "image", "data": svg, "mimeType": mime} for mime in ("image/svg+xml", "image/png")]
        call(
            host,
            4,
            "sample_raw",
            {"params_json": json.dumps({"messages": [{"role": "user", "content": svgs}], "maxTokens": 10})},
        )
        card = page.locator("article.pending")
        card.wait_for(timeout=15000)
        assert card.locator("img").count() == 0
        assert "image of type 'image/svg+xml' not shown" in card.inner_text()
        assert "image data is not image/png" in card.inner_text()
        asked = len(llm.requests)
        page.get_by_role("button", name="Deny").click()
        error = result_of(host, 4)["error"]
        assert error["code"] == -1 and "rejected at the companion console" in error["message"]
        assert len(llm.requests) == asked
        page.locator("ol.audit li.rejected").first.wait_for(timeout=15000)
        page.select_option("#f-decision", "rejected")
        expect(page.locator("ol.audit li")).to_have_count(1, timeout=10000)
        page.select_option("#f-decision", "approved")
        expect(page.locator("ol.audit li")).to_have_count(2, timeout=10000)

        # a form: a value below the minimum is said and asked again; then filled
        schema = {
            "type": "object",
            "properties": {
                "age": {"type": "integer", "minimum": 0, "title": "Age"},
                "color": {"type": "string", "enum": ["r", "g"], "enumNames": ["Red", "Green"], "title": "Colour"},
                "news": {"type": "boolean", "title": "Newsletter", "default": False},
            },
            "required": ["age"],
        }
        call(host, 5, "elicit_form", {"schema_json": json.dumps(schema), "message": "Tell us about you"})
        card = page.locator("article.elicit")
        card.wait_for(timeout=15000)
        assert "Tell us about you" in card.inner_text()
        page.get_by_label("Age *").fill("-4")
        page.get_by_role("button", name="Submit").click()
        expect(card.locator(".error")).to_contain_text("too small")
        page.get_by_label("Age *").fill("42")
        page.get_by_label("Colour").select_option("g")
        page.get_by_label("Newsletter").check()
        page.get_by_role("button", name="Submit").click()
        assert result_of(host, 5) == {"action": "accept", "data": {"age": 42, "color": "g", "news": True}}

    sampling = {"title": "mcp-sampling-proxy", "body": "Server 'small_server' asks to use an LLM"}
    reviewing = {"title": "mcp-sampling-proxy", "body": "Server 'small_server' has an answer to review"}
    form = {
        "title": "mcp-sampling-proxy",
        "body": "Server 'small_server' (which calls itself \"small-server\") asks a question",
    }
    assert page.evaluate("window.__shown") == [sampling, reviewing, sampling, reviewing, sampling, form]
    assert [e for e in errors if "status of 422" not in e] == []  # (the refused form answer's 422 is logged)
    context.close()


def shot(page: Any, tmp_path: Path, name: str) -> Path:
    path = tmp_path / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    if SCREENSHOTS:
        Path(SCREENSHOTS, path.name).write_bytes(path.read_bytes())
    return path


def test_budgets_shared_on_redis_are_shown(
    tmp_path: Path, llm: FakeLLMServer, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With `state: {backend: redis}` the page is shown the budget every proxy shares (read from Redis), not
    the local budgets file: the pending request's own reservation is already counted. A proxy and the web
    console in process (helpers/playbook.py, helpers/played_console.py); Redis is the real server."""
    import anyio
    from helpers.playbook import Playbook
    from helpers.played_console import played_page

    from mcp_sampling_proxy.quotas.state import state_dir

    monkeypatch.setenv("TEST_LLM_KEY", "k")
    state = f"state:\n  backend: redis\n  url: {redis_url}\n  prefix: 'web:'\n"
    policy = openai_policy(llm.base_url, rules=RULES) + state
    prompt = {"messages": [{"role": "user", "content": {"type": "text", "text": "please"}}], "maxTokens": 100}

    async def main() -> None:
        async with (
            Playbook(tmp_path, policy, name="kitchen_sink_server", console=True) as play,
            played_page(play) as page,
        ):
            await play.handshake({})
            async with anyio.create_task_group() as tg:
                tg.start_soon(play.sample, prompt)
                question = await page.question()
                budget = question["limits"]["budget"]
                assert budget["limit"] == 50000 and 0 < budget["reserved"] < 1000, budget
                assert budget["left"] == 50000 - budget["reserved"]
                assert (await page.answer(question, action="approve")).status_code == 200
            [row] = (await page.get("api/usage"))["budgets"]
            assert (row["server"], row["rule"], row["limit"]) == ("kitchen_sink_server", "ask", 50000)
            assert row["used"] > 0

    anyio.run(main)
    assert not (state_dir() / "budgets.json").exists()  # all of it on Redis


def request(
    web: WebConsole, method: str, path: str, headers: dict[str, str] | None = None, body: bytes | None = None
) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", web.port, timeout=10)
    try:
        conn.putrequest(method, path, skip_host=True)
        sent = {"Host": f"127.0.0.1:{web.port}", **(headers or {})}
        if body is not None:
            sent.setdefault("Content-Length", str(len(body)))
        for name, value in sent.items():
            conn.putheader(name, value)
        conn.endheaders(body)
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def test_listens_on_loopback_only(setup: dict[str, Any]) -> None:
    web = setup["web"]
    listening = Path(f"/proc/{web.proc.pid}/net/tcp").read_text()
    local = [line.split()[1] for line in listening.splitlines()[1:] if line.split()[3] == "0A"]  # LISTEN
    ours = [address for address in local if int(address.split(":")[1], 16) == web.port]
    assert ours == ["0100007F:" + format(web.port, "04X")]


def test_options_without_web_are_an_error(tmp_path: Path, dirs: dict[str, str]) -> None:
    done = subprocess.run(
        [PY, "-m", "mcp_sampling_proxy", "console", "--no-open"],
        env=proxy_env(**dirs),
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 2 and "go with --web" in done.stderr


def state_once(web: WebConsole, holds: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
    """The page's state once `holds` is true of it, read from its event stream as the page reads it."""
    conn = http.client.HTTPConnection("127.0.0.1", web.port, timeout=30)
    try:
        conn.request("GET", f"/{web.token}/api/events")
        response = conn.getresponse()
        assert response.status == 200
        event = ""
        for raw in response:
            line = raw.decode().rstrip("\n")
            if line.startswith("event: "):
                event = line.removeprefix("event: ")
            elif line.startswith("data: ") and event == "state":
                state: dict[str, Any] = json.loads(line.removeprefix("data: "))
                if holds(state):
                    return state
        raise AssertionError("the event stream ended")
    finally:
        conn.close()


def test_quitting_the_web_console_hands_the_question_on(setup: dict[str, Any]) -> None:
    """Ctrl-C ends the web console; the proxy sees its console go and denies what was pending."""
    web = setup["web"]
    with proxy(setup) as host:
        host.initialize()
        state_once(web, lambda state: bool(state["proxies"]))
        call(host, 2, "sample", {"prompt": "x"})
        state_once(web, lambda state: bool(state["questions"]))
        web.close()
        assert "went away before answering" in result_of(host, 2)["error"]["message"]
    assert os.path.exists(setup["policy"])


def test_a_broken_default_policy_does_not_keep_the_console_from_starting(tmp_path: Path, dirs: dict[str, str]) -> None:
    """The default policy only feeds the budgets shown: the console starts without them and says
    why; a policy named with --policy is still an error naming its line."""
    config = tmp_path / "config"
    config.mkdir()
    (config / "policy.yaml").write_text("rules:\n  - action: alow\n")
    web = WebConsole({**dirs, "MCP_SAMPLING_PROXY_CONFIG_DIR": str(config)}, stderr=tmp_path / "web.log")
    try:
        assert request(web, "GET", f"/{web.token}/api/state")[0] == 200
    finally:
        web.close()
    assert "the default policy cannot be read" in (tmp_path / "web.log").read_text()
    named = subprocess.run(
        [PY, "-m", "mcp_sampling_proxy", "console", "--web", "--no-open", "--policy", str(config / "policy.yaml")],
        env=proxy_env(**dirs),
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert named.returncode == 2 and "policy.yaml:2" in named.stderr and named.stdout == ""
