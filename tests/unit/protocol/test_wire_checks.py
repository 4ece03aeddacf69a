"""`wire_checks` accept exactly what the SDK's models accept in strict mode.

The proxy checks sampling and elicitation requests without pydantic (issue #14: no pydantic on
the hot path, ~10 MB and ~0.15 s less), so this compares the two verdicts on rich valid requests
and on every one-field mutation of them: each field deleted, and set to a value of each JSON type.
Two documented differences are checked on their own: a block without `type` (the spec requires
it; the SDK's models default it) and snake_case field names (the SDK also takes those)."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import pytest
from mcp_types import CreateMessageRequestParams, ElicitRequestFormParams, ElicitRequestURLParams
from pydantic import ValidationError

from mcp_sampling_proxy.protocol import wire_checks
from mcp_sampling_proxy.protocol.jsonrpc import RpcError
from mcp_sampling_proxy.protocol.sampling_request import validate
from mcp_sampling_proxy.services.elicitation.request import validate_elicitation

ICON = {"src": "https://x/icon.png", "mimeType": "image/png", "sizes": ["16x16"], "theme": "dark"}
ANNOTATIONS = {"audience": ["user", "assistant"], "priority": 0.5, "lastModified": "2025-01-01T00:00:00Z"}
SAMPLING = {
    "messages": [
        {"role": "user", "content": {"type": "text", "text": "hi", "annotations": ANNOTATIONS, "_meta": {"k": 1}}},
        {
            "role": "assistant",
            "content": [
                {"type": "tool_use", "name": "lookup", "id": "t1", "input": {"q": "x"}, "_meta": {}},
            ],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "toolUseId": "t1",
                    "isError": False,
                    "structuredContent": {"n": 1},
                    "content": [
                        {"type": "text", "text": "found"},
                        {"type": "image", "data": "aGk=", "mimeType": "image/png"},
                        {"type": "audio", "data": "aGk=", "mimeType": "audio/wav"},
                        {
                            "type": "resource_link",
                            "name": "r",
                            "uri": "file:///r",
                            "title": "R",
                            "description": "d",
                            "mimeType": "text/plain",
                            "size": 3,
                            "icons": [ICON],
                            "annotations": ANNOTATIONS,
                        },
                        {"type": "resource", "resource": {"uri": "file:///a", "mimeType": "text/plain", "text": "a"}},
                        {"type": "resource", "resource": {"uri": "file:///b", "blob": "Yg=="}},
                    ],
                },
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "image", "data": "aGk=", "mimeType": "image/png"},
                {"type": "audio", "data": "aGk=", "mimeType": "audio/wav"},
            ],
        },
    ],
    "modelPreferences": {
        "hints": [{"name": "claude"}, {}],
        "costPriority": 0.2,
        "speedPriority": 1,
        "intelligencePriority": 0.9,
    },
    "systemPrompt": "be brief",
    "includeContext": "thisServer",
    "temperature": 0.7,
    "maxTokens": 100,
    "stopSequences": ["END"],
    "metadata": {"a": 1},
    "tools": [
        {
            "name": "lookup",
            "title": "Lookup",
            "description": "d",
            "inputSchema": {"type": "object"},
            "outputSchema": {"type": "object"},
            "icons": [ICON],
            "execution": {"taskSupport": "optional"},
            "annotations": {
                "title": "L",
                "readOnlyHint": True,
                "destructiveHint": False,
                "idempotentHint": True,
                "openWorldHint": False,
            },
            "_meta": {},
        }
    ],
    "toolChoice": {"mode": "auto"},
    "task": {"ttl": 1000},
    "_meta": {"progressToken": "p1"},
}
FORM = {
    "mode": "form",
    "message": "Your name?",
    "requestedSchema": {"type": "object", "properties": {}},
    "task": {"ttl": 5},
    "_meta": {"progressToken": 7},
}
URL = {"mode": "url", "message": "Log in", "url": "https://example.com/login", "elicitationId": "e1"}
# One value of each JSON type (and the shapes strict mode treats specially)
SUBSTITUTES: list[Any] = [None, True, 0, 7, 1.5, -1.0, 2.0, "s", "", [], ["s"], {}, {"type": "text"}]


def paths(value: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """Every key and index path inside `value`."""
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, child in items:
        yield (*prefix, key)
        yield from paths(child, (*prefix, key))


def mutations(base: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    for path in paths(base):
        parent_path, key = path[:-1], path[-1]
        for replacement in [*SUBSTITUTES, "delete"]:
            changed = copy.deepcopy(base)
            parent = changed
            for part in parent_path:
                parent = parent[part]
            if replacement == "delete":
                if isinstance(parent, dict):
                    del parent[key]
                else:
                    parent.pop(key)
            else:
                parent[key] = replacement
            if key == "type" and replacement == "delete":
                continue  # a documented difference (test below)
            yield f"{'.'.join(map(str, path))}={replacement!r}", changed


def sdk_accepts(model: Any, params: dict[str, Any]) -> bool:
    try:
        model.model_validate(params, strict=True)
    except ValidationError:
        return False
    return True


def ours_accepts(check: wire_checks.Check, params: dict[str, Any]) -> bool:
    try:
        check(params, "")
    except wire_checks.Invalid:
        return False
    return True


@pytest.mark.parametrize(
    ("name", "check", "model", "base"),
    [
        ("sampling", wire_checks.CREATE_MESSAGE, CreateMessageRequestParams, SAMPLING),
        ("elicitation form", wire_checks.ELICIT_FORM, ElicitRequestFormParams, FORM),
        ("elicitation url", wire_checks.ELICIT_URL, ElicitRequestURLParams, URL),
    ],
)
def test_the_checks_agree_with_the_sdks_strict_models(
    name: str, check: wire_checks.Check, model: Any, base: dict[str, Any]
) -> None:
    assert sdk_accepts(model, base) and ours_accepts(check, base)
    disagreements = []
    tried = 0
    for label, params in mutations(base):
        tried += 1
        if sdk_accepts(model, params) != ours_accepts(check, params):
            disagreements.append(f"{label}: sdk {sdk_accepts(model, params)}, ours {ours_accepts(check, params)}")
    assert tried > 40
    assert not disagreements, f"{len(disagreements)} of {tried} {name} mutations disagree:\n" + "\n".join(
        disagreements[:40]
    )


def test_a_block_must_say_its_type_and_fields_go_by_their_wire_names() -> None:
    """The two places the checks are stricter than the SDK's models, as the spec's schema is."""
    untyped = {"messages": [{"role": "user", "content": {"text": "hi"}}], "maxTokens": 5}
    assert sdk_accepts(CreateMessageRequestParams, untyped)
    with pytest.raises(RpcError, match=r"messages\.0\.content\.type: Field required"):
        validate(untyped)
    snake = {"messages": [{"role": "user", "content": {"type": "text", "text": "hi"}}], "max_tokens": 5}
    assert sdk_accepts(CreateMessageRequestParams, snake)
    with pytest.raises(RpcError, match="maxTokens: Field required"):
        validate(snake)


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"messages": [], "maxTokens": "6000"}, "maxTokens: Input should be a valid integer"),
        ({"messages": [], "maxTokens": True}, "maxTokens: Input should be a valid integer"),
        (
            {"messages": [{"role": "system", "content": {"type": "text", "text": "x"}}], "maxTokens": 5},
            "messages.0.role: Input should be 'user' or 'assistant'",
        ),
        (
            {"messages": [{"role": "user", "content": {"type": "video", "data": "x"}}], "maxTokens": 5},
            "messages.0.content.type: Input should be 'text', 'image', 'audio', 'tool_use' or 'tool_result'",
        ),
        (
            {"messages": [{"role": "user", "content": [{"type": "text", "text": 5}]}], "maxTokens": 5},
            "messages.0.content.0.text: Input should be a valid string",
        ),
        ("not an object", "params must be an object"),
    ],
)
def test_errors_name_the_field(params: Any, message: str) -> None:
    with pytest.raises(RpcError) as caught:
        validate(params)
    assert caught.value.code == -32602
    assert caught.value.message == f"Invalid params for sampling/createMessage: {message}"


def test_elicitation_errors_name_the_field() -> None:
    with pytest.raises(RpcError, match="Invalid params for elicitation/create: message: Field required"):
        validate_elicitation({"requestedSchema": {"type": "object"}})
    with pytest.raises(RpcError, match="url: Input should be a valid string"):
        validate_elicitation({"mode": "url", "message": "m", "url": 5})


def test_deep_nesting_is_an_invalid_params_error_not_a_crash() -> None:
    deep: Any = {"type": "text", "text": "x"}
    for _ in range(5000):
        deep = {"type": "tool_result", "toolUseId": "t", "content": [deep]}
    with pytest.raises(RpcError) as caught:
        validate({"messages": [{"role": "user", "content": deep}], "maxTokens": 5})
    assert caught.value.code == -32602
