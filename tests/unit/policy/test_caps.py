"""Size caps on sampling requests (mcp_sampling_proxy.policy.size_caps): pure, checked before approval."""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass
from typing import Any, NoReturn

import pytest

from mcp_sampling_proxy.policy import survey as survey_module
from mcp_sampling_proxy.policy.size_caps import CapsOutcome, check_caps, format_bytes
from mcp_sampling_proxy.policy.survey import serialized_size
from mcp_sampling_proxy.protocol.content import b64_decoded_size, walk_blocks
from mcp_sampling_proxy.protocol.jsonrpc import INVALID_PARAMS, RpcError, dumps

MiB = 1024 * 1024


@dataclass(frozen=True)
class Caps:
    max_messages: int = 256
    max_text_bytes: int = 1 * MiB
    max_media_bytes: int = 8 * MiB
    max_request_bytes: int = 16 * MiB
    max_tokens: int | None = None
    max_tokens_action: str = "clamp"
    max_tools: int = 128


def text(value: str) -> dict[str, Any]:
    return {"type": "text", "text": value}


def image(data: str, kind: str = "image") -> dict[str, Any]:
    return {"type": kind, "data": data, "mimeType": "image/png" if kind == "image" else "audio/wav"}


def request(*messages: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"messages": list(messages) or [{"role": "user", "content": text("hi")}], "maxTokens": 100, **extra}


def user(*content: dict[str, Any]) -> dict[str, Any]:
    return {"role": "user", "content": list(content)}


def refused(params: dict[str, Any], caps: Caps, **kwargs: Any) -> str:
    with pytest.raises(RpcError) as info:
        check_caps(params, caps, **kwargs)
    assert info.value.code == INVALID_PARAMS
    return info.value.message


def test_an_ordinary_request_passes_unchanged() -> None:
    params = request(user(text("summarise this")), systemPrompt="be brief", tools=[{"name": "t", "inputSchema": {}}])
    outcome = check_caps(params, Caps())
    assert outcome == CapsOutcome(100, ())


def test_max_messages_under_at_and_over() -> None:
    caps = Caps(max_messages=3)
    check_caps(request(*[user(text("x"))] * 2), caps)
    check_caps(request(*[user(text("x"))] * 3), caps)
    message = refused(request(*[user(text("x"))] * 4), caps)
    assert message == "request refused: the request holds 4 messages; the limit is 3 (limits.max_messages)"


def test_max_tools_under_at_and_over() -> None:
    caps = Caps(max_tools=2)
    tools = [{"name": f"t{i}", "inputSchema": {"type": "object"}} for i in range(3)]
    check_caps(request(tools=tools[:1]), caps)
    check_caps(request(tools=tools[:2]), caps)
    assert refused(request(tools=tools), caps) == (
        "request refused: the request offers 3 tools; the limit is 2 (limits.max_tools)"
    )


def test_text_block_counts_utf8_bytes_not_characters() -> None:
    caps = Caps(max_text_bytes=10)
    check_caps(request(user(text("é" * 4))), caps)  # 8 bytes
    check_caps(request(user(text("é" * 5))), caps)  # 10 bytes: at the limit
    assert refused(request(user(text("x"), text("é" * 5 + "a"))), caps) == (
        "request refused: messages[0].content[1] text block is 11 bytes; the limit is 10 bytes (limits.max_text_bytes)"
    )
    # 4 characters, 12 bytes: the character count alone would let it through
    assert "is 12 bytes" in refused(request(user(text("€" * 4))), caps)


def test_text_block_message_names_the_cap_in_mib() -> None:
    big = "a" * (1 * MiB + 1)
    params = request(user(text("a")), user(text("b")), user(text("c")), {"role": "user", "content": text(big)})
    assert refused(params, Caps()) == (
        "request refused: messages[3].content text block is 1,048,577 bytes; the limit is 1 MiB (limits.max_text_bytes)"
    )
    check_caps(request(user(text("a" * MiB))), Caps())


def test_system_prompt_is_capped_like_text() -> None:
    caps = Caps(max_text_bytes=8)
    check_caps(request(systemPrompt="12345678"), caps)
    assert refused(request(systemPrompt="123456789"), caps) == (
        "request refused: systemPrompt is 9 bytes; the limit is 8 bytes (limits.max_text_bytes)"
    )


def tool_turn(*result_content: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    use = {"role": "assistant", "content": [{"type": "tool_use", "id": "c1", "name": "fetch", "input": {}}]}
    result = {"role": "user", "content": [{"type": "tool_result", "toolUseId": "c1", "content": list(result_content)}]}
    return use, result


def test_text_inside_tool_result_counts() -> None:
    caps = Caps(max_text_bytes=5)
    check_caps(request(user(text("hi")), *tool_turn(text("12345"))), caps)
    assert refused(request(user(text("hi")), *tool_turn(text("ok"), text("123456"))), caps) == (
        "request refused: messages[2].content[0].content[1] text block is 6 bytes; the limit is 5 bytes "
        "(limits.max_text_bytes)"
    )


def test_media_inside_tool_result_counts() -> None:
    caps = Caps(max_media_bytes=3)
    check_caps(request(user(text("hi")), *tool_turn(image(base64.b64encode(b"abc").decode()))), caps)
    message = refused(request(user(text("hi")), *tool_turn(image(base64.b64encode(b"abcd").decode()))), caps)
    assert message == (
        "request refused: messages[2].content[0].content[0] image block is 4 bytes decoded; the limit is 3 bytes "
        "(limits.max_media_bytes)"
    )


def test_embedded_resource_text_and_blob_in_tool_result() -> None:
    caps = Caps(max_text_bytes=4, max_media_bytes=2)
    resource = {"type": "resource", "resource": {"uri": "file:///a", "text": "12345"}}
    assert "resource text is 5 bytes" in refused(request(user(text("hi")), *tool_turn(resource)), caps)
    blob = {"type": "resource", "resource": {"uri": "file:///b", "blob": base64.b64encode(b"abc").decode()}}
    assert "resource blob is 3 bytes decoded" in refused(request(user(text("hi")), *tool_turn(blob)), caps)


@pytest.mark.parametrize("kind", ["image", "audio"])
def test_media_under_at_and_over(kind: str) -> None:
    caps = Caps(max_media_bytes=6)
    for size in (4, 5, 6):  # padded with ==, =, and none
        check_caps(request(user(image(base64.b64encode(b"x" * size).decode(), kind))), caps)
    message = refused(request(user(text("look"), image(base64.b64encode(b"x" * 7).decode(), kind))), caps)
    assert message == (
        f"request refused: messages[0].content[1] {kind} block is 7 bytes decoded; the limit is 6 bytes "
        "(limits.max_media_bytes)"
    )


def test_media_size_comes_from_the_base64_length_without_decoding(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_decoding(*args: object, **kwargs: object) -> NoReturn:
        raise AssertionError("caps must not decode base64")

    monkeypatch.setattr(base64, "b64decode", no_decoding)
    monkeypatch.setattr(binascii, "a2b_base64", no_decoding)
    limit = 8 * MiB
    at_limit = "A" * (limit // 3 * 4) + "AAA="  # limit - limit % 3 + 2 bytes
    assert b64_decoded_size(at_limit) == limit // 3 * 3 + 2 <= limit
    check_caps(request(user(image(at_limit))), Caps())
    over = "A" * (limit // 3 * 4 + 4)
    assert "is 8,388,609 bytes decoded; the limit is 8 MiB" in refused(request(user(image(over))), Caps())


def test_decoded_size_matches_real_decoding() -> None:
    for size in range(40):
        encoded = base64.b64encode(bytes(range(size))).decode()
        assert b64_decoded_size(encoded) == size


@pytest.mark.parametrize(
    ("data", "why"),
    [
        ("QUJDRA", "its length 6 is not a multiple of 4"),
        ("QUJDR", "its length 5 is not a multiple of 4"),
        ("Q===", "it ends in ==="),
    ],
)
def test_invalid_base64_length_is_refused(data: str, why: str) -> None:
    assert refused(request(user(image(data))), Caps()) == (
        f"request refused: messages[0].content[0] image block data is not valid base64: {why}"
    )


def test_request_bytes_precomputed_at_and_over(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(survey_module, "serialized_size", lambda params: pytest.fail("must not re-serialise"))
    caps = Caps(max_request_bytes=1000)
    check_caps(request(), caps, request_bytes=1000)
    assert refused(request(), caps, request_bytes=1001) == (
        "request refused: the request is 1,001 bytes; the limit is 1,000 bytes (limits.max_request_bytes)"
    )


def test_request_bytes_computed_when_not_given() -> None:
    params = request(user(text("ünïcode " * 10)))
    size = serialized_size(params)
    assert size == len(dumps(params))
    check_caps(params, Caps(max_request_bytes=size))
    assert f"the request is {size:,} bytes" in refused(params, Caps(max_request_bytes=size - 1))


def test_whole_request_cap_is_checked_first() -> None:
    params = request(*[user(text("x" * 100))] * 5)
    message = refused(params, Caps(max_request_bytes=10, max_messages=1, max_text_bytes=1))
    assert "limits.max_request_bytes" in message


def test_max_tokens_none_means_no_cap() -> None:
    outcome = check_caps(request(maxTokens=10**9), Caps(max_tokens=None))
    assert outcome.max_tokens == 10**9 and outcome.notes == ()


def test_max_tokens_clamp_lowers_it_with_a_note() -> None:
    params = request(maxTokens=5000)
    caps = Caps(max_tokens=4096, max_tokens_action="clamp")
    outcome = check_caps(params, caps)
    assert outcome.max_tokens == 4096
    assert params["maxTokens"] == 5000  # the caller's dict is untouched
    assert outcome.notes == ("maxTokens 5,000 lowered to 4,096 (limits.max_tokens)",)
    at_cap = check_caps(request(maxTokens=4096), caps)
    assert at_cap.max_tokens == 4096 and at_cap.notes == ()
    under = check_caps(request(maxTokens=10), caps)
    assert under.max_tokens == 10 and under.notes == ()


def test_max_tokens_deny() -> None:
    caps = Caps(max_tokens=4096, max_tokens_action="deny")
    check_caps(request(maxTokens=4096), caps)
    assert refused(request(maxTokens=5000), caps) == (
        "request refused: maxTokens is 5,000; the limit is 4,096 (limits.max_tokens)"
    )


def test_malformed_shapes_are_left_for_validation() -> None:
    for params in (
        {"messages": "nope", "maxTokens": "many"},
        {"messages": [None, {"content": "str"}, {"content": [None, 3, {"type": "text", "text": 5}]}]},
        {"messages": [{"role": "user", "content": {"type": "image", "data": None}}], "tools": "x"},
        {},
    ):
        assert check_caps(params, Caps(max_tokens=1)) == CapsOutcome(None, ())


def test_walk_blocks_paths() -> None:
    params = request({"role": "user", "content": text("a")}, user(text("b")), *tool_turn(text("c")))
    assert [path for path, _ in walk_blocks(params)] == [
        "messages[0].content",
        "messages[1].content[0]",
        "messages[2].content[0]",
        "messages[3].content[0]",
        "messages[3].content[0].content[0]",
    ]


@pytest.mark.parametrize(
    ("n", "shown"),
    [
        (MiB, "1 MiB"),
        (2 * 1024 * MiB, "2 GiB"),
        (16 * MiB, "16 MiB"),
        (512 * 1024, "512 KiB"),
        (1_500_000, "1,500,000 bytes"),
        (10, "10 bytes"),
    ],
)
def test_format_bytes(n: int, shown: str) -> None:
    assert format_bytes(n) == shown
