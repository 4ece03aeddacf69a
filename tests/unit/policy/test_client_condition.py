"""The `client:` condition: the caller's name under `serve` (its bearer token's name), as rules see it.

Rules are written as YAML and loaded by the real loader, so each case checks the parsing too; the
facts come from a real request through `judge_sampling`, the code the proxy and `policy explain` run.
"""

from __future__ import annotations

from typing import Any

import pytest

from mcp_sampling_proxy.config.settings import Settings, parse_settings
from mcp_sampling_proxy.notation.yamlnodes import PolicyError
from mcp_sampling_proxy.policy.conditions import ClientMatches, Facts
from mcp_sampling_proxy.policy.engine import decide, why
from mcp_sampling_proxy.services.assess import Origin, Refused, judge_elicitation, judge_sampling

F = "policy.yaml"
PARAMS = {"messages": [{"role": "user", "content": {"type": "text", "text": "hello"}}], "maxTokens": 100}

PER_PERSON = """\
rules:
  - name: alice
    when: {client: alice}
    action: allow
    budget: {tokens: 100000, per: 1d}
  - name: interns
    when: {client: ["intern-*", guest]}
    action: allow
    budget: {tokens: 5000, per: 1d}
  - name: everyone-else
    action: deny
    message: ask for a token of your own
"""


def settings_of(text: str) -> Settings:
    return parse_settings(text, F)


def facts(client: str | None) -> Facts:
    return Facts(method="sampling", server="notes", client=client)


@pytest.mark.parametrize(
    ("client", "rule"),
    [
        ("alice", "alice"),
        ("ALICE", "alice"),  # names compare case-folded, as server names do
        ("intern-jo", "interns"),
        ("guest", "interns"),
        ("bob", "everyone-else"),
        (None, "everyone-else"),  # over stdio there is no caller's name
    ],
)
def test_each_caller_gets_the_rule_of_its_name(client: str | None, rule: str) -> None:
    assert decide(settings_of(PER_PERSON).rules, facts(client)).rule == rule


def test_the_reasons_say_who_called_and_why_it_does_or_does_not_match() -> None:
    condition = ClientMatches(("alice", "intern-*"))
    assert condition.test(facts("intern-jo")) == (True, "client 'intern-jo' matches 'intern-*'")
    assert condition.test(facts("bob")) == (False, "client 'bob' does not match any of 'alice', 'intern-*'")
    matched, reason = ClientMatches(("alice",)).test(facts(None))
    assert not matched
    assert reason == (
        "no client name (only `serve` with bearer tokens names its caller), so client does not match 'alice'"
    )


def test_over_stdio_not_client_holds() -> None:
    """`not: {client: ...}` holds where there is no caller's name: a rule meant for served callers
    only must say `client: "*"` as well."""
    text = (
        "rules:\n  - name: not-alice\n    when: {not: {client: alice}}\n    action: deny\n"
        "  - name: served\n    when: {client: '*'}\n    action: allow\n"
    )
    rules = settings_of(text).rules
    assert decide(rules, facts(None)).rule == "not-alice"
    assert decide(rules, facts("alice")).rule == "served"
    assert decide([rules[1]], facts(None)).rule != "served"


def test_the_proxys_judging_code_passes_the_client_on() -> None:
    settings = settings_of(PER_PERSON)
    judged = judge_sampling(settings, PARAMS, Origin("notes", "host", (), client="alice"))
    assert judged.facts.client == "alice"
    assert judged.decision.rule == "alice"
    assert judged.decision.matched is not None
    assert why(judged.decision.matched, judged.facts) == "client 'alice' matches 'alice'"
    with pytest.raises(Refused) as refused:
        judge_sampling(settings, PARAMS, Origin("notes", "host", ()))
    assert refused.value.error.message == "ask for a token of your own"
    elicited = judge_elicitation(settings, {"message": "hi", "requestedSchema": {}}, Origin("n", "h", (), None, "bob"))
    assert (elicited.facts.client, elicited.decision.rule) == ("bob", "everyone-else")


def error_of(when: str) -> str:
    with pytest.raises(PolicyError) as info:
        parse_settings(f"rules:\n  - name: r\n    action: allow\n    when: {when}\n", F)
    return str(info.value)


@pytest.mark.parametrize(
    ("when", "expected"),
    [
        (
            "{client: ''}",
            "policy.yaml:4:20: rules[0].when.client must be a glob or a list of globs (a non-empty string)",
        ),
        ("{client: []}", "policy.yaml:4:20: rules[0].when.client needs at least one glob"),
        ("{client: [alice, 3]}", "policy.yaml:4:28: rules[0].when.client[1] must be a glob (a non-empty string)"),
        ("{client: {name: alice}}", "rules[0].when.client must be a glob or a list of globs"),
        (
            '{client: "al\\u200bice"}',
            "policy.yaml:4:20: rules[0].when.client holds a control or invisible character",
        ),
        ("{clint: alice}", "unknown key 'clint' in rules[0].when (did you mean 'client'?)"),
    ],
)
def test_a_bad_client_condition_is_refused_with_where_and_what(when: str, expected: str) -> None:
    assert expected in error_of(when)


def test_a_list_of_globs_and_the_nested_forms_parse() -> None:
    text = "rules:\n  - name: r\n    action: allow\n    when:\n      any: [{client: [a, 'b*']}, {not: {client: c}}]\n"
    [rule] = settings_of(text).rules
    answers: dict[str | None, Any] = {name: rule.when.test(facts(name))[0] for name in ("a", "bee", "c", None)}
    assert answers == {"a": True, "bee": True, "c": False, None: True}
