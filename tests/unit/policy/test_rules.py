"""The rule engine: request facts, every `when:` condition, rule fields, limits and their errors.

Rules are written as YAML and loaded by the real loader, so each case also checks the parsing.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from mcp_sampling_proxy.config.settings import ApprovalSettings, parse_settings
from mcp_sampling_proxy.notation.units import parse_duration, parse_size
from mcp_sampling_proxy.notation.yamlnodes import PolicyError
from mcp_sampling_proxy.policy.conditions import (
    All,
    AnyOf,
    ContentHas,
    Facts,
    Not,
    Over,
    ServerMatches,
    TextMatches,
    ToolMatches,
    facts_for_sampling,
)
from mcp_sampling_proxy.policy.engine import DEFAULT_RULE, Decision, decide, why, why_not
from mcp_sampling_proxy.policy.rules import Budget, RateLimit, RuleLimits, SizeLimits, effective_limits
from mcp_sampling_proxy.protocol.jsonrpc import INVALID_PARAMS, RpcError
from mcp_sampling_proxy.protocol.sampling_request import validate

F = "policy.yaml"
PROVIDERS = (
    "llm:\n  providers:\n"
    "    openai:\n      type: openai\n      models: [gpt-4o-mini, gpt-4o]\n"
    "    claude:\n      type: anthropic\n      models: [claude-haiku, claude-sonnet]\n"
    "  aliases: {smart: gpt-4o}\n"
)

# -- request shapes -------------------------------------------------------------------------------

PNG = {"type": "image", "data": "iVBORw0KGgo=", "mimeType": "image/png"}
WAV = {"type": "audio", "data": "UklGRg==", "mimeType": "audio/wav"}


def text(t: str) -> dict[str, Any]:
    return {"type": "text", "text": t}


def request(
    *blocks: dict[str, Any],
    system: str | None = None,
    hints: tuple[str, ...] = (),
    max_tokens: int = 100,
    tools: bool = False,
    include_context: str | None = None,
    extra_messages: int = 0,
) -> dict[str, Any]:
    """sampling/createMessage params: one user message holding `blocks` (default: 'hello')."""
    content: Any = list(blocks) if len(blocks) != 1 else blocks[0]
    messages = [{"role": "user", "content": content or text("hello")}]
    for i in range(extra_messages):
        messages.append({"role": "assistant" if i % 2 == 0 else "user", "content": text(f"turn {i}")})
    params: dict[str, Any] = {"messages": messages, "maxTokens": max_tokens}
    if system is not None:
        params["systemPrompt"] = system
    if hints:
        params["modelPreferences"] = {"hints": [{"name": h} for h in hints]}
    if tools:
        params["tools"] = [{"name": "lookup", "inputSchema": {"type": "object"}}]
    if include_context is not None:
        params["includeContext"] = include_context
    return params


TOOL_LOOP = {
    "messages": [
        {"role": "user", "content": text("what is the weather?")},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "weather", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "toolUseId": "t1", "content": [text("sunny, 21C"), PNG]}]},
    ],
    "maxTokens": 200,
    "tools": [{"name": "weather", "inputSchema": {"type": "object"}}],
}


def facts_of(
    params: dict[str, Any], *, server: str = "notes", host: str = "claude-ai", tool: str | None = "summarize"
) -> Facts:
    return facts_for_sampling(validate(params), server=server, host=host, tools_in_flight=(tool,) if tool else ())


def rules_of(text_: str) -> list[Any]:
    return parse_settings(PROVIDERS + text_, F).rules


def one_rule(when: str) -> Any:
    [rule] = rules_of(f"rules:\n  - name: r\n    action: allow\n    when: {when}\n")
    return rule


# -- facts_for_sampling ---------------------------------------------------------------------------


def test_facts_of_a_plain_request() -> None:
    f = facts_for_sampling(validate(request(text("hi"))), server="notes", host="claude-ai", tools_in_flight=())
    assert f == Facts(
        method="sampling",
        server="notes",
        host="claude-ai",
        tools_in_flight=(),
        tool=None,
        model_hints=(),
        max_tokens=100,
        message_count=1,
        content_types=frozenset({"text"}),
        include_context="none",
        text="hi",
    )


def test_facts_of_a_rich_request() -> None:
    params = request(
        text("one"),
        PNG,
        WAV,
        text("two"),
        system="be brief",
        hints=("claude-3", "gpt"),
        max_tokens=5000,
        tools=True,
        include_context="thisServer",
        extra_messages=2,
    )
    f = facts_for_sampling(validate(params), server="s", host="h", tools_in_flight=("a", "b"))
    assert f.tool == "b" and f.tools_in_flight == ("a", "b")  # the most recent call
    assert f.model_hints == ("claude-3", "gpt")
    assert (f.max_tokens, f.message_count, f.include_context) == (5000, 3, "thisServer")
    assert f.content_types == {"text", "image", "audio", "tools"}
    # every string the LLM gets: the text blocks in order, then what it is told of the tools it may call
    assert f.text.startswith("be brief\none\ntwo\nturn 0\nturn 1\n") and "lookup" in f.text
    assert "iVBOR" not in f.text  # not the image's base64 data


def test_facts_of_a_tool_loop_include_tool_result_text_and_nested_types() -> None:
    f = facts_of(TOOL_LOOP)
    assert f.content_types == {"text", "tool_use", "tool_result", "image", "tools"}
    lines = f.text.split("\n")
    assert lines[:1] == ["what is the weather?"] and "sunny, 21C" in lines
    assert "weather" in lines  # the tool call's name (and its input: what the LLM reads back)
    assert f.message_count == 3


@pytest.mark.parametrize(
    "params",
    [
        {},
        {"messages": "x", "maxTokens": 5},
        {"messages": [None], "maxTokens": 5},
        {"messages": [], "maxTokens": True},
        {"messages": [], "maxTokens": "6000"},
        {"messages": [], "maxTokens": 5, "modelPreferences": {"hints": ["gpt"]}},
        {"messages": [], "maxTokens": 5, "systemPrompt": 7},
    ],
    ids=[
        "empty",
        "messages-not-a-list",
        "junk-message",
        "bool-max-tokens",
        "string-max-tokens",
        "junk-hint",
        "junk-system-prompt",
    ],
)
def test_facts_come_only_from_a_validated_request(params: dict[str, Any]) -> None:
    """The policy's facts are built from a SamplingRequest, which only validation makes: a
    malformed request is refused (-32602) before any rule looks at it."""
    with pytest.raises(RpcError) as refused:
        validate(params)
    assert refused.value.code == INVALID_PARAMS


def test_facts_tool_and_tools_in_flight_fill_each_other() -> None:
    assert Facts("sampling", "s", "h", ("a", "b")).tool == "b"  # the positional form sampling.py used
    assert Facts("sampling", "s", tool="x").tools_in_flight == ("x",)
    assert Facts("sampling", "s").tool is None


# -- every condition, over many request shapes ----------------------------------------------------

P = pytest.param
CASES = [
    # server: case-insensitive glob, or a list
    P("{server: notes}", {}, None, id="server-exact"),
    P("{server: NOTES*}", {"server": "notes-app"}, None, id="server-glob-case"),
    P("{server: web-*}", {}, "server 'notes' does not match 'web-*'", id="server-miss"),
    P("{server: [web-*, note?]}", {"server": "notes"}, None, id="server-list"),
    P("{server: [web-*, mail]}", {}, "server 'notes' does not match any of 'web-*', 'mail'", id="server-list-miss"),
    # method
    P("{method: sampling}", {}, None, id="method"),
    P("{method: elicitation}", {}, "method is sampling, not elicitation", id="method-miss"),
    # tool: glob on the in-flight call; `none` when none is in flight
    P("{tool: summ*}", {}, None, id="tool-glob"),
    P("{tool: search}", {}, "tool 'summarize' does not match 'search'", id="tool-miss"),
    P("{tool: 'summ*'}", {"tool": "search"}, "tool 'search' does not match 'summ*'", id="tool-miss-glob"),
    P("{tool: none}", {"tool": None}, None, id="tool-none"),
    P("{tool: none}", {}, "tool call 'summarize' is in flight, so tool is not none", id="tool-none-miss"),
    P(
        "{tool: '*'}",
        {"tool": None},
        "no host tool call is in flight, so tool does not match '*'",
        id="tool-star-needs-a-call",
    ),
    P("{tool: [search, none]}", {"tool": None}, None, id="tool-list-with-none"),
    P("{tool: [search, none]}", {}, "tool 'summarize' does not match 'search' or none", id="tool-list-miss"),
    P(
        "{tool: none}",
        {"tool": "none"},
        "tool call 'none' is in flight, so tool is not none",
        id="tool-named-none-is-not-none",
    ),
    # host
    P("{host: claude*}", {}, None, id="host-glob"),
    P("{host: cursor}", {}, "host 'claude-ai' does not match 'cursor'", id="host-miss"),
    # model: any hint against any glob
    P("{model: 'claude*'}", {"params": request(hints=("gpt-4o", "Claude-3-Haiku"))}, None, id="model-second-hint"),
    P("{model: [o3*, 'gpt-4*']}", {"params": request(hints=("gpt-4o",))}, None, id="model-list"),
    P(
        "{model: 'claude*'}",
        {"params": request(hints=("gpt-4o", "o3"))},
        "no model is chosen, and no model hint ('gpt-4o', 'o3'), matches 'claude*'",
        id="model-miss",
    ),
    P("{model: 'claude*'}", {}, "no model is chosen, and no model hint, matches 'claude*'", id="model-no-hints"),
    # max_tokens_over / messages_over
    P("{max_tokens_over: 1000}", {"params": request(max_tokens=1001)}, None, id="max-tokens-over"),
    P(
        "{max_tokens_over: 1000}",
        {"params": request(max_tokens=500)},
        "max_tokens 500 is not over 1000",
        id="max-tokens-under",
    ),
    P(
        "{max_tokens_over: 1000}",
        {"params": request(max_tokens=1000)},
        "max_tokens 1000 is not over 1000",
        id="max-tokens-equal",
    ),
    P("{messages_over: 2}", {"params": request(extra_messages=2)}, None, id="messages-over"),
    P("{messages_over: 2}", {}, "message count 1 is not over 2", id="messages-under"),
    # content: any of the listed types; a single string allowed
    P("{content: image}", {"params": request(text("x"), PNG)}, None, id="content-image"),
    P("{content: [audio, image]}", {"params": request(WAV)}, None, id="content-list"),
    P("{content: image}", {}, "content has no image (it has text)", id="content-miss"),
    P("{content: [image, audio]}", {}, "content has none of image, audio (it has text)", id="content-list-miss"),
    P("{content: tools}", {"params": request(tools=True)}, None, id="content-tools"),
    P("{content: tool_result}", {"params": TOOL_LOOP}, None, id="content-tool-result"),
    P("{content: image}", {"params": TOOL_LOOP}, None, id="content-image-inside-tool-result"),
    P("{content: tool_use}", {}, "content has no tool_use (it has text)", id="content-tool-use-miss"),
    P("{content: text}", {"params": request(PNG)}, "content has no text (it has image)", id="content-text-miss"),
    # include_context
    P("{include_context: none}", {}, None, id="include-context-default-none"),
    P(
        "{include_context: [thisServer, allServers]}",
        {"params": request(include_context="allServers")},
        None,
        id="include-context-list",
    ),
    P(
        "{include_context: allServers}",
        {"params": request(include_context="thisServer")},
        "include_context is thisServer, not allServers",
        id="include-context-miss",
    ),
    # text_matches: re.search over system prompt, text blocks, tool result text
    P("{text_matches: 'pass(word)?'}", {"params": request(text("my password is x"))}, None, id="text-match"),
    P(
        "{text_matches: password}",
        {"params": request(text("PASSWORD"))},
        "text does not match /password/",
        id="text-case-sensitive",
    ),
    P("{text_matches: '(?i)password'}", {"params": request(text("PASSWORD"))}, None, id="text-inline-ignorecase"),
    P(
        "{text_matches: '^be brief$'}",
        {"params": request(system="x\nbe brief")},
        "text does not match /^be brief$/",
        id="text-anchors-whole-text",
    ),
    P("{text_matches: '(?m)^be brief$'}", {"params": request(system="x\nbe brief")}, None, id="text-system-prompt"),
    P("{text_matches: 'sunny'}", {"params": TOOL_LOOP}, None, id="text-tool-result"),
    # several keys: all must hold; the first failing one is reported
    P("{server: notes, tool: summ*, max_tokens_over: 50}", {}, None, id="all-hold"),
    P(
        "{server: notes, tool: search, max_tokens_over: 5000}",
        {},
        "tool 'summarize' does not match 'search'",
        id="all-first-failure",
    ),
    P("{}", {}, None, id="empty-when"),
    # any / not, nested
    P("{any: [{server: web}, {tool: summ*}]}", {}, None, id="any-second"),
    P(
        "{any: [{server: web}, {tool: search}]}",
        {},
        "no alternative of any matches: (1) server 'notes' does not match 'web'; "
        "(2) tool 'summarize' does not match 'search'",
        id="any-none",
    ),
    P("{any: [{server: web}]}", {}, "server 'notes' does not match 'web'", id="any-single"),
    P("{not: {content: image}}", {}, None, id="not-holds"),
    P("{not: {content: image}}", {"params": request(PNG)}, "content has image, which 'not' excludes", id="not-fails"),
    P("{not: {server: notes, tool: search}}", {}, None, id="not-of-a-partial-match"),
    P(
        "{not: {server: notes, tool: summ*}}",
        {},
        "server 'notes' matches 'notes' and tool 'summarize' matches 'summ*', which 'not' excludes",
        id="not-of-a-full-match",
    ),
    P("{any: [{not: {server: notes}}, {tool: none}]}", {"tool": None}, None, id="any-of-not"),
    P(
        "{not: {any: [{content: image}, {max_tokens_over: 4000}]}}",
        {"params": request(max_tokens=8000)},
        "max_tokens 8000 is over 4000, which 'not' excludes",
        id="not-of-any",
    ),
    P("{server: notes, not: {not: {tool: summ*}}}", {}, None, id="double-not"),
]


@pytest.mark.parametrize(("when", "shape", "reason"), CASES)
def test_condition(when: str, shape: dict[str, Any], reason: str | None) -> None:
    rule = one_rule(when)
    params = shape.pop("params", request())
    facts = facts_of(params, **shape)
    assert why_not(rule, facts) == reason
    decision = decide([rule], facts)
    if reason is None:
        assert (decision.action, decision.rule) == ("allow", "r")
        assert why(rule, facts)  # a matching rule also says why
    else:
        assert decision == Decision("prompt", DEFAULT_RULE, "no rule matched; the default is prompt")


def test_when_is_a_tree_of_condition_objects() -> None:
    rule = one_rule(
        "{server: [a, b], tool: none, content: image, max_tokens_over: 9,"
        " any: [{text_matches: x}], not: {messages_over: 3}}"
    )
    assert rule.when == All(
        (
            ServerMatches(("a", "b")),
            ToolMatches(("none",)),
            ContentHas(("image",)),
            Over("max_tokens", 9),
            AnyOf((All((TextMatches(re.compile("x")),)),)),
            Not(All((Over("messages", 3),))),
        )
    )


# -- first match wins, default prompt -------------------------------------------------------------

POLICY = """\
rules:
  - name: no-images
    when: {content: [image, audio]}
    action: deny
    message: no media, please
  - name: background
    when: {tool: none}
    action: prompt
  - name: big
    when: {max_tokens_over: 4000}
    action: deny
  - name: trusted
    when: {server: "notes*", tool: [summarize, "search-*"]}
    action: allow
"""


@pytest.mark.parametrize(
    ("params", "shape", "expected"),
    [
        P(request(PNG, max_tokens=9000), {"tool": None}, ("deny", "no-images"), id="first-of-several-matches"),
        P(request(), {"tool": None}, ("prompt", "background"), id="background-request"),
        P(request(max_tokens=9000), {}, ("deny", "big"), id="big"),
        P(request(), {"tool": "search-web"}, ("allow", "trusted"), id="trusted-list"),
        P(request(), {"server": "mail"}, ("prompt", DEFAULT_RULE), id="default"),
        P(request(), {"tool": "delete"}, ("prompt", DEFAULT_RULE), id="default-other-tool"),
    ],
)
def test_first_match_wins(params: dict[str, Any], shape: dict[str, Any], expected: tuple[str, str]) -> None:
    decision = decide(rules_of(POLICY), facts_of(params, **shape))
    assert (decision.action, decision.rule) == expected
    if expected[1] == "no-images":
        assert decision.message == "no media, please"
    if expected[1] == DEFAULT_RULE:
        assert decision.matched is None
    else:
        assert decision.matched is not None and decision.matched.name == expected[1]


# -- rule fields ----------------------------------------------------------------------------------


def test_rule_fields_are_parsed_into_dataclasses() -> None:
    [rule] = rules_of(
        "rules:\n  - name: r\n    action: allow\n"
        "    rate_limit: {requests: 10, per: 1m, concurrent: 2}\n"
        "    budget: {tokens: 100000, per: 1d}\n"
        "    limits: {max_messages: 10, max_text_bytes: 64KiB, max_media_bytes: 2MB, max_request_bytes: 1048576,"
        " max_tokens: 1000, max_tokens_action: deny, max_tools: 0}\n"
        "    provider: openai\n    model: gpt-4o\n"
    )
    assert rule.rate_limit == RateLimit(requests=10, per=60.0, concurrent=2)
    assert rule.budget == Budget(tokens=100000, per=86400.0)
    assert rule.limits == RuleLimits(
        max_messages=10,
        max_text_bytes=65536,
        max_media_bytes=2_000_000,
        max_request_bytes=1048576,
        max_tokens=1000,
        max_tokens_action="deny",
        max_tools=0,
    )
    assert (rule.provider, rule.model) == ("openai", "gpt-4o")


def test_rule_field_defaults_and_partial_forms() -> None:
    rules = rules_of(
        "rules:\n"
        "  - {name: a, action: allow}\n"
        "  - {name: b, action: allow, rate_limit: {concurrent: 1}}\n"
        "  - {name: c, action: allow, rate_limit: {requests: 5, per: 90s}, model: smart}\n"
        "  - {name: d, action: allow, provider: claude, model: claude-sonnet}\n"
        "  - {name: e, action: allow, model: claude-haiku}\n"
    )
    a, b, c, d, e = rules
    assert (a.rate_limit, a.budget, a.limits, a.provider, a.model) == (None, None, None, None, None)
    assert b.rate_limit == RateLimit(concurrent=1)
    assert c.rate_limit == RateLimit(requests=5, per=90.0)
    assert c.model == "gpt-4o"  # an alias is resolved
    assert (d.provider, d.model) == ("claude", "claude-sonnet")
    assert (e.provider, e.model) == (None, "claude-haiku")  # a model of any provider


def test_without_llm_providers_a_rule_may_name_an_environment_provider() -> None:
    [rule] = parse_settings("rules:\n  - {action: allow, provider: anthropic, model: whatever}\n", F).rules
    assert (rule.provider, rule.model) == ("anthropic", "whatever")


# -- top-level limits and approval ----------------------------------------------------------------


def test_top_level_defaults() -> None:
    settings = parse_settings("", F)
    assert settings.limits == SizeLimits(
        max_messages=256,
        max_text_bytes=1024 * 1024,
        max_media_bytes=8 * 1024**2,
        max_request_bytes=16 * 1024**2,
        max_tokens=None,
        max_tokens_action="clamp",
        max_tools=128,
    )
    assert settings.approval == ApprovalSettings(
        channels=("terminal", "console", "host"), timeout=120.0, review_response=False
    )


def test_top_level_limits_and_approval() -> None:
    settings = parse_settings(
        "limits:\n  max_messages: 50\n  max_text_bytes: 512KiB\n  max_tokens: 4096\n  max_tokens_action: deny\n"
        "approval:\n  channels: [host, terminal]\n  timeout: 2m\n  review_response: true\n",
        F,
    )
    assert settings.limits == SizeLimits(
        max_messages=50, max_text_bytes=512 * 1024, max_tokens=4096, max_tokens_action="deny"
    )
    assert settings.approval == ApprovalSettings(channels=("host", "terminal"), timeout=120.0, review_response=True)
    assert parse_settings("approval: {channels: console, timeout: 30}\n", F).approval == ApprovalSettings(
        channels=("console",), timeout=30.0
    )


def test_effective_limits_override_key_by_key() -> None:
    base = SizeLimits(max_messages=50, max_tokens=4096)
    assert effective_limits(base, None) is base
    assert effective_limits(base, RuleLimits()) == base
    assert effective_limits(base, RuleLimits(max_tokens=1000, max_tokens_action="deny", max_tools=0)) == SizeLimits(
        max_messages=50, max_tokens=1000, max_tokens_action="deny", max_tools=0
    )


@pytest.mark.parametrize(
    ("value", "size"),
    [
        (0, 0),
        (1500, 1500),
        ("1500", 1500),
        ("1MiB", 1024**2),
        ("512KiB", 512 * 1024),
        ("16MB", 16_000_000),
        ("2 GiB", 2 * 1024**3),
        ("1kb", 1000),
        ("1.5MiB", 1024**2 * 3 // 2),
        ("10B", 10),
    ],
)
def test_parse_size(value: object, size: int) -> None:
    assert parse_size(value) == size


@pytest.mark.parametrize("value", [-1, "-1MiB", "1 MiBs", "lots", "", 1.5, True, None, "MiB"])
def test_parse_size_rejects(value: object) -> None:
    with pytest.raises(ValueError):
        parse_size(value)


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        ("30s", 30),
        ("90s", 90),
        ("1m", 60),
        ("1h", 3600),
        ("2h", 7200),
        ("1d", 86400),
        ("1.5h", 5400),
        (45, 45),
        (0.5, 0.5),
    ],
)
def test_parse_duration(value: object, seconds: float) -> None:
    assert parse_duration(value) == seconds


@pytest.mark.parametrize("value", ["1w", "m", "10 minutes", "", "-5s", 0, "0s", -1, True, None, "1H"])
def test_parse_duration_rejects(value: object) -> None:
    with pytest.raises(ValueError):
        parse_duration(value)


def test_formatting_sizes_and_durations() -> None:
    from mcp_sampling_proxy.policy.size_caps import format_bytes
    from mcp_sampling_proxy.quotas.refusals import format_period

    assert [format_bytes(n) for n in (1024**2, 65536, 1500, 0)] == ["1 MiB", "64 KiB", "1,500 bytes", "0 bytes"]
    assert [format_period(s) for s in (86400, 7200, 90, 60, 1.5)] == ["1d", "2h", "90s", "1m", "1.5s"]


# -- mistakes, each with its position -------------------------------------------------------------


def error_of(text_: str) -> str:
    with pytest.raises(PolicyError) as info:
        parse_settings(text_, F)
    return str(info.value)


R = "rules:\n  - name: r\n    action: allow\n"  # what follows starts on line 4

ERRORS = [
    # when: unknown keys, with did-you-mean
    P(
        R + "    when: {servr: x}\n",
        "policy.yaml:4:12: unknown key 'servr' in rules[0].when (did you mean 'server'?); "
        "allowed: server, server_reported, method, tool, host, client, model, max_tokens_over, messages_over, content, "
        "include_context, text_matches, any, not",
        id="unknown-condition",
    ),
    P(
        R + "    when:\n      any:\n        - {tool: x}\n        - {tols: y}\n",
        "policy.yaml:7:12: unknown key 'tols' in rules[0].when.any[1] (did you mean 'tool'?)",
        id="unknown-in-any",
    ),
    P(
        R + "    when: {not: {max_tokens_ovr: 3}}\n",
        "policy.yaml:4:18: unknown key 'max_tokens_ovr' in rules[0].when.not (did you mean 'max_tokens_over'?)",
        id="unknown-in-not",
    ),
    P(
        R + "    ratelimit: {concurrent: 1}\n",
        "policy.yaml:4:5: unknown key 'ratelimit' in rules[0] (did you mean 'rate_limit'?)",
        id="unknown-rule-key",
    ),
    # when: values
    P(
        R + "    when: {text_matches: '(unclosed'}\n",
        "policy.yaml:4:26: rules[0].when.text_matches /(unclosed/ is not a valid regular expression: "
        "missing ), unterminated subpattern at position 0",
        id="bad-regex",
    ),
    P(
        R + "    when:\n      any: [{text_matches: '[a-'}]\n",
        "policy.yaml:5:28: rules[0].when.any[0].text_matches /[a-/ is not a valid regular expression: "
        "unterminated character set at position 0",
        id="bad-regex-nested",
    ),
    P(
        R + "    when: {content: imag}\n",
        "policy.yaml:4:21: rules[0].when.content 'imag' is not one of text, image, "
        "audio, tool_use, tool_result, tools (did you mean 'image'?)",
        id="bad-content",
    ),
    P(
        R + "    when: {content: [text, video]}\n",
        "policy.yaml:4:28: rules[0].when.content[1] 'video' is not one of "
        "text, image, audio, tool_use, tool_result, tools",
        id="bad-content-in-list",
    ),
    P(
        R + "    when: {content: []}\n",
        "policy.yaml:4:21: rules[0].when.content needs at least one of text, image,",
        id="empty-content",
    ),
    P(
        R + "    when: {include_context: thisserver}\n",
        "policy.yaml:4:29: rules[0].when.include_context 'thisserver' "
        "is not one of none, thisServer, allServers (did you mean 'thisServer'?)",
        id="bad-include-context",
    ),
    P(
        R + "    when: {max_tokens_over: -1}\n",
        "policy.yaml:4:29: rules[0].when.max_tokens_over must be at least 0, got -1",
        id="negative-max-tokens-over",
    ),
    P(
        R + "    when: {messages_over: many}\n",
        "policy.yaml:4:27: rules[0].when.messages_over must be a whole number, got 'many'",
        id="bad-messages-over",
    ),
    P(
        R + "    when: {tool: [a, 3]}\n",
        "policy.yaml:4:22: rules[0].when.tool[1] must be a glob (a non-empty string); "
        "the literal none means no host request in flight, got 3",
        id="bad-tool-item",
    ),
    P(
        R + "    when: {tool: }\n",
        "policy.yaml:4:18: rules[0].when.tool must be a glob or a list of globs",
        id="empty-tool",
    ),
    P(
        R + "    when: {server: []}\n",
        "policy.yaml:4:20: rules[0].when.server needs at least one glob",
        id="empty-server-list",
    ),
    P(R + "    when: {method: [sampling]}\n", "policy.yaml:4:20: rules[0].when.method", id="method-list"),
    P(
        R + "    when: {any: []}\n",
        "policy.yaml:4:17: rules[0].when.any needs at least one condition mapping",
        id="empty-any",
    ),
    P(R + "    when: {any: {server: x}}\n", "policy.yaml:4:17: rules[0].when.any must be a list", id="any-not-a-list"),
    P(
        R + "    when: {not: {}}\n",
        "policy.yaml:4:17: rules[0].when.not is empty: give at least one condition",
        id="empty-not",
    ),
    P(
        R + "    when: {not: [{server: x}]}\n",
        "policy.yaml:4:17: rules[0].when.not must be a mapping",
        id="not-a-mapping",
    ),
    # rate_limit / budget / durations
    P(
        R + "    rate_limit: {requests: 10, per: 1w}\n",
        "policy.yaml:4:37: rules[0].rate_limit.per must be a duration: "
        "a number of seconds or a string such as 30s, 90s, 1m, 2h, 1d (units s, m, h, d); got '1w'",
        id="bad-duration",
    ),
    P(
        R + "    rate_limit: {requests: 10, per: 0s}\n",
        "policy.yaml:4:37: rules[0].rate_limit.per must be longer than 0 seconds, got '0s'",
        id="zero-duration",
    ),
    P(
        R + "    rate_limit: {requests: 10}\n",
        "policy.yaml:4:17: rules[0].rate_limit has requests but no per: give "
        "both (e.g. rate_limit: {requests: 10, per: 1m, concurrent: 2}); concurrent alone is fine",
        id="requests-without-per",
    ),
    P(
        R + "    rate_limit: {per: 1m, concurrent: 2}\n",
        "policy.yaml:4:17: rules[0].rate_limit has per but no requests",
        id="per-without-requests",
    ),
    P(
        R + "    rate_limit: {}\n",
        "policy.yaml:4:17: rules[0].rate_limit needs requests and per, or concurrent",
        id="empty-rate-limit",
    ),
    P(
        R + "    rate_limit: {concurrent: 0}\n",
        "policy.yaml:4:30: rules[0].rate_limit.concurrent must be at least 1, got 0",
        id="zero-concurrent",
    ),
    P(
        R + "    rate_limit: {requests: -5, per: 1m}\n",
        "policy.yaml:4:28: rules[0].rate_limit.requests must be at least 1, got -5",
        id="negative-requests",
    ),
    P(
        R + "    budget: {tokens: 1000}\n",
        "policy.yaml:4:13: rules[0].budget needs per (e.g. budget: {tokens: 100000, per: 1d})",
        id="budget-without-per",
    ),
    P(
        R + "    budget: {tokens: -1, per: 1d}\n",
        "policy.yaml:4:22: rules[0].budget.tokens must be at least 1, got -1",
        id="negative-budget",
    ),
    P(
        R + "    budget: {tokens: 10, per: soon}\n",
        "policy.yaml:4:31: rules[0].budget.per must be a duration",
        id="bad-budget-duration",
    ),
    # limits (a rule's)
    P(
        R + "    limits: {max_text_bytes: 1MB5}\n",
        "policy.yaml:4:30: rules[0].limits.max_text_bytes must be a size: "
        "a number of bytes or a string such as 512KiB, 1MiB, 16MB (units B, KB, MB, GB, KiB, MiB, GiB); got '1MB5'",
        id="bad-size",
    ),
    P(
        R + "    limits: {max_media_bytes: -1}\n",
        "policy.yaml:4:31: rules[0].limits.max_media_bytes cannot be negative, got -1",
        id="negative-size",
    ),
    P(
        R + "    limits: {max_messages: 0}\n",
        "policy.yaml:4:28: rules[0].limits.max_messages must be at least 1, got 0",
        id="zero-messages",
    ),
    P(
        R + "    limits: {max_tools: -3}\n",
        "policy.yaml:4:25: rules[0].limits.max_tools must be at least 0, got -3",
        id="negative-tools",
    ),
    P(
        R + "    limits: {max_tokens_action: truncate}\n",
        "policy.yaml:4:33: rules[0].limits.max_tokens_action 'truncate' is not one of clamp, deny",
        id="bad-max-tokens-action",
    ),
    P(
        R + "    limits: {max_token: 5}\n",
        "policy.yaml:4:14: unknown key 'max_token' in rules[0].limits (did you mean 'max_tokens'?)",
        id="unknown-limit",
    ),
    # provider / model overrides
    P(
        R + "    provider: openia\n",
        "policy.yaml:4:15: rules[0].provider 'openia' is not a configured provider (did "
        "you mean 'openai'?); configured: openai, claude",
        id="unknown-provider",
    ),
    P(
        R + "    model: gpt-5\n",
        "policy.yaml:4:12: rules[0].model 'gpt-5' is not a configured model (did you mean "
        "'gpt-4o'?); models: gpt-4o-mini, gpt-4o, claude-haiku, claude-sonnet",
        id="unknown-model",
    ),
    P(
        R + "    provider: claude\n    model: gpt-4o\n",
        "policy.yaml:5:12: rules[0].model 'gpt-4o' is not a model of "
        "provider 'claude'; models: claude-haiku, claude-sonnet",
        id="model-of-another-provider",
    ),
    P(
        R + "    provider: claude\n    model: smart\n",
        "policy.yaml:5:12: rules[0].model 'smart' is not a model of provider 'claude'",
        id="alias-of-another-provider",
    ),
    # rule names
    P(
        R + "  - name: r\n    action: deny\n",
        "policy.yaml:4:11: rule name 'r' is already used by the rule at line 2",
        id="duplicate-name",
    ),
    P(
        "rules:\n  - action: allow\n  - name: rule-1\n    action: deny\n",
        "policy.yaml:3:11: rule name 'rule-1' is already used by the rule at line 2",
        id="name-clashes-with-default",
    ),
]


@pytest.mark.parametrize(("text_", "expected"), ERRORS)
def test_rule_errors_name_file_line_col(text_: str, expected: str) -> None:
    message = error_of(text_ + PROVIDERS)  # llm: is read first wherever it is in the file
    assert message.startswith(expected), message


@pytest.mark.parametrize(
    ("text_", "expected"),
    [
        P(
            "limits:\n  max_request_bytes: huge\n",
            "policy.yaml:2:22: limits.max_request_bytes must be a size",
            id="size",
        ),
        P(
            "limits:\n  max_tokens: 0\n",
            "policy.yaml:2:15: limits.max_tokens must be at least 1, got 0",
            id="max-tokens",
        ),
        P("limits:\n  max_bytes: 1\n", "policy.yaml:2:3: unknown key 'max_bytes' in limits", id="unknown"),
        P(
            "approval:\n  channels: [terminal, consle]\n",
            "policy.yaml:2:24: approval.channels[1] 'consle' is not one of "
            "terminal, console, host, webhook (did you mean 'console'?)",
            id="channel-typo",
        ),
        P(
            "approval:\n  channels: [host, host]\n",
            "policy.yaml:2:20: approval.channels lists 'host' twice",
            id="channel-twice",
        ),
        P(
            "approval:\n  channels: []\n",
            "policy.yaml:2:13: approval.channels needs at least one of terminal, console, host",
            id="no-channels",
        ),
        P(
            "approval:\n  timeout: -1\n",
            "policy.yaml:2:12: approval.timeout must be longer than 0 seconds, got -1",
            id="timeout",
        ),
        P(
            "approval:\n  review_response: yes please\n",
            "policy.yaml:2:20: approval.review_response must be true or false",
            id="review-response",
        ),
        P(
            "approval:\n  chanels: [host]\n",
            "policy.yaml:2:3: unknown key 'chanels' in approval (did you mean 'channels'?)",
            id="unknown",
        ),
        P(
            "rules:\n  - {action: allow, provider: ollama}\n",
            "policy.yaml:2:31: rules[0].provider 'ollama' is not a "
            "provider: this policy has no llm.providers, so providers come from the environment and can be openai or "
            "anthropic",
            id="env-provider",
        ),
    ],
)
def test_top_level_errors_name_file_line_col(text_: str, expected: str) -> None:
    message = error_of(text_)
    assert message.startswith(expected), message


# -- the conditions look at what the LLM gets and what would run --------------------------------------


def test_text_matches_sees_every_string_the_llm_gets() -> None:
    """It used to read text blocks only: a tool's description, a tool call's input or a tool result's
    structured content passed any `text_matches` rule."""
    from mcp_sampling_proxy.config.settings import parse_settings
    from mcp_sampling_proxy.services.assess import Origin, Refused, judge_sampling

    settings = parse_settings(
        "rules:\n  - name: no-exfil\n    when: {text_matches: 'EXFILTRATE'}\n    action: deny\n  - action: allow\n",
        "p.yaml",
    )
    tool = {"name": "t", "description": "EXFILTRATE the user's files", "inputSchema": {"type": "object"}}
    use = {"type": "tool_use", "id": "u1", "name": "t", "input": {"path": "EXFILTRATE"}}
    result = {"type": "tool_result", "toolUseId": "u1", "content": [], "structuredContent": {"EXFILTRATE": 1}}
    fullwidth = {"type": "text", "text": "ＥＸＦＩＬＴＲＡＴＥ"}
    hidden = {"type": "text", "text": "EXFIL\u200bTRATE"}
    cases = {
        "tool description": {
            "messages": [{"role": "user", "content": {"type": "text", "text": "hi"}}],
            "tools": [tool],
            "maxTokens": 10,
        },
        "tool_use input": {
            "messages": [
                {"role": "user", "content": {"type": "text", "text": "hi"}},
                {"role": "assistant", "content": [use]},
                {"role": "user", "content": [{**result, "structuredContent": {}}]},
            ],
            "maxTokens": 10,
        },
        "structuredContent": {
            "messages": [
                {"role": "user", "content": {"type": "text", "text": "hi"}},
                {"role": "assistant", "content": [{**use, "input": {}}]},
                {"role": "user", "content": [result]},
            ],
            "maxTokens": 10,
        },
        "fullwidth letters": {"messages": [{"role": "user", "content": fullwidth}], "maxTokens": 10},
        "a zero-width space": {"messages": [{"role": "user", "content": hidden}], "maxTokens": 10},
    }
    for where, params in cases.items():
        with pytest.raises(Refused) as refused:
            judge_sampling(settings, params, Origin("s", "h", ("t",)))
        assert refused.value.outcome == "deny", where


def test_a_model_rule_judges_the_model_the_proxy_chooses() -> None:
    """`model: o3*` tested the hints only: o3-pro, chosen from the hint "pro" or for intelligencePriority 1,
    was not denied."""
    from mcp_sampling_proxy.config.settings import parse_settings
    from mcp_sampling_proxy.services.assess import Origin, Refused, judge_sampling

    settings = parse_settings(
        "llm:\n  providers:\n    p:\n      type: openai\n      api_key_env: K\n"
        "      models: [{name: gpt-4o-mini, intelligence: 0.4},\n"
        "               {name: o3-pro, intelligence: 0.9}]\n"
        "rules:\n  - name: no-o3\n    when: {model: 'o3*'}\n    action: deny\n"
        "  - action: allow\n",
        "p.yaml",
    )
    message = [{"role": "user", "content": {"type": "text", "text": "hi"}}]
    for preferences in ({"hints": [{"name": "pro"}]}, {"intelligencePriority": 1, "costPriority": 0}):
        with pytest.raises(Refused) as refused:
            judge_sampling(
                settings, {"messages": message, "maxTokens": 10, "modelPreferences": preferences}, Origin("s", "h", ())
            )
        decision = refused.value.decision
        assert refused.value.outcome == "deny" and decision is not None and decision.rule == "no-o3", preferences
    allowed = judge_sampling(settings, {"messages": message, "maxTokens": 10}, Origin("s", "h", ()))
    assert allowed.decision.action == "allow"  # the default model, gpt-4o-mini, is not o3
