"""Edits by a human keep what they did not touch (issue #11, defect 3), in process: the edit itself.

`[e]dit` at an approval replaces only the text of the last user message: its image (and every
other non-text block) still reaches the LLM; an answer's text is replaced, its tool calls kept; a
tool result cannot be edited. Through the real proxy, the fake LLM, a pty and the console socket (what
reaches the LLM, the review screen, the audit record of who edited what): tests/e2e/test_approval_edits.py.
"""

from __future__ import annotations

from typing import Any

import pytest

from mcp_sampling_proxy.approval.dialogues import approval_dialogue
from mcp_sampling_proxy.approval.edits import with_prompt, with_text
from mcp_sampling_proxy.protocol.wire_types import CreateMessageParams, SamplingMessage

IMAGE = {"type": "image", "data": "iVBORw0KGgo=", "mimeType": "image/png"}


# -- the edit itself, on every shape of content ----------------------------------------------------

AUDIO = {"type": "audio", "data": "UklGRg==", "mimeType": "audio/wav"}


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ({"type": "text", "text": "old"}, {"type": "text", "text": "new"}),
        (IMAGE, [{"type": "text", "text": "new"}, IMAGE]),
        (
            [IMAGE, {"type": "text", "text": "a"}, AUDIO, {"type": "text", "text": "b"}],
            [IMAGE, {"type": "text", "text": "new"}, AUDIO],
        ),
        ([IMAGE, AUDIO], [{"type": "text", "text": "new"}, IMAGE, AUDIO]),
    ],
    ids=["one-text", "one-image", "mixed", "no-text"],
)
def test_with_prompt_replaces_only_the_text_of_the_last_user_message(content: Any, expected: Any) -> None:
    first: SamplingMessage = {"role": "user", "content": {"type": "text", "text": "first"}}
    answer: SamplingMessage = {"role": "assistant", "content": {"type": "text", "text": "an answer"}}
    params: CreateMessageParams = {
        "messages": [first, answer, {"role": "user", "content": content}],
        "maxTokens": 9,
        "systemPrompt": "s",
    }
    edited = with_prompt(params, "new")
    assert edited == {**params, "messages": [first, answer, {"role": "user", "content": expected}]}
    assert params["messages"][2]["content"] == content  # the original is untouched


def test_with_text_keeps_the_tool_calls_of_an_answer() -> None:
    use = {"type": "tool_use", "id": "c1", "name": "get_weather", "input": {"city": "Oslo"}}
    result = {
        "role": "assistant",
        "content": [{"type": "text", "text": "let me look"}, use],
        "model": "m",
        "stopReason": "toolUse",
    }
    assert with_text(result, "looking") == {**result, "content": [{"type": "text", "text": "looking"}, use]}


@pytest.mark.anyio
async def test_a_tool_result_message_cannot_be_edited_and_the_question_is_asked_again() -> None:
    params = {
        "messages": [
            {"role": "user", "content": {"type": "text", "text": "weather?"}},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "c1", "name": "w", "input": {}}]},
            {"role": "user", "content": [{"type": "tool_result", "toolUseId": "c1", "content": []}]},
        ],
        "maxTokens": 9,
    }
    answers = iter(["e", "y"])
    said: list[str] = []

    async def ask(prompt: str) -> str | None:
        return next(answers)

    assert await approval_dialogue(params, ask, said.append) == ("once", None)
    assert any("tool results" in line for line in said)
