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
from helpers.support import (
    EXAMPLES,
    KITCHEN_SINK,
    PY,
    SMALL_SERVER,
    openai_policy,
    proxy_command,
    proxy_env,
    write_policy,
)
from helpers.terminal import PtySession, console_beside_a_proxy, terminal_env, try_argv

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="needs a Linux pty")


def test_server_text_is_stripped_of_escape_sequences_on_the_terminal(tmp_path: Path) -> None:
    policy = write_policy(tmp_path, "rules:\n  - name: all\n    action: allow\n")
    evil = "hello\x1b[2J\x1b[H\x1b]0;pwned\x07\x1b[31mRED\x9b5A end"
    session = PtySession(
        try_argv(
            "--policy", policy, "--tool", "sample", "--args", json.dumps({"prompt": evil}), "--", PY, SMALL_SERVER
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


def test_readme_quickstart_without_policy_or_key(tmp_path: Path) -> None:
    """The README's first command: approve at the terminal, then type the reply (the `console` provider
    a proxy without a policy or a key falls back to)."""
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    assert "mcp-sampling-proxy try --tool summarize" in readme
    text = "MCP servers can ask the client for LLM completions."
    session = PtySession(
        try_argv(
            "--tool", "summarize", "--args", json.dumps({"text": text}), "--", PY, str(EXAMPLES / "summarizer.py")
        ),
        terminal_env(),
    )
    session.read_until(b"Allow this request?")
    session.type("y\n")
    screen = session.read_until(b"finish with a line holding only '.'")
    assert b"Server 'summarizer' asks for an LLM completion" in screen and text.encode() in screen
    session.type("Servers borrow the client's model.\n.\n")
    assert session.finish() == 0
    assert b"Servers borrow the client's model." in session.output.split(b"result:")[1]


# A host in the terminal: it starts the proxy (whose /dev/tty is this terminal) and makes the tool calls
# given as JSON ([tool, arguments] each) one after the other, each once the one before ended; what each
# tool returned goes to a file, one JSON line each (not to the terminal, where the questions are).
SEQUENTIAL_HOST = """\
import json, subprocess, sys

proxy = subprocess.Popen(json.loads(sys.argv[2]), stdin=subprocess.PIPE, stdout=subprocess.PIPE)


def send(message):
    proxy.stdin.write((json.dumps(message) + "\\n").encode())
    proxy.stdin.flush()


def response(wanted):
    while True:
        message = json.loads(proxy.stdout.readline())
        if message.get("id") == wanted and "method" not in message:
            return message


send({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-06-18",
      "capabilities": {}, "clientInfo": {"name": "pty-host", "version": "1"}}})
response(1)
send({"jsonrpc": "2.0", "method": "notifications/initialized"})
for number, (tool, arguments) in enumerate(json.loads(sys.argv[1]), start=2):
    send({"jsonrpc": "2.0", "id": number, "method": "tools/call", "params": {"name": tool, "arguments": arguments}})
    with open(sys.argv[3], "a") as results:
        results.write(response(number)["result"]["content"][0]["text"] + "\\n")
"""


def test_the_proxys_terminal_takes_each_answer_in_one_keystroke(tmp_path: Path, llm: FakeLLMServer) -> None:
    """One proxy on a real terminal asks six questions in turn: y approves (and its answer, under review, is
    replaced: e), n denies; a form is declined (d) or cancelled (c) in one key; a link shows its host and
    is opened only on o, never on d."""
    llm.reply_text("the model's draft")
    policy = write_policy(
        tmp_path,
        openai_policy(llm.base_url, rules="rules:\n  - name: ask-me\n    action: prompt\n")
        + "approval:\n  review_response: true\nelicitation: {url_mode: true}\n",
    )
    opener = tmp_path / "opener.py"
    opener.write_text("import sys\nwith open(sys.argv[1], 'a') as f:\n    f.write(sys.argv[2] + '\\n')\n")
    opened = tmp_path / "opened.txt"
    url = "https://xn--pple-43d.com/login?next=%2F"
    name_form = {"schema_json": json.dumps({"type": "object", "properties": {"name": {"type": "string"}}})}
    calls = [
        ("sample", {"prompt": "may I?"}),
        ("sample", {"prompt": "may I too?"}),
        ("elicit_form", name_form),
        ("elicit_form", name_form),
        ("elicit_url", {"url": url}),
        ("elicit_url", {"url": url}),
    ]
    host = tmp_path / "host.py"
    host.write_text(SEQUENTIAL_HOST)
    results = tmp_path / "results.jsonl"
    env = terminal_env(TEST_LLM_KEY="k", MCP_SAMPLING_PROXY_URL_OPENER=f"{PY} {opener} {opened}")
    command = json.dumps(proxy_command(policy, upstream=[PY, KITCHEN_SINK]))  # the one with elicit_url
    session = PtySession([PY, str(host), json.dumps(calls), command, str(results)], env)

    screen = session.read_until(b"Allow this request?")
    assert b"may I?" in screen and b"during tool call 'sample'" in screen
    session.type("y\n")
    assert b"the model's draft" in session.read_until(b"Send this answer to the server?")
    session.type("e\n")
    session.read_until(b"Replacement answer")
    session.type("the operator's answer\n.\n")
    asked = len(session.output)
    assert b"may I too?" in session.read_until(b"Allow this request?", after=asked)
    session.type("n\n")
    for key in ("d", "c"):
        asked = len(session.output)
        session.read_until(b"[a]nswer the form", after=asked)
        session.type(key + "\n")
    for key in ("o", "d"):
        asked = len(session.output)
        screen = session.read_until(b"[o]pen it in your browser", after=asked)[asked:]
        assert url.encode() in screen and b">>> xn--pple-43d.com <<<" in screen and b"WARNING" in screen
        session.type(key + "\n")
    assert session.finish() == 0
    approved, denied, declined, cancelled, accepted, refused = (
        json.loads(line) for line in results.read_text().splitlines()
    )
    assert approved["content"]["text"] == "the operator's answer"
    assert "rejected at the terminal" in denied["error"]["message"] and len(llm.requests) == 1
    assert (declined["action"], cancelled["action"]) == ("decline", "cancel")
    assert (accepted["action"], refused["action"]) == ("accept", "decline")
    assert opened.read_text() == url + "\n"  # opened once: on `o`, not on `d`


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
            "--tool", "elicit_form", "--args", json.dumps({"schema_json": json.dumps(schema)}), "--", PY, SMALL_SERVER
        ),
        terminal_env(),
    )
    session.read_until(b"[a]nswer the form")
    assert b"Server 'small_server' (which calls itself \"small-server\") asks during tool call" in session.output
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


def test_the_console_command_answers_a_proxy_without_a_terminal(
    tmp_path: Path, dirs: dict[str, str], llm: FakeLLMServer
) -> None:
    """A proxy started as Claude Desktop starts it (no terminal), `console` on a terminal beside it. A request
    sent the moment the proxy is up waits for the console's next scan rather than being refused, and shows
    the server's text without its escape sequences; a `y` typed while nothing is asked approves nothing
    (type-ahead is discarded), an answer that is no choice asks again, and the prompt names the host; a
    form re-asks a value below its minimum."""
    console, proxy = console_beside_a_proxy(tmp_path, dirs, llm.base_url)
    console.read_until(b"watching")
    with proxy as host:
        host.initialize(name="typeahead-host")  # no wait for "attached": the call goes out at once
        call = {"name": "sample", "arguments": {"prompt": "evil\x1b[2J prompt"}}
        host.send({"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": call})
        console.read_until(b"Allow this request? [y]es once")
        console.type("y\n")
        approved = host.wait_for(lambda m: m.get("id") == 5)
        assert json.loads(approved["result"]["content"][0]["text"])["content"]["text"] == "echo: evil\x1b[2J prompt"
        console.read_until(b"-> approved")  # the outcome is shown; the console is idle again
        asked = len(console.output)

        console.type("y\n")  # typed while nothing is asked
        call = {"name": "sample", "arguments": {"prompt": "nobody saw me"}}
        host.send({"jsonrpc": "2.0", "id": 6, "method": "tools/call", "params": call})
        screen = console.read_until(b"Allow this request? [y]es once", after=asked)[asked:]
        assert b"host 'typeahead-host'" in screen
        console.type("maybe\n")  # the question still waits: the type-ahead `y` answered nothing
        console.read_until(b"is not one of the choices", after=asked)
        console.type("n\n")
        console.read_until(b"-> denied", after=asked)
        denied = host.wait_for(lambda m: m.get("id") == 6)
        assert json.loads(denied["result"]["content"][0]["text"])["error"]["code"] == -1

        schema = {"type": "object", "properties": {"age": {"type": "integer", "minimum": 0}}, "required": ["age"]}
        call = {"name": "elicit_form", "arguments": {"schema_json": json.dumps(schema)}}
        host.send({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": call})
        console.read_until(b"[a]nswer the form")
        console.type("a\n")
        asked = len(console.output)
        console.read_until(b"age", after=asked)
        console.type("-4\n")  # below the minimum: asked again
        console.read_until(b"too small", after=asked)
        console.type("42\n")
        filled = host.wait_for(lambda m: m.get("id") == 7)
    os.kill(console.pid, 2)
    console.finish()
    assert json.loads(filled["result"]["content"][0]["text"]) == {"action": "accept", "data": {"age": 42}}
    assert len(llm.requests) == 1  # the first request's: nothing else ran
    assert b"evil prompt" in console.output and b"\x1b[2J" not in console.output


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
            while console._read(0.1):  # what it wrote before it ended may still wait in the terminal
                pass
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
