"""What a proxy's start loads: only what it needs before it answers.

Every proxy a host starts pays for each module it imports, in CPU and in the time to its answer to
`initialize`; a module the start does not need is imported where it is first used, with a comment
saying so (CONTRIBUTING.md). Those lazy imports rot silently: one import moved to the top of a module
brings an HTTP client back into every start. So a real start is watched here (`-X importtime` lists every
module the process imported, to its end), without timing anything (timings live in bench/).
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import httpx
from helpers.serving import ALICE, start_serve, stop
from helpers.support import INITIALIZE_LINE, PY, SMALL_SERVER, proxy_env

# not needed by a proxy without an HTTP provider nor a webhook, that no server asked to elicit
NOT_AT_START = (
    "aiohttp",  # an HTTP provider's client (providers/llm_http.py, made by providers/registry.py)
    "httpx",  # a webhook's, an HTTP check's, a --url server's client
    "mcp_sampling_proxy.providers.openai",
    "mcp_sampling_proxy.providers.anthropic",
    "mcp_sampling_proxy.services.elicitation.ask",  # an elicitation's stages (services/elicitation/service.py)
    "mcp_sampling_proxy.services.elicitation.auto",
    "mcp_sampling_proxy.approval.forms",
    "mcp_sampling_proxy.system.browser",
    "mcp_sampling_proxy.approval.webhook_channel",  # only with approval.webhook (approval/registry.py)
    "mcp_sampling_proxy.approval.webhook_signing",
    "jsonschema",
    "redis",
    "opentelemetry",
    "mcp",  # the SDK: the proxy speaks the wire itself
    "pydantic",
)


def imported_by_a_start(tmp_path: Path, *options: str) -> list[str]:
    """Every module a proxy in front of a small server imported, from its start until the host closed it."""
    done = subprocess.run(
        [PY, "-X", "importtime", "-m", "mcp_sampling_proxy", *options, "--", PY, SMALL_SERVER],
        input=INITIALIZE_LINE,
        env=proxy_env(HOME=str(tmp_path)),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert '"result"' in done.stdout, done.stderr[-2000:]  # it relayed the server's answer to initialize
    return [line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")]


def test_a_start_without_an_http_provider_loads_no_http_client_webhook_nor_elicitation(tmp_path: Path) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text("rules:\n  - name: ask\n    when: {method: sampling}\n    action: prompt\n", encoding="utf-8")
    imported = imported_by_a_start(tmp_path, "--policy", str(policy))
    assert "mcp_sampling_proxy.relay.core" in imported  # the list is the proxy's own
    loaded = [name for name in imported if name in NOT_AT_START or name.partition(".")[0] in NOT_AT_START]
    assert loaded == []


def test_a_start_with_an_http_provider_leaves_its_client_for_later(tmp_path: Path) -> None:
    """A host starts its servers together and asks each for its tools at once: a proxy that made its LLM
    client then (aiohttp, a CA store: ~150 ms of CPU) took that from every server's answers. It makes it
    once the host's start is over (runtime.WARM_UP_DELAY), or at the first sampling request; a session of
    half a second, as a host's start is, loads none of it."""
    policy = tmp_path / "policy.yaml"
    policy.write_text(
        "llm:\n  providers:\n    local:\n      type: openai\n      base_url: http://127.0.0.1:9/v1\n"
        "      api_key_env: TEST_LLM_KEY\n      models: [m]\n",
        encoding="utf-8",
    )
    proxy = subprocess.Popen(
        [PY, "-X", "importtime", "-m", "mcp_sampling_proxy", "--policy", str(policy), "--", PY, SMALL_SERVER],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=proxy_env(HOME=str(tmp_path), TEST_LLM_KEY="key"),
    )
    assert proxy.stdin is not None and proxy.stdout is not None
    proxy.stdin.write(INITIALIZE_LINE.encode())
    proxy.stdin.flush()
    assert b'"result"' in proxy.stdout.readline()
    time.sleep(0.5)
    _, stderr = proxy.communicate(timeout=60)
    imported = [line.rsplit("|", 1)[-1].strip() for line in stderr.decode().splitlines() if "import time:" in line]
    assert "mcp_sampling_proxy.relay.core" in imported  # the list is the proxy's own
    assert [name for name in imported if name.partition(".")[0] == "aiohttp"] == []


def test_serve_answers_a_session_without_loading_the_sdk(tmp_path: Path) -> None:
    """`serve` speaks Streamable HTTP itself (front/http_session.py): its start and a session's calls load
    neither the `mcp` SDK nor pydantic (about 0.6 s of CPU at each start), unless --oauth-issuer asks for
    the SDK's OAuth parts."""
    served = start_serve(tmp_path, env={"PYTHONPROFILEIMPORTTIME": "1"})
    headers = {"Authorization": f"Bearer {ALICE}", "Accept": "application/json, text/event-stream"}
    hello = json.loads(INITIALIZE_LINE)
    try:
        with httpx.Client(timeout=20) as http:
            opened = http.post(served.url, json=hello, headers=headers)
            assert opened.status_code == 200 and '"serverInfo"' in opened.text, opened.text
            headers |= {"Mcp-Session-Id": opened.headers["mcp-session-id"], "MCP-Protocol-Version": "2025-11-25"}
            call = {
                "jsonrpc": "2.0",
                "id": 2,
                "method": "tools/call",
                "params": {"name": "echo", "arguments": {"text": "hi"}},
            }
            answered = http.post(served.url, json=call, headers=headers)
            assert answered.status_code == 200 and '"hi"' in answered.text, answered.text
    finally:
        assert stop(served) == 0
    log = served.errlog.read_text()
    imported = [line.rsplit("|", 1)[-1].strip() for line in log.splitlines() if line.startswith("import time:")]
    assert "mcp_sampling_proxy.front.http_session" in imported  # the list is serve's own
    assert [
        name for name in imported if name.partition(".")[0] in ("mcp", "mcp_types", "pydantic", "sse_starlette")
    ] == []


def test_try_plays_its_host_without_loading_the_sdk(tmp_path: Path) -> None:
    """`try` is a host of its own (transport/stdio_host.py): it lists a server's tools through a proxy without
    the `mcp` SDK or pydantic, which cost it about 0.6 s of CPU at each run."""
    done = subprocess.run(
        [PY, "-m", "mcp_sampling_proxy", "try", "--no-terminal", "--", PY, SMALL_SERVER],
        env=proxy_env(HOME=str(tmp_path), PYTHONPROFILEIMPORTTIME="1"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0 and "tools: " in done.stdout and "echo" in done.stdout, done.stdout + done.stderr
    imported = [line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")]
    assert "mcp_sampling_proxy.transport.stdio_host" in imported  # the list is try's own
    assert [name for name in imported if name.partition(".")[0] in ("mcp", "mcp_types", "pydantic")] == []


# what a byte relay does not load either: the early start spawns a sandboxed server before any of them
NOT_BEFORE_THE_EARLY_SPAWN = ("typing", "msgspec", "yaml", "anyio", "structlog", "asyncio", "argparse", "json")


def test_the_entry_point_loads_nothing_heavy_before_the_early_spawn() -> None:
    """The entry point hardens the process and may spawn the server from its start record before the
    command line's modules load (transport/early_start.py): what it imports for that is the interpreter's
    own and a few standard modules. One heavy import there (typing alone is 3 ms, msgspec 27 ms) delays
    every sandboxed server's start by as much."""
    script = (
        "import sys; before = set(sys.modules)\n"
        "import mcp_sampling_proxy.entry, mcp_sampling_proxy.system.hardening\n"
        "import mcp_sampling_proxy.system.stop_signals, mcp_sampling_proxy.transport.early_start\n"
        "print(' '.join(sorted(set(sys.modules) - before)))\n"
    )
    done = subprocess.run([PY, "-c", script], capture_output=True, text=True, timeout=60, env=proxy_env())
    assert done.returncode == 0, done.stderr
    loaded = done.stdout.split()
    assert "mcp_sampling_proxy.transport.early_start" in loaded  # the list is the entry's own
    heavy = [name for name in loaded if name.partition(".")[0] in NOT_BEFORE_THE_EARLY_SPAWN]
    assert heavy == [], heavy
