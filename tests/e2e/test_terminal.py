"""The terminal as a person uses it: `try` under a pseudo-terminal, typed replies, y/n approval.

The proxy runs in a new session (as the SDK starts servers), so it reaches the user's terminal
through the device `try` hands it. Server text shown there must arrive without escape sequences.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from fakes.llm_server import FakeLLMServer
from helpers.support import EXAMPLES, KITCHEN_SINK, PY, openai_policy, proxy_env, write_policy
from helpers.terminal import PtySession, console_beside_a_proxy, terminal_env, try_argv

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="needs a Linux pty")


def test_console_provider_reply_typed_at_the_terminal(tmp_path: Path) -> None:
    policy = write_policy(tmp_path, "rules:\n  - name: all\n    action: allow\n")
    session = PtySession(
        try_argv(
            "--policy",
            policy,
            "--tool",
            "summarize",
            "--args",
            json.dumps({"text": "The quick brown fox."}),
            "--",
            PY,
            str(EXAMPLES / "summarizer.py"),
        ),
        terminal_env(),
    )
    screen = session.read_until(b"finish with a line holding only '.'")
    assert b"Server 'summarizer' asks for an LLM completion" in screen
    assert b"The quick brown fox." in screen
    session.type("A fox, quickly.\n.\n")
    assert session.finish() == 0
    assert b"result:" in session.output
    assert b"A fox, quickly." in session.output.split(b"result:")[1]


def test_server_text_is_stripped_of_escape_sequences_on_the_terminal(tmp_path: Path) -> None:
    policy = write_policy(tmp_path, "rules:\n  - name: all\n    action: allow\n")
    evil = "hello\x1b[2J\x1b[H\x1b]0;pwned\x07\x1b[31mRED\x9b5A end"
    session = PtySession(
        try_argv(
            "--policy", policy, "--tool", "sample", "--args", json.dumps({"prompt": evil}), "--", PY, KITCHEN_SINK
        ),
        terminal_env(),
    )
    screen = session.read_until(b"finish with a line holding only '.'")
    session.type(".\n")
    session.finish()
    assert b"hellopwnedRED end" not in screen  # the OSC payload is removed with its sequence
    assert b"helloRED end" in screen
    for forbidden in (b"\x1b[2J", b"\x1b]0;", b"\x1b[31m", b"\x9b", "\x9b".encode()):
        assert forbidden not in session.output


@pytest.mark.parametrize(("answer", "approved"), [("y", True), ("n", False)])
def test_prompt_rule_asks_at_the_terminal(tmp_path: Path, answer: str, approved: bool) -> None:
    with FakeLLMServer("openai") as llm:
        llm.reply_text("approved answer")
        policy = write_policy(
            tmp_path, openai_policy(llm.base_url, rules=("rules:\n  - name: ask-me\n    action: prompt\n"))
        )
        session = PtySession(
            try_argv("--policy", policy, "--tool", "sample", "--args", '{"prompt": "may I?"}', "--", PY, KITCHEN_SINK),
            terminal_env(TEST_LLM_KEY="k"),
        )
        screen = session.read_until(b"Allow this request?")
        assert b"may I?" in screen
        assert b"during tool call 'sample'" in screen
        session.type(answer + "\n")
        session.finish()
        if approved:
            assert b"approved answer" in session.output
            assert len(llm.requests) == 1
        else:
            assert b"rejected at the terminal" in session.output
            assert llm.requests == []


def test_readme_quickstart_without_policy_or_key(tmp_path: Path) -> None:
    """The README's first command: approve at the terminal, then type the reply."""
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    assert "mcp-sampling-proxy try --tool summarize" in readme
    session = PtySession(
        try_argv(
            "--tool",
            "summarize",
            "--args",
            '{"text": "MCP servers can ask the client for LLM completions."}',
            "--",
            PY,
            str(EXAMPLES / "summarizer.py"),
        ),
        terminal_env(),
    )
    session.read_until(b"Allow this request?")
    session.type("y\n")
    session.read_until(b"finish with a line holding only '.'")
    session.type("Servers borrow the client's model.\n.\n")
    assert session.finish() == 0
    assert b"Servers borrow the client's model." in session.output.split(b"result:")[1]


def test_console_command_approves_a_proxy_without_terminal(tmp_path: Path, dirs: dict[str, str]) -> None:
    """A proxy started like Claude Desktop starts it (no terminal); the user runs `console` elsewhere."""
    with FakeLLMServer("openai") as llm:
        console, proxy = console_beside_a_proxy(tmp_path, dirs, llm.base_url)
        with proxy as host:
            host.initialize()
            console.read_until(b"attached")
            host.send(
                {
                    "jsonrpc": "2.0",
                    "id": 5,
                    "method": "tools/call",
                    "params": {"name": "sample", "arguments": {"prompt": "evil\x1b[2J prompt"}},
                }
            )
            console.read_until(b"Allow this request? [y]es once")
            console.type("y\n")
            response = host.wait_for(lambda m: m.get("id") == 5)
        os.kill(console.pid, 2)
        console.finish()
    assert json.loads(response["result"]["content"][0]["text"])["content"]["text"] == "echo: evil\x1b[2J prompt"
    assert b"evil prompt" in console.output
    assert b"\x1b[2J" not in console.output


def test_form_on_the_terminal_every_field_type_and_re_asking(tmp_path: Path) -> None:
    schema = {
        "type": "object",
        "properties": {
            "name": {"type": "string", "title": "Your name", "minLength": 2},
            "age": {"type": "integer", "minimum": 0, "maximum": 150, "default": 30},
            "email": {"type": "string", "format": "email"},
            "born": {"type": "string", "format": "date"},
            "newsletter": {"type": "boolean", "default": False},
            "color": {"type": "string", "oneOf": [{"const": "r", "title": "Red"}, {"const": "g", "title": "Green"}]},
            "legacy": {"type": "string", "enum": ["x", "y"], "enumNames": ["Ex", "Why"]},
            "sizes": {"type": "array", "items": {"enum": ["s", "m", "l"]}, "minItems": 1},
            "score": {"type": "number", "minimum": 0, "maximum": 1, "default": 0.5},
        },
        "required": ["name", "age"],
    }
    session = PtySession(
        try_argv(
            "--tool", "elicit_form", "--args", json.dumps({"schema_json": json.dumps(schema)}), "--", PY, KITCHEN_SINK
        ),
        terminal_env(),
    )
    session.read_until(b"[a]nswer the form")
    assert b"Server 'kitchen_sink_server' (which calls itself \"kitchen-sink\") asks during tool call" in session.output
    assert b"asks during tool call 'elicit_form'" in session.output
    session.type("a\n")
    answers = [
        (b"Your name", "A"),  # too short: re-asked
        (b"at least 2", "Ada"),
        (b"age", "200"),  # out of range: re-asked
        (b"150", ""),  # Enter: the default (30)
        (b"email", "not-an-email"),  # re-asked
        (b"email", "ada@example.com"),
        (b"born", "1815-12-10"),
        (b"newsletter", "y"),
        (b"color", "2"),  # by number: Green
        (b"legacy", "Why"),  # by label
        (b"sizes", "1, 3"),
        (b"score", ""),
    ]
    for prompt, text in answers:
        session.read_until(prompt)
        session.type(text + "\n")
    assert session.finish() == 0
    result = json.loads(session.output.split(b"result:")[1].strip().decode())
    assert result == {
        "action": "accept",
        "data": {
            "name": "Ada",
            "age": 30,
            "email": "ada@example.com",
            "born": "1815-12-10",
            "newsletter": True,
            "color": "g",
            "legacy": "y",
            "sizes": ["s", "l"],
            "score": 0.5,
        },
    }


@pytest.mark.parametrize(("key", "action"), [("d", "decline"), ("c", "cancel")])
def test_form_decline_and_cancel_are_one_keystroke(tmp_path: Path, key: str, action: str) -> None:
    schema = {"type": "object", "properties": {"name": {"type": "string"}}}
    session = PtySession(
        try_argv(
            "--tool", "elicit_form", "--args", json.dumps({"schema_json": json.dumps(schema)}), "--", PY, KITCHEN_SINK
        ),
        terminal_env(),
    )
    session.read_until(b"[a]nswer the form")
    session.type(key + "\n")
    session.finish()
    assert f'"action": "{action}"'.encode() in session.output


@pytest.mark.parametrize(("key", "opened"), [("o", True), ("d", False)])
def test_url_mode_on_the_terminal_shows_the_host_and_opens_only_on_consent(
    tmp_path: Path, key: str, opened: bool
) -> None:
    script = tmp_path / "opener.py"
    script.write_text("import sys, pathlib\npathlib.Path(sys.argv[1]).write_text(sys.argv[2])\n")
    record = tmp_path / "opened.txt"
    policy = write_policy(tmp_path, "elicitation: {url_mode: true}\n")
    url = "https://xn--pple-43d.com/login?next=%2F"
    env = terminal_env(MCP_SAMPLING_PROXY_URL_OPENER=f"{PY} {script} {record}")
    session = PtySession(
        try_argv(
            "--policy", policy, "--tool", "elicit_url", "--args", json.dumps({"url": url}), "--", PY, KITCHEN_SINK
        ),
        env,
    )
    screen = session.read_until(b"[o]pen it in your browser")
    assert url.encode() in screen
    assert b">>> xn--pple-43d.com <<<" in screen
    assert b"WARNING" in screen
    session.type(key + "\n")
    session.finish()
    assert record.exists() is opened
    if opened:
        assert record.read_text() == url
        assert b'"action": "accept"' in session.output
    else:
        assert b'"action": "decline"' in session.output


def test_console_command_fills_an_elicitation_form(tmp_path: Path) -> None:
    from helpers.support import RawHost, proxy_command

    dirs = {
        "MCP_SAMPLING_PROXY_RUNTIME_DIR": str(tmp_path / "run"),
        "MCP_SAMPLING_PROXY_STATE_DIR": str(tmp_path / "state"),
    }
    schema = {"type": "object", "properties": {"age": {"type": "integer", "minimum": 0}}, "required": ["age"]}
    console = PtySession([PY, "-m", "mcp_sampling_proxy", "console"], terminal_env(**dirs))
    with RawHost(proxy_command(), proxy_env(**dirs), tmp_path / "stderr.log") as host:
        host.initialize()
        console.read_until(b"attached")
        host.send(
            {
                "jsonrpc": "2.0",
                "id": 3,
                "method": "tools/call",
                "params": {"name": "elicit_form", "arguments": {"schema_json": json.dumps(schema)}},
            }
        )
        console.read_until(b"[a]nswer the form")
        console.type("a\n")
        console.read_until(b"age")
        console.type("-4\n")  # below the minimum: asked again
        console.read_until(b"too small")
        console.type("42\n")
        response = host.wait_for(lambda m: m.get("id") == 3)
    os.kill(console.pid, 2)
    console.finish()
    assert json.loads(response["result"]["content"][0]["text"]) == {"action": "accept", "data": {"age": 42}}


def test_review_at_the_terminal_can_edit_the_answer(tmp_path: Path) -> None:
    with FakeLLMServer("openai") as llm:
        llm.reply_text("the model's draft")
        policy = write_policy(tmp_path, openai_policy(llm.base_url) + "approval:\n  review_response: true\n")
        session = PtySession(
            try_argv("--policy", policy, "--tool", "sample", "--args", '{"prompt": "x"}', "--", PY, KITCHEN_SINK),
            terminal_env(TEST_LLM_KEY="k"),
        )
        screen = session.read_until(b"Send this answer to the server?")
        assert b"the model's draft" in screen
        session.type("e\n")
        session.read_until(b"Replacement answer")
        session.type("the operator's answer\n.\n")
        assert session.finish() == 0
    assert b'"text": "the operator\'s answer"' in session.output.split(b"result:")[1]


def test_console_ignores_type_ahead_and_re_asks_on_an_unknown_answer(tmp_path: Path, dirs: dict[str, str]) -> None:
    """A `y` typed while the console sat idle must not approve the next request (issue #11, defect 2):
    input typed before the question is discarded, an answer that is not a choice asks again, the
    outcome is shown, and the prompt names the host too."""
    with FakeLLMServer("openai") as llm:
        console, proxy = console_beside_a_proxy(tmp_path, dirs, llm.base_url)
        with proxy as host:
            host.initialize(name="typeahead-host")
            console.read_until(b"attached")
            console.type("y\n")  # typed while nothing is asked
            time.sleep(0.5)
            host.send(
                {
                    "jsonrpc": "2.0",
                    "id": 5,
                    "method": "tools/call",
                    "params": {"name": "sample", "arguments": {"prompt": "nobody saw me"}},
                }
            )
            screen = console.read_until(b"Allow this request? [y]es once")
            assert b"host 'typeahead-host'" in screen
            time.sleep(1.0)
            assert llm.requests == []  # the type-ahead `y` approved nothing
            console.type("maybe\n")
            console.read_until(b"is not one of the choices")
            console.type("n\n")
            console.read_until(b"-> denied")
            response = host.wait_for(lambda m: m.get("id") == 5)
        os.kill(console.pid, 2)
        console.finish()
    assert json.loads(response["result"]["content"][0]["text"])["error"]["code"] == -1
    assert llm.requests == []


def test_one_ctrl_c_at_a_console_prompt_quits_and_the_request_is_refused(tmp_path: Path, dirs: dict[str, str]) -> None:
    """Issue #11, defect 2: the first Ctrl-C at a prompt quits the console; the proxy sees it go and
    refuses the request (no other channel), audits that, and keeps serving."""
    with FakeLLMServer("openai") as llm:
        console, proxy = console_beside_a_proxy(tmp_path, dirs, llm.base_url)
        with proxy as host:
            host.initialize()
            console.read_until(b"attached")
            host.send(
                {
                    "jsonrpc": "2.0",
                    "id": 5,
                    "method": "tools/call",
                    "params": {"name": "sample", "arguments": {"prompt": "hello"}},
                }
            )
            console.read_until(b"Allow this request? [y]es once")
            console.type("\x03")
            deadline = time.monotonic() + 10
            while (ended := os.waitpid(console.pid, os.WNOHANG))[0] == 0 and time.monotonic() < deadline:
                console._read(0.1)
            if ended[0] == 0:
                os.kill(console.pid, 9)
                raise AssertionError("one Ctrl-C did not quit the console:\n" + console.output.decode(errors="replace"))
            code = os.waitstatus_to_exitcode(ended[1])
            response = host.wait_for(lambda m: m.get("id") == 5)
            assert "result" in host.request("ping")  # the proxy goes on
    assert code in (0, 130)
    assert b"Traceback" not in console.output
    assert b"console closed" in console.output
    body = json.loads(response["result"]["content"][0]["text"])
    assert "approval" in body["error"]["message"] and not llm.requests


def test_after_ctrl_c_at_the_console_the_host_is_asked_next(tmp_path: Path, dirs: dict[str, str]) -> None:
    from helpers.support import RawHost, proxy_command

    with FakeLLMServer("openai") as llm:
        rules = "approval: {channels: [console, host]}\nrules:\n  - name: ask\n    action: prompt\n"
        policy = write_policy(tmp_path, openai_policy(llm.base_url, rules=rules))
        console = PtySession([PY, "-m", "mcp_sampling_proxy", "console"], terminal_env(**dirs))
        with RawHost(proxy_command(policy), proxy_env(**dirs), tmp_path / "stderr.log") as host:
            host.initialize({"elicitation": {}})
            console.read_until(b"attached")
            host.send(
                {
                    "jsonrpc": "2.0",
                    "id": 5,
                    "method": "tools/call",
                    "params": {"name": "sample", "arguments": {"prompt": "hello"}},
                }
            )
            console.read_until(b"Allow this request? [y]es once")
            console.type("\x03")
            asked = host.wait_for(lambda m: m.get("method") == "elicitation/create")
            host.send(
                {"jsonrpc": "2.0", "id": asked["id"], "result": {"action": "accept", "content": {"approve": True}}}
            )
            response = host.wait_for(lambda m: m.get("id") == 5)
        console.finish(timeout=10)
    assert json.loads(response["result"]["content"][0]["text"])["content"]["text"] == "echo: hello"


RAW_EVIL_TOOLS = """
import json, sys
for line in sys.stdin:
    msg = json.loads(line)
    if "id" not in msg:
        continue
    if msg["method"] == "initialize":
        result = {"protocolVersion": msg["params"]["protocolVersion"], "capabilities": {"tools": {}},
                  "serverInfo": {"name": "evil", "version": "1"}}
    elif msg["method"] == "tools/list":
        result = {"tools": [{"name": "evil\\x1b]0;pwned\\x07name\\x1b[2J", "inputSchema": {"type": "object"}}]}
    else:
        result = {}
    print(json.dumps({"jsonrpc": "2.0", "id": msg["id"], "result": result}), flush=True)
"""


def test_try_lists_a_servers_tool_names_without_their_escape_sequences(tmp_path: Path) -> None:
    """`try` prints the server's tool names on the terminal: a name is the server's text like any other."""
    done = subprocess.run(
        try_argv("--", PY, "-c", RAW_EVIL_TOOLS),
        capture_output=True,
        env=proxy_env(),
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, done.stderr.decode(errors="replace")[-2000:]
    assert b"tools: evilname\n" in done.stdout
    assert b"\x1b" not in done.stdout and b"\x07" not in done.stdout


def test_a_request_right_after_start_waits_for_the_console_on_its_way(tmp_path: Path, dirs: dict[str, str]) -> None:
    """A host that calls a sampling tool the moment its proxy is up: the running console finds the new
    proxy at its next scan (every 0.5 s), and the request waits for it rather than being refused with
    "no companion console is attached"."""
    with FakeLLMServer("openai") as llm:
        console, proxy = console_beside_a_proxy(tmp_path, dirs, llm.base_url)
        console.read_until(b"watching")
        with proxy as host:
            host.initialize()  # no wait for "attached": the call goes out at once
            host.send(
                {
                    "jsonrpc": "2.0",
                    "id": 5,
                    "method": "tools/call",
                    "params": {"name": "sample", "arguments": {"prompt": "now"}},
                }
            )
            console.read_until(b"Allow this request? [y]es once")
            console.type("y\n")
            response = host.wait_for(lambda m: m.get("id") == 5)
        os.kill(console.pid, 2)
        console.finish()
    assert json.loads(response["result"]["content"][0]["text"])["content"]["text"] == "echo: now"
