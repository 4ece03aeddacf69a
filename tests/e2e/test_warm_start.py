"""A launch after the first is forked by the warm start server (system/warm_start.py), its modules loaded,
and runs as that launch in all a host can see: its own environment (the key it was given), working directory,
stdio, stop signals and exit status. The first launch starts the warm server; new code, or the setting, and
the launch starts as usual.

The proxy runs as a host starts it (`python -m mcp_sampling_proxy`), its user directories the test's own and
the warm start turned on (tests turn it off elsewhere); each test ends the warm servers it started."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from fakes.llm_server import FakeLLMServer
from helpers.support import (
    PY,
    SMALL_SERVER,
    RawHost,
    children_of,
    openai_policy,
    proxy_command,
    proxy_env,
    running_with,
    write_policy,
)
from helpers.terminal import PtySession
from helpers.warm import carrying_the_flag, end_warm_servers, warm_servers

from mcp_sampling_proxy.system.hardening import cmdline, comm

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the warm start is Linux's")

WARM = "started warm"


@pytest.fixture
def run_dir(tmp_path: Path) -> Iterator[Path]:
    """The runtime directory of the test's launches; the warm servers started in it are ended after."""
    run = tmp_path / "run"
    run.mkdir(mode=0o700)
    try:
        yield run
    finally:
        end_warm_servers(run)


@pytest.fixture
def env(tmp_path: Path, run_dir: Path) -> dict[str, str]:
    for part in ("home", "state"):
        (tmp_path / part).mkdir(mode=0o700)
    return proxy_env(
        HOME=str(tmp_path / "home"),
        XDG_STATE_HOME=str(tmp_path / "state"),
        XDG_RUNTIME_DIR=str(run_dir),
        MCP_SAMPLING_PROXY_WARM_START="auto",
    )


def wait_for_warm_server(run: Path, timeout: float = 20.0) -> None:
    """Until the warm server listens (it loads the proxy's modules first)."""
    deadline = time.monotonic() + timeout
    while not list((run / "mcp-sampling-proxy" / "warm").glob("*.sock")):
        assert time.monotonic() < deadline, "no warm server started"
        time.sleep(0.05)


def launch(
    command: list[str], env: dict[str, str], log: Path, *, cwd: Path | None = None, call: str | None = None
) -> tuple[str, int, dict[str, object] | None]:
    """One launch: initialize, one tool call (`call`: sample, else echo), then the host closes stdin. The
    log, the exit status and the call's result."""
    with RawHost(command, env, log, cwd=cwd) as host:
        host.initialize()
        if call == "sample":
            answer = host.request("tools/call", {"name": "sample", "arguments": {"prompt": "hello"}}, timeout=30)
        else:
            answer = host.request("tools/call", {"name": "echo", "arguments": {"text": "warm"}}, timeout=30)
        host.close_stdin()
        status = host.wait()
    return log.read_text(), status, answer.get("result")


def stopped_cold_and_warm(
    command: list[str], env: dict[str, str], log: Path, mode: str, stop: Callable[[RawHost, str], None]
) -> tuple[int, str]:
    """A session with the warm start `mode` ("off": cold; "auto": forked warm), one tool call, then `stop`ped
    as a test's host or user would: its exit status and log, the log checked to say which start it had."""
    with RawHost(command, {**env, "MCP_SAMPLING_PROXY_WARM_START": mode}, log) as host:
        host.initialize()
        host.request("tools/call", {"name": "echo", "arguments": {"text": "x"}})
        stop(host, mode)
        status = host.wait()
    text = log.read_text()
    assert (WARM in text) == (mode == "auto"), text
    return status, text


def test_a_later_launch_is_forked_warm_and_runs_as_that_launch(
    tmp_path: Path, env: dict[str, str], run_dir: Path, llm: FakeLLMServer
) -> None:
    """The second launch gets its own key and its own working directory's policy (a relative path), not the
    first launch's, whose environment the warm server never held."""
    for name in ("one", "two"):
        (tmp_path / name).mkdir()
        write_policy(tmp_path / name, openai_policy(llm.base_url, model=f"model-{name}"))
        llm.reply_text(f"answer {name}")
    command = [PY, "-P", *proxy_command("policy.yaml")[1:]]  # -P: sys.path is not each launch's cwd (-m's)
    first, status, _ = launch(
        command, {**env, "TEST_LLM_KEY": "key-one"}, tmp_path / "1.log", cwd=tmp_path / "one", call="sample"
    )
    assert WARM not in first and status == 0, first
    wait_for_warm_server(run_dir)
    second, status, result = launch(
        command, {**env, "TEST_LLM_KEY": "key-two"}, tmp_path / "2.log", cwd=tmp_path / "two", call="sample"
    )
    assert WARM in second and status == 0, second
    assert result is not None and "answer two" in json.dumps(result), result
    one, two = llm.requests[-2], llm.requests[-1]
    assert one.headers["authorization"] == "Bearer key-one" and one.body["model"] == "model-one"
    assert two.headers["authorization"] == "Bearer key-two" and two.body["model"] == "model-two"
    (server,) = warm_servers(run_dir)  # one warm server, and it took neither launch's key into its environment
    if os.getuid() == 0:  # (root reads a non-dumpable process's environment; anyone else is refused)
        held = (Path("/proc") / str(server) / "environ").read_bytes()
        assert b"key-one" not in held and b"TEST_LLM_KEY" not in held


def burst(command: list[str], env: dict[str, str], logs: list[Path]) -> list[str]:
    """Launches started together, as a desktop host starts its config's servers: each initializes, calls
    echo and ends. Their logs, once each exited 0 having answered."""
    with contextlib.ExitStack() as stack:
        hosts = [stack.enter_context(RawHost(command, env, log)) for log in logs]
        for n, host in enumerate(hosts):
            host.initialize()
            answer = host.request("tools/call", {"name": "echo", "arguments": {"text": f"launch {n}"}}, timeout=30)
            assert f"launch {n}" in json.dumps(answer.get("result")), answer
        for host in hosts:
            host.close_stdin()
            assert host.wait() == 0
    return [log.read_text() for log in logs]


def test_launches_started_together_wait_for_one_warm_server_rather_than_each_load_the_proxy(
    tmp_path: Path, env: dict[str, str], run_dir: Path
) -> None:
    """A host that starts its servers together, with no warm server running (the first start, or a desktop
    app's start: its warm server ended with the app's last session): the launch that starts the warm server
    loads the proxy itself, the others wait for that warm server and are forked by it. The same after the
    warm server was killed outright (its socket left in place, which no launch takes for a live one)."""
    command = proxy_command(None)
    for round_ in ("first", "after a kill"):
        logs = burst(command, env, [tmp_path / f"{round_}-{n}.log" for n in range(4)])
        assert sorted(WARM in log for log in logs) == [False, True, True, True], (round_, logs)
        (server,) = warm_servers(run_dir)
        os.kill(server, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while warm_servers(run_dir):
            assert time.monotonic() < deadline, "the warm server did not end"
            time.sleep(0.05)
        assert list((run_dir / "mcp-sampling-proxy" / "warm").glob("*.sock"))  # (its socket stays)


def test_a_warm_proxy_ends_on_the_hosts_signal_and_its_status_is_the_launchs(
    tmp_path: Path, env: dict[str, str], run_dir: Path
) -> None:
    """The host signals the process it started: the forked proxy stops its server and exits as a cold proxy
    does, and so does the launch. A start that fails says so on the launch's stderr, with the same status."""
    server = tmp_path / "marked_server.py"  # a name of its own: its process is found by it
    shutil.copy(SMALL_SERVER, server)
    command = proxy_command(None, upstream=[PY, str(server)])
    launch(command, env, tmp_path / "first.log")
    wait_for_warm_server(run_dir)

    def stop(host: RawHost, _mode: str) -> None:
        assert bool(running_with(str(server))), "the server runs"
        host.proc.send_signal(signal.SIGTERM)

    statuses = {}
    for mode in ("off", "auto"):
        statuses[mode], _ = stopped_cold_and_warm(command, env, tmp_path / f"signal-{mode}.log", mode, stop)
        deadline = time.monotonic() + 10
        while bool(running_with(str(server))):
            assert time.monotonic() < deadline, f"{mode}: the server outlived its proxy"
            time.sleep(0.05)
    assert statuses["auto"] == statuses["off"], statuses

    failed = {}
    for mode in ("off", "auto"):
        found = subprocess.run(
            proxy_command(str(tmp_path / "missing.yaml"), upstream=[PY, str(server)]),
            env={**env, "MCP_SAMPLING_PROXY_WARM_START": mode},
            input=b"",
            capture_output=True,
            timeout=30,
            check=False,
        )
        failed[mode] = (found.returncode, found.stderr.decode().splitlines()[-1])
    assert failed["auto"] == failed["off"] and failed["off"][0] != 0, failed
    assert "missing.yaml" in failed["auto"][1], failed


def test_a_signal_sent_by_command_line_is_one_ask_for_a_forked_proxy_as_for_a_cold_one(
    tmp_path: Path, env: dict[str, str], run_dir: Path
) -> None:
    """`pkill -f` of a proxy's command line signals every process that shows it: a cold proxy, and, forked
    warm, the launch and its fork too, which then also gets the launch's forwarded copy. One
    SIGTERM asked once: the server gets its graceful stop in both, never the hurried one a host asking again
    gets ("asked again to stop"), and the statuses are the same."""
    command = proxy_command(None)
    launch(command, env, tmp_path / "first.log")
    wait_for_warm_server(run_dir)

    def pkill(host: RawHost, mode: str) -> None:
        shown = cmdline(host.proc.pid)
        # (as pgrep -f reads them: words), of this test's processes only: other tests' proxies show the
        # same command line
        ours = {host.proc.pid, *(pid for server in warm_servers(run_dir) for pid in _descendants(server))}
        same = [pid for pid in _pids() if cmdline(pid) == shown and pid in ours]
        assert len(same) >= (2 if mode == "auto" else 1), same  # forked warm: the launch and its fork
        # the fork's own first, then the launch's, which it passes on: two signals, not one left pending
        # (two SIGTERMs pending at once are one), as when pkill reaches the fork before the launch forwards
        for pid in (pid for pid in same if pid != host.proc.pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        if mode == "auto":
            deadline = time.monotonic() + 10
            while "shutting down" not in (tmp_path / f"pkill-{mode}.log").read_text():
                assert time.monotonic() < deadline, "the forked proxy did not take its signal"
                time.sleep(0.01)
        host.proc.send_signal(signal.SIGTERM)

    statuses = {}
    for mode in ("off", "auto"):
        statuses[mode], text = stopped_cold_and_warm(command, env, tmp_path / f"pkill-{mode}.log", mode, pkill)
        assert "asked again to stop" not in text, text
    assert statuses["auto"] == statuses["off"], statuses


def _pids() -> list[int]:
    return [int(entry.name) for entry in Path("/proc").iterdir() if entry.name.isdigit()]


def _descendants(pid: int) -> list[int]:
    """The processes below `pid` (what a warm server forked, and what they started)."""
    return [found for child in children_of(pid) for found in (child, *_descendants(child))]


def test_a_launch_killed_outright_takes_its_warm_proxy_and_server_with_it(
    tmp_path: Path, env: dict[str, str], run_dir: Path
) -> None:
    """A host's force-quit (SIGKILL) of the process it started, its pipes still open: a cold proxy dies with
    it and its group guard stops the server; a forked one must too, not serve on until the pipes close."""
    server = tmp_path / "killed_server.py"
    shutil.copy(SMALL_SERVER, server)
    command = proxy_command(None, upstream=[PY, str(server)])
    launch(command, env, tmp_path / "first.log")
    wait_for_warm_server(run_dir)
    for mode in ("off", "auto"):
        log = tmp_path / f"kill-{mode}.log"
        with RawHost(command, {**env, "MCP_SAMPLING_PROXY_WARM_START": mode}, log) as host:
            host.initialize()
            assert bool(running_with(str(server)))
            host.proc.kill()
            host.proc.wait(10)
            deadline = time.monotonic() + 10
            while bool(running_with(str(server))):  # the host's pipes are open all along
                assert time.monotonic() < deadline, f"{mode}: the server outlived its proxy's kill"
                time.sleep(0.05)
        assert (WARM in log.read_text()) == (mode == "auto"), log.read_text()


def _ignores_sigquit(status: dict[str, str]) -> bool:
    return bool(int(status["SigIgn"], 16) & (1 << (signal.SIGQUIT - 1)))


# what a host may set for the servers it starts, which exec keeps and a fork would take from its warm server:
# the wrapper that sets it, and the server's /proc/PID/status, read as a cold proxy's server's would be
SET_BY_THE_HOST: dict[str, tuple[list[str], Callable[[dict[str, str]], bool]]] = {
    "no_new_privs": (["setpriv", "--no-new-privs"], lambda status: status["NoNewPrivs"] == "1"),
    "SIGQUIT ignored": (["bash", "-c", 'trap "" QUIT; exec "$@"', "host"], _ignores_sigquit),
    "one CPU": (["taskset", "-c", "0"], lambda status: status["Cpus_allowed_list"] == "0"),
}


@pytest.mark.parametrize("what", list(SET_BY_THE_HOST))
def test_what_a_host_sets_for_its_servers_reaches_one_forked_warm(
    tmp_path: Path, env: dict[str, str], run_dir: Path, what: str
) -> None:
    """A host that runs its servers with no_new_privs (`setpriv --no-new-privs`, systemd's NoNewPrivileges=),
    ignoring a signal (a shell's background job: SIGQUIT) or on some CPUs (`taskset`) gets an unconfined
    server with it, as through a cold proxy: each names the warm server, so one started without it forks no
    proxy for such a launch."""
    wrapper, holds = SET_BY_THE_HOST[what]
    if shutil.which(wrapper[0]) is None or (what == "one CPU" and len(os.sched_getaffinity(0)) < 2):
        pytest.skip(f"{wrapper[0]} (and, for the CPUs, two of them) is needed here")
    server = tmp_path / "host_set_server.py"  # a name of its own: its process is found by it
    shutil.copy(SMALL_SERVER, server)
    policy = write_policy(tmp_path, "sandbox: off\nrules: []\n")  # (bubblewrap sets no_new_privs itself)
    command = proxy_command(policy, upstream=[PY, str(server)])
    launch(command, env, tmp_path / "first.log")
    wait_for_warm_server(run_dir)
    with RawHost([*wrapper, *command], env, tmp_path / "set.log") as host:
        host.initialize()
        ours = [str(server)]  # the server itself: `python host_set_server.py`, not a proxy naming it
        (started,) = [pid for pid in running_with(str(server)) if cmdline(pid)[1:2] == ours]
        lines = (Path("/proc") / str(started) / "status").read_text().splitlines()
        status = {name: value.strip() for name, _, value in (line.partition(":") for line in lines)}
        assert holds(status), status
        host.close_stdin()
        assert host.wait() == 0


def doctor_says(command: list[str], env: dict[str, str]) -> str:
    """`doctor`'s start-up line and its fix, run as the launches are (the same interpreter and sys.path: the
    same name)."""
    done = subprocess.run([*command[:4], "doctor"], env=env, capture_output=True, text=True, timeout=60)
    lines = done.stdout.splitlines()
    (at,) = [n for n, line in enumerate(lines) if "warm start:" in line]
    return " ".join(lines[at : at + 2])


def test_doctor_names_a_stopped_warm_server_that_makes_each_launch_wait_and_how_to_end_it(
    tmp_path: Path, env: dict[str, str], run_dir: Path
) -> None:
    """A warm server stopped (SIGSTOP: a debugger, a desktop suspending the app) makes each launch wait for
    it, then load the proxy itself, every time, until it is ended, which a plain kill does not do to a stopped
    process: stopped before it listens (the launch waits WAIT_SECONDS), or after (it takes the connection and
    says nothing: READY_SECONDS). Each such launch says so in the host's log, and doctor says which, both
    with the warm server's pid (not the pid /proc/locks gives, the launch's that took the lock for it and
    has exited)."""
    command = [PY, "-P", *proxy_command()[1:]]
    with RawHost(command, env, tmp_path / "1.log") as host:
        deadline = time.monotonic() + 10
        while not carrying_the_flag(run_dir):  # the launch starts it at once; it settles before it loads
            assert time.monotonic() < deadline, "no warm server started"
            time.sleep(0.005)
        (server,) = carrying_the_flag(run_dir)
        os.kill(server, signal.SIGSTOP)
        host.initialize()
        host.close_stdin()
        assert host.wait() == 0
    assert not list((run_dir / "mcp-sampling-proxy" / "warm").glob("*.sock"))  # stopped before it listened
    said = doctor_says(command, env)
    assert f"the warm start server (process {server}) has not started listening (stopped or hung)" in said, said
    assert f"fix: `kill -KILL {server}` ends it" in said, said
    log, status, _ = launch(command, env, tmp_path / "2.log")  # waits for it, then starts without it, and says so
    assert status == 0 and WARM not in log, log
    assert f"the warm start server (process {server}) did not start listening within 3 s" in log, log
    assert f"until it is ended (`kill -KILL {server}`;" in log, log

    os.kill(server, signal.SIGCONT)
    wait_for_warm_server(run_dir)
    assert f"a warm start server (process {server}) forks the proxies" in doctor_says(command, env)
    os.kill(server, signal.SIGSTOP)
    said = doctor_says(command, env)
    assert f"the warm start server (process {server}) does not answer (stopped or hung)" in said, said
    assert f"fix: `kill -KILL {server}` ends it" in said, said
    log, status, _ = launch(command, env, tmp_path / "3.log")
    assert status == 0 and WARM not in log, log
    assert f"the warm start server (process {server}) did not answer within 2 s" in log, log
    os.kill(server, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while server in carrying_the_flag(run_dir):
        assert time.monotonic() < deadline, "the warm server did not end"
        time.sleep(0.05)
    assert "none runs for this shell's interpreter yet" in doctor_says(command, env)


def test_new_code_or_the_setting_off_means_the_usual_start(tmp_path: Path, env: dict[str, str], run_dir: Path) -> None:
    """A warm server forks no proxy from older code (here one module of a copy of the proxy rewritten, as an
    upgrade does): that launch starts as usual, and a warm server of the new code serves later ones. Off,
    no warm server is used or started."""
    import mcp_sampling_proxy

    copy = tmp_path / "code" / "mcp_sampling_proxy"
    shutil.copytree(
        Path(mcp_sampling_proxy.__file__).parent, copy, symlinks=True, ignore=shutil.ignore_patterns("__pycache__")
    )
    env = {**env, "PYTHONPATH": str(copy.parent)}
    command = [PY, "-P", *proxy_command(None)[1:]]  # -P: the copy, not the working directory's package
    launch(command, env, tmp_path / "first.log")
    wait_for_warm_server(run_dir)
    assert WARM in launch(command, env, tmp_path / "warm.log")[0]
    module = copy / "relay" / "core.py"
    module.write_text(module.read_text() + "\n# a fix\n")
    upgraded = launch(command, env, tmp_path / "upgraded.log")[0]
    assert WARM not in upgraded, upgraded
    deadline = time.monotonic() + 30
    while WARM not in launch(command, env, tmp_path / "later.log")[0]:  # the old one is gone, a new one loads
        assert time.monotonic() < deadline, "no warm server of the new code"
        time.sleep(0.2)
    assert len(warm_servers(run_dir)) == 1

    off = {**env, "MCP_SAMPLING_PROXY_WARM_START": "off", "XDG_RUNTIME_DIR": str(tmp_path / "run-off")}
    (tmp_path / "run-off").mkdir(mode=0o700)
    for n in range(2):
        assert WARM not in launch(command, off, tmp_path / f"off-{n}.log")[0]
    time.sleep(1)
    assert not (tmp_path / "run-off" / "mcp-sampling-proxy" / "warm").exists()
    assert not warm_servers(tmp_path / "run-off")


def test_a_forked_proxy_shows_its_launchs_command_line_and_outlives_the_warm_server(
    tmp_path: Path, env: dict[str, str], run_dir: Path
) -> None:
    """`ps` and `pgrep -f` show a proxy forked warm with its launch's command line (the server it wraps), not
    the warm server's: the warm server's flag is its own, so troubleshooting.md's `pkill -x mcp-proxy-warm`
    (or a `pkill -f` of the flag) ends it alone. The session runs on after the warm server's end and ends
    as usual; a launch meanwhile starts cold and starts another warm server."""
    command = proxy_command(None)
    launch(command, env, tmp_path / "first.log")
    wait_for_warm_server(run_dir)
    with RawHost(command, env, tmp_path / "session.log") as host:
        host.initialize()
        (server,) = warm_servers(run_dir)
        (forked,) = children_of(server)
        assert cmdline(forked) == cmdline(host.proc.pid), cmdline(forked)
        assert carrying_the_flag(run_dir) == [server]  # the proxy and its guard no longer carry it
        assert comm(server) == "mcp-proxy-warm" and comm(forked) != "mcp-proxy-warm"
        os.kill(server, signal.SIGTERM)
        deadline = time.monotonic() + 10
        while comm(server) is not None:
            assert time.monotonic() < deadline, "the warm server did not end"
            time.sleep(0.05)
        answer = host.request("tools/call", {"name": "echo", "arguments": {"text": "still here"}}, timeout=30)
        assert "still here" in json.dumps(answer.get("result")), answer
        # a launch while that session runs starts cold, and starts a new warm server: the session's proxy
        # holds nothing of the old one's (its lock among them)
        after, status, _ = launch(command, env, tmp_path / "after.log")
        assert WARM not in after and status == 0, after
        deadline = time.monotonic() + 20
        while len(warm_servers(run_dir)) != 1:
            assert time.monotonic() < deadline, f"no new warm server: {carrying_the_flag(run_dir)}"
            time.sleep(0.05)
        host.close_stdin()
        assert host.wait() == 0
    assert WARM in (tmp_path / "session.log").read_text()


# a host run in a terminal (as Claude Code is): it starts the proxy twice, one session each; the second, once
# the warm server listens, calls a tool whose sampling the policy asks about
TERMINAL_HOST = """\
import glob, json, subprocess, sys, time

command, run, results = json.loads(sys.argv[1]), sys.argv[2], sys.argv[3]


def session(tool, arguments):
    proxy = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    def send(message):
        proxy.stdin.write((json.dumps(message) + "\\n").encode())
        proxy.stdin.flush()
    send({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-06-18",
          "capabilities": {}, "clientInfo": {"name": "terminal-host", "version": "1"}}})
    proxy.stdout.readline()
    send({"jsonrpc": "2.0", "method": "notifications/initialized"})
    send({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": tool, "arguments": arguments}})
    while True:
        message = json.loads(proxy.stdout.readline())
        if message.get("id") == 2 and "method" not in message:
            break
    with open(results, "a") as found:
        found.write(json.dumps(message) + "\\n")
    proxy.stdin.close()
    proxy.wait()


session("echo", {"text": "cold"})
while not glob.glob(run + "/mcp-sampling-proxy/warm/*.sock"):
    time.sleep(0.05)
session("sample", {"prompt": "may I, from a fork?"})
"""


def test_a_warm_proxy_asks_on_the_terminal_of_the_host_that_launched_it(
    tmp_path: Path, env: dict[str, str], run_dir: Path, llm: FakeLLMServer
) -> None:
    """The launch's controlling terminal is handed over: the forked proxy, in a session of its own, asks
    there and reads the answer typed there."""
    llm.reply_text("granted from the fork")
    policy = write_policy(tmp_path, openai_policy(llm.base_url, rules="rules:\n  - name: ask\n    action: prompt\n"))
    host, results = tmp_path / "host.py", tmp_path / "results.jsonl"
    host.write_text(TERMINAL_HOST)
    command = [PY, "-P", *proxy_command(policy)[1:]]
    terminal = {k: v for k, v in env.items() if k != "MCP_SAMPLING_PROXY_NO_TERMINAL"}
    session = PtySession(
        [PY, str(host), json.dumps(command), str(run_dir), str(results)], {**terminal, "TEST_LLM_KEY": "k"}
    )
    screen = session.read_until(b"Allow this request?")
    assert b"started warm" in screen and b"may I, from a fork?" in screen
    session.type("y\n")
    assert session.finish() == 0
    cold, warm = (json.loads(line) for line in results.read_text().splitlines())
    assert cold["result"]["content"][0]["text"] == "cold"
    assert "granted from the fork" in warm["result"]["content"][0]["text"], warm
