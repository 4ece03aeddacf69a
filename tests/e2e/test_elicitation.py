"""Elicitation through the real proxy: hosts with and without it, consoles, policy, URL mode."""

from __future__ import annotations

import json
import sys
import threading
import time
from pathlib import Path
from typing import Any

import anyio
import pytest
from helpers.console import SocketConsole
from helpers.support import PY, RawHost, proxy_command, proxy_env, sdk_host, tool_json, write_policy

SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "title": "Your name", "minLength": 2},
        "age": {"type": "integer", "minimum": 0, "maximum": 150, "default": 30},
        "email": {"type": "string", "format": "email"},
        "newsletter": {"type": "boolean", "default": False},
        "color": {"type": "string", "oneOf": [{"const": "r", "title": "Red"}, {"const": "g", "title": "Green"}]},
        "sizes": {"type": "array", "items": {"enum": ["s", "m", "l"]}, "minItems": 1},
        "score": {"type": "number", "minimum": 0, "maximum": 1, "default": 0.5},
    },
    "required": ["name", "age"],
}
DEFAULTS_ONLY = {
    "type": "object",
    "properties": {"age": {"type": "integer", "default": 30}, "ok": {"type": "boolean", "default": True}},
    "required": ["age"],
}
SECRET = {"type": "object", "properties": {"password": {"type": "string", "title": "Your password"}}}


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return proxy_env(
        MCP_SAMPLING_PROXY_RUNTIME_DIR=str(tmp_path / "run"), MCP_SAMPLING_PROXY_STATE_DIR=str(tmp_path / "state")
    )


async def elicit(
    tmp_path: Path, env: dict[str, str], policy: str, tool: str, args: dict[str, Any], **client: Any
) -> Any:
    path = write_policy(tmp_path, policy)
    async with sdk_host(proxy_command(path), env, tmp_path / "stderr.log", **client) as host:
        return tool_json(await host.call_tool(tool, args))


@pytest.mark.anyio
async def test_host_with_elicitation_answers_it(tmp_path: Path, env: dict[str, str]) -> None:
    from mcp_types import ElicitResult

    async def host_form(context: Any, params: Any) -> ElicitResult:
        return ElicitResult(action="accept", content={"name": "Ada"})

    result = await elicit(tmp_path, env, "", "elicit_name", {}, elicitation_callback=host_form)
    assert result == {"action": "accept", "data": {"name": "Ada"}}


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("policy", "expected"),
    [
        ("", {"action": "decline", "data": None}),
        ("elicitation: {non_interactive: cancel}\n", {"action": "cancel", "data": None}),
        ("elicitation: {non_interactive: accept_defaults}\n", {"action": "accept", "data": {"age": 30, "ok": True}}),
    ],
)
async def test_no_host_support_and_nobody_to_ask(
    tmp_path: Path, env: dict[str, str], policy: str, expected: dict[str, Any]
) -> None:
    result = await elicit(tmp_path, env, policy, "elicit_form", {"schema_json": json.dumps(DEFAULTS_ONLY)})
    assert result == expected


@pytest.mark.anyio
async def test_accept_defaults_needs_a_default_for_every_required_field(tmp_path: Path, env: dict[str, str]) -> None:
    result = await elicit(
        tmp_path,
        env,
        "elicitation: {non_interactive: accept_defaults}\n",
        "elicit_form",
        {"schema_json": json.dumps(SCHEMA)},
    )
    assert result["action"] == "decline"


@pytest.mark.anyio
async def test_deny_rule_declines_never_errors(tmp_path: Path, env: dict[str, str]) -> None:
    from mcp_types import ElicitResult

    async def host_form(context: Any, params: Any) -> ElicitResult:
        raise AssertionError("the host must not be asked")

    policy = "rules:\n  - name: no-forms\n    when: {method: elicitation}\n    action: deny\n"
    result = await elicit(tmp_path, env, policy, "elicit_name", {}, elicitation_callback=host_form)
    assert result == {"action": "decline", "data": None}


@pytest.mark.anyio
async def test_sensitive_form_is_declined_with_a_warning(tmp_path: Path, env: dict[str, str]) -> None:
    policy = "elicitation: {route: console}\n"
    result = await elicit(tmp_path, env, policy, "elicit_form", {"schema_json": json.dumps(SECRET)})
    assert result["action"] == "decline"
    assert "forbids in form mode" in (tmp_path / "stderr.log").read_text()


@pytest.mark.anyio
async def test_upstream_capabilities_advertise_form_and_strip_tasks(tmp_path: Path, env: dict[str, str]) -> None:
    with RawHost(
        proxy_command(write_policy(tmp_path, "elicitation: {url_mode: true}\n")), env, tmp_path / "stderr.log"
    ) as host:
        host.initialize({"tasks": {"requests": {"elicitation": {"create": {}}, "sampling": {"createMessage": {}}}}})
        response = host.request("tools/call", {"name": "caps", "arguments": {}})
    caps = json.loads(response["result"]["content"][0]["text"])
    assert caps["elicitation"] == {"form": {}, "url": {}}
    assert "elicitation" not in caps.get("tasks", {}).get("requests", {})
    assert "sampling" not in caps.get("tasks", {}).get("requests", {})


@pytest.mark.anyio
async def test_companion_console_fills_the_form(tmp_path: Path, env: dict[str, str]) -> None:
    answers: list[Any] = []
    path = write_policy(tmp_path, "")
    async with sdk_host(proxy_command(path), env, tmp_path / "stderr.log") as host:
        console = await SocketConsole.attach(Path(env["MCP_SAMPLING_PROXY_RUNTIME_DIR"]))
        async with anyio.create_task_group() as tg:

            async def call() -> None:
                answers.append(tool_json(await host.call_tool("elicit_form", {"schema_json": json.dumps(SCHEMA)})))
                answers.append(tool_json(await host.call_tool("elicit_form", {"schema_json": json.dumps(SCHEMA)})))

            tg.start_soon(call)
            first = await console.receive()
            assert first["type"] == "elicit"
            assert first["server"] == "'kitchen_sink_server' (which calls itself \"kitchen-sink\")"
            assert first["tool"] == "elicit_form"
            assert first["schema"] == SCHEMA
            content = {"name": "Ada", "age": 36, "color": "g", "sizes": ["s", "l"]}
            await console.send({"type": "elicit", "id": first["id"], "action": "accept", "content": content})
            assert (await console.receive())["type"] == "resolved"
            second = await console.receive()
            await console.send(
                {"type": "elicit", "id": second["id"], "action": "accept", "content": {"name": "A", "age": 999}}
            )  # invalid: refused by the proxy
    assert answers[0] == {"action": "accept", "data": content}
    assert answers[1]["action"] == "decline"


def opener_script(tmp_path: Path) -> str:
    script = tmp_path / "opener.py"
    script.write_text("import sys, pathlib\npathlib.Path(sys.argv[1]).write_text(sys.argv[2])\n")
    return f"{PY} {script} {tmp_path / 'opened.txt'}"


def test_url_mode_on_the_console_opens_only_after_consent_and_swallows_completion(
    tmp_path: Path, env: dict[str, str]
) -> None:
    env = {**env, "MCP_SAMPLING_PROXY_URL_OPENER": opener_script(tmp_path)}
    policy = write_policy(tmp_path, "elicitation: {url_mode: true}\n")

    attached = threading.Event()

    async def run() -> None:
        console = await SocketConsole.attach(tmp_path / "run")
        attached.set()
        for answer in ("decline", "accept"):
            request = await console.receive()
            assert request["type"] == "elicit"
            assert request["mode"] == "url"
            assert request["url"] == "https://login.example.com/auth?x=1"
            await console.send({"type": "elicit", "id": request["id"], "action": answer})
            assert (await console.receive())["type"] == "resolved"

    with RawHost(proxy_command(policy), env, tmp_path / "stderr.log") as host:
        host.initialize()
        with anyio.from_thread.start_blocking_portal() as portal:
            future = portal.start_task_soon(run)
            assert attached.wait(30), "the console never attached"
            declined = host.request(
                "tools/call", {"name": "elicit_url", "arguments": {"url": "https://login.example.com/auth?x=1"}}
            )
            accepted = host.request(
                "tools/call",
                {
                    "name": "elicit_url",
                    "arguments": {"url": "https://login.example.com/auth?x=1", "elicitation_id": "e-2"},
                },
            )
            future.result(timeout=20)
        received = [json.loads(line) for line in host.raw_received]
    assert json.loads(declined["result"]["content"][0]["text"]) == {"action": "decline"}
    assert json.loads(accepted["result"]["content"][0]["text"]) == {"action": "accept"}
    # the companion console opens URLs on its own side; the proxy fetched and opened nothing
    assert not (tmp_path / "opened.txt").exists()
    assert not any(m.get("method") == "notifications/elicitation/complete" for m in received)


def test_url_mode_host_that_supports_it_sees_request_and_completion(tmp_path: Path, env: dict[str, str]) -> None:
    with RawHost(proxy_command(write_policy(tmp_path, "")), env, tmp_path / "stderr.log") as host:
        host.initialize({"elicitation": {"form": {}, "url": {}}})
        host.send(
            {
                "jsonrpc": "2.0",
                "id": 9,
                "method": "tools/call",
                "params": {"name": "elicit_url", "arguments": {"url": "https://example.com/x"}},
            }
        )
        request = host.wait_for(lambda m: m.get("method") == "elicitation/create")
        assert request["params"]["url"] == "https://example.com/x"
        host.send({"jsonrpc": "2.0", "id": request["id"], "result": {"action": "accept"}})
        complete = host.wait_for(lambda m: m.get("method") == "notifications/elicitation/complete")
        assert complete["params"]["elicitationId"] == "e-1"
        result = host.wait_for(lambda m: m.get("id") == 9)
    assert json.loads(result["result"]["content"][0]["text"]) == {"action": "accept"}


if sys.platform != "linux":  # pragma: no cover
    pytestmark = pytest.mark.skip("uses Unix sockets")


@pytest.mark.anyio
async def test_rate_limit_applies_to_elicitation(tmp_path: Path, env: dict[str, str]) -> None:
    policy = (
        "elicitation: {non_interactive: accept_defaults}\n"
        "rules:\n  - name: forms\n    when: {method: elicitation}\n    action: allow\n"
        "    rate_limit: {requests: 1, per: 1h}\n"
    )
    path = write_policy(tmp_path, policy)
    async with sdk_host(proxy_command(path), env, tmp_path / "stderr.log") as host:
        args = {"schema_json": json.dumps(DEFAULTS_ONLY)}
        first = tool_json(await host.call_tool("elicit_form", args))
        second = tool_json(await host.call_tool("elicit_form", args))
    assert first == {"action": "accept", "data": {"age": 30, "ok": True}}
    assert second == {"action": "decline", "data": None}
    assert "rate limit of rule 'forms'" in (tmp_path / "stderr.log").read_text()


@pytest.mark.anyio
async def test_elicitation_decisions_are_audited(tmp_path: Path, env: dict[str, str]) -> None:
    from mcp_sampling_proxy.commands import audit as audit_cmd

    log = tmp_path / "audit.jsonl"
    policy = f"elicitation: {{non_interactive: accept_defaults}}\naudit:\n  path: {log}\n"
    await elicit(tmp_path, env, policy, "elicit_form", {"schema_json": json.dumps(DEFAULTS_ONLY)})
    (record,) = [json.loads(line) for line in log.read_text().splitlines()]
    assert record["method"] == "elicitation/create"
    assert record["decision"] == "allow"
    assert record["tool"] == "elicit_form"
    assert record["content"]["request"]["sha256"]
    assert audit_cmd.main(["verify", str(log)]) == 0


# -- format checks (jsonschema's FormatChecker) through the real proxy ----------------------------

FORMATTED = {
    "type": "object",
    "properties": {
        "email": {"type": "string", "format": "email", "title": "Email"},
        "born": {"type": "string", "format": "date", "title": "Birthday"},
        "when": {"type": "string", "format": "date-time", "title": "Meeting"},
        "site": {"type": "string", "format": "uri", "title": "Homepage"},
    },
    "required": ["email", "born"],
}


@pytest.mark.skipif(sys.platform != "linux", reason="needs a Linux pty")
def test_terminal_form_re_asks_a_bad_email_date_date_time_and_url(tmp_path: Path) -> None:
    from helpers.support import KITCHEN_SINK
    from helpers.terminal import PtySession, terminal_env, try_argv

    session = PtySession(
        try_argv(
            "--tool",
            "elicit_form",
            "--args",
            json.dumps({"schema_json": json.dumps(FORMATTED)}),
            "--",
            PY,
            KITCHEN_SINK,
        ),
        terminal_env(),
    )
    session.read_until(b"[a]nswer the form")
    session.type("a\n")
    steps = [
        (b"Email* (email)", "ada@example", b"not a valid email; expected an email address like name@example.com"),
        (b"Email* (email)", "ada@example.com", None),
        (b"Birthday* (date)", "2023-02-29", b"not a valid date; expected a date like 2025-03-01"),
        (b"Birthday* (date)", "1815-12-10", None),
        (b"Meeting (date-time)", "1815-12-10 08:00", b"not a valid date-time; expected a date and time with offset"),
        (b"Meeting (date-time)", "1815-12-10T08:00:00+01:00", None),
        (b"Homepage (uri)", "example.com", b"not a valid uri; expected a URL like https://example.com/"),
        (b"Homepage (uri)", "https://example.com/ada", None),
    ]
    for prompt, text, complaint in steps:
        session.read_until(prompt)
        asked = session.output.count(prompt)
        session.type(text + "\n")
        if complaint is not None:
            session.read_until(complaint)
            deadline = time.monotonic() + 30
            while session.output.count(prompt) == asked and time.monotonic() < deadline:
                session._read(0.5)
            assert session.output.count(prompt) == asked + 1  # the same field, asked again
    assert session.finish() == 0
    result = json.loads(session.output.split(b"result:")[1].strip().decode())
    assert result == {
        "action": "accept",
        "data": {
            "email": "ada@example.com",
            "born": "1815-12-10",
            "when": "1815-12-10T08:00:00+01:00",
            "site": "https://example.com/ada",
        },
    }


@pytest.mark.anyio
async def test_companion_console_answer_with_a_bad_format_is_refused(tmp_path: Path, env: dict[str, str]) -> None:
    answers: list[Any] = []
    good = {"email": "ada@example.com", "born": "1815-12-10"}
    async with sdk_host(proxy_command(write_policy(tmp_path, "")), env, tmp_path / "stderr.log") as host:
        console = await SocketConsole.attach(Path(env["MCP_SAMPLING_PROXY_RUNTIME_DIR"]))
        async with anyio.create_task_group() as tg:

            async def call() -> None:
                for _ in range(3):
                    answers.append(
                        tool_json(await host.call_tool("elicit_form", {"schema_json": json.dumps(FORMATTED)}))
                    )

            tg.start_soon(call)
            for content in ({**good, "email": "ada@"}, {**good, "born": "1815-13-10"}, good):
                request = await console.receive()
                await console.send({"type": "elicit", "id": request["id"], "action": "accept", "content": content})
                assert (await console.receive())["type"] == "resolved"
    assert [a["action"] for a in answers] == ["decline", "decline", "accept"]
    assert answers[2]["data"] == good


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("default", "expected"),
    [
        ("ada@example.com", {"action": "accept", "data": {"email": "ada@example.com"}}),
        ("ada at example.com", {"action": "decline", "data": None}),  # not an email: no default, nobody to ask
    ],
)
async def test_accept_defaults_ignores_a_default_of_the_wrong_format(
    tmp_path: Path, env: dict[str, str], default: str, expected: dict[str, Any]
) -> None:
    schema = {
        "type": "object",
        "properties": {"email": {"type": "string", "format": "email", "default": default}},
        "required": ["email"],
    }
    result = await elicit(
        tmp_path,
        env,
        "elicitation: {non_interactive: accept_defaults}\n",
        "elicit_form",
        {"schema_json": json.dumps(schema)},
    )
    assert result == expected
