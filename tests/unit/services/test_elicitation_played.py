"""Elicitation played in memory (tests/helpers/playbook.py): hosts with and without forms, nobody to ask,
the policy's rules and rate limits, the companion console filling a form or answering a URL, and the
audit record. The real relay and services between a host and a server the test plays, named as the proxy
would name the kitchen-sink server, whose `elicit_form` and `elicit_url` tools ask these questions;
the console is the tests' SocketConsole on the proxy's real socket. Through the proxy as a process (an
SDK host that answers forms, the terminal's form): tests/e2e/test_elicitation.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest
from helpers.playbook import Playbook
from structlog.testing import capture_logs

from mcp_sampling_proxy.commands import audit as audit_cmd

pytestmark = pytest.mark.anyio
SERVER = "kitchen_sink_server"
NO_CALLBACKS: dict[str, Any] = {}  # an SDK host without callbacks declares no capabilities
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
LOGIN = "https://login.example.com/auth?x=1"
COMPLETE = {"jsonrpc": "2.0", "method": "notifications/elicitation/complete", "params": {"elicitationId": "e-1"}}


def form(schema: dict[str, Any]) -> dict[str, Any]:
    """The request the kitchen-sink server's `elicit_form` sends."""
    return {"mode": "form", "message": "Please fill in the form", "requestedSchema": schema}


def url_form(url: str, elicitation_id: str = "e-1") -> dict[str, Any]:
    """The request its `elicit_url` sends."""
    return {"mode": "url", "message": "Please sign in", "url": url, "elicitationId": elicitation_id}


async def elicit(tmp_path: Path, policy: str, schema: dict[str, Any]) -> dict[str, Any]:
    """The result a server asking for `schema` gets from a host without forms, nobody else to ask."""
    async with Playbook(tmp_path, policy, name=SERVER) as play:
        await play.handshake(NO_CALLBACKS)
        answer = await play.elicit(form(schema), tool="elicit_form")
    result: dict[str, Any] = answer["result"]
    return result


@pytest.mark.parametrize(
    ("policy", "expected"),
    [
        ("", {"action": "decline"}),
        ("elicitation: {non_interactive: cancel}\n", {"action": "cancel"}),
        ("elicitation: {non_interactive: accept_defaults}\n", {"action": "accept", "content": {"age": 30, "ok": True}}),
    ],
)
async def test_no_host_support_and_nobody_to_ask(tmp_path: Path, policy: str, expected: dict[str, Any]) -> None:
    assert await elicit(tmp_path, policy, DEFAULTS_ONLY) == expected


async def test_accept_defaults_needs_a_default_for_every_required_field(tmp_path: Path) -> None:
    result = await elicit(tmp_path, "elicitation: {non_interactive: accept_defaults}\n", SCHEMA)
    assert result["action"] == "decline"


@pytest.mark.parametrize(
    ("default", "expected"),
    [
        ("ada@example.com", {"action": "accept", "content": {"email": "ada@example.com"}}),
        ("ada at example.com", {"action": "decline"}),  # not an email: no default, nobody to ask
    ],
)
async def test_accept_defaults_ignores_a_default_of_the_wrong_format(
    tmp_path: Path, default: str, expected: dict[str, Any]
) -> None:
    schema = {
        "type": "object",
        "properties": {"email": {"type": "string", "format": "email", "default": default}},
        "required": ["email"],
    }
    assert await elicit(tmp_path, "elicitation: {non_interactive: accept_defaults}\n", schema) == expected


async def test_deny_rule_declines_never_errors(tmp_path: Path) -> None:
    policy = "rules:\n  - name: no-forms\n    when: {method: elicitation}\n    action: deny\n"
    async with Playbook(tmp_path, policy, name=SERVER) as play:
        await play.handshake({"elicitation": {}})
        answer = await play.elicit(form(SCHEMA))  # a form sent to the host would end the call's wait: it fails
    assert answer["result"] == {"action": "decline"}


async def test_sensitive_form_is_declined_with_a_warning(tmp_path: Path) -> None:
    with capture_logs() as logs:
        result = await elicit(tmp_path, "elicitation: {route: console}\n", SECRET)
    assert result["action"] == "decline"
    assert any("forbids in form mode" in str(entry) for entry in logs)


async def test_upstream_capabilities_advertise_form_and_strip_tasks(tmp_path: Path) -> None:
    tasks: dict[str, Any] = {"requests": {"elicitation": {"create": {}}, "sampling": {"createMessage": {}}}}
    initialize = {
        "protocolVersion": "2025-11-25",
        "capabilities": {"tasks": tasks},
        "clientInfo": {"name": "raw-host", "version": "1"},
    }
    async with Playbook(tmp_path, "elicitation: {url_mode: true}\n") as play:
        play.host.says({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": initialize})
        caps = (await play.server.next())["params"]["capabilities"]
    assert caps["elicitation"] == {"form": {}, "url": {}}
    assert "elicitation" not in caps.get("tasks", {}).get("requests", {})
    assert "sampling" not in caps.get("tasks", {}).get("requests", {})


async def test_rate_limit_applies_to_elicitation(tmp_path: Path) -> None:
    policy = (
        "elicitation: {non_interactive: accept_defaults}\n"
        "rules:\n  - name: forms\n    when: {method: elicitation}\n    action: allow\n"
        "    rate_limit: {requests: 1, per: 1h}\n"
    )
    async with Playbook(tmp_path, policy, name=SERVER) as play:
        await play.handshake(NO_CALLBACKS)
        with capture_logs() as logs:
            first = await play.elicit(form(DEFAULTS_ONLY))
            second = await play.elicit(form(DEFAULTS_ONLY))
    assert first["result"] == {"action": "accept", "content": {"age": 30, "ok": True}}
    assert second["result"] == {"action": "decline"}
    assert any("rate limit of rule 'forms'" in str(entry) for entry in logs)


async def test_elicitation_decisions_are_audited(tmp_path: Path) -> None:
    async with Playbook(tmp_path, "elicitation: {non_interactive: accept_defaults}\n", name=SERVER) as play:
        await play.handshake(NO_CALLBACKS)
        await play.elicit(form(DEFAULTS_ONLY), tool="elicit_form")
        (record,) = play.audit()
    assert record["method"] == "elicitation/create"
    assert record["decision"] == "allow"
    assert record["tool"] == "elicit_form"
    assert record["content"]["request"]["sha256"]
    assert audit_cmd.main(["verify", str(play.audit_path)]) == 0


async def test_companion_console_fills_the_form(tmp_path: Path) -> None:
    answers: list[dict[str, Any]] = []
    async with Playbook(tmp_path, "", name=SERVER, console=True) as play:
        await play.handshake(NO_CALLBACKS)
        console = await play.attach_console()
        async with anyio.create_task_group() as tg:

            async def call() -> None:
                for _ in range(2):
                    answers.append((await play.elicit(form(SCHEMA), tool="elicit_form"))["result"])

            tg.start_soon(call)
            first = await console.receive()
            assert first["type"] == "elicit"
            assert first["server"] == "'kitchen_sink_server' (which calls itself \"played-server\")"
            assert first["tool"] == "elicit_form"
            assert first["schema"] == SCHEMA
            content = {"name": "Ada", "age": 36, "color": "g", "sizes": ["s", "l"]}
            await console.send({"type": "elicit", "id": first["id"], "action": "accept", "content": content})
            assert (await console.receive())["type"] == "resolved"
            second = await console.receive()
            await console.send(
                {"type": "elicit", "id": second["id"], "action": "accept", "content": {"name": "A", "age": 999}}
            )  # invalid: refused by the proxy
    assert answers[0] == {"action": "accept", "content": content}
    assert answers[1]["action"] == "decline"


async def test_companion_console_answer_with_a_bad_format_is_refused(tmp_path: Path) -> None:
    answers: list[dict[str, Any]] = []
    good = {"email": "ada@example.com", "born": "1815-12-10"}
    async with Playbook(tmp_path, "", name=SERVER, console=True) as play:
        await play.handshake(NO_CALLBACKS)
        console = await play.attach_console()
        async with anyio.create_task_group() as tg:

            async def call() -> None:
                for _ in range(3):
                    answers.append((await play.elicit(form(FORMATTED), tool="elicit_form"))["result"])

            tg.start_soon(call)
            for content in ({**good, "email": "ada@"}, {**good, "born": "1815-13-10"}, good):
                request = await console.receive()
                await console.send({"type": "elicit", "id": request["id"], "action": "accept", "content": content})
                assert (await console.receive())["type"] == "resolved"
    assert [a["action"] for a in answers] == ["decline", "decline", "accept"]
    assert answers[2]["content"] == good


async def test_url_mode_on_the_console_is_answered_there_and_swallows_completion(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The companion console opens URLs on its own side: the proxy opens nothing (an opener it ran would
    be a process, which fails any test here), and the server's completion is not passed to the host."""
    monkeypatch.setenv("MCP_SAMPLING_PROXY_URL_OPENER", f"touch {tmp_path / 'opened'}")
    answers: list[dict[str, Any]] = []
    async with Playbook(tmp_path, "elicitation: {url_mode: true}\n", name=SERVER, console=True) as play:
        await play.handshake(NO_CALLBACKS)
        console = await play.attach_console()
        async with anyio.create_task_group() as tg:

            async def calls() -> None:
                answers.append((await play.elicit(url_form(LOGIN), tool="elicit_url"))["result"])
                async with play.call("elicit_url") as call:
                    answers.append((await call.elicit(url_form(LOGIN, "e-2")))["result"])
                    play.server.says({**COMPLETE, "params": {"elicitationId": "e-2"}})

            tg.start_soon(calls)
            for action in ("decline", "accept"):
                request = await console.receive()
                assert (request["type"], request["mode"], request["url"]) == ("elicit", "url", LOGIN)
                await console.send({"type": "elicit", "id": request["id"], "action": action})
                assert (await console.receive())["type"] == "resolved"
        assert play.host.nothing_yet()  # the completion never reached the host
    assert answers == [{"action": "decline"}, {"action": "accept"}]
    assert not (tmp_path / "opened").exists()


async def test_url_mode_host_that_supports_it_sees_request_and_completion(tmp_path: Path) -> None:
    async with Playbook(tmp_path, "", name=SERVER) as play:
        await play.handshake({"elicitation": {"form": {}, "url": {}}})
        async with play.call("elicit_url") as call:
            answer = await call.elicit(
                url_form("https://example.com/x"), host=lambda _: {"result": {"action": "accept"}}
            )
            complete = {
                "jsonrpc": "2.0",
                "method": "notifications/elicitation/complete",
                "params": {"elicitationId": "e-1"},
            }
            play.server.says(complete)
            forwarded = await play.host.next()
    assert play.host_asked[0]["params"]["url"] == "https://example.com/x"
    assert answer["result"] == {"action": "accept"}
    assert forwarded["method"] == "notifications/elicitation/complete"
    assert forwarded["params"]["elicitationId"] == "e-1"


@pytest.mark.parametrize(
    ("policy", "reason"),
    [
        ("", "URL mode is not enabled (elicitation.url_mode)"),
        ("elicitation: {route: decline}\n", "elicitation route is decline"),
    ],
)
async def test_a_url_request_nobody_may_answer_is_declined_saying_why(tmp_path: Path, policy: str, reason: str) -> None:
    async with Playbook(tmp_path, policy, name=SERVER) as play:
        await play.handshake({"elicitation": {"form": {}}})  # a host with forms only: URL mode is not its
        answer = await play.elicit(url_form(LOGIN), tool="elicit_url")
        (record,) = play.audit()
    assert answer["result"] == {"action": "decline"}
    assert not play.host_asked
    assert (record["decision"], record["reason"]) == ("deny", reason)
