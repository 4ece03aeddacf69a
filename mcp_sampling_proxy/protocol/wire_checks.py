"""Strict checks of the server requests the proxy serves (`sampling/createMessage`,
`elicitation/create`), written out instead of validated with the SDK's pydantic models.

WHY: the SDK's models cost ~10 MB of memory and ~0.15 s of import before the first request, and
the proxy needs only a yes/no and a field path. These checks accept exactly what the SDK's
models accept in strict mode (`tests/unit/protocol/test_wire_checks.py` compares them on a corpus of valid and
broken requests), with two differences that follow the spec's schema: a content block must say
its `type` (the SDK's models default it), and fields are known by their wire names only (the
SDK's models also take `max_tokens` for `maxTokens`). Keys the spec does not define are allowed,
as the SDK allows them. Messages are pydantic's ("Field required", "Input should be a valid
string") so that the errors servers see stay the same.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

Check = Callable[[Any, str], None]


class Invalid(ValueError):
    """A value that does not fit: where (a dotted path, e.g. `messages.0.content.text`) and why."""

    def __init__(self, where: str, message: str):
        super().__init__(f"{where}: {message}")
        self.where = where
        self.message = message


def _join(where: str, key: str | int) -> str:
    return f"{where}.{key}" if where else str(key)


# -- scalars ----------------------------------------------------------------------------------------


def text(value: Any, where: str) -> None:
    if not isinstance(value, str):
        raise Invalid(where, "Input should be a valid string")


def integer(value: Any, where: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise Invalid(where, "Input should be a valid integer")


def number(value: Any, where: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise Invalid(where, "Input should be a valid number")


def boolean(value: Any, where: str) -> None:
    if not isinstance(value, bool):
        raise Invalid(where, "Input should be a valid boolean")


def obj(value: Any, where: str) -> None:
    if not isinstance(value, dict):
        raise Invalid(where, "Input should be a valid dictionary")


def anything(value: Any, where: str) -> None:
    return None


def number_between(low: float, high: float) -> Check:
    def check(value: Any, where: str) -> None:
        number(value, where)
        if not low <= value <= high:
            raise Invalid(where, f"Input should be between {low:g} and {high:g}")

    return check


def one_of(*allowed: str) -> Check:
    shown = ", ".join(repr(a) for a in allowed[:-1]) + f" or {allowed[-1]!r}" if len(allowed) > 1 else repr(allowed[0])

    def check(value: Any, where: str) -> None:
        if not isinstance(value, str) or value not in allowed:
            raise Invalid(where, f"Input should be {shown}")

    return check


def list_of(item: Check) -> Check:
    def check(value: Any, where: str) -> None:
        if not isinstance(value, list):
            raise Invalid(where, "Input should be a valid list")
        for index, element in enumerate(value):
            item(element, _join(where, index))

    return check


def optional(inner: Check) -> Check:
    """The field may be absent or null (the SDK's `X | None = None`)."""

    def check(value: Any, where: str) -> None:
        if value is not None:
            inner(value, where)

    return check


def request_meta(value: Any, where: str) -> None:
    """`_meta` of a request: an object whose `progressToken`, when given, is a string or an integer."""
    obj(value, where)
    if "progressToken" in value:
        token = value["progressToken"]
        if isinstance(token, bool) or not isinstance(token, str | int):
            raise Invalid(_join(where, "progressToken"), "Input should be a valid string or integer")


# -- objects ----------------------------------------------------------------------------------------


class Shape:
    """An object with known fields (wire name -> check); other keys are allowed. Required fields
    must be present; optional ones may be absent or null; defaulted ones may be absent, not null
    (the SDK's `x: T = default`)."""

    def __init__(
        self,
        required: Mapping[str, Check] | None = None,
        optional_fields: Mapping[str, Check] | None = None,
        defaulted: Mapping[str, Check] | None = None,
    ):
        self.required = dict(required or {})
        self.optional = {name: optional(check) for name, check in (optional_fields or {}).items()}
        self.optional.update(defaulted or {})

    def __call__(self, value: Any, where: str) -> None:
        obj(value, where)
        for name, check in self.required.items():
            if name not in value:
                raise Invalid(_join(where, name), "Field required")
            check(value[name], _join(where, name))
        for name, check in self.optional.items():
            if name in value:
                check(value[name], _join(where, name))


def by_type(shapes: Mapping[str, Check]) -> Check:
    """One of several block shapes, chosen by the block's `type`."""
    allowed = one_of(*shapes)

    def check(value: Any, where: str) -> None:
        obj(value, where)
        if "type" not in value:
            raise Invalid(_join(where, "type"), "Field required")
        allowed(value["type"], _join(where, "type"))
        shapes[value["type"]](value, where)

    return check


def block_or_list(block: Check) -> Check:
    """A message's content: one block, or a list of them."""
    many = list_of(block)

    def check(value: Any, where: str) -> None:
        (many if isinstance(value, list) else block)(value, where)

    return check


META = {"_meta": obj}
ROLE = one_of("user", "assistant")
ANNOTATIONS = Shape(
    optional_fields={"audience": list_of(ROLE), "priority": number_between(0.0, 1.0), "lastModified": text}
)
ICON = Shape({"src": text}, {"mimeType": text, "sizes": list_of(text), "theme": one_of("light", "dark")})
TEXT = Shape({"text": text}, {"annotations": ANNOTATIONS, **META})
MEDIA = Shape({"data": text, "mimeType": text}, {"annotations": ANNOTATIONS, **META})
RESOURCE_LINK = Shape(
    {"name": text, "uri": text},
    {
        "title": text,
        "description": text,
        "mimeType": text,
        "size": integer,
        "icons": list_of(ICON),
        "annotations": ANNOTATIONS,
        **META,
    },
)


def _resource_contents(value: Any, where: str) -> None:
    """Text or blob resource contents (the SDK's union: whichever fits)."""
    obj(value, where)
    base = {"uri": text}
    rest = {"mimeType": text, **META}
    try:
        Shape({**base, "text": text}, rest)(value, where)
    except Invalid as as_text:
        try:
            Shape({**base, "blob": text}, rest)(value, where)
        except Invalid:
            raise as_text from None


EMBEDDED = Shape({"resource": _resource_contents}, {"annotations": ANNOTATIONS, **META})
CONTENT_BLOCK = by_type(
    {"text": TEXT, "image": MEDIA, "audio": MEDIA, "resource_link": RESOURCE_LINK, "resource": EMBEDDED}
)
TOOL_USE = Shape({"name": text, "id": text, "input": obj}, META)
TOOL_RESULT = Shape(
    {"toolUseId": text},
    {"structuredContent": anything, "isError": boolean, **META},
    defaulted={"content": list_of(CONTENT_BLOCK)},
)
SAMPLING_BLOCK = by_type(
    {"text": TEXT, "image": MEDIA, "audio": MEDIA, "tool_use": TOOL_USE, "tool_result": TOOL_RESULT}
)
SAMPLING_MESSAGE = Shape({"role": ROLE, "content": block_or_list(SAMPLING_BLOCK)}, META)
MODEL_PREFERENCES = Shape(
    optional_fields={
        "hints": list_of(Shape(optional_fields={"name": text})),
        "costPriority": number,
        "speedPriority": number,
        "intelligencePriority": number,
    }
)
TOOL = Shape(
    {"name": text, "inputSchema": obj},
    {
        "title": text,
        "description": text,
        "outputSchema": obj,
        "icons": list_of(ICON),
        "execution": Shape(optional_fields={"taskSupport": one_of("forbidden", "optional", "required")}),
        "annotations": Shape(
            optional_fields={
                "title": text,
                "readOnlyHint": boolean,
                "destructiveHint": boolean,
                "idempotentHint": boolean,
                "openWorldHint": boolean,
            }
        ),
        **META,
    },
)
TASK = Shape(optional_fields={"ttl": integer})
REQUEST_META = {"_meta": request_meta}

CREATE_MESSAGE = Shape(
    {"messages": list_of(SAMPLING_MESSAGE), "maxTokens": integer},
    {
        "modelPreferences": MODEL_PREFERENCES,
        "systemPrompt": text,
        "includeContext": one_of("none", "thisServer", "allServers"),
        "temperature": number,
        "stopSequences": list_of(text),
        "metadata": obj,
        "tools": list_of(TOOL),
        "toolChoice": Shape(optional_fields={"mode": one_of("auto", "required", "none")}),
        "task": TASK,
        **REQUEST_META,
    },
)
ELICIT_FORM = Shape(
    {"message": text, "requestedSchema": obj}, {"task": TASK, **REQUEST_META}, defaulted={"mode": one_of("form")}
)
ELICIT_URL = Shape(
    {"message": text, "url": text},
    {"elicitationId": text, "task": TASK, **REQUEST_META},
    defaulted={"mode": one_of("url")},
)
