"""The two pure decisions: which rule applies to a request, and which provider/model answers it."""

from __future__ import annotations

from typing import Any

import pytest

from mcp_sampling_proxy.config.providers import ModelSpec, ProviderConfig
from mcp_sampling_proxy.config.settings import parse_settings
from mcp_sampling_proxy.policy.conditions import All, Facts, MethodIs, ServerMatches, ToolMatches
from mcp_sampling_proxy.policy.engine import DEFAULT_RULE, Decision, decide, why_not
from mcp_sampling_proxy.policy.rules import Rule
from mcp_sampling_proxy.protocol.sampling_request import ModelPreferences
from mcp_sampling_proxy.providers.model_choice import Choice, choose_model

# -- policy.decide --------------------------------------------------------------------------------


def facts(server: str = "notes", method: str = "sampling") -> Facts:
    return Facts(method=method, server=server, host="test-host")


def server_is(pattern: str) -> All:
    return All((ServerMatches((pattern,)),))


def test_first_matching_rule_wins() -> None:
    rules = [
        Rule("deny-notes", "deny", server_is("notes"), message="no notes"),
        Rule("allow-all", "allow"),
        Rule("deny-all", "deny"),
    ]
    assert decide(rules, facts("notes")) == Decision("deny", "deny-notes", "rule 'deny-notes' matched", "no notes")
    assert decide(rules, facts("other")) == Decision("allow", "allow-all", "rule 'allow-all' matched")
    assert decide(list(reversed(rules)), facts("notes")).rule == "deny-all"


def test_rule_without_when_matches_everything() -> None:
    rules = [Rule("catch-all", "prompt")]
    for f in (facts("a"), facts("b", "elicitation"), Facts(method="sampling", server="")):
        assert decide(rules, f).rule == "catch-all"
        assert why_not(rules[0], f) is None


@pytest.mark.parametrize(
    ("pattern", "server", "matches"),
    [
        ("notes", "notes", True),
        ("notes", "Notes", True),
        ("NOTES", "notes", True),
        ("untrusted-*", "Untrusted-Web", True),
        ("untrusted-*", "trusted-web", False),
        ("*-fs", "local-FS", True),
        ("file?", "files", True),
        ("file?", "file", False),
        ("[ab]*", "beta", True),
        ("notes", "notes-2", False),
    ],
)
def test_server_condition_is_a_case_insensitive_glob(pattern: str, server: str, matches: bool) -> None:
    rule = Rule("r", "allow", server_is(pattern))
    decision = decide([rule], facts(server))
    assert (decision.rule == "r") is matches
    if not matches:
        assert why_not(rule, facts(server)) == f"server '{server}' does not match '{pattern}'"


def test_method_condition() -> None:
    rules = [
        Rule("elicit-ok", "allow", All((MethodIs("elicitation"),))),
        Rule("sampling-no", "deny", All((MethodIs("sampling"),))),
    ]
    assert decide(rules, facts(method="elicitation")).action == "allow"
    assert decide(rules, facts(method="sampling")).rule == "sampling-no"
    assert why_not(rules[0], facts(method="sampling")) == "method is sampling, not elicitation"


def test_all_conditions_must_match() -> None:
    rule = Rule("both", "allow", All((ServerMatches(("notes*",)), MethodIs("sampling"))))
    assert decide([rule], facts("notes-app", "sampling")).action == "allow"
    assert decide([rule], facts("notes-app", "elicitation")).rule == DEFAULT_RULE
    assert decide([rule], facts("mail", "sampling")).rule == DEFAULT_RULE


def test_default_is_prompt_when_nothing_matches() -> None:
    assert decide([], facts()) == Decision("prompt", DEFAULT_RULE, "no rule matched; the default is prompt")
    only_other = [Rule("other", "allow", server_is("other"))]
    decision = decide(only_other, facts("notes"))
    assert (decision.action, decision.rule, decision.message) == ("prompt", "default", None)


def test_deny_message_is_carried_from_the_policy_file() -> None:
    settings = parse_settings(
        "rules:\n"
        "  - name: no-web\n    when:\n      server: 'Web-*'\n    action: deny\n"
        "    message: ask your admin to enable sampling for web servers\n"
        "  - action: allow\n",
        "policy.yaml",
    )
    denied = decide(settings.rules, facts("web-search"))
    assert denied == Decision(
        "deny", "no-web", "rule 'no-web' matched", "ask your admin to enable sampling for web servers"
    )
    allowed = decide(settings.rules, facts("notes"))
    assert (allowed.action, allowed.rule, allowed.message) == ("allow", "rule-2", None)


def tool_is(*patterns: str) -> All:
    return All((ToolMatches(patterns),))


def in_flight(*tools: str) -> Facts:
    """A request while the host's `tools` calls are in flight, oldest first: any of them could own it."""
    return Facts(method="sampling", server="notes", host="test-host", tools_in_flight=tools)


def test_with_several_calls_in_flight_the_strictest_outcome_wins_and_names_its_tool() -> None:
    rules = [Rule("read-ok", "allow", tool_is("read")), Rule("no-delete", "deny", tool_is("delete"), message="no")]
    decision = decide(rules, in_flight("read", "delete", "read2"))
    assert (decision.action, decision.rule, decision.tool) == ("deny", "no-delete", "delete")
    assert "for tool 'delete', the strictest outcome of the 3 tool calls in flight" in decision.reason


def test_among_equally_strict_outcomes_the_rule_first_in_the_file_wins() -> None:
    rules = [Rule("ask-b", "prompt", tool_is("b")), Rule("ask-a", "prompt", tool_is("a"))]
    decision = decide(rules, in_flight("a", "b"))
    assert (decision.rule, decision.tool) == ("ask-b", "b")


def test_under_one_rule_the_oldest_call_in_flight_is_the_one_charged() -> None:
    # the tool a decision names is the one its rule's rate limit and budget are charged to
    rules = [Rule("search-ok", "allow", tool_is("search*"))]
    decision = decide(rules, in_flight("search-web", "search-docs", "search-code"))
    assert (decision.rule, decision.tool) == ("search-ok", "search-web")
    assert "for tool 'search-web'" in decision.reason


# -- model_choice.choose_model --------------------------------------------------------------------

OPENAI = ProviderConfig(
    name="openai", type="openai", models=(ModelSpec("gpt-4o-mini"), ModelSpec("gpt-4o"), ModelSpec("o3-mini"))
)
ANTHROPIC = ProviderConfig(
    name="anthropic", type="anthropic", models=(ModelSpec("claude-sonnet-4-5"), ModelSpec("claude-haiku-4-5"))
)
BOTH = [OPENAI, ANTHROPIC]


def hints(*names: Any, **priorities: float) -> ModelPreferences | None:
    """A request's preferences as the proxy reads them off the wire (names: costPriority, ...)."""
    wire: Any = {"hints": [{"name": n} for n in names], **priorities}  # as it comes off the wire
    return ModelPreferences.from_wire(wire)


def test_first_matching_hint_wins_even_if_a_later_hint_matches_an_earlier_model() -> None:
    choice = choose_model(BOTH, hints("claude", "gpt"))
    assert (choice.provider, choice.model) == ("anthropic", "claude-sonnet-4-5")
    assert choice.reason.startswith("hint 'claude' matched by prefix 'anthropic/claude-sonnet-4-5'")
    assert choose_model(BOTH, hints("gpt", "claude")).model == "gpt-4o-mini"


def test_unmatched_hints_are_skipped_in_order() -> None:
    choice = choose_model(BOTH, hints("gemini", "mistral", "haiku"))
    assert choice == Choice(
        "anthropic",
        "claude-haiku-4-5",
        "hint 'gemini' matched no model; hint 'mistral' matched "
        "no model; hint 'haiku' matched as a substring 'anthropic/claude-haiku-4-5'",
    )


def test_hint_is_a_case_insensitive_substring() -> None:
    assert choose_model(BOTH, hints("GPT-4O")).model == "gpt-4o"  # an exact match beats gpt-4o-mini (issue #11)
    assert choose_model(BOTH, hints("4O")).model == "gpt-4o-mini"  # first configured model containing it
    assert choose_model(BOTH, hints("Sonnet")).model == "claude-sonnet-4-5"
    assert choose_model(BOTH, hints("O3")).model == "o3-mini"


def test_a_claude_hint_selects_the_anthropic_provider_even_when_openai_is_default() -> None:
    choice = choose_model(BOTH, hints("claude-3-5-sonnet", "claude"), default_provider="openai")
    assert (choice.provider, choice.model) == ("anthropic", "claude-sonnet-4-5")
    assert choice.reason.startswith("hint 'claude-3-5-sonnet' matched no model; hint 'claude' matched by prefix")


def test_alias_map_applies_per_hint_in_order() -> None:
    aliases = {"fast": "claude-haiku-4-5", "smart": "gpt-4o"}
    # the alias of the first hint beats a substring hit of the second
    choice = choose_model(BOTH, hints("fast", "gpt"), aliases=aliases)
    assert choice == Choice("anthropic", "claude-haiku-4-5", "hint 'fast' is an alias for 'anthropic/claude-haiku-4-5'")
    # a substring hit for the first hint beats an alias of the second
    assert choose_model(BOTH, hints("sonnet", "smart"), aliases=aliases).model == "claude-sonnet-4-5"
    # alias lookup is case-insensitive on the hint (the policy loader stores alias keys lower-cased)
    assert choose_model(BOTH, hints("SMART"), aliases=aliases) == Choice(
        "openai", "gpt-4o", "hint 'SMART' is an alias for 'openai/gpt-4o'"
    )


def test_aliases_from_the_policy_file() -> None:
    settings = parse_settings(
        "llm:\n  providers:\n    openai:\n      type: openai\n      models: [gpt-4o-mini, gpt-4o]\n"
        "  aliases:\n    Claude-3-Opus: gpt-4o\n",
        "policy.yaml",
    )
    choice = choose_model(settings.providers, hints("claude-3-opus"), aliases=settings.aliases)
    assert (choice.provider, choice.model) == ("openai", "gpt-4o")


def test_hints_without_a_name_are_skipped() -> None:
    prefs = ModelPreferences.from_wire({"hints": [{}, {"name": None}, {"name": ""}, {"name": "haiku"}]})
    assert choose_model(BOTH, prefs).model == "claude-haiku-4-5"


RATED = [
    ProviderConfig(
        name="openai",
        type="openai",
        models=(
            ModelSpec("mini", cost=0.9, speed=0.9, intelligence=0.3),
            ModelSpec("big", cost=0.2, speed=0.4, intelligence=0.9),
        ),
    ),
    ProviderConfig(
        name="anthropic", type="anthropic", models=(ModelSpec("mid", cost=0.6, speed=0.6, intelligence=0.7),)
    ),
]


@pytest.mark.parametrize(
    ("priorities", "expected"),
    [
        ({"costPriority": 1}, ("openai", "mini")),
        ({"speedPriority": 0.8}, ("openai", "mini")),
        ({"intelligencePriority": 1}, ("openai", "big")),
        # mini: .3*.9+.7*.3=.48, big: .3*.2+.7*.9=.69, mid: .3*.6+.7*.7=.67
        ({"costPriority": 0.3, "intelligencePriority": 0.7}, ("openai", "big")),
        # mini: .5*.9+.5*.3=.60, big: .55, mid: .65
        ({"costPriority": 0.5, "intelligencePriority": 0.5}, ("anthropic", "mid")),
    ],
)
def test_priorities_pick_the_best_weighted_score(priorities: Any, expected: tuple[str, str]) -> None:
    choice = choose_model(RATED, ModelPreferences.from_wire(priorities))
    assert (choice.provider, choice.model) == expected
    assert choice.reason.startswith("best score ")
    for key, weight in priorities.items():
        assert f"{key.removesuffix('Priority')}={weight:g}" in choice.reason


def test_priority_reason_shows_score_and_weights() -> None:
    choice = choose_model(RATED, ModelPreferences.from_wire({"costPriority": 0.5, "intelligencePriority": 0.5}))
    assert choice.reason == "best score 0.65 for priorities cost=0.5, intelligence=0.5"


def test_unrated_axis_counts_as_neutral() -> None:
    providers = [
        ProviderConfig(
            name="p",
            type="openai",
            models=(
                ModelSpec("fast-only", speed=0.8),  # intelligence unrated: 0.5
                ModelSpec("dull", speed=0.2, intelligence=0.4),
            ),
        )
    ]
    # fast-only: .8 + .5 = 1.3 ; dull: .2 + .4 = .6
    choice = choose_model(providers, ModelPreferences.from_wire({"speedPriority": 1, "intelligencePriority": 1}))
    assert choice == Choice("p", "fast-only", "best score 1.30 for priorities speed=1, intelligence=1")
    # on intelligence alone the neutral 0.5 beats a rated 0.4
    assert choose_model(providers, ModelPreferences.from_wire({"intelligencePriority": 1})).model == "fast-only"


def test_zero_or_missing_priorities_and_unrated_models_fall_back_to_the_default() -> None:
    assert choose_model(RATED, ModelPreferences.from_wire({"costPriority": 0, "speedPriority": 0})).model == "mini"
    assert choose_model(BOTH, ModelPreferences.from_wire({"intelligencePriority": 1})) == Choice(
        "openai", "gpt-4o-mini", "default model of provider 'openai'"
    )


def test_a_matching_hint_beats_priorities() -> None:
    choice = choose_model(RATED, hints("mid", costPriority=1))
    assert (choice.model, choice.reason) == ("mid", "hint 'mid' matched exactly 'anthropic/mid'")


def test_default_provider_and_first_model_otherwise() -> None:
    assert choose_model(BOTH, None) == Choice("openai", "gpt-4o-mini", "default model of provider 'openai'")
    assert choose_model(BOTH, ModelPreferences.from_wire({}), default_provider="anthropic") == Choice(
        "anthropic", "claude-sonnet-4-5", "default model of provider 'anthropic'"
    )
    assert choose_model(BOTH, hints("gemini"), default_provider="anthropic") == Choice(
        "anthropic", "claude-sonnet-4-5", "hint 'gemini' matched no model; default model of provider 'anthropic'"
    )
    # an unknown default (never produced by the loader) still answers with the first provider
    assert choose_model(BOTH, None, default_provider="missing").provider == "openai"
