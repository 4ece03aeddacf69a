"""The grammar of the policy's rules: how `rules:`, `when:` conditions and `limits:` are written, next to
what they mean (conditions.py, rules.py). A new condition is a class in conditions.py and a line in
`_parse_condition` here, with its key in WHEN_KEYS.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from functools import partial
from typing import Any, TypeVar, cast

from msgspec import Struct, field
from msgspec.structs import fields

from mcp_sampling_proxy.notation.vocabulary import ACTIONS, MAX_TOKENS_ACTIONS, Action
from mcp_sampling_proxy.notation.yamlnodes import Node, did_you_mean, shown_value
from mcp_sampling_proxy.policy.conditions import (
    ALWAYS,
    All,
    AnyOf,
    ClientMatches,
    Condition,
    ContentHas,
    HostMatches,
    IncludeContextIs,
    MethodIs,
    ModelMatches,
    Not,
    Over,
    ServerMatches,
    ServerReportedMatches,
    TextMatches,
    ToolMatches,
)
from mcp_sampling_proxy.policy.rules import Budget, RateLimit, Rule, RuleLimits, SizeLimits
from mcp_sampling_proxy.text.identity import bad_character

T = TypeVar("T")

METHODS = ("sampling", "elicitation")
CONTENT_TYPES = ("text", "image", "audio", "tool_use", "tool_result", "tools")
INCLUDE_CONTEXT = ("none", "thisServer", "allServers")


class KnownProviders(Struct, frozen=True):
    """What a rule's `provider:` and `model:` may name: the configured providers and their models (none:
    providers come from the environment, named `from_environment`), and the model aliases."""

    models: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # provider name -> its model names
    aliases: Mapping[str, str] = field(default_factory=dict)
    from_environment: tuple[str, ...] = ()
    unchecked: bool = False  # the llm section has mistakes of its own: take the names as written


_LIMIT_KEYS = tuple(f.name for f in fields(SizeLimits))
_SIZE_KEYS = ("max_text_bytes", "max_media_bytes", "max_request_bytes")
_LIMIT_MINIMUM = {"max_messages": 1, "max_tokens": 1, "max_tools": 0}


def parse_limits(node: Node) -> dict[str, Any]:
    """The keys a `limits:` mapping sets (top level or a rule's), validated."""
    given = node.mapping(_LIMIT_KEYS)
    out: dict[str, Any] = {}
    for key, value in given.items():
        if key in _SIZE_KEYS:
            out[key] = value.size()
        elif key == "max_tokens_action":
            out[key] = value.choice(MAX_TOKENS_ACTIONS)
        else:
            out[key] = value.int(minimum=_LIMIT_MINIMUM[key])
    return out


RULE_KEYS = ("name", "when", "action", "message", "rate_limit", "budget", "limits", "provider", "model", "check")
WHEN_KEYS = (
    "server",
    "server_reported",
    "method",
    "tool",
    "host",
    "client",
    "model",
    "max_tokens_over",
    "messages_over",
    "content",
    "include_context",
    "text_matches",
    "any",
    "not",
)


def parse_rules(node: Node, known: KnownProviders, checks: Collection[str] = ()) -> list[Rule]:
    """The policy's `rules:` list, each checked against the providers and models `known` and the
    `checks:` names defined. When the document gathers its mistakes, each rule (and each of its keys)
    is checked even after a bad one."""
    rules: list[Rule] = []
    seen: dict[str, int] = {}
    for index, rnode in enumerate(node.sequence()):
        rule = rnode.attempt(partial(_parse_rule, rnode, index, known, checks), None)
        if rule is None:
            continue
        if rule.name in seen:
            where = rnode.mapping().get("name", rnode)
            rnode.report(
                where.error(
                    f"rule name '{rule.name}' is already used by the rule at line {seen[rule.name]}; "
                    "names must be unique (audit records and rate limits go by name)"
                )
            )
            continue
        seen[rule.name] = rule.line
        rules.append(rule)
    return rules


def _parse_rule(node: Node, index: int, known: KnownProviders, checks: Collection[str] = ()) -> Rule:
    fields_ = node.mapping(RULE_KEYS)

    def read(key: str, parse: Callable[[Node], T], fallback: T) -> T:
        """The key's value, or `fallback` when it is absent (or wrong, when mistakes are gathered)."""
        return fields_[key].attempt(lambda: parse(fields_[key]), fallback) if key in fields_ else fallback

    action: Action = "deny"
    if "action" not in fields_:
        node.report(node.error(f"rule {index + 1} needs an action: one of {', '.join(ACTIONS)}"))
    action = read("action", lambda n: cast(Action, n.choice(ACTIONS)), action)
    name = read("name", Node.str, f"rule-{index + 1}")
    when: Condition = ALWAYS
    if "when" in fields_ and fields_["when"].value() is not None:
        when = read("when", _parse_when, ALWAYS)
    provider = read("provider", lambda n: _rule_provider(n, known), None)
    provider_broken = "provider" in fields_ and provider is None  # its model cannot be checked against it
    limits = read("limits", parse_limits, None)
    return Rule(
        name=name,
        action=action,
        when=when,
        message=read("message", Node.str, None),
        line=node.node.start_mark.line + 1,
        rate_limit=read("rate_limit", _parse_rate_limit, None),
        budget=read("budget", _parse_budget, None),
        limits=RuleLimits(**limits) if limits is not None else None,
        provider=provider,
        model=None if provider_broken else read("model", lambda n: _rule_model(n, provider, known), None),
        checks=read("check", lambda n: _rule_checks(n, action, checks), ()),
    )


def _rule_checks(node: Node, action: Action, defined: Collection[str]) -> tuple[str, ...]:
    """A rule's `check:`: names of the `checks:` section, run in this order before the action applies."""
    if action == "deny":
        raise node.error(f"{node.label}: a rule with action: deny refuses the request without running checks")
    names = node.strings()
    for item, name in zip([node] if not node.is_sequence() else node.sequence(), names, strict=True):
        if name not in defined:
            what = f"; defined: {', '.join(defined)}" if defined else "; the policy has no checks: section"
            raise item.error(f"{item.label} '{name}' is not a check{did_you_mean(name, tuple(defined))}{what}")
    if len(set(names)) != len(names):
        raise node.error(f"{node.label} names a check twice")
    return tuple(names)


def _parse_when(node: Node, *, nested: bool = False) -> All:
    given = node.mapping(WHEN_KEYS)
    if nested and not node.keys():  # an unknown key alone is reported as such
        raise node.error(f"{node.label} is empty: give at least one condition ({', '.join(WHEN_KEYS)})")
    conditions = (value.attempt(partial(_parse_condition, key, value), None) for key, value in given.items())
    return All(tuple(c for c in conditions if c is not None))


def _parse_condition(key: str, node: Node) -> Condition:
    if key == "server":
        return ServerMatches(_name_globs(node))
    if key == "server_reported":
        return ServerReportedMatches(_name_globs(node))
    if key == "host":
        return HostMatches(_globs(node))
    if key == "client":
        return ClientMatches(_name_globs(node))
    if key == "model":
        return ModelMatches(_globs(node))
    if key == "tool":
        return ToolMatches(_globs(node, "; the literal none means no host request in flight"))
    if key == "method":
        return MethodIs(node.choice(METHODS))
    if key == "max_tokens_over":
        return Over("max_tokens", node.int(minimum=0))
    if key == "messages_over":
        return Over("messages", node.int(minimum=0))
    if key == "content":
        return ContentHas(_choices(node, CONTENT_TYPES))
    if key == "include_context":
        return IncludeContextIs(_choices(node, INCLUDE_CONTEXT))
    if key == "text_matches":
        return TextMatches(node.regex())
    if key == "any":
        alternatives = node.sequence()
        if not alternatives:
            raise node.error(f"{node.label} needs at least one condition mapping: any: [{{...}}, {{...}}]")
        parsed = (alt.attempt(partial(_parse_when, alt, nested=True), None) for alt in alternatives)
        return AnyOf(tuple(alt for alt in parsed if alt is not None))
    if key == "not":
        return Not(_parse_when(node, nested=True))
    raise node.error(f"unknown condition '{key}'")  # pragma: no cover - mapping() rejects unknown keys


def _globs(node: Node, note: str = "") -> tuple[str, ...]:
    """A glob or a list of globs (non-empty strings)."""
    items = [node] if not node.is_sequence() else node.sequence()
    if not items:
        raise node.error(f"{node.label} needs at least one glob{note}")
    out = []
    for item in items:
        v = item.value()
        if not isinstance(v, str) or not v:
            what = "a glob or a list of globs" if item is node else "a glob"
            raise item.error(f"{item.label} must be {what} (a non-empty string){note}, got {shown_value(v)}")
        out.append(v)
    return tuple(out)


def _name_globs(node: Node) -> tuple[str, ...]:
    """Globs over names (servers, clients): refused when they hold control or invisible characters,
    which would make a rule look as if it named one server or caller while it names another."""
    globs = _globs(node)
    items = [node] if not node.is_sequence() else node.sequence()
    for item, glob in zip(items, globs, strict=True):
        bad = bad_character(glob)
        if bad is not None:
            raise item.error(
                f"{item.label} holds a control or invisible character, {bad}: "
                "retype the name with visible characters only"
            )
    return globs


def _choices(node: Node, allowed: tuple[str, ...]) -> tuple[str, ...]:
    """One of `allowed`, or a non-empty list of them."""
    if not node.is_sequence():
        return (node.choice(allowed),)
    items = node.sequence()
    if not items:
        raise node.error(f"{node.label} needs at least one of {', '.join(allowed)}")
    return tuple(dict.fromkeys(item.choice(allowed) for item in items))


def _parse_rate_limit(node: Node) -> RateLimit:
    given = node.mapping(("requests", "per", "concurrent"))
    example = "e.g. rate_limit: {requests: 10, per: 1m, concurrent: 2}"
    if not given:
        raise node.error(f"{node.label} needs requests and per, or concurrent ({example})")
    if ("requests" in given) != ("per" in given):
        has, lacks = ("requests", "per") if "requests" in given else ("per", "requests")
        raise node.error(f"{node.label} has {has} but no {lacks}: give both ({example}); concurrent alone is fine")
    return RateLimit(
        requests=given["requests"].int(minimum=1) if "requests" in given else None,
        per=given["per"].duration() if "per" in given else None,
        concurrent=given["concurrent"].int(minimum=1) if "concurrent" in given else None,
    )


def _parse_budget(node: Node) -> Budget:
    given = node.mapping(("tokens", "usd", "per"))
    example = "e.g. budget: {usd: 5, per: 1d}" if "usd" in given else "e.g. budget: {tokens: 100000, per: 1d}"
    if "per" not in given:
        raise node.error(f"{node.label} needs per ({example})")
    if "tokens" not in given and "usd" not in given:
        raise node.error(f"{node.label} needs tokens or usd, or both ({example}, or budget: {{usd: 5, per: 1d}})")
    usd = given["usd"].number(minimum=0) if "usd" in given else None
    if usd is not None and usd <= 0:
        raise given["usd"].error(f"{node.label}.usd must be more than 0 dollars, got {usd}")
    return Budget(
        tokens=given["tokens"].int(minimum=1) if "tokens" in given else None,
        per=given["per"].duration(),
        usd=usd,
    )


def _rule_provider(node: Node, known: KnownProviders) -> str:
    name = node.str()
    if known.unchecked:
        return name
    configured = tuple(known.models)
    if configured:
        if name not in configured:
            raise node.error(
                f"{node.label} '{name}' is not a configured provider{did_you_mean(name, configured)}; "
                f"configured: {', '.join(configured)}"
            )
    elif name not in known.from_environment:
        raise node.error(
            f"{node.label} '{name}' is not a provider: this policy has no llm.providers, so providers come from "
            f"the environment and can be {' or '.join(known.from_environment)}"
        )
    return name


def _rule_model(node: Node, provider: str | None, known: KnownProviders) -> str:
    """A configured model (of `provider` when given); an alias resolves to its model."""
    name = node.str()
    if known.unchecked or not known.models:  # providers from the environment: their models are known only at run time
        return name
    pool = [models for owner, models in known.models.items() if provider is None or owner == provider]
    models = tuple(dict.fromkeys(model for names in pool for model in names))
    if name in models:
        return name
    target = known.aliases.get(name.lower())
    if target is not None and target in models:
        return target
    owner = f"a model of provider '{provider}'" if provider else "a configured model"
    raise node.error(f"{node.label} '{name}' is not {owner}{did_you_mean(name, models)}; models: {', '.join(models)}")
