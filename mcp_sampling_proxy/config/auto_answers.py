"""The grammar of `elicitation.auto_answers`: forms the policy answers itself, when nobody can be asked.

A headless run (CI, a scheduled agent) has nobody to confirm "Deploy to staging?", and declining
every form breaks servers that always ask. An auto-answer names the server (a glob, required: a
grant names whom it trusts), optionally the host tool call in flight and a regex over the server's
message, and the answer: `accept` with `content`, `decline` or `cancel`. It stays a policy of last
resort: it applies only where nobody can be asked (`applies: headless`, the default) unless it says
`applies: always`; sensitive forms and URL-mode requests are never answered this way (the serving
side enforces that, services/auto_answers.py). The content can only be checked against the form's
schema when a form arrives; here its shape is checked: field names to plain values.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from functools import partial
from typing import Any

from msgspec import Struct, field

from mcp_sampling_proxy.notation.yamlnodes import Node, shown_value
from mcp_sampling_proxy.policy.conditions import Facts, ServerMatches, ToolMatches
from mcp_sampling_proxy.text.identity import bad_character

ANSWER_ACTIONS = ("accept", "decline", "cancel")
APPLIES = ("headless", "always")  # headless: only where nobody can be asked; always: before the host or a console
AUTO_ANSWER_KEYS = ("name", "server", "tool", "message", "action", "content", "applies")


class AutoAnswer(Struct, frozen=True):
    """One `elicitation.auto_answers` entry."""

    name: str
    server: ServerMatches
    action: str  # accept | decline | cancel
    tool: ToolMatches | None = None  # None: whatever is in flight, or nothing
    message: re.Pattern[str] | None = None  # searched in the server's message
    content: Mapping[str, Any] = field(default_factory=dict)  # accept only: the answer, checked against the form
    applies: str = "headless"

    def matches(self, server: str, tools_in_flight: tuple[str, ...], message: str) -> bool:
        """True when this entry is for this request. With several tool calls in flight (the request
        could belong to any), every one of them must match: a grant never rests on a guess."""
        if not self.server.test(Facts(method="elicitation", server=server))[0]:
            return False
        if self.tool is not None:
            candidates: tuple[str | None, ...] = tools_in_flight or (None,)
            for tool in candidates:
                facts = Facts(method="elicitation", server=server, tool=tool)
                if not self.tool.test(facts)[0]:
                    return False
        return self.message is None or self.message.search(message) is not None


def parse_auto_answers(node: Node) -> tuple[AutoAnswer, ...]:
    """The `auto_answers:` list; names must be unique (the audit record names the entry)."""
    answers: list[AutoAnswer] = []
    seen: set[str] = set()
    for index, item in enumerate(node.sequence()):
        answer = item.attempt(partial(_parse_one, item, index), None)
        if answer is None:
            continue
        if answer.name in seen:
            item.report(item.error(f"auto-answer name '{answer.name}' is used twice; names must be unique"))
            continue
        seen.add(answer.name)
        answers.append(answer)
    return tuple(answers)


def _parse_one(node: Node, index: int) -> AutoAnswer:
    given = node.mapping(AUTO_ANSWER_KEYS)
    example = "e.g. {server: deployer, tool: deploy, action: accept, content: {confirm: true}}"
    for key in ("server", "action"):
        if key not in given:
            raise node.error(f"auto-answer {index + 1} needs {key}: ({example})")
    action = given["action"].choice(ANSWER_ACTIONS)
    content: dict[str, Any] = {}
    if "content" in given:
        if action != "accept":
            raise given["content"].error(f"content: goes with action: accept, not {action} (which sends no content)")
        content = _content(given["content"])
    return AutoAnswer(
        name=given["name"].str() if "name" in given else f"auto-answer-{index + 1}",
        server=ServerMatches(_globs(given["server"], names=True)),
        action=action,
        tool=ToolMatches(_globs(given["tool"])) if "tool" in given else None,
        message=given["message"].regex() if "message" in given else None,
        content=content,
        applies=given["applies"].choice(APPLIES) if "applies" in given else "headless",
    )


def _globs(node: Node, *, names: bool = False) -> tuple[str, ...]:
    """A glob or a list of globs; over server `names`, none with an invisible character (which would
    make the entry look as if it named one server while it names another)."""
    items = node.sequence() if node.is_sequence() else [node]
    if not items:
        raise node.error(f"{node.label} needs at least one glob")
    globs = []
    for item in items:
        value = item.value()
        if not isinstance(value, str) or not value:
            raise item.error(f"{item.label} must be a glob (a non-empty string), got {shown_value(value)}")
        bad = bad_character(value) if names else None
        if bad is not None:
            raise item.error(f"{item.label} holds a control or invisible character, {bad}: retype the server name")
        globs.append(value)
    return tuple(globs)


def _content(node: Node) -> dict[str, Any]:
    """Field name -> value: text, a number, true/false, or a list of texts (a multi-select)."""
    content: dict[str, Any] = {}
    for name, value_node in node.mapping().items():
        value = value_node.value()
        plain = isinstance(value, str | int | float | bool) or (
            isinstance(value, list) and all(isinstance(v, str) for v in value)
        )
        if not plain:
            raise value_node.error(
                f"{value_node.label} must be text, a number, true/false or a list of texts, got {shown_value(value)}"
            )
        content[name] = value
    return content
