"""A sandboxed server is spawned early, from the record of its last start (transport/start_record.py), only
while that record holds: the same command line and environment, the policy file as it was, the
filesystem as the plan found it. Otherwise the start is the usual one, and it records what it planned.

The proxy runs as a host starts it (`python -m mcp_sampling_proxy`, the entry point) in front of the small
server, in the bubblewrap sandbox, with its user directories in the test's own."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.support import RawHost, proxy_command, proxy_env, write_policy

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed: no sandbox")

EARLY = "server started early"
STALE = "the record of the last start no longer holds"


def start(command: list[str], env: dict[str, str], log: Path, *, call: bool = False) -> str:
    """One start: initialize (and the echo tool called, with `call`), then the host closes stdin; the log."""
    with RawHost(command, env, log) as host:
        host.initialize()
        if call:
            answer = host.request("tools/call", {"name": "echo", "arguments": {"text": "early"}})
            assert answer["result"]["content"][0]["text"] == "early", answer
        host.close_stdin()
        host.wait()
    return log.read_text()


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    for part in ("home", "state", "run"):
        (tmp_path / part).mkdir(mode=0o700)
    return proxy_env(
        HOME=str(tmp_path / "home"), XDG_STATE_HOME=str(tmp_path / "state"), XDG_RUNTIME_DIR=str(tmp_path / "run")
    )


def test_a_sandboxed_server_starts_early_while_the_record_of_its_last_start_holds(
    tmp_path: Path, env: dict[str, str]
) -> None:
    policy = write_policy(tmp_path, "rules: []\n")
    command = proxy_command(policy)
    # the first start makes the state key and the server's data directory, and still records what it planned
    logs = [start(command, env, tmp_path / "start-0.log"), start(command, env, tmp_path / "start-1.log")]
    assert EARLY not in logs[0] and EARLY in logs[1], logs
    assert "server sandboxed" in logs[-1] and STALE not in "".join(logs)
    assert EARLY in start(command, env, tmp_path / "call.log", call=True)  # and it serves as any other
    (record,) = (tmp_path / "state" / "mcp-sampling-proxy" / "starts").iterdir()
    assert record.stat().st_mode & 0o777 == 0o600

    write_policy(tmp_path, "rules: []\n# edited\n")  # the policy as it was no longer
    edited = start(command, env, tmp_path / "edited.log")
    assert EARLY not in edited and STALE not in edited  # planned afresh before anything was started
    assert EARLY in start(command, env, tmp_path / "after-edit.log")  # it recorded what it planned (the
    # directories and state files were there already)

    moved = start(command, {**env, "LANG": "C.UTF-8-other"}, tmp_path / "env.log")
    assert EARLY not in moved and STALE not in moved  # another environment: another start

    record.write_bytes(record.read_bytes()[:-1] + b"\0")  # a record whose seal no longer fits
    garbled = start(command, env, tmp_path / "garbled.log")
    assert EARLY not in garbled and STALE not in garbled


def test_a_directory_made_in_a_write_grant_keeps_the_start_early(tmp_path: Path, env: dict[str, str]) -> None:
    """A server that writes in its grant makes directories there (a build's, a new package's): the next start
    is early all the same. A git repository made there is what the plan reads (its hooks stay read-only):
    that start plans afresh before anything runs, and records the new plan."""
    notes = tmp_path / "home" / "notes"
    notes.mkdir()
    policy = write_policy(tmp_path, f"sandbox:\n  servers:\n    notes:\n      write: [{notes}]\nrules: []\n")
    command = proxy_command(policy, "--name", "notes")
    logs = [start(command, env, tmp_path / f"start-{n}.log") for n in range(2)]
    assert EARLY not in logs[0] and EARLY in logs[1], logs
    (notes / "build" / "out").mkdir(parents=True)
    assert EARLY in start(command, env, tmp_path / "built.log")
    (notes / "repo" / ".git" / "hooks").mkdir(parents=True)
    cloned = start(command, env, tmp_path / "cloned.log")
    assert EARLY not in cloned and STALE not in cloned
    assert EARLY in start(command, env, tmp_path / "again.log")


def test_a_file_made_beside_the_audit_log_keeps_the_start_early(tmp_path: Path, env: dict[str, str]) -> None:
    """The plan hides the audit log with its rotations, lock and seal: another file made in its folder (here
    the state directory, where the proxy keeps its other files) keeps the next start early; a rotation of
    the log is hidden too, so that start plans afresh."""
    state = tmp_path / "state" / "mcp-sampling-proxy"
    policy = write_policy(tmp_path, f"audit:\n  path: {state / 'audit.jsonl'}\nrules: []\n")
    command = proxy_command(policy)
    logs = [start(command, env, tmp_path / f"start-{n}.log") for n in range(2)]  # the log made before the plan
    assert EARLY in logs[1], logs
    (state / "notes.json").write_text("{}")
    assert EARLY in start(command, env, tmp_path / "beside.log")
    (state / "audit.jsonl.1").write_text("")
    rotated = start(command, env, tmp_path / "rotated.log")
    assert EARLY not in rotated and STALE not in rotated
    assert EARLY in start(command, env, tmp_path / "again.log")


SESSION_SERVER = """
import json, os, sys
for line in sys.stdin:
    message = json.loads(line)
    if message.get("method") == "initialize":
        info = {"name": "session", "version": os.environ.get("CLAUDE_CODE_SESSION_ID", "unset")}
        result = {"protocolVersion": message["params"]["protocolVersion"], "capabilities": {}, "serverInfo": info}
        print(json.dumps({"jsonrpc": "2.0", "id": message["id"], "result": result}), flush=True)
"""


def test_a_host_that_names_each_session_anew_still_starts_its_server_early(tmp_path: Path, env: dict[str, str]) -> None:
    """Claude Code gives each session's servers their session's id in CLAUDE_CODE_SESSION_ID: the next
    session's start is early all the same, and its server sees the id of the session it serves."""
    server = tmp_path / "session_server.py"
    server.write_text(SESSION_SERVER, encoding="utf-8")
    command = proxy_command(write_policy(tmp_path, "rules: []\n"), upstream=[sys.executable, str(server)])
    seen: list[str] = []
    for session in ("first", "second", "third"):
        log = tmp_path / f"{session}.log"
        with RawHost(command, {**env, "CLAUDE_CODE_SESSION_ID": session}, log) as host:
            seen.append(host.initialize()["result"]["serverInfo"]["version"])
            host.close_stdin()
            host.wait()
        seen.append("early" if EARLY in log.read_text() else "usual")
    assert seen == ["first", "usual", "second", "early", "third", "early"]


def test_a_server_run_unconfined_is_never_started_early(tmp_path: Path, env: dict[str, str]) -> None:
    """`sandbox: off` plans nothing to hold the server: no record is kept, so there is nothing to start from."""
    command = proxy_command(write_policy(tmp_path, "sandbox: off\nrules: []\n"))
    logs = [start(command, env, tmp_path / f"off-{n}.log") for n in range(3)]
    assert not any(EARLY in log for log in logs), logs
    assert not (tmp_path / "state" / "mcp-sampling-proxy" / "starts").exists()
    said = [json.loads(line)["event"] for line in logs[-1].splitlines() if line.startswith("{")]
    assert any(event.startswith("sandbox: off") for event in said), said


def test_new_code_plans_afresh(tmp_path: Path, env: dict[str, str]) -> None:
    """A plan is what the proxy's code makes of its inputs: after an upgrade (here one module of a copy of
    the proxy rewritten, as `git pull` or a reinstall of the same version does) the next start must not spawn
    the server under what the older code planned (a looser sandbox, before a fix), but plan afresh."""
    import mcp_sampling_proxy

    package = Path(mcp_sampling_proxy.__file__).parent
    copy = tmp_path / "code" / "mcp_sampling_proxy"
    shutil.copytree(package, copy, symlinks=True, ignore=shutil.ignore_patterns("__pycache__"))
    env = {**env, "PYTHONPATH": str(copy.parent)}
    python = [sys.executable, "-P"]  # -P: not the working directory's package first, the copy
    found = subprocess.run(
        [*python, "-c", "import mcp_sampling_proxy as m; print(m.__file__)"],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert found.stdout.strip() == str(copy / "__init__.py"), found
    policy = write_policy(tmp_path, "rules: []\n")
    command = [*python, *proxy_command(policy)[1:]]
    logs = [start(command, env, tmp_path / f"start-{n}.log") for n in range(2)]
    assert EARLY in logs[1], logs
    module = copy / "transport" / "sandbox.py"
    module.write_text(module.read_text() + "\n# a fix\n")
    upgraded = start(command, env, tmp_path / "upgraded.log")
    assert EARLY not in upgraded and STALE not in upgraded, upgraded
    assert EARLY in start(command, env, tmp_path / "again.log")
