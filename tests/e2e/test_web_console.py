"""`mcp-sampling-proxy console --web` (issue #13): approvals and the audit trail in a real headless
Chromium, against real proxies; and the same server refusing requests without the token, from a
foreign Origin or through a rebinding Host name (plain HTTP)."""

from __future__ import annotations

import base64
import http.client
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import pytest
from fakes.llm_server import FakeLLMServer
from helpers.browser import CHROMIUM
from helpers.support import PY, RawHost, openai_policy, proxy_command, proxy_env, write_policy
from helpers.web_console import WebConsole

if TYPE_CHECKING:
    from mcp_sampling_proxy.approval.console.client import ConsoleClient

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="console sockets use SO_PEERCRED and /proc")


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


@pytest.fixture
def setup(tmp_path: Path, dirs: dict[str, str], llm: FakeLLMServer) -> Iterator[dict[str, Any]]:
    audit = tmp_path / "audit.jsonl"
    policy = write_policy(tmp_path, openai_policy(llm.base_url, rules=RULES) + f"audit:\n  path: {audit}\n")
    web = WebConsole(dirs, "--policy", policy, stderr=tmp_path / "web.log")
    try:
        yield {"web": web, "policy": policy, "dirs": dirs, "llm": llm, "tmp": tmp_path}
    finally:
        web.close()


def open_page(browser: Any, web: WebConsole) -> Any:
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
    page.errors = errors
    page.goto(web.url)
    return page


def proxy(setup: dict[str, Any], policy: str | None = "") -> RawHost:
    policy = setup["policy"] if policy == "" else policy
    return RawHost(proxy_command(policy), proxy_env(**setup["dirs"]), setup["tmp"] / "proxy.log")


def call(host: RawHost, request_id: int, name: str, arguments: dict[str, Any]) -> None:
    host.send(
        {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": {"name": name, "arguments": arguments}}
    )


def result_of(host: RawHost, request_id: int) -> dict[str, Any]:
    return host.wait_for(lambda m: m.get("id") == request_id and "method" not in m, 30)


def attached(page: Any) -> None:
    page.get_by_text("1 proxy attached").wait_for(timeout=15000)


@needs_browser
def test_approve_once_shows_the_request_in_full_and_the_audit_line_appears(setup: dict[str, Any], browser: Any) -> None:
    web = setup["web"]
    page = open_page(browser, web)
    with proxy(setup) as host:
        host.initialize()
        attached(page)
        image = {"type": "image", "data": PNG, "mimeType": "image/png"}
        params = {
            "messages": [
                {
                    "role": "user",
                    "content": [{"type": "text", "text": "<b>describe</b> this <img src=x onerror=alert(1)>"}, image],
                }
            ],
            "systemPrompt": "You are terse.",
            "maxTokens": 120,
            "modelPreferences": {"hints": [{"name": "gpt-test"}]},
        }
        call(host, 2, "sample_raw", {"params_json": json.dumps(params)})
        card = page.locator("article.pending")
        card.wait_for(timeout=15000)
        # server text is text: the markup shows as typed and creates no element
        assert "<b>describe</b> this <img src=x onerror=alert(1)>" in card.inner_text()
        assert card.locator("b:text('describe')").count() == 0
        img = card.locator("img")
        assert img.get_attribute("src").startswith("data:image/png;base64,")
        assert img.evaluate("i => i.complete && i.naturalWidth") == 1
        text = card.inner_text()
        assert "You are terse." in text and "maxTokens 120" in text and "gpt-test" in text
        # the proxy reserved this request's worst case before asking
        assert re.search(r"budget left 49,\d{3} of 50,000 tokens per 1d \(\d+ reserved", text), text
        page.get_by_role("button", name="Allow once").click()
        response = result_of(host, 2)
        assert response["result"].get("isError") is not True, response
        assert json.loads(response["result"]["content"][0]["text"])["result"]["role"] == "assistant"
        assert "describe" in json.dumps(setup["llm"].last.body)
        page.locator("article.pending").wait_for(state="detached", timeout=10000)
        line = page.locator("ol.audit li").first
        line.wait_for(timeout=15000)
        assert "approved by console (rule ask)" in line.inner_text()
        # the token use of the approved request is counted for its server
        page.locator("#usage tbody tr").first.wait_for(timeout=10000)
        assert "kitchen_sink_server" in page.locator("#usage").inner_text()
    assert page.errors == []


@needs_browser
@pytest.mark.parametrize(
    ("tool", "arguments", "body"),
    [
        pytest.param("sample", {"prompt": "please"}, "Server 'kitchen_sink_server' asks to use an LLM", id="sampling"),
        pytest.param(
            "elicit_form",
            {"schema_json": json.dumps({"type": "object", "properties": {"a": {"type": "string"}}})},
            "Server 'kitchen_sink_server' (which calls itself \"kitchen-sink\") asks a question",
            id="form",
        ),
    ],
)
def test_a_desktop_notification_says_which_server_asks(
    setup: dict[str, Any], browser: Any, tool: str, arguments: dict[str, Any], body: str
) -> None:
    """With notifications allowed, a new request raises one naming its server (Chromium's own
    Notification is recorded: headless Chromium has no desktop to show it on), without a quote
    nested in another."""
    web = setup["web"]
    context = browser.new_context()
    context.grant_permissions(["notifications"], origin=f"http://127.0.0.1:{web.port}")
    context.add_init_script("""
        window.__shown = [];
        const Real = window.Notification;
        class Recorded { constructor(title, options) { window.__shown.push({title, body: options.body}); }
                         close() {} static get permission() { return Real.permission; }
                         static requestPermission() { return Real.requestPermission(); } }
        window.Notification = Recorded;
    """)
    page = context.new_page()
    page.goto(web.url)
    assert page.evaluate("Notification.permission") == "granted"
    with proxy(setup) as host:
        host.initialize()
        attached(page)
        call(host, 2, tool, arguments)
        page.locator("article.pending, article.elicit").wait_for(timeout=15000)
        page.wait_for_function("window.__shown.length > 0", timeout=10000)
        shown = page.evaluate("window.__shown")
        assert shown == [{"title": "mcp-sampling-proxy", "body": body}]
        page.get_by_role("button", name="Deny" if tool == "sample" else "Decline").click()
        result_of(host, 2)
    context.close()


@needs_browser
def test_budgets_shared_on_redis_are_shown(
    tmp_path: Path, dirs: dict[str, str], llm: FakeLLMServer, redis_url: str, browser: Any
) -> None:
    """With `state: {backend: redis}` the page shows the budget every proxy shares (read from Redis),
    not the local budgets file: the pending request's own reservation is already counted."""
    state = f"state:\n  backend: redis\n  url: {redis_url}\n  prefix: 'web:'\n"
    policy = write_policy(tmp_path, openai_policy(llm.base_url, rules=RULES) + state)
    web = WebConsole(dirs, "--policy", policy, stderr=tmp_path / "web.log")
    try:
        page = open_page(browser, web)
        with RawHost(proxy_command(policy), proxy_env(**dirs), tmp_path / "proxy.log") as host:
            host.initialize()
            attached(page)
            call(host, 2, "sample", {"prompt": "please"})
            card = page.locator("article.pending")
            card.wait_for(timeout=15000)
            assert re.search(r"budget left 49,\d{3} of 50,000 tokens per 1d \(\d+ reserved", card.inner_text()), (
                card.inner_text()
            )
            page.get_by_role("button", name="Allow once").click()
            result_of(host, 2)
        assert not (Path(dirs["MCP_SAMPLING_PROXY_STATE_DIR"]) / "budgets.json").exists()  # all of it on Redis
        page.reload()  # the budgets table, read again from Redis
        row = page.locator("#budgets tbody tr").first
        row.wait_for(timeout=15000)
        cells = row.inner_text()
        assert "kitchen_sink_server" in cells and "ask" in cells and "50,000" in cells, cells
    finally:
        web.close()


@needs_browser
def test_deny_refuses_the_request(setup: dict[str, Any], browser: Any) -> None:
    from playwright.sync_api import expect

    page = open_page(browser, setup["web"])
    with proxy(setup) as host:
        host.initialize()
        attached(page)
        call(host, 2, "sample", {"prompt": "please"})
        page.get_by_role("button", name="Deny").click()
        response = result_of(host, 2)
    error = json.loads(response["result"]["content"][0]["text"])["error"]
    assert error["code"] == -1 and "rejected at the companion console" in error["message"]
    assert setup["llm"].requests == []
    page.locator("ol.audit li.rejected").first.wait_for(timeout=15000)
    # the filters narrow the tail: no 'approved' line exists
    page.select_option("#f-decision", "approved")
    expect(page.locator("ol.audit li")).to_have_count(0, timeout=10000)
    page.select_option("#f-decision", "rejected")
    page.locator("ol.audit li").first.wait_for(timeout=10000)


@needs_browser
def test_edit_the_prompt_then_approve(setup: dict[str, Any], browser: Any) -> None:
    page = open_page(browser, setup["web"])
    with proxy(setup) as host:
        host.initialize()
        attached(page)
        call(host, 2, "sample", {"prompt": "the server's words"})
        page.get_by_role("button", name="Edit prompt…").click()
        box = page.get_by_label("edited prompt")
        assert box.input_value() == "the server's words"
        box.fill("the operator's words")
        page.get_by_role("button", name="Approve with this prompt").click()
        response = result_of(host, 2)
    assert json.loads(response["result"]["content"][0]["text"])["content"]["text"] == "echo: the operator's words"
    assert "the server's words" not in json.dumps(setup["llm"].last.body)
    line = page.locator("ol.audit li").first
    line.wait_for(timeout=15000)
    assert "prompt edited by console" in line.inner_text()


@needs_browser
def test_fill_an_elicitation_form(setup: dict[str, Any], browser: Any) -> None:
    from playwright.sync_api import expect

    schema = {
        "type": "object",
        "properties": {
            "age": {"type": "integer", "minimum": 0, "title": "Age"},
            "color": {"type": "string", "enum": ["r", "g"], "enumNames": ["Red", "Green"], "title": "Colour"},
            "news": {"type": "boolean", "title": "Newsletter", "default": False},
        },
        "required": ["age"],
    }
    page = open_page(browser, setup["web"])
    with proxy(setup, policy=None) as host:
        host.initialize()
        attached(page)
        call(host, 3, "elicit_form", {"schema_json": json.dumps(schema), "message": "Tell us about you"})
        card = page.locator("article.elicit")
        card.wait_for(timeout=15000)
        assert "Tell us about you" in card.inner_text()
        page.get_by_label("Age *").fill("-4")
        page.get_by_role("button", name="Submit").click()
        expect(card.locator(".error")).to_contain_text("too small")  # below the minimum: said, and asked again
        page.get_by_label("Age *").fill("42")
        page.get_by_label("Colour").select_option("g")
        page.get_by_label("Newsletter").check()
        page.get_by_role("button", name="Submit").click()
        response = result_of(host, 3)
    assert json.loads(response["result"]["content"][0]["text"]) == {
        "action": "accept",
        "data": {"age": 42, "color": "g", "news": True},
    }


@needs_browser
def test_an_svg_image_is_not_rendered(setup: dict[str, Any], browser: Any) -> None:
    svg = base64.b64encode(b'<svg xmlns="http://www.w3.org/2000/svg" onload="alert(1)"/>').decode()
    page = open_page(browser, setup["web"])
    with proxy(setup) as host:
        host.initialize()
        attached(page)
        params = {
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {"type": "image", "data": svg, "mimeType": "image/svg+xml"},
                        {"type": "image", "data": svg, "mimeType": "image/png"},
                    ],
                }
            ],
            "maxTokens": 10,
        }
        call(host, 2, "sample_raw", {"params_json": json.dumps(params)})
        card = page.locator("article.pending")
        card.wait_for(timeout=15000)
        assert card.locator("img").count() == 0
        assert "image of type 'image/svg+xml' not shown" in card.inner_text()
        assert "image data is not image/png" in card.inner_text()
        page.get_by_role("button", name="Deny").click()
        result_of(host, 2)


# --- the same server, plain HTTP: what it refuses ---------------------------------------------------


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


def test_the_server_refuses_without_the_token_from_other_origins_and_rebinding_hosts(setup: dict[str, Any]) -> None:
    web = setup["web"]
    ok = f"/{web.token}/"
    assert request(web, "GET", ok)[0] == 200
    assert request(web, "GET", ok, {"Host": f"localhost:{web.port}"})[0] == 200
    status, body = request(web, "GET", "/")
    assert status == 403 and b"token" in body
    assert request(web, "GET", "/api/state")[0] == 403
    assert request(web, "GET", f"/{web.token[:-1]}x/api/state")[0] == 403
    # DNS rebinding: a page on evil.example resolved to 127.0.0.1 sends its own name as Host
    assert request(web, "GET", ok, {"Host": f"evil.example:{web.port}"})[0] == 421
    assert request(web, "GET", f"/{web.token}/api/state", {"Host": "127.0.0.1"})[0] == 421
    # another site's page in the user's browser
    answer = json.dumps({"key": "1:1", "action": "approve"}).encode()
    json_type = {"Content-Type": "application/json"}
    status, _ = request(web, "POST", f"/{web.token}/api/answer", {**json_type, "Origin": "http://evil.example"}, answer)
    assert status == 403
    assert request(web, "GET", f"/{web.token}/api/events", {"Origin": "http://evil.example"})[0] == 403
    assert request(web, "GET", f"/{web.token}/api/state", {"Sec-Fetch-Site": "cross-site"})[0] == 403
    # CSRF: a form post (text/plain, urlencoded) is refused; GET never answers anything
    assert request(web, "POST", f"/{web.token}/api/answer", {"Content-Type": "text/plain"}, answer)[0] == 415
    assert request(web, "GET", f"/{web.token}/api/answer?key=1:1&action=approve")[0] == 404
    # the right token and headers reach the answer endpoint (nothing is pending)
    status, body = request(
        web, "POST", f"/{web.token}/api/answer", {**json_type, "Origin": f"http://127.0.0.1:{web.port}"}, answer
    )
    assert status == 409 and b"no longer pending" in body
    # malformed numbers get an HTTP error, not a dropped connection (int() of '²' or 'x' used to raise)
    assert request(web, "GET", f"/{web.token}/api/audit?n=%C2%B2")[0] == 200
    assert request(web, "POST", f"/{web.token}/api/answer", {**json_type, "Content-Length": "x"}, b"")[0] == 413
    # the event stream needs the token too
    assert request(web, "GET", "/api/events")[0] == 403
    status, _ = request(web, "GET", ok)
    headers = _headers(web, ok)
    assert "script-src 'self'" in headers["content-security-policy"]
    assert "img-src data:" in headers["content-security-policy"]


def _headers(web: WebConsole, path: str) -> dict[str, str]:
    conn = http.client.HTTPConnection("127.0.0.1", web.port, timeout=10)
    try:
        conn.request("GET", path)
        response = conn.getresponse()
        response.read()
        return {k.lower(): v for k, v in response.getheaders()}
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


def test_quitting_the_web_console_hands_the_question_on(setup: dict[str, Any]) -> None:
    """Ctrl-C ends the web console; the proxy sees its console go and denies what was pending."""
    web = setup["web"]
    with proxy(setup) as host:
        host.initialize()
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            _status, body = request(web, "GET", f"/{web.token}/api/state")
            if json.loads(body)["proxies"]:
                break
            time.sleep(0.1)
        call(host, 2, "sample", {"prompt": "x"})
        while (
            time.monotonic() < deadline
            and not json.loads(request(web, "GET", f"/{web.token}/api/state")[1])["questions"]
        ):
            time.sleep(0.1)
        web.close()
        response = result_of(host, 2)
    assert "went away before answering" in json.loads(response["result"]["content"][0]["text"])["error"]["message"]
    assert os.path.exists(setup["policy"])


@needs_browser
def test_review_the_answer_and_replace_it(setup: dict[str, Any], browser: Any) -> None:
    llm = setup["llm"]
    llm.reply_text("the model's draft")
    policy = write_policy(
        setup["tmp"], openai_policy(llm.base_url) + "approval:\n  review_response: true\n", name="review.yaml"
    )
    page = open_page(browser, setup["web"])
    with proxy(setup, policy=policy) as host:
        host.initialize()
        attached(page)
        call(host, 2, "sample", {"prompt": "x"})
        card = page.locator("article.review")
        card.wait_for(timeout=15000)
        assert "the model's draft" in card.inner_text()
        page.get_by_role("button", name="Edit answer…").click()
        page.get_by_label("replacement answer").fill("the operator's answer")
        page.get_by_role("button", name="Send this answer").click()
        response = result_of(host, 2)
    assert json.loads(response["result"]["content"][0]["text"])["content"]["text"] == "the operator's answer"


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


def test_a_silent_connection_is_closed_after_the_socket_timeout(tmp_path: Path) -> None:
    """A peer that connects and sends nothing gets its connection closed, so a few hundred of them
    cannot hold the console's connections for ever (the real server on a real socket, timeout shortened)."""
    import socket

    import anyio
    import anyio.to_thread

    from mcp_sampling_proxy.approval.console.client import ConsoleClient
    from mcp_sampling_proxy.front.web_console.app import WebConsole
    from mcp_sampling_proxy.front.web_console.server import listen, page_server
    from mcp_sampling_proxy.front.web_console.state import WebState
    from mcp_sampling_proxy.front.web_console.views import PolicyFacts

    listener = listen(0)
    state = WebState(PolicyFacts(), dict, None)
    console = WebConsole(state, ConsoleClient(tmp_path, state.on_event), listener.getsockname()[1], socket_timeout=0.5)
    took: list[float] = []

    def silent_peer() -> bytes:
        with socket.create_connection(("127.0.0.1", console.port), timeout=10) as peer:
            started = time.monotonic()
            try:
                return peer.recv(1024)
            finally:
                took.append(time.monotonic() - started)

    async def main() -> bytes:
        server = page_server(console)
        async with anyio.create_task_group() as tg:
            tg.start_soon(server.serve, [listener])
            try:
                received = await anyio.to_thread.run_sync(silent_peer)
            finally:
                server.should_exit = True
        return received

    assert anyio.run(main) == b""  # closed by the console, not by our 10 s wait
    assert took[0] < 5


def test_a_flood_of_audit_records_costs_one_snapshot_per_state_change_for_all_pages() -> None:
    """A server that floods the proxy fills the audit log: each new record used to rebuild every
    open page's state (budgets read, pending images checked) once per page. Now records are only
    a count for the pages, a state change is rebuilt once for all of them, and a page gets at most
    one event per 0.1 s. The real state and event stream, three pages reading it."""
    import anyio

    from mcp_sampling_proxy.approval.console.client import Event
    from mcp_sampling_proxy.front.web_console.app import WebConsole
    from mcp_sampling_proxy.front.web_console.state import WebState
    from mcp_sampling_proxy.front.web_console.views import PolicyFacts

    reads: list[float] = []

    def budgets() -> dict[str, Any]:
        reads.append(time.monotonic())
        return {}

    state = WebState(PolicyFacts(), budgets, None)
    console = WebConsole(state, client=cast("ConsoleClient", None), port=0)
    last_count: dict[int, int] = {}

    async def page(index: int) -> None:
        async for chunk in console.events():
            if chunk.startswith(b"event: audit"):
                last_count[index] = json.loads(chunk.split(b"data: ", 1)[1])["count"]

    async def main() -> None:
        async with anyio.create_task_group() as tg:
            for index in range(3):
                tg.start_soon(page, index)
            await anyio.sleep(0.3)
            for i in range(1000):  # over about 2 s, as a flooding server's refusals arrive
                state.add_records([{"event": "decision", "n": i}], None)
                await anyio.sleep(0.002)
                if i % 250 == 0:  # now and then a real change of state: a proxy's notice
                    state.on_event(Event("refused", Path(f"/run/{i}.sock"), why="not ours"))
            with anyio.move_on_after(10):
                while last_count != {0: 1000, 1: 1000, 2: 1000}:
                    await anyio.sleep(0.05)
            await console.stop()

    anyio.run(main)
    assert last_count == {0: 1000, 1: 1000, 2: 1000}  # every page saw the final count
    assert len(reads) <= 6, f"{len(reads)} snapshots for 4 state changes and 1000 records"


def test_usage_says_which_records_its_counts_cover() -> None:
    """The usage table counts the records the console holds (the last 20,000), not the whole
    log: the answer says how many and since when, so the page can say so."""
    import anyio

    from mcp_sampling_proxy.front.web_console.state import KEEP_RECORDS, WebState, usage_view
    from mcp_sampling_proxy.front.web_console.views import PolicyFacts

    state = WebState(PolicyFacts(), dict, None)
    state.add_records(
        [
            {
                "event": "decision",
                "ts": f"2026-11-23T10:0{i}:00.000Z",
                "server": "s",
                "decision": "allow",
                "input_tokens": 10,
                "output_tokens": 5,
            }
            for i in range(3)
        ],
        None,
    )
    usage = anyio.run(usage_view, state, {})
    assert usage["covers"] == {"records": 3, "since": "2026-11-23T10:00:00.000Z", "kept": KEEP_RECORDS}
    assert [(s["server"], s["input_tokens"]) for s in usage["servers"]] == [("s", 30)]


def test_the_budgets_shown_are_the_ones_a_proxy_sealed(tmp_path: Path) -> None:
    """The page shows the budgets file only when its seal verifies: a file something else wrote (or an
    emptied one) is what a proxy refuses, so it is not shown as the budgets either."""
    from mcp_sampling_proxy.front.web_console.views import read_budgets
    from mcp_sampling_proxy.quotas.integrity import prepare
    from mcp_sampling_proxy.quotas.limiters import TokenBudget

    prepare(tmp_path)  # the key a proxy makes at start
    TokenBudget(tmp_path / "budgets.json", durable=False).reserve("ask@x", 1000, 86400, 100)
    shown = read_budgets(tmp_path / "budgets.json")
    assert shown["ask@x"]["reserved"] == 100
    forged = json.loads((tmp_path / "budgets.json").read_text())["sealed"]  # the data without its seal
    (tmp_path / "budgets.json").write_text(json.dumps(forged))
    assert read_budgets(tmp_path / "budgets.json") == {}
