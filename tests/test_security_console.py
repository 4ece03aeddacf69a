"""Issue #10, console slice: the governed server is the adversary, and so is every peer on the
console sockets. A server must not approve its own (or another proxy's) sampling requests through
the console socket, must not phish the user with a planted socket, must not crash or paint the
console, and proxies must not leave sockets or zombies behind."""

from __future__ import annotations

import json
import signal
import socket
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from fakes.llm_server import FakeLLMServer
from support import PY, ROOT, RawHost, openai_policy, proxy_command, proxy_env, write_policy

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="SO_PEERCRED, /proc and a subreaper are Linux's")

HOSTILE = ROOT / "tests" / "fixtures" / "hostile"
SELF_APPROVE = str(HOSTILE / "self_approve_console.py")
FAKE_SOCKET = str(HOSTILE / "fake_console_socket.py")
PROMPT_RULES = "rules:\n  - name: ask\n    action: prompt\n"


@pytest.fixture
def llm():
    with FakeLLMServer("openai") as server:
        yield server


@pytest.fixture
def dirs(tmp_path: Path) -> dict[str, str]:
    return {"MCP_SAMPLING_PROXY_RUNTIME_DIR": str(tmp_path / "run"),
            "MCP_SAMPLING_PROXY_STATE_DIR": str(tmp_path / "state"), "TEST_LLM_KEY": "k"}


def remembered(dirs: dict[str, str]) -> list[Any]:
    path = Path(dirs["MCP_SAMPLING_PROXY_STATE_DIR"]) / "approvals.json"
    return json.loads(path.read_text()).get("always", []) if path.exists() else []


def wait_until(predicate: Any, timeout: float = 15.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return bool(predicate())


def zombie_children(pid: int) -> list[int]:
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        for child in (task / "children").read_text().split():
            try:
                state = Path(f"/proc/{child}/stat").read_text().rsplit(")", 1)[1].split()[0]
            except OSError:
                continue
            if state == "Z":
                found.append(int(child))
    return found


def tool_call(host: RawHost, request_id: int, name: str, timeout: float = 30.0) -> dict[str, Any]:
    host.send({"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": {"name": name, "arguments": {}}})
    return host.wait_for(lambda m: m.get("id") == request_id and "method" not in m, timeout)


# --- 1. self-approval ---------------------------------------------------------------------------

@pytest.mark.parametrize("daemon", [False, True], ids=["thread", "double-forked-daemon"])
def test_server_cannot_approve_its_own_request(tmp_path: Path, dirs: dict[str, str], llm: FakeLLMServer,
                                               daemon: bool) -> None:
    report = tmp_path / "report"
    policy = write_policy(tmp_path, openai_policy(llm.base_url, rules=PROMPT_RULES))
    run_dir = dirs["MCP_SAMPLING_PROXY_RUNTIME_DIR"]
    upstream = [PY, SELF_APPROVE, run_dir, str(report), *(["--daemon"] if daemon else [])]
    with RawHost(proxy_command(policy, upstream=upstream), proxy_env(**dirs), tmp_path / "stderr.log") as host:
        host.initialize()
        response = tool_call(host, 2, "sample")
        sampling = json.loads(response["result"]["content"][0]["text"])
        # the orphaned daemon exits after being hung up on; the proxy (its subreaper) reaps it
        zombies_gone = wait_until(lambda: not zombie_children(host.proc.pid))
        host.close_stdin()
        assert host.wait() == 0
    events = report.read_text().split()
    assert "approved" not in events and "hello" not in events
    assert "closed" in events  # the proxy hung up on it
    assert sampling["error"]["code"] == -1
    assert "no approval channel" in sampling["error"]["message"]
    assert llm.requests == []
    assert remembered(dirs) == []
    log = (tmp_path / "stderr.log").read_text()
    assert "refused a companion console connection" in log
    assert "self_approve_console.py" in log  # the refused peer's command line
    assert zombies_gone


def test_server_below_another_proxy_cannot_approve(tmp_path: Path, dirs: dict[str, str], llm: FakeLLMServer) -> None:
    report = tmp_path / "report"
    run_dir = Path(dirs["MCP_SAMPLING_PROXY_RUNTIME_DIR"])
    policy = write_policy(tmp_path, openai_policy(llm.base_url, rules=PROMPT_RULES))
    with RawHost(proxy_command(policy), proxy_env(**dirs), tmp_path / "a.log") as victim:
        victim.initialize()
        target = run_dir / f"{victim.proc.pid}.sock"
        assert wait_until(target.exists)
        upstream = [PY, SELF_APPROVE, str(run_dir), str(report), "--target", str(target)]
        with RawHost(proxy_command(policy, upstream=upstream), proxy_env(**dirs), tmp_path / "b.log") as attacker:
            attacker.initialize()
            tool_call(attacker, 2, "attack")
            victim.send({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
                         "params": {"name": "sample", "arguments": {"prompt": "not yours"}}})
            result = victim.wait_for(lambda m: m.get("id") == 3, 30)
    sampled = json.loads(result["result"]["content"][0]["text"])
    assert "error" in sampled and sampled["error"]["code"] == -1
    assert "approved" not in report.read_text().split()
    assert llm.requests == []
    assert remembered(dirs) == []
    assert "refused a companion console connection" in (tmp_path / "a.log").read_text()


def test_genuine_console_still_approves_always(tmp_path: Path, dirs: dict[str, str], llm: FakeLLMServer) -> None:
    run_dir = Path(dirs["MCP_SAMPLING_PROXY_RUNTIME_DIR"])
    policy = write_policy(tmp_path, openai_policy(llm.base_url, rules=PROMPT_RULES))
    with RawHost(proxy_command(policy), proxy_env(**dirs), tmp_path / "stderr.log") as host:
        host.initialize()
        sock_path = run_dir / f"{host.proc.pid}.sock"
        assert wait_until(sock_path.exists)
        console = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        console.connect(str(sock_path))
        lines = console.makefile("rb")
        assert json.loads(lines.readline())["type"] == "hello"
        host.send({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                   "params": {"name": "sample", "arguments": {"prompt": "mine"}}})
        pending = json.loads(lines.readline())
        console.sendall(json.dumps({"type": "decision", "id": pending["id"], "approve": True,
                                    "scope": "always"}).encode() + b"\n")
        result = host.wait_for(lambda m: m.get("id") == 2, 30)
        console.close()
    assert json.loads(result["result"]["content"][0]["text"])["content"]["text"] == "echo: mine"
    assert remembered(dirs) == [["kitchen-sink", "sample"]]


def test_orphans_are_reaped_and_the_upstream_exit_status_kept(tmp_path: Path, dirs: dict[str, str]) -> None:
    script = tmp_path / "orphans.py"
    script.write_text(
        "import os, sys, time\n"
        "for _ in range(5):\n"
        "    if os.fork() == 0:\n"
        "        os.setsid()\n"
        "        if os.fork() == 0:\n"
        "            time.sleep(0.2); os._exit(0)\n"
        "        os._exit(0)\n"
        "    os.wait()\n"
        "sys.stdin.readline()\n"
        "time.sleep(1)\n"
        "os._exit(7)\n")
    with RawHost(proxy_command(upstream=[PY, str(script)]), proxy_env(**dirs), tmp_path / "stderr.log") as host:
        time.sleep(1.0)  # the orphans have exited (not a pass/fail timing: the check below waits)
        assert wait_until(lambda: not zombie_children(host.proc.pid))
        host.send({"jsonrpc": "2.0", "id": 1, "method": "ping"})
        assert host.wait() == 7


# --- 2. stale sockets ---------------------------------------------------------------------------

def test_no_socket_survives_any_way_a_proxy_ends(tmp_path: Path, dirs: dict[str, str]) -> None:
    run_dir = Path(dirs["MCP_SAMPLING_PROXY_RUNTIME_DIR"])

    def started() -> RawHost:
        host = RawHost(proxy_command(), proxy_env(**dirs), tmp_path / "stderr.log")
        host.initialize()
        assert wait_until((run_dir / f"{host.proc.pid}.sock").exists)
        return host

    with started() as host:  # host EOF
        host.close_stdin()
        assert host.wait() == 0
    for sig in (signal.SIGTERM, signal.SIGINT):
        with started() as host:
            host.proc.send_signal(sig)
            assert host.wait() == 0
    with started() as host:  # the upstream crashes
        host.send({"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": {"name": "crash", "arguments": {}}})
        assert host.wait() != 0
    assert list(run_dir.glob("*.sock")) == []

    with started() as host:  # SIGKILL leaves a socket; the next proxy start removes it
        host.proc.kill()
        host.wait()
    killed = list(run_dir.glob("*.sock"))
    assert len(killed) == 1
    with started() as host:
        assert not killed[0].exists()
        host.proc.kill()
        host.wait()
    # ... and so does the console
    console = RawHost([PY, "-m", "mcp_sampling_proxy", "console"], proxy_env(**dirs))
    try:
        assert wait_until(lambda: list(run_dir.glob("*.sock")) == [])
    finally:
        console.close()
