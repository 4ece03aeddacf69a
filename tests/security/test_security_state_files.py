"""The state directory is shared by the user's proxies and reachable by every server they govern (it
runs as the same user). A server that holds a state file's lock, or puts a FIFO or a device where the
file was, must not freeze the relay of any proxy, nor make it read without end."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

import anyio
import pytest
from fakes.llm_server import FakeLLMServer
from helpers.support import PY, SMALL_SERVER, proxy_command, proxy_env, sdk_host, tool_json, write_policy

from mcp_sampling_proxy.quotas import state as state_module
from mcp_sampling_proxy.quotas.state import JsonStateFile

pytestmark = pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")  # ping: legacy era


def policy_text(base_url: str, rules: str) -> str:
    return (
        "llm:\n  providers:\n    fake:\n      type: openai\n"
        f"      base_url: {base_url}\n      api_key_env: TEST_LLM_KEY\n      models: [gpt-small]\n"
        "rules:\n" + rules
    )


def proxy_setup(tmp_path: Path, policy: str) -> tuple[list[str], dict[str, str], Path]:
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    env = proxy_env(
        TEST_LLM_KEY="k", MCP_SAMPLING_PROXY_STATE_DIR=str(state), MCP_SAMPLING_PROXY_RUNTIME_DIR=str(tmp_path / "run")
    )
    return proxy_command(write_policy(tmp_path, policy), upstream=[PY, SMALL_SERVER]), env, state


@pytest.mark.anyio
async def test_a_held_budget_lock_refuses_the_request_and_the_relay_keeps_going(
    tmp_path: Path, llm: FakeLLMServer
) -> None:
    """Another process (the server can) takes budgets.json's lock and keeps it. The request waits for
    it in a worker thread, so pings are answered meanwhile, and after the lock wait it is refused with
    an error that names the file; nothing reached the LLM. (The wait was on the event loop, without
    end: every message of the session stopped.)"""
    command, env, state = proxy_setup(
        tmp_path,
        policy_text(llm.base_url, "  - name: budgeted\n    action: allow\n    budget: {tokens: 10000, per: 1d}\n"),
    )
    lock = os.open(state / "budgets.json.lock", os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(lock, fcntl.LOCK_EX)
    order: list[str] = []
    result: dict[str, object] = {}
    try:
        with anyio.fail_after(60):
            async with sdk_host(command, env, tmp_path / "stderr.log") as client:

                async def sample() -> None:
                    result.update(tool_json(await client.call_tool("sample", {"prompt": "hi"})))
                    order.append("sample answered")

                async with anyio.create_task_group() as tg:
                    tg.start_soon(sample)
                    await anyio.sleep(0.5)  # the request is waiting for the lock by now
                    await client.send_ping()
                    order.append("ping answered")
                    await client.call_tool("echo", {"text": "still relaying"})
                    order.append("echo answered")
    finally:
        os.close(lock)
    assert order == ["ping answered", "echo answered", "sample answered"]
    error = result["error"]
    assert isinstance(error, dict)
    assert "budgets.json.lock has been locked by another process" in error["message"]
    assert "the request is refused" in error["message"]
    assert llm.requests == []


@pytest.mark.anyio
async def test_a_fifo_in_place_of_the_approvals_file_is_moved_aside(tmp_path: Path, llm: FakeLLMServer) -> None:
    """approvals.json replaced by a FIFO: opening it to read would wait for a writer forever, on the
    event loop. It is moved aside as unusable and the request goes on to be asked (here nobody can be,
    so it is refused, as without a remembered approval)."""
    command, env, state = proxy_setup(tmp_path, policy_text(llm.base_url, "  - name: ask\n    action: prompt\n"))
    os.mkfifo(state / "approvals.json", 0o600)
    with anyio.fail_after(60):
        async with sdk_host(command, env, tmp_path / "stderr.log") as client:
            result = tool_json(await client.call_tool("sample", {"prompt": "hi"}))
            await client.send_ping()
    assert "no approval channel is available" in result["error"]["message"]
    assert (state / "approvals.json.corrupt").is_fifo()
    assert "state file unusable" in (tmp_path / "stderr.log").read_text()
    assert llm.requests == []


@pytest.mark.parametrize("plant", ["device", "oversized"])
def test_a_state_file_that_would_never_end_is_not_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, plant: str
) -> None:
    """A symlink to /dev/zero (a read without end) or a file past the size limit is set aside, and
    the update starts from empty state, as for a corrupt file."""
    path = tmp_path / "budgets.json"
    if plant == "device":
        path.symlink_to("/dev/zero")
    else:
        monkeypatch.setattr(state_module, "MAX_STATE_BYTES", 1024)
        path.write_text('{"budgets": {}, "padding": "' + "x" * 2048 + '"}')
    store = JsonStateFile(path, durable=False)
    assert store.update(lambda data: dict(data)) == {}
    assert (tmp_path / "budgets.json.corrupt").exists() or (tmp_path / "budgets.json.corrupt").is_symlink()
    store.update(lambda data: data.update(ok=True))
    assert store.read() == {"ok": True}


def test_a_held_audit_lock_fails_the_write_instead_of_hanging_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The audit log's lock held for good by someone else: a write gives up after LOCK_WAIT with the
    audit error (the request is refused, as for any write that fails) instead of waiting forever."""
    import threading

    from mcp_sampling_proxy.audit import chain_file
    from mcp_sampling_proxy.audit.recorder import AuditLog

    monkeypatch.setattr(chain_file, "LOCK_WAIT", 0.5)
    path = tmp_path / "audit.jsonl"
    log = AuditLog(str(path), fsync=False)
    log.record(server="s", decision="allow")
    holder = os.open(str(path) + ".lock", os.O_RDWR)
    fcntl.flock(holder, fcntl.LOCK_EX)
    errors: list[BaseException] = []

    def write() -> None:
        try:
            log.record(server="s", decision="allow")
        except BaseException as exc:
            errors.append(exc)

    try:
        writer = threading.Thread(target=write, daemon=True)
        writer.start()
        writer.join(20)
        assert not writer.is_alive(), "the audit write is still waiting for the lock"
    finally:
        os.close(holder)
    assert len(errors) == 1 and isinstance(errors[0], chain_file.AuditError)
    assert "audit.jsonl.lock has been locked by another process for over 0.5 s" in str(errors[0])
    log.record(server="s", decision="allow")  # the lock is free again: writing works
    log.close()
    assert len(path.read_text().splitlines()) == 2


def test_a_proxy_starting_while_the_audit_lock_is_held_still_writes_once_it_is_free(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Start-up gives up on the lock after LOCK_WAIT and says so, without calling the log unusable
    (nothing is refused for it): the first record takes the lock (and checks the file's end) when it
    is free again."""
    from mcp_sampling_proxy.audit import chain_file
    from mcp_sampling_proxy.audit.recorder import AuditLog

    monkeypatch.setattr(chain_file, "LOCK_WAIT", 0.2)
    path = tmp_path / "audit.jsonl"
    holder = os.open(str(path) + ".lock", os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(holder, fcntl.LOCK_EX)
    try:
        log = AuditLog(str(path), fsync=False)
    finally:
        os.close(holder)
    said = capsys.readouterr()
    assert "another process holds the audit log's lock" in said.out + said.err
    assert "unusable" not in said.out + said.err
    log.check_usable()
    log.record(server="s", decision="allow")
    log.close()
    assert '"server":"s"' in path.read_text()


def test_a_fifo_in_place_of_a_stored_login_reads_as_no_login(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A remote server's stored OAuth login replaced by a FIFO (by a local server another proxy
    governs): loading it must not wait for a writer forever (the proxy would never start)."""
    import threading

    from mcp_sampling_proxy.transport import oauth_store

    monkeypatch.setenv("MCP_SAMPLING_PROXY_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setattr(oauth_store, "_keyring", lambda: None)
    url = "https://mcp.example.com/mcp"
    path = oauth_store.file_path(url, create=True)
    os.mkfifo(path, 0o600)
    loaded: list[object] = []
    reader = threading.Thread(target=lambda: loaded.append(oauth_store.load(url)), daemon=True)
    reader.start()
    reader.join(10)
    if reader.is_alive():  # let the stuck open finish, then fail
        with open(path, "wb"):
            pass
        pytest.fail("loading the stored login waited on the FIFO")
    assert loaded == [None]
