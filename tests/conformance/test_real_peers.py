"""Servers we did not write behave the same direct and through the proxy, for the `mcp` SDK client.

Each server is driven by one script (lists, tool results, prompts, resources, completions, progress,
logging, subscriptions, cancellation) twice: connected directly, and through the proxy. The two
transcripts must be equal, except where the proxy is meant to differ: it adds `sampling` and
`elicitation` to the host's capabilities, so servers that look at them offer more tools
(server-everything: trigger-sampling-request, trigger-elicitation-request) and their sampling and
elicitation requests get answers (the proxy's LLM, the policy's form defaults) where a direct
host without them gets an error. Those differences are asserted by name (server-everything's sampling
tool, answered by the proxy's LLM, in each host's cell of tests/conformance/test_eras.py).

The npm servers come from the CI cache (tests/helpers/npm_support.py); the FastMCP server is
tests/fixtures/fastmcp_peer.py, written as the Python SDK's docs teach.
"""

from __future__ import annotations

import json
import re
import socket
import subprocess
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest
from fakes.llm_server import FakeLLMServer
from helpers.npm_support import server_command
from helpers.support import PY, ROOT, openai_policy, proxy_env, write_policy

from mcp_sampling_proxy.config.sandbox_profiles import profile

FASTMCP_PEER = [PY, str(ROOT / "tests" / "fixtures" / "fastmcp_peer.py")]
EVERYTHING = "@modelcontextprotocol/server-everything"
SAMPLING_ONLY_TOOLS = {"trigger-sampling-request", "trigger-elicitation-request"}
"""server-everything registers these only for a host that declares sampling / elicitation: the proxy does."""

POLICY_EXTRA = "elicitation:\n  non_interactive: accept_defaults\n"
_VARYING = [  # parts of a result that differ per connection or per second, not per path
    (re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"), "<session>"),
    (re.compile(r"\b\d{1,2}:\d{2}:\d{2}( [AP]M)?"), "<time>"),
]
pytestmark = pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")

Target = list[str] | str
"""A stdio command, or a Streamable HTTP URL."""


class Peer:
    """A connected `mcp` SDK client plus what the server sent it unasked."""

    def __init__(self) -> None:
        self.client: Any = None
        self.logs: list[Any] = []
        self.notifications: list[dict[str, Any]] = []

    async def on_log(self, params: types.LoggingMessageNotificationParams) -> None:
        self.logs.append(_plain(params.data))

    async def on_message(self, message: Any) -> None:
        if isinstance(message, Exception):
            return
        self.notifications.append(message.model_dump(mode="json", by_alias=True, exclude_none=True))

    async def wait_for(self, predicate: Callable[[], bool], timeout: float = 10.0) -> None:
        with anyio.fail_after(timeout):
            while not predicate():
                await anyio.sleep(0.02)


@asynccontextmanager
async def connect(
    target: Target, via: str, tmp_path: Path, llm: FakeLLMServer, env: dict[str, str] | None = None
) -> AsyncIterator[Peer]:
    """The SDK client as a host without sampling or elicitation, direct or through the proxy."""
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters, stdio_client

    peer = Peer()
    run_env = proxy_env(
        TEST_LLM_KEY="k",
        MCP_SAMPLING_PROXY_RUNTIME_DIR=str(tmp_path / "run"),
        MCP_SAMPLING_PROXY_STATE_DIR=str(tmp_path / "state"),
        **(env or {}),
    )
    server: Any
    if via == "direct":
        server = target if isinstance(target, str) else None
        command = target if isinstance(target, list) else None
    else:
        # the server's sandbox profile, as `wrap` writes it (the filesystem server writes its directory)
        known = profile(target, env) if isinstance(target, list) else None
        sandbox = f"sandbox:\n  servers:\n    peer: {known}\n" if known else ""
        policy = write_policy(tmp_path, openai_policy(llm.base_url, extra=POLICY_EXTRA + sandbox))
        command = [PY, "-m", "mcp_sampling_proxy", "--log-format", "json", "--policy", policy, "--name", "peer"]
        command += ["--url", target] if isinstance(target, str) else ["--", *target]
    with open(tmp_path / f"stderr-{via}.log", "a", encoding="utf-8") as errlog:
        if command:
            params = StdioServerParameters(command=command[0], args=command[1:], env=run_env)
            server = stdio_client(params, errlog=errlog)
        async with Client(
            server, mode="legacy", logging_callback=peer.on_log, message_handler=peer.on_message
        ) as client:
            peer.client = client
            yield peer


def _plain(value: Any) -> Any:
    """JSON-able, with session ids (each HTTP connection gets its own) and clock times blanked."""
    if hasattr(value, "model_dump"):
        value = value.model_dump(mode="json", by_alias=True, exclude_none=True)
    text = json.dumps(value)
    for pattern, replacement in _VARYING:
        text = pattern.sub(replacement, text)
    return json.loads(text)


async def inventory(client: Any) -> dict[str, Any]:
    """Tools, prompts, resources and templates as the host sees them, and the server's capabilities."""
    found: dict[str, Any] = {"capabilities": _plain(client.server_capabilities)}
    caps = client.server_capabilities
    found["tools"] = {t.name: _plain(t) for t in (await client.list_tools()).tools}
    if caps.prompts:
        found["prompts"] = [_plain(p) for p in (await client.list_prompts()).prompts]
    if caps.resources:
        found["resources"] = [_plain(r) for r in (await client.list_resources()).resources]
        found["templates"] = [_plain(t) for t in (await client.list_resource_templates()).resource_templates]
    return found


async def call(client: Any, name: str, arguments: dict[str, Any] | None = None) -> Any:
    return _plain(await client.call_tool(name, arguments or {}))


async def cancel_mid_call(peer: Peer, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """Start a long call, cancel it at its first progress, then check the session still answers."""
    progressed = anyio.Event()

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        progressed.set()

    started = time.monotonic()
    async with anyio.create_task_group() as tg:

        async def long_call() -> None:
            await peer.client.call_tool(name, arguments, progress_callback=on_progress)

        tg.start_soon(long_call)
        with anyio.fail_after(10):
            await progressed.wait()
        tg.cancel_scope.cancel()
    await peer.client.send_ping()
    return {"ended_early": time.monotonic() - started < 4.0}


async def progress_of(client: Any, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    seen: list[list[Any]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append([progress, total, message])

    result = await client.call_tool(name, arguments, progress_callback=on_progress)
    return {"result": _plain(result), "progress": seen}


# --- one script per server ---------------------------------------------------------------------------


async def everything_script(peer: Peer) -> dict[str, Any]:
    client = peer.client
    found = await inventory(client)
    first_doc = found["resources"][0]["uri"]
    found["calls"] = {
        "echo": await call(client, "echo", {"message": "héllo"}),
        "get-sum": await call(client, "get-sum", {"a": 2, "b": 40}),
        "get-tiny-image": await call(client, "get-tiny-image"),
        "get-structured-content": await call(client, "get-structured-content", {"location": "Chicago"}),
        "get-annotated-message": await call(
            client, "get-annotated-message", {"messageType": "error", "includeImage": True}
        ),
        "get-resource-reference": await call(client, "get-resource-reference", {"resourceId": 2}),
        "get-resource-links": await call(client, "get-resource-links", {"count": 2}),
        "unknown-tool": await call(client, "no-such-tool"),
    }
    found["prompts-get"] = {
        "simple": _plain(await client.get_prompt("simple-prompt")),
        "args": _plain(await client.get_prompt("args-prompt", {"city": "Oslo", "state": "Oslo"})),
    }
    found["read"] = [
        _plain(await client.read_resource(first_doc)),
        _plain(await client.read_resource("demo://resource/dynamic/text/3")),
    ]
    prompt = types.PromptReference(name="completable-prompt")
    found["complete"] = [
        _plain(await client.complete(prompt, {"name": "department", "value": "S"})),
        _plain(
            await client.complete(prompt, {"name": "name", "value": ""}, context_arguments={"department": "Marketing"})
        ),
    ]
    found["progress"] = await progress_of(client, "trigger-long-running-operation", {"duration": 0.3, "steps": 3})

    await client.set_logging_level("info")
    await client.subscribe_resource(first_doc)
    await peer.wait_for(lambda: any("Subscribe" in str(log) for log in peer.logs))
    await call(client, "toggle-subscriber-updates")  # sends one update at once, then every 5 s
    await peer.wait_for(lambda: any(n.get("method") == "notifications/resources/updated" for n in peer.notifications))
    await call(client, "toggle-subscriber-updates")
    await client.unsubscribe_resource(first_doc)
    await peer.wait_for(lambda: any("Unsubscribe" in str(log) for log in peer.logs))
    found["logs"] = list(peer.logs)
    found["updated"] = [n for n in peer.notifications if n.get("method") == "notifications/resources/updated"][:1]
    found["cancel"] = await cancel_mid_call(peer, "trigger-long-running-operation", {"duration": 5, "steps": 50})
    return found


async def filesystem_script(peer: Peer, root: Path) -> dict[str, Any]:
    client = peer.client
    found = await inventory(client)
    note = str(root / "notes" / "a.txt")
    found["calls"] = [
        await call(client, "list_allowed_directories"),
        await call(client, "create_directory", {"path": str(root / "notes")}),
        await call(client, "write_file", {"path": note, "content": "alpha\nbeta\n"}),
        await call(client, "read_text_file", {"path": note, "head": 1}),
        await call(
            client, "edit_file", {"path": note, "edits": [{"oldText": "beta", "newText": "gamma"}], "dryRun": True}
        ),
        await call(client, "list_directory", {"path": str(root / "notes")}),
        await call(client, "search_files", {"path": str(root), "pattern": "a.txt"}),
        await call(client, "directory_tree", {"path": str(root / "notes")}),
        await call(client, "read_text_file", {"path": "/etc/hostname"}),  # outside the allowed directory
    ]
    return found


async def memory_script(peer: Peer) -> dict[str, Any]:
    client = peer.client
    found = await inventory(client)
    found["calls"] = [
        await call(
            client,
            "create_entities",
            {
                "entities": [
                    {"name": "Ada", "entityType": "person", "observations": ["wrote the first program"]},
                    {"name": "Engine", "entityType": "machine", "observations": []},
                ]
            },
        ),
        await call(
            client, "create_relations", {"relations": [{"from": "Ada", "to": "Engine", "relationType": "programmed"}]}
        ),
        await call(
            client, "add_observations", {"observations": [{"entityName": "Engine", "contents": ["analytical"]}]}
        ),
        await call(client, "search_nodes", {"query": "program"}),
        await call(client, "read_graph"),
        await call(client, "open_nodes", {"names": ["Nobody"]}),
    ]
    return found


async def fastmcp_script(peer: Peer, label: str) -> dict[str, Any]:
    client = peer.client
    found = await inventory(client)
    found["progress"] = await progress_of(client, "count_to", {"n": 3})
    found["prompt"] = _plain(await client.get_prompt("review", {"language": "python", "code": "x = 1"}))
    found["read"] = _plain(await client.read_resource("peer://readme"))
    found["complete"] = _plain(
        await client.complete(types.PromptReference(name="review"), {"name": "language", "value": "p"})
    )
    found["unknown-tool"] = await call(client, "nope")
    found["cancel"] = await cancel_wait(peer, label)
    await peer.wait_for(lambda: len(peer.logs) >= 3)
    found["logs"] = list(peer.logs)
    return found


async def cancel_wait(peer: Peer, label: str) -> dict[str, Any]:
    """Cancel a `wait` and ask the server whether the cancellation reached it."""
    async with anyio.create_task_group() as tg:
        tg.start_soon(lambda: peer.client.call_tool("wait", {"seconds": 30, "label": label}))
        await anyio.sleep(0.3)
        tg.cancel_scope.cancel()
    for _ in range(100):  # the cancellation travels on its own; poll until the server has seen it
        reached = json.loads((await peer.client.call_tool("cancelled", {})).content[0].text)
        if label in reached:
            return {"reached_server": True}
        await anyio.sleep(0.05)
    return {"reached_server": False}


# --- the tests -----------------------------------------------------------------------------------------


async def both(
    target: Target,
    script: Callable[[Peer], Awaitable[dict[str, Any]]],
    tmp_path: Path,
    llm: FakeLLMServer,
    env: dict[str, str] | None = None,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Run `script` direct, then through the proxy; the two transcripts."""
    results = []
    for via in ("direct", "proxy"):
        async with connect(target, via, tmp_path, llm, env) as peer:
            results.append(await script(peer))
    return results[0], results[1]


def split_sampling_tools(direct: dict[str, Any], proxied: dict[str, Any]) -> set[str]:
    """The tools only the proxied host sees; removed from `proxied` so the rest must be equal."""
    extra = set(proxied["tools"]) - set(direct["tools"])
    for name in extra:
        del proxied["tools"][name]
    return extra


@pytest.mark.anyio
async def test_server_everything_stdio_same_direct_and_proxied(tmp_path: Path, llm: FakeLLMServer) -> None:
    target = server_command(EVERYTHING, "stdio")
    direct, proxied = await both(target, everything_script, tmp_path, llm)
    assert split_sampling_tools(direct, proxied) == SAMPLING_ONLY_TOOLS
    assert direct["cancel"] == {"ended_early": True}
    assert direct["updated"] and direct["progress"]["progress"] == [[1, 3, None], [2, 3, None], [3, 3, None]]
    assert direct == proxied


@pytest.fixture
def everything_http(tmp_path: Path) -> Any:
    """server-everything's Streamable HTTP transport on a free loopback port."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    command = server_command(EVERYTHING, "streamableHttp")
    with open(tmp_path / "everything-http.log", "wb") as log:
        proc = subprocess.Popen(command, env=proxy_env(PORT=str(port)), stdout=log, stderr=log)
        try:
            deadline = time.monotonic() + 30
            while True:
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                    break
                except OSError:
                    if proc.poll() is not None or time.monotonic() > deadline:
                        raise RuntimeError(
                            f"server-everything (HTTP) did not start: {(tmp_path / 'everything-http.log').read_text()}"
                        ) from None
                    time.sleep(0.1)
            yield f"http://127.0.0.1:{port}/mcp"
        finally:
            proc.terminate()
            proc.wait(10)


@pytest.mark.anyio
async def test_server_everything_http_same_direct_and_proxied(
    tmp_path: Path, llm: FakeLLMServer, everything_http: str
) -> None:
    direct, proxied = await both(everything_http, everything_script, tmp_path, llm)
    assert split_sampling_tools(direct, proxied) == SAMPLING_ONLY_TOOLS
    assert direct["updated"] and direct["cancel"] == {"ended_early": True}
    assert direct == proxied


@pytest.mark.anyio
async def test_server_filesystem_same_direct_and_proxied(tmp_path: Path, llm: FakeLLMServer) -> None:
    root = (tmp_path / "shared").resolve()
    root.mkdir()
    target = server_command("@modelcontextprotocol/server-filesystem", str(root))
    direct, proxied = await both(target, lambda peer: filesystem_script(peer, root), tmp_path, llm)
    assert "alpha" in json.dumps(direct["calls"][3]) and direct["calls"][-1].get("isError")
    assert direct == proxied


@pytest.mark.anyio
async def test_server_memory_same_direct_and_proxied(tmp_path: Path, llm: FakeLLMServer) -> None:
    results = []
    for via in ("direct", "proxy"):  # a fresh memory file each, so both start empty
        (tmp_path / "memory").mkdir(exist_ok=True)  # its own directory: the profile grants the server that one
        env = {"MEMORY_FILE_PATH": str(tmp_path / "memory" / f"memory-{via}.jsonl")}
        async with connect(server_command("@modelcontextprotocol/server-memory"), via, tmp_path, llm, env) as peer:
            results.append(await memory_script(peer))
    direct, proxied = results
    assert (tmp_path / "memory" / "memory-proxy.jsonl").exists()  # its grant: the file is where it wrote it
    assert "programmed" in json.dumps(direct["calls"][4])
    assert direct == proxied


@pytest.mark.anyio
async def test_fastmcp_server_same_direct_and_proxied_but_sampling_and_elicitation(
    tmp_path: Path, llm: FakeLLMServer
) -> None:
    llm.reply_text("ok")
    results = []
    for via in ("direct", "proxy"):
        async with connect(FASTMCP_PEER, via, tmp_path, llm) as peer:
            found = await fastmcp_script(peer, "cancel-me")
            found["ask_llm"] = json.loads(
                (await peer.client.call_tool("ask_llm", {"question": "Define MCP"})).content[0].text
            )
            found["ask_user"] = json.loads(
                (await peer.client.call_tool("ask_user", {"topic": "lunch"})).content[0].text
            )
            results.append(found)
    direct, proxied = results
    # the named differences: a direct host without sampling/elicitation gets errors; through the proxy
    # the proxy's LLM answers (offered the server's tool) and the form is accepted with its defaults
    assert "error" in direct.pop("ask_llm")
    assert "error" in direct.pop("ask_user")
    assert proxied.pop("ask_llm") == {"text": "ok", "stop_reason": "endTurn", "model": "gpt-test"}
    assert [t["function"]["name"] for t in llm.requests[0].body["tools"]] == ["lookup"]
    assert proxied.pop("ask_user") == {"action": "accept", "data": {"name": "anonymous", "count": 3}}
    assert direct["cancel"] == {"reached_server": True}
    assert direct["progress"]["progress"] == [[1, 3, "step 1"], [2, 3, "step 2"], [3, 3, "step 3"]]
    assert direct == proxied
