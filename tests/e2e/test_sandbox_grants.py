"""Living with grants: a server the sandbox refuses leaves its user the path or host and the grant that allows
it (on the proxy's stderr, and in `doctor` later), and the grant, once written, is what it needed.

The servers are small scripts run behind the real proxy, sandboxed by bubblewrap; the network side goes
through the proxy's relay to services on this machine's loopback, which a server reaches only when its
grant names them.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import sys
import textwrap
from pathlib import Path

import pytest
from helpers.support import (
    MINIMAL_SERVER,
    ROOT,
    RawHost,
    proxy_command,
    proxy_env,
    run_subcommand,
    write_policy,
)

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed: no sandbox")

PROBE = ROOT / "tests" / "fixtures" / "hostile" / "sandbox_probe.py"

WRITER = (
    textwrap.dedent(
        """
        import os, sys
        target = sys.argv[1]
        try:
            os.makedirs(os.path.dirname(target), exist_ok=True)
            with open(target, "w") as f:
                f.write("cache")
            print("wrote", target, file=sys.stderr)
        except OSError as exc:
            print(f"cannot write the cache: {exc}", file=sys.stderr)
        """
    )
    + MINIMAL_SERVER
)


def run_once(command: list[str], env: dict[str, str], log: Path) -> str:
    with RawHost(command, env, log) as host:
        host.initialize()
        host.close_stdin()
        host.wait()
    return log.read_text()


def test_a_refused_write_names_the_path_and_the_grant_and_the_grant_works(tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / ".cache").mkdir(parents=True)
    target = home / ".cache" / "writer" / "index.db"
    server = tmp_path / "writer.py"
    server.write_text(WRITER)
    env = proxy_env(HOME=str(home))
    policy = write_policy(tmp_path, "rules: []\n")
    log = run_once(
        proxy_command(policy, "--name", "writer", upstream=[sys.executable, str(server), str(target)]),
        env,
        tmp_path / "first.log",
    )
    assert "Read-only file system" in log and not target.exists()
    (said,) = [json.loads(line) for line in log.splitlines() if "the sandbox refused the server" in line]
    assert said["event"] == f"the sandbox refused the server a write to {target.parent}"  # makedirs failed first
    # ~/.cache itself may not be granted (it holds uv's cache, which runs as the user later): a folder of its own
    assert said["fix"] == (
        "if it needs it, grant it: sandbox.servers.writer.write: [~/.cache/writer] "
        "(make it first: mkdir -p ~/.cache/writer; ~/.cache itself may not be granted)"
    )
    # doctor says it too, after the proxy is long gone (run in this process: the same state dir)
    assert env["XDG_STATE_HOME"] == os.environ["XDG_STATE_HOME"]
    doctor = run_subcommand(["doctor"])
    assert "the sandbox refused server 'writer' a write to" in doctor.stdout, doctor.stdout
    # the grant it names lets the write through
    target.parent.mkdir()
    grant = write_policy(
        tmp_path, f"rules: []\nsandbox:\n  servers:\n    writer: {{write: [{target.parent}]}}\n", "granted.yaml"
    )
    log = run_once(
        proxy_command(grant, "--name", "writer", upstream=[sys.executable, str(server), str(target)]),
        env,
        tmp_path / "second.log",
    )
    assert f"wrote {target}" in log and target.read_text() == "cache"


def test_a_refused_connection_names_the_host_and_the_grant(tmp_path: Path) -> None:
    base = tmp_path / "area"
    (base / "out").mkdir(parents=True)
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    policy = write_policy(tmp_path, "rules: []\n")
    command = proxy_command(policy, "--name", "probe", upstream=[sys.executable, str(PROBE), str(base), str(port)])
    try:
        with RawHost(command, proxy_env(), tmp_path / "stderr.log") as host:
            host.initialize()
            found = json.loads(
                host.request("tools/call", {"name": "probe", "arguments": {}})["result"]["content"][0]["text"]
            )
            host.close_stdin()
            host.wait()
    finally:
        listener.close()
    assert found["relayed"].startswith("refused 403"), found
    said = [
        json.loads(line) for line in (tmp_path / "stderr.log").read_text().splitlines() if "refused the server" in line
    ]
    assert [s["event"] for s in said] == [f"the sandbox refused the server a connection to 127.0.0.1:{port}"]
    assert said[0]["fix"].startswith(f"if it needs it, grant it: sandbox.servers.probe.network: [127.0.0.1:{port}]")


OFFLINE = (
    textwrap.dedent(
        """
        import sys, urllib.request
        try:  # as a package runner does at its start (npm names the address in its error)
            urllib.request.urlopen("https://registry.npmjs.org/some-server", timeout=10)
        except OSError as exc:
            print(f"npm error request to https://registry.npmjs.org/some-server failed, reason: {exc}", file=sys.stderr)
        """
    )
    + MINIMAL_SERVER
)


def test_with_no_network_a_host_the_server_could_not_reach_is_named_with_the_grant(tmp_path: Path) -> None:
    """With `network: false` no relay decides, so nothing said why a server (npx fetching its package) failed
    but its own error, a minute later. The start says what a server started by npx will meet, and the proxy
    reads the failure in the server's stderr and names the host and the grant
    (tests/unit/transport/test_sandbox_notes.py: the runtimes' ways of saying it)."""
    server = tmp_path / "offline.py"
    server.write_text(OFFLINE)
    npx = tmp_path / "bin" / "npx"  # started as npx starts a server: the start says what npx will meet
    npx.parent.mkdir()
    npx.write_text(f"#!/bin/sh\nexec {sys.executable} {server}\n")
    npx.chmod(0o755)
    policy = write_policy(tmp_path, "rules: []\nsandbox:\n  network: false\n")
    command = proxy_command(policy, "--name", "offline", upstream=[str(npx), "-y", "some-server"])
    log = run_once(command, proxy_env(), tmp_path / "stderr.log")
    (warned,) = [json.loads(line) for line in log.splitlines() if "started by a package runner" in line]
    assert warned["fix"] == "grant the registry: sandbox.servers.offline.network: [registry.npmjs.org]"
    said = [json.loads(line) for line in log.splitlines() if "refused the server" in line]
    assert "Temporary failure in name resolution" in log  # the server's own words, passed on
    assert [s["event"] for s in said] == ["the sandbox refused the server a connection to registry.npmjs.org"]
    assert said[0]["fix"] == "if it needs it, grant it: sandbox.servers.offline.network: [registry.npmjs.org]"


def test_an_unlisted_host_is_asked_on_the_console_and_always_is_remembered(tmp_path: Path) -> None:
    """A server whose grant lists hosts asks for another: the console shows which server wants which host,
    the human allows it always, the connection goes through, and the next start needs nobody. Each decision
    is an audit record."""
    import anyio
    from helpers.console import SocketConsole

    base = tmp_path / "area"
    (base / "out").mkdir(parents=True)
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    audit = tmp_path / "audit.jsonl"
    policy = write_policy(
        tmp_path,
        f"rules: []\naudit:\n  path: {audit}\nsandbox:\n  servers:\n    probe: {{network: [api.example.com]}}\n",
    )
    run_dir = tmp_path / "run"
    env = proxy_env(MCP_SAMPLING_PROXY_RUNTIME_DIR=str(run_dir), MCP_SAMPLING_PROXY_STATE_DIR=str(tmp_path / "state"))
    command = proxy_command(policy, "--name", "probe", upstream=[sys.executable, str(PROBE), str(base), str(port)])
    shown: dict[str, object] = {}

    async def allow_always() -> None:
        console = await SocketConsole.attach(run_dir)
        pending = await console.receive()
        shown.update(pending)
        await console.send({"type": "decision", "id": pending["id"], "approve": True, "scope": "always"})

    try:
        with RawHost(command, env, tmp_path / "first.log") as host:
            host.initialize()
            host.send({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "probe", "arguments": {}}})
            anyio.run(allow_always)
            answer = host.wait_for(lambda m: m.get("id") == 7, 30)
            host.close_stdin()
            host.wait()
        assert json.loads(answer["result"]["content"][0]["text"])["relayed"] == "ok"
        assert f"wants to connect to 127.0.0.1:{port}" in json.dumps(shown), shown
        with RawHost(command, env, tmp_path / "second.log") as host:  # nobody at the console now
            host.initialize()
            again = host.request("tools/call", {"name": "probe", "arguments": {}}, timeout=30)
            host.close_stdin()
            host.wait()
        assert json.loads(again["result"]["content"][0]["text"])["relayed"] == "ok"
    finally:
        listener.close()
    records = [json.loads(line) for line in audit.read_text().splitlines()]
    decisions = [(r["tool"], r["decision"], r["approver"]) for r in records if r.get("method") == "network/connect"]
    target = f"127.0.0.1:{port}"
    assert decisions == [(target, "approved", "console"), (target, "approved", "remembered")], decisions


def this_machines_address() -> str | None:
    """An address of this machine that is not loopback (where a "public" test server can listen)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("192.0.2.1", 9))  # no packet is sent: only the route is looked up
        except OSError:
            return None
        address = str(probe.getsockname()[0])
    return None if address.startswith("127.") or address == "0.0.0.0" else address


class Page:
    """An HTTP server on `address` answering every GET with `text`."""

    def __init__(self, address: str, text: str):
        import http.server
        import threading

        body = text.encode()

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer((address, 0), Handler)
        self.url = f"http://{address}:{self.server.server_address[1]}/"
        self.where = f"{address}:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.mark.parametrize("granted", ["default", "listed"])
def test_a_fetch_server_reaches_the_hosts_of_its_grant_and_no_others(tmp_path: Path, granted: str) -> None:
    """A fetch-style server (urllib through HTTP_PROXY) runs unchanged: by default it reads a page on this
    machine's network address (not loopback); with a host list it reads the listed one only, and the
    refusal it gets names the grant. Its direct connection to the user's loopback finds nothing."""
    address = this_machines_address()
    if address is None:
        pytest.skip("this machine has no address but loopback: no 'public' host to reach")
    pages = [Page(address, "the listed page"), Page(address, "another page"), Page("127.0.0.1", "a local service")]
    grant = f"{{network: [{pages[0].where}]}}" if granted == "listed" else "{network: true}"
    policy = write_policy(tmp_path, f"rules: []\nsandbox:\n  servers:\n    fetch: {grant}\n")
    fetcher = str(ROOT / "tests" / "fixtures" / "fetch_server.py")
    try:
        with RawHost(
            proxy_command(policy, "--name", "fetch", upstream=[sys.executable, fetcher]),
            proxy_env(),
            tmp_path / "stderr.log",
        ) as host:
            host.initialize()
            read = [
                host.request("tools/call", {"name": "fetch", "arguments": {"url": page.url}}, timeout=30)["result"]
                for page in pages
            ]
            host.close_stdin()
            host.wait()
    finally:
        for page in pages:
            page.close()
    texts = [result["content"][0]["text"] for result in read]
    assert texts[0] == "the listed page"
    if granted == "listed":
        assert read[1]["isError"] and texts[1].startswith("HTTP 403: mcp-sampling-proxy:"), texts[1]
        assert f"sandbox.servers.fetch.network: [{pages[0].where}]" in texts[1]
    else:
        assert texts[1] == "another page"
    assert read[2]["isError"] and "local service" not in texts[2]  # the user's loopback: out of reach
