"""The relay as a process: everything passes unchanged, bad input on the pipe is answered, and the lifecycle
is clean. What the relay does with each message, without a process, is tests/unit/relay/test_relay_played.py."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from helpers.support import (
    INITIALIZE_LINE,
    KITCHEN_SINK,
    PY,
    RawHost,
    alive,
    children_of,
    proxy_command,
    proxy_env,
    running_with,
    server_children,
    write_policy,
)

SCRIPT = [
    ("tools/list", {}),
    ("tools/call", {"name": "echo", "arguments": {"text": "héllo \u2028 world"}}),
    ("tools/call", {"name": "progress", "arguments": {"steps": 3}, "_meta": {"progressToken": "tok-1"}}),
    ("logging/setLevel", {"level": "debug"}),
    ("tools/call", {"name": "log", "arguments": {"message": "a log line", "level": "warning"}}),
    ("tools/call", {"name": "notify_changes", "arguments": {}}),
    ("resources/list", {}),
    ("resources/read", {"uri": "test://hello"}),
    ("prompts/get", {"name": "greet", "arguments": {"name": "Ada"}}),
    ("ping", None),
    ("no/such_method", {"x": 1}),
    ("tools/call", {"name": "echo", "arguments": {"text": "x"}, "_meta": {"custom/key": {"deep": [1, 2]}}}),
]


def run_script(command: list[str], env: dict[str, str], stderr: Path) -> list[dict[str, Any]]:
    """Run SCRIPT (with string and integer ids) and return every message received."""
    with RawHost(command, env, stderr) as host:
        host.initialize()
        for index, (method, params) in enumerate(SCRIPT):
            request_id = f"req-{index}" if index % 2 else index + 100
            message: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
            if params is not None:
                message["params"] = params
            host.send(message)
            host.wait_for(lambda m, rid=request_id: m.get("id") == rid and "method" not in m)
        host.close_stdin()
        assert host.wait() == 0
        return [json.loads(line) for line in host.raw_received]


def normalise(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Drop what legitimately differs between runs (the capabilities the proxy adds)."""
    for message in messages:
        result = message.get("result")
        if isinstance(result, dict) and "serverInfo" in result:
            result.pop("serverInfo", None)
    return messages


def test_every_message_matches_a_direct_connection(tmp_path: Path) -> None:
    direct = run_script([PY, KITCHEN_SINK], proxy_env(), tmp_path / "direct.log")
    proxied = run_script(proxy_command(upstream=[PY, KITCHEN_SINK]), proxy_env(), tmp_path / "stderr.log")
    assert normalise(proxied) == normalise(direct)
    # stdout carries protocol messages only (the server's log tool ran): the proxy's own lines are on stderr
    assert all(message["jsonrpc"] == "2.0" for message in proxied)
    assert b"upstream ready" in (tmp_path / "stderr.log").read_bytes(), "logs belong on stderr"
    methods = [m.get("method") for m in proxied if "method" in m]
    # the script provoked each notification kind; the comparison above proves they all arrived in order
    for expected in (
        "notifications/progress",
        "notifications/message",
        "notifications/tools/list_changed",
        "notifications/resources/updated",
    ):
        assert expected in methods
    unknown = next(m for m in proxied if m.get("id") == 110)
    assert unknown["error"]["code"] == -32601


def test_a_line_logged_before_logging_is_set_up_goes_to_stderr() -> None:
    """Importing the package is enough: structlog's own default would print to stdout, the protocol's."""
    early = "import structlog, mcp_sampling_proxy.log; structlog.get_logger().warning('before configure')"
    done = subprocess.run([PY, "-c", early], capture_output=True, text=True, env=proxy_env(), timeout=30, check=True)
    assert done.stdout == ""
    assert "before configure" in done.stderr


def test_oversized_message_is_refused_with_the_limit_named(tmp_path: Path) -> None:
    command = proxy_command(None, "--max-message-bytes", "1000")
    with RawHost(command, proxy_env(), tmp_path / "stderr.log") as host:
        host.initialize()
        big = {
            "jsonrpc": "2.0",
            "id": 9,
            "method": "tools/call",
            "params": {"name": "echo", "arguments": {"text": "x" * 5000}},
        }
        host.send(big)
        error = host.next_message()
        assert error["error"]["code"] == -32600
        assert "1000" in error["error"]["message"]
        ok = host.request("tools/call", {"name": "echo", "arguments": {"text": "small"}})
        assert ok["result"]["content"][0]["text"] == "small"


def test_upstream_crash_answers_inflight_requests_and_exits_nonzero(tmp_path: Path) -> None:
    with RawHost(proxy_command(), proxy_env(), tmp_path / "stderr.log") as host:
        host.initialize()
        host.send(
            {
                "jsonrpc": "2.0",
                "id": 77,
                "method": "tools/call",
                "params": {"name": "slow", "arguments": {"seconds": 30}},
            }
        )
        host.send(
            {"jsonrpc": "2.0", "id": 78, "method": "tools/call", "params": {"name": "crash", "arguments": {"code": 3}}}
        )
        answers = {}
        for _ in range(2):
            message = host.next_message()
            answers[message["id"]] = message
        assert set(answers) == {77, 78}
        for message in answers.values():
            assert message["error"]["code"] == -32000
            assert "exited with code 3" in message["error"]["message"]
            assert "small_server" in message["error"]["message"]
        assert host.wait() == 3
        assert host.recv() is None


@pytest.mark.parametrize("how", ["eof", "sigterm", "sigint"])
def test_shutdown_leaves_no_orphan_or_zombie(tmp_path: Path, how: str) -> None:
    with RawHost(proxy_command(), proxy_env(), tmp_path / "stderr.log") as host:
        host.initialize()
        children = children_of(host.proc.pid)
        # the server, and the guard that would stop its group if the proxy were killed outright
        assert len(server_children(host.proc.pid)) == 1 and len(children) == 2, children
        started = time.monotonic()
        if how == "eof":
            host.close_stdin()
        else:
            host.proc.send_signal(signal.SIGTERM if how == "sigterm" else signal.SIGINT)
        assert host.wait() == 0
        assert time.monotonic() - started < 10
        deadline = time.monotonic() + 5
        while any(alive(child) for child in children) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not any(alive(child) for child in children)  # neither left running nor a zombie


STUBBORN = """
import signal, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
for line in sys.stdin:
    pass
while True:
    time.sleep(1)
"""


def test_stuck_upstream_is_killed_without_hanging(tmp_path: Path) -> None:
    policy = write_policy(tmp_path, "upstream:\n  shutdown_timeout: 0.5\n")
    command = proxy_command(policy, upstream=[PY, "-c", STUBBORN])
    with RawHost(command, proxy_env(), tmp_path / "stderr.log") as host:
        child = _first_child_running(host.proc.pid, b"SIG_IGN")
        started = time.monotonic()
        host.close_stdin()
        assert host.wait() == 0
        assert time.monotonic() - started < 8
        time.sleep(0.2)
        assert not alive(child)


ENV_SCRIPT = (
    "import os, sys\nsys.stderr.write(f'env:{os.getpid()}:' + ','.join(sorted(os.environ)) + '\\n')\n"
    "sys.stderr.flush()\nsys.stdin.read()\n"
)
# The server starts once the policy is parsed; how each way of writing it hides a key is
# tests/unit/config/test_child_env.py. Here, one policy through the real proxy: a key named, one passed.
PASS_ENV_POLICY = (
    "llm:\n  providers:\n    p:\n      type: openai\n      api_key_env: CUSTOM_KEY\n      models: [m]\n"
    "upstream: {pass_env: [ANTHROPIC_API_KEY]}\n"
)


def upstream_env_lines(policy: str, env: dict[str, str], tmp_path: Path) -> list[tuple[int, list[str]]]:
    """Start the proxy on a server that prints its pid and environment names; (pid, names) per server."""
    script = ENV_SCRIPT + f"# {tmp_path}\n"  # this test's servers, not another worker's (`running_with`)
    log = tmp_path / "stderr.log"
    with RawHost(proxy_command(policy, upstream=[PY, "-c", script]), env, log) as host:
        deadline = time.monotonic() + 15
        while "env:" not in log.read_text() and time.monotonic() < deadline:
            time.sleep(0.02)
        host.close_stdin()
        host.wait()
    stderr = log.read_text()
    assert "sk-" not in stderr
    lines = [line for line in stderr.splitlines() if "env:" in line]
    assert all(line.startswith("[upstream ") for line in lines)
    return [
        (int(line.split("env:")[1].split(":")[0]), line.split("env:")[1].split(":", 1)[1].split(",")) for line in lines
    ]


def test_upstream_stderr_is_tagged_on_proxy_stderr_and_keys_are_not_inherited(tmp_path: Path) -> None:
    env = proxy_env(
        OPENAI_API_KEY="sk-secret-openai",
        ANTHROPIC_API_KEY="sk-ant-secret",
        CUSTOM_KEY="sk-custom-secret",
        SOME_SETTING="kept",
    )
    servers = upstream_env_lines(write_policy(tmp_path, PASS_ENV_POLICY), env, tmp_path)
    assert len(servers) == 1  # one start, once the policy is read
    names = servers[0][1]
    assert "SOME_SETTING" in names
    assert "CUSTOM_KEY" not in names and "OPENAI_API_KEY" not in names
    assert "ANTHROPIC_API_KEY" in names  # upstream.pass_env


def test_a_variable_the_policy_only_mentions_reaches_the_server(tmp_path: Path) -> None:
    """The server starts once the policy is parsed: a variable named in a comment is not a key to hide (the
    text-guessing early start used to hide it, and start the server again)."""
    block = "llm:\n  providers:\n    p:\n      type: openai\n      api_key_env: CUSTOM_KEY\n      models: [m]\n"
    policy = write_policy(tmp_path, "# SOME_SETTING is read by the server\n" + block)
    env = proxy_env(CUSTOM_KEY="sk-custom-secret", SOME_SETTING="kept")
    servers = upstream_env_lines(policy, env, tmp_path)
    assert len(servers) == 1
    assert "SOME_SETTING" in servers[0][1] and "CUSTOM_KEY" not in servers[0][1]
    assert not running_with(f"# {tmp_path}\n")


def test_a_policy_error_starts_no_server(tmp_path: Path) -> None:
    import subprocess

    marker = tmp_path / "started"
    script = f"import pathlib, sys, os\npathlib.Path({str(marker)!r}).write_text(str(os.getpid()))\nsys.stdin.read()\n"
    policy = write_policy(tmp_path, "rules:\n  - name: x\n    actoin: allow\n")
    result = subprocess.run(
        proxy_command(policy, upstream=[PY, "-c", script]), env=proxy_env(), capture_output=True, text=True, timeout=30
    )
    assert result.returncode == 2 and "actoin" in result.stderr
    assert result.stdout == ""
    assert not marker.exists()  # the policy is read before any server starts


def test_missing_command_gets_a_clear_error(tmp_path: Path) -> None:
    import subprocess

    result = subprocess.run(
        proxy_command(upstream=["no-such-server-binary"]), env=proxy_env(), capture_output=True, text=True, timeout=30
    )
    assert result.returncode == 127
    assert "'no-such-server-binary' not found" in result.stderr
    assert result.stdout == ""


def test_help_explains_options_with_a_host_config_example() -> None:
    import subprocess

    result = subprocess.run([PY, "-m", "mcp_sampling_proxy", "--help"], capture_output=True, text=True, timeout=30)
    assert result.returncode == 0
    for needle in ("--policy", "--url", "--header", "--name", "--log-level", "--log-format", "mcpServers"):
        assert needle in result.stdout
    # every subcommand is listed, with what it is for
    from mcp_sampling_proxy.notation.vocabulary import SUBCOMMANDS

    listed = result.stdout.split("commands (each has --help):\n", 1)[1].split("\n\n", 1)[0]
    names = {line.split()[0] for line in listed.splitlines()}
    assert names | {"unwrap", "logout"} == set(SUBCOMMANDS), listed


if sys.platform != "linux":  # pragma: no cover
    pytestmark = pytest.mark.skip("process-tree checks use /proc")


def test_big_result_passes_intact(tmp_path: Path) -> None:
    with RawHost(proxy_command(), proxy_env(), tmp_path / "stderr.log") as host:
        host.initialize()
        response = host.request("tools/call", {"name": "big", "arguments": {"size": 3_000_000}})
        follow_up = host.request("tools/call", {"name": "echo", "arguments": {"text": "after"}})
    assert len(response["result"]["content"][0]["text"]) == 3_000_000
    assert follow_up["result"]["content"][0]["text"] == "after"


STUBBORN_ANSWERING = """
import json, signal, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
for line in sys.stdin:
    message = json.loads(line)
    if message.get("method") == "initialize":
        result = {"protocolVersion": message["params"]["protocolVersion"], "capabilities": {},
                  "serverInfo": {"name": "stubborn", "version": "1"}}
        print(json.dumps({"jsonrpc": "2.0", "id": message["id"], "result": result}), flush=True)
while True:
    time.sleep(1)
"""


def test_sigterm_while_stopping_after_eof_ends_the_server_now(tmp_path: Path) -> None:
    """SDK hosts close stdin, wait 2 s, SIGTERM, wait 2 s, SIGKILL. The proxy used to ignore the
    SIGTERM while it waited out its 5 s grace for the server, so it was killed before it could stop
    the server and say so; asked again, it now ends the server at once and exits in time."""
    command = proxy_command(upstream=[PY, "-c", STUBBORN_ANSWERING])
    with RawHost(command, proxy_env(), tmp_path / "stderr.log") as host:
        host.initialize()  # the session runs: the EOF below is the first stop, the SIGTERM the second
        child = server_children(host.proc.pid)[0]
        host.close_stdin()
        time.sleep(0.5)
        host.proc.send_signal(signal.SIGTERM)
        signalled = time.monotonic()
        assert host.wait() == 0
        assert time.monotonic() - signalled < 2.0  # before an SDK host's SIGKILL
    time.sleep(0.2)
    assert not alive(child)
    log = (tmp_path / "stderr.log").read_text()
    assert "asked again to stop" in log and "upstream stopped" in log


def test_sigterm_while_the_proxy_starts_is_an_orderly_stop(tmp_path: Path) -> None:
    """The server is spawned before the proxy's slower imports; a host that gives up at once (its
    SIGTERM before the session's own handlers) used to kill the proxy by the default action (-15),
    with no word on stderr. The signal is now held and acted on: the server is stopped, exit 0."""
    policy = write_policy(tmp_path, "upstream:\n  shutdown_timeout: 0.5\n")  # the server ignores SIGTERM
    command = proxy_command(policy, upstream=[PY, "-c", STUBBORN])
    with RawHost(command, proxy_env(), tmp_path / "stderr.log") as host:
        child = _first_child_running(host.proc.pid, b"SIG_IGN")  # the server, not bubblewrap's early probe
        host.proc.send_signal(signal.SIGTERM)
        assert host.wait() == 0
    time.sleep(0.2)
    assert not alive(child)
    log = (tmp_path / "stderr.log").read_text()
    assert '"reason":"SIGTERM"' in log.replace(" ", "") and "upstream stopped" in log


def _first_child_running(pid: int, fragment: bytes) -> int:
    """A child of `pid` whose command line holds `fragment`; not one forked but not yet exec'd (the
    bubblewrap probe's, before its exec), which still has the proxy's command line, server's words and all."""
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        for child in server_children(pid):
            try:
                cmdline = Path(f"/proc/{child}/cmdline").read_bytes()
                if fragment in cmdline and b"mcp_sampling_proxy" not in cmdline:
                    return child
            except OSError:
                continue
        time.sleep(0.002)
    raise AssertionError("the proxy started no server")


def test_stdout_on_dev_null_is_written_without_aborting(tmp_path: Path) -> None:
    """A character device that is not a terminal cannot be polled: uvloop aborted (SIGABRT, exit 134,
    no message) when the proxy's stdout was /dev/null."""
    import subprocess

    hello = json.dumps(
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "clientInfo": {"name": "x", "version": "1"},
            },
        }
    )
    with open("/dev/null", "wb") as devnull:
        done = subprocess.run(
            proxy_command(),
            input=(hello + "\n").encode(),
            stdout=devnull,
            stderr=subprocess.PIPE,
            env=proxy_env(),
            timeout=30,
        )
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    assert b"upstream ready" in done.stderr and b"upstream stopped" in done.stderr


# A server that answers a request 0.3 s after reading it, and drops it if the EOF came meanwhile (as the
# SDK's server does when it reads a request and EOF together): it answers only if it got EOF after the answer.
DROPS_AT_EOF = """
import json, queue, sys, threading, time
lines = queue.Queue()
threading.Thread(target=lambda: [*map(lines.put, sys.stdin), lines.put(None)], daemon=True).start()
while (line := lines.get()) is not None:
    message = json.loads(line)
    if "id" not in message:
        continue
    if message["method"] == "initialize":
        result = {"protocolVersion": message["params"]["protocolVersion"], "capabilities": {"tools": {}},
                  "serverInfo": {"name": "drops-at-eof", "version": "1"}}
    else:
        time.sleep(0.3)
        if None in list(lines.queue):
            sys.exit(0)
        result = {"tools": []}
    print(json.dumps({"jsonrpc": "2.0", "id": message["id"], "result": result}), flush=True)
"""


def test_a_host_that_closes_stdin_after_writing_still_gets_every_answer(tmp_path: Path) -> None:
    """`printf REQUESTS | mcp-sampling-proxy -- server`: the host writes, closes its stdin and reads. The
    proxy used to tell the server EOF as soon as it had forwarded the lines, and a server that reads a
    request and EOF together drops the request; directly it had answered. It now tells the server EOF
    once every host request has its answer."""
    import subprocess

    initialize = json.loads(INITIALIZE_LINE)
    lines = [initialize, {"jsonrpc": "2.0", "method": "notifications/initialized"}]
    lines.append({"jsonrpc": "2.0", "id": 2, "method": "tools/list"})
    text = "".join(json.dumps(line) + "\n" for line in lines)
    done = subprocess.run(
        proxy_command(upstream=[PY, "-c", DROPS_AT_EOF]),
        input=text,
        capture_output=True,
        text=True,
        env=proxy_env(),
        timeout=60,
    )
    answers = {message.get("id"): message for message in map(json.loads, done.stdout.splitlines())}
    assert set(answers) == {1, 2}, f"answers to {set(answers)}\n{done.stderr[-2000:]}"
    assert answers[2]["result"] == {"tools": []}, answers[2]
