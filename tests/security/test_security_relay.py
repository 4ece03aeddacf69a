"""Attacks on the relay itself: one hostile line from either side must not stop, fool or silence it.

Each test runs the real proxy process between a raw JSON-lines host and a hostile server
(tests/fixtures/hostile/relay_attacks_server.py) and checks what a user would see: the proxy
keeps answering, only JSON-RPC objects reach the host, sampling is always inspected (policy and
audit), and a message that cannot be delivered gets an error instead of silence.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path
from typing import Any

from helpers.support import (
    PY,
    ROOT,
    UNCONFINED,
    RawHost,
    alive,
    children_of,
    proxy_command,
    proxy_env,
    server_children,
    write_policy,
)

HOSTILE = str(ROOT / "tests" / "fixtures" / "hostile" / "relay_attacks_server.py")
# unconfined: these attacks are on the relay and on the process tree the proxy keeps without a sandbox
DENY_ALL = "rules:\n  - name: no-sampling\n    action: deny\naudit:\n  path: {audit}\n" + UNCONFINED
# the hostile server ignores EOF: the grace the proxy gives it before SIGTERM (5 s by default) is only waited out
QUICK_STOP = "upstream:\n  shutdown_timeout: 1\n"


def start(tmp_path: Path, *options: str, upstream: list[str] | None = None) -> RawHost:
    policy = write_policy(tmp_path, DENY_ALL.format(audit=tmp_path / "audit.jsonl") + QUICK_STOP)
    command = proxy_command(policy, *options, upstream=upstream or [PY, HOSTILE])
    host = RawHost(command, proxy_env(), tmp_path / "stderr.log")
    host.initialize()
    return host


def call(host: RawHost, tool: str, timeout: float = 15.0, **arguments: Any) -> dict[str, Any]:
    return host.request("tools/call", {"name": tool, "arguments": arguments}, timeout=timeout)


def tool_payload(response: dict[str, Any]) -> Any:
    return json.loads(response["result"]["content"][0]["text"])


def assert_only_objects_reached_the_host(host: RawHost) -> None:
    for raw in host.raw_received:
        message = json.loads(raw)
        assert isinstance(message, dict) and message.get("jsonrpc") == "2.0", raw[:200]


def audit_records(tmp_path: Path) -> list[dict[str, Any]]:
    path = tmp_path / "audit.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def still_answers(host: RawHost) -> None:
    assert host.request("ping", timeout=10)["result"] == {}


# -- from the host --------------------------------------------------------------------------------


def test_host_lines_with_unusable_ids_or_deep_nesting_get_errors_and_the_relay_goes_on(tmp_path: Path) -> None:
    with start(tmp_path) as host:
        # a request in flight while the hostile lines arrive must still be answered
        host.send({"jsonrpc": "2.0", "id": 500, "method": "ping"})
        hostile = [
            b'{"jsonrpc":"2.0","id":{"a":1},"method":"ping"}',
            b'{"jsonrpc":"2.0","id":[1,2],"method":"ping"}',
            b'{"jsonrpc":"2.0","id":true,"method":"ping"}',
            b'{"jsonrpc":"2.0","id":1.5,"method":"ping"}',
            b'{"jsonrpc":"2.0","id":7,"method":["ping"]}',
            b"[" * 1000 + b"]" * 1000,
            b'{"a":' * 1000 + b"1" + b"}" * 1000,
            b"[" * 100_000 + b"]" * 100_000,
            b'{"jsonrpc":"2.0","id":11,"method":"ping","params":' + b"[" * 5000 + b"]" * 5000 + b"}",
            b'{"jsonrpc":"2.0","id":8,"method":"ping","params":{"x":NaN}}',
            b'{"jsonrpc":"2.0","id":9,"method":"ping","params":{"x":"\\ud800"}}',
            b'{"jsonrpc":"2.0","id":10,"method":"ping","params":{"x":"\xff\xfe"}}',
            b'{"jsonrpc":"2.0","id":{"a":1},"result":{}}',  # a "response" nobody can match
            b"[]",
        ]
        for line in hostile:
            host.send_raw(line + b"\n")
        errors = [host.wait_for(lambda m: "error" in m, timeout=10) for _ in range(13)]
        # the ping's answer may come before, between or after the errors
        pong = [m for m in host.seen if m.get("id") == 500] or [host.wait_for(lambda m: m.get("id") == 500)]
        assert pong[0]["result"] == {}
        still_answers(host)
        assert host.proc.poll() is None
    codes = sorted(e["error"]["code"] for e in errors)
    assert codes == [-32700] * 5 + [-32600] * 8
    # a line that does not parse is answered under its id when one can be read from it
    assert sorted(e["id"] for e in errors if e["error"]["code"] == -32700 and e["id"] is not None) == [8, 9, 10, 11]
    invalid = [e for e in errors if e["error"]["code"] == -32600]
    assert {e["id"] for e in invalid} == {None, 7}  # an unusable id is answered as null
    assert any("id must be a string or an integer" in e["error"]["message"] for e in invalid)
    assert_only_objects_reached_the_host(host)


# -- from the server ------------------------------------------------------------------------------


def test_server_scalars_and_garbage_never_reach_the_host(tmp_path: Path) -> None:
    with start(tmp_path) as host:
        response = call(host, "scalars")
        assert response["result"]["content"][0]["text"].startswith("scalars sent")
        still_answers(host)
    assert_only_objects_reached_the_host(host)
    assert len(host.raw_received) == 3  # initialize, the call, the ping: nothing else


def test_server_sampling_with_unusable_ids_is_refused_and_the_proxy_keeps_running(tmp_path: Path) -> None:
    with start(tmp_path) as host:
        payload = tool_payload(call(host, "array_id_sampling"))
        still_answers(host)
        server_pid = payload["pid"]
        host.close_stdin()
        assert host.wait() == 0
    # the server was told (id null, as JSON-RPC says for an unusable id) and nothing reached the host
    assert payload["answers"][0]["id"] is None
    assert payload["answers"][0]["error"]["code"] == -32600
    assert_only_objects_reached_the_host(host)
    assert not any(b"sampling/createMessage" in line for line in host.raw_received)
    # a server that ignores EOF is still stopped (SIGTERM to its process group)
    deadline = time.monotonic() + 10
    while alive(server_pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(server_pid)


def test_sampling_with_a_lone_surrogate_is_judged_by_policy_and_answered(tmp_path: Path) -> None:
    with start(tmp_path) as host:
        payload = tool_payload(call(host, "surrogate_sampling"))
        still_answers(host)
    answer = payload["answers"][0]
    # strict JSON refuses the lone surrogate: the server gets a clear error, the proxy lives on
    assert answer["id"] == "s1" and answer["error"]["code"] in (-32600, -32700, -32602, -1)
    assert_only_objects_reached_the_host(host)


def test_a_large_line_disguised_as_a_response_is_still_inspected_as_sampling(tmp_path: Path) -> None:
    with start(tmp_path) as host:
        response = call(host, "disguised_sampling", timeout=20)
        still_answers(host)
    payload = tool_payload(response)
    # the proxy saw a sampling request (it has a method) and the deny rule refused it
    assert payload["answers"][0]["error"]["code"] == -1
    assert "no-sampling" in payload["answers"][0]["error"]["message"]
    records = audit_records(tmp_path)
    assert [(r["method"], r["decision"], r["rule"]) for r in records] == [
        ("sampling/createMessage", "deny", "no-sampling")
    ]
    # the host saw one response for its call: the real one, never the disguised line
    answers = [json.loads(raw) for raw in host.raw_received if b'"method"' not in raw]
    assert all("method" not in m for m in answers)
    assert_only_objects_reached_the_host(host)


def test_server_batch_members_are_inspected_one_by_one(tmp_path: Path) -> None:
    with start(tmp_path) as host:
        payload = tool_payload(call(host, "batch_sampling"))
    assert payload["answers"][0]["id"] == "b1" and payload["answers"][0]["error"]["code"] == -1
    notes = [json.loads(raw) for raw in host.raw_received if b"notifications/message" in raw]
    assert [n["params"]["data"] for n in notes] == ["in a batch"]
    assert [r["decision"] for r in audit_records(tmp_path)] == ["deny"]
    assert_only_objects_reached_the_host(host)


# -- size limits -----------------------------------------------------------------------------------


def test_an_oversized_server_response_is_answered_with_an_error_naming_the_limit(tmp_path: Path) -> None:
    with start(tmp_path, "--max-message-bytes", "100000") as host:
        response = call(host, "oversized", size=300_000)
        still_answers(host)
    assert response["error"]["code"] == -32603
    assert "100000 bytes" in response["error"]["message"] and "--max-message-bytes" in response["error"]["message"]
    assert "relay_attacks_server" in response["error"]["message"]  # the operator's name for it (derived)


def test_an_oversized_host_request_is_answered_under_its_own_id(tmp_path: Path) -> None:
    with start(tmp_path, "--max-message-bytes", "100000") as host:
        host.send(
            {
                "jsonrpc": "2.0",
                "id": 77,
                "method": "tools/call",
                "params": {"name": "scalars", "arguments": {"pad": "y" * 200_000}},
            }
        )
        error = host.wait_for(lambda m: m.get("id") == 77, timeout=10)
        still_answers(host)
    assert error["error"]["code"] == -32600 and "100000 bytes" in error["error"]["message"]


def test_the_proxy_stops_a_server_that_ignores_eof_after_the_host_leaves(tmp_path: Path) -> None:
    host = start(tmp_path)
    try:
        payload = call(host, "scalars")
        server_pid = int(payload["result"]["content"][0]["text"].split("pid=")[1])
        assert server_pid in children_of(host.proc.pid)
        os.kill(host.proc.pid, signal.SIGTERM)
        assert host.wait() == 0
        deadline = time.monotonic() + 10
        while alive(server_pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not alive(server_pid)
    finally:
        host.close()


def test_a_rewritten_request_keeps_integers_beyond_64_bits_exact(tmp_path: Path) -> None:
    """2026-era requests are rewritten (capabilities added to _meta); a huge integer in them must
    reach the server as written, not as the float a fast parser reads it as."""
    meta = {"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {}}
    with start(tmp_path) as host:
        arguments = b'"arguments":{"n":123456789012345678901234567890},"_meta":' + json.dumps(meta).encode()
        host.send_raw(
            b'{"jsonrpc":"2.0","id":41,"method":"tools/call","params":{"name":"echo_request",' + arguments + b"}}\n"
        )
        host.wait_for(lambda m: m.get("id") == 41)
    answer = next(raw for raw in host.raw_received if b'"id":41' in raw.replace(b" ", b""))
    assert b"123456789012345678901234567890" in answer


def test_a_server_that_ignores_eof_dies_with_a_proxy_killed_outright(tmp_path: Path) -> None:
    """A host that force-quits the proxy (SIGKILL) gives it no chance to stop its server; the
    server (which ignores EOF and SIGTERM alike here) must not run on with nobody to stop it."""
    host = start(tmp_path)
    try:
        payload = call(host, "scalars")
        server_pid = int(payload["result"]["content"][0]["text"].split("pid=")[1])
        os.kill(host.proc.pid, signal.SIGKILL)
        host.proc.wait(10)
        deadline = time.monotonic() + 10
        while alive(server_pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not alive(server_pid)
    finally:
        host.close()


def test_what_the_server_started_dies_with_a_proxy_killed_outright(tmp_path: Path) -> None:
    """PDEATHSIG reaches only the server: a worker it started (npx's node, a pool) used to run on
    after a host force-quit the proxy. The proxy's guard stops the server's whole group: the
    worker, which ignores SIGTERM, is gone within its grace period."""
    pid_file = tmp_path / "worker.pid"
    policy = write_policy(tmp_path, DENY_ALL.format(audit=tmp_path / "audit.jsonl"))
    host = RawHost(
        proxy_command(policy, upstream=[PY, str(ROOT / "tests" / "fixtures" / "hostile" / "worker_spawner.py")]),
        proxy_env(WORKER_PID_FILE=str(pid_file)),
        tmp_path / "stderr.log",
    )
    worker = None
    try:
        host.initialize()
        worker = int(pid_file.read_text())
        assert alive(worker)
        os.kill(host.proc.pid, signal.SIGKILL)
        host.proc.wait(10)
        deadline = time.monotonic() + 15
        while alive(worker) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not alive(worker), "the server's worker outlived the proxy"
    finally:
        if worker is not None and alive(worker):
            os.kill(worker, signal.SIGKILL)
        host.close()


def test_a_proxy_that_stops_its_server_stands_its_guard_down(tmp_path: Path) -> None:
    """The usual end (the host closes stdin): the proxy stops the group itself and its guard exits
    at once, leaving no process behind (the guard must never signal a group id used again later)."""
    pid_file = tmp_path / "worker.pid"
    policy = write_policy(tmp_path, DENY_ALL.format(audit=tmp_path / "audit.jsonl"))
    host = RawHost(
        proxy_command(policy, upstream=[PY, str(ROOT / "tests" / "fixtures" / "hostile" / "worker_spawner.py")]),
        proxy_env(WORKER_PID_FILE=str(pid_file)),
        tmp_path / "stderr.log",
    )
    host.initialize()
    guards = [pid for pid in children_of(host.proc.pid) if pid not in server_children(host.proc.pid)]
    assert len(guards) == 1
    worker = int(pid_file.read_text())
    try:
        host.close_stdin()
        assert host.wait(30) == 0
    finally:
        host.close()
    deadline = time.monotonic() + 10
    while (alive(worker) or alive(guards[0])) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(worker) and not alive(guards[0])


GUARD_STOPPER = """
import os, signal, sys, time
from pathlib import Path
parent = os.getppid()
deadline = time.monotonic() + 20
stopped = False
while not stopped and time.monotonic() < deadline:  # the proxy may start its guard after its server
    for entry in Path("/proc").iterdir():
        try:
            if (entry.name.isdigit() and int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1]) == parent
                    and (entry / "comm").read_text().strip() == "mcp-proxy-guard"):
                os.kill(int(entry.name), signal.SIGSTOP)
                sys.stderr.write(f"stopped the guard {entry.name}\\n")
                sys.stderr.flush()
                stopped = True
        except OSError:
            pass
    time.sleep(0.05)
sys.stdin.read()
"""


def test_a_server_that_stops_the_guard_cannot_hold_the_proxys_shutdown(tmp_path: Path) -> None:
    """The server (same user) SIGSTOPs its proxy's guard. Standing the guard down at the end used to
    write it a byte and wait for it to exit: the proxy then never exited. It is killed now."""
    host = RawHost(
        proxy_command(write_policy(tmp_path, UNCONFINED), upstream=[PY, "-c", GUARD_STOPPER]),
        proxy_env(),
        tmp_path / "stderr.log",
    )
    try:
        deadline = time.monotonic() + 30
        while "stopped the guard" not in (tmp_path / "stderr.log").read_text() and time.monotonic() < deadline:
            time.sleep(0.05)
        guard = int((tmp_path / "stderr.log").read_text().split("stopped the guard ")[1].split()[0])
        host.close_stdin()
        assert host.wait(30) == 0
    finally:
        host.close()
    assert not alive(guard)
