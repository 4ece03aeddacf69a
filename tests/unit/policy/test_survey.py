"""A sampling request is walked once: the caps, the policy's facts and the budget's worst case read
its survey (mcp_sampling_proxy.policy.survey), not the request."""

from __future__ import annotations

import base64
import binascii
from pathlib import Path
from typing import Any

import pytest

from mcp_sampling_proxy.config.settings import parse_settings
from mcp_sampling_proxy.policy import token_bound
from mcp_sampling_proxy.policy.survey import Outline, survey
from mcp_sampling_proxy.protocol import content
from mcp_sampling_proxy.services.assess import Origin, judge_sampling

PNG_1x1 = base64.b64encode(
    bytes.fromhex("89504e470d0a1a0a0000000d4948445200000001000000010806000000") + b"\0" * 20
).decode()
TOOLS = [{"name": "fetch", "description": "fetches a page", "inputSchema": {"type": "object"}}]
PARAMS: dict[str, Any] = {
    "systemPrompt": "be brief",
    "messages": [
        {
            "role": "user",
            "content": [{"type": "text", "text": "héllo"}, {"type": "image", "data": PNG_1x1, "mimeType": "image/png"}],
        },
        {"role": "assistant", "content": [{"type": "tool_use", "id": "c1", "name": "fetch", "input": {"url": "x"}}]},
        {
            "role": "user",
            "content": [{"type": "tool_result", "toolUseId": "c1", "content": [{"type": "text", "text": "page"}]}],
        },
    ],
    "tools": TOOLS,
    "maxTokens": 5000,
}
POLICY = """\
limits: {max_tokens: 4000}
rules:
  - name: capped
    action: allow
    limits: {max_text_bytes: 1MiB}
    budget: {tokens: 100000, usd: 5, per: 1d}
"""


def test_judging_walks_the_request_once(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    walks: list[str] = []
    blocks_of = content._blocks_of

    def counted(value: Any, where: str, depth: int) -> Any:
        if depth == 0 and where == "messages[0].content":
            walks.append(where)
        return blocks_of(value, where, depth)

    monkeypatch.setattr(content, "_blocks_of", counted)
    settings = parse_settings(POLICY, str(tmp_path / "policy.yaml"))
    judged = judge_sampling(settings, PARAMS, Origin("notes", "host", ("search",)), request_bytes=900)
    worst = judged.worst_case()
    # the caps (global, then the rule's), the facts and the worst case in tokens and dollars: one walk
    assert len(walks) == 1
    assert judged.request.max_tokens == 4000 and worst.output_tokens == 4000
    assert judged.facts.content_types == {"text", "image", "tool_use", "tool_result", "tools"}
    assert set(judged.facts.text.split("\n")) == {
        "be brief",
        "héllo",
        "url",
        "x",
        "fetch",
        "page",
        "type",
        "object",
        "fetches a page",
    }


def test_the_survey_counts_what_the_token_bound_counts() -> None:
    surveyed = survey(PARAMS)
    text = len("be brief") + len("héllo".encode()) + len('{"url":"x"}') + len("fetch") + len("page")
    tools = token_bound.json_bytes(TOOLS)
    image = token_bound.image_tokens(1, 1)
    assert surveyed.worst_case().tokens == (
        token_bound.REQUEST_OVERHEAD
        + 3 * token_bound.MESSAGE_OVERHEAD
        + 5 * token_bound.BLOCK_OVERHEAD
        + text
        + image
        + token_bound.TOOLS_OVERHEAD
        + tools
        + 5000
    )
    assert surveyed.worst_case(100).output_tokens == 100


def test_no_base64_is_decoded_unless_a_budget_asks(monkeypatch: pytest.MonkeyPatch) -> None:
    """The image's size is read from its header for a budget's worst case only: a request under no
    budget costs no decoding however many images it holds."""
    decoded: list[int] = []
    a2b = binascii.a2b_base64

    def counted(data: str) -> bytes:
        decoded.append(len(data))
        return a2b(data)

    monkeypatch.setattr(binascii, "a2b_base64", counted)
    surveyed = survey(PARAMS, Outline.of(PARAMS, 900))
    assert decoded == []
    assert surveyed.input_tokens > 0 and len(decoded) == 1
