"""The policy engine: a pure function from request facts and rules to a decision.

No I/O here, so every rule can be tested and explained without starting anything. The
default when no rule matches is `prompt`: a human decides, and when nobody can be asked the
approval step turns that into a deny that says how to configure the proxy. The facts and the
conditions rules test are in `conditions`, the rules themselves in `rules`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from msgspec.structs import replace

from mcp_sampling_proxy.notation.vocabulary import Action
from mcp_sampling_proxy.policy.conditions import Facts
from mcp_sampling_proxy.policy.rules import Rule

DEFAULT_RULE = "default"


# -- decisions ------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Decision:
    action: Action
    rule: str  # the matching rule's name, or "default"
    reason: str
    message: str | None = None  # shown to the server on deny
    # the matching rule itself (its rate_limit, budget, limits, provider, model), None for the default
    matched: Rule | None = dataclasses.field(default=None, compare=False, repr=False)
    # the candidate tool this decision was reached for (the one charged), when several were in flight
    tool: str | None = dataclasses.field(default=None, compare=False)


STRICTNESS = {"allow": 0, "prompt": 1, "deny": 2}


def decide(rules: Sequence[Rule], facts: Facts) -> Decision:
    """First matching rule wins; nothing matched means prompt.

    When more than one host tools/call is in flight, any of them could own the request and the
    server alone knows which, so the rules are evaluated once per candidate tool and the strictest
    outcome wins (deny > prompt > allow); among equally strict outcomes, the one whose rule comes
    first in the file (the default last), then the oldest candidate. A harmless call in flight can
    then never launder a request fired by a denied one."""
    candidates = tuple(dict.fromkeys(facts.tools_in_flight))
    if len(candidates) <= 1:
        return _decide_one(rules, facts)
    order = {rule.name: index for index, rule in enumerate(rules)}
    outcomes = [_decide_one(rules, replace(facts, tool=tool)) for tool in candidates]
    index = max(
        range(len(outcomes)),
        key=lambda i: (STRICTNESS.get(outcomes[i].action, 1), -order.get(outcomes[i].rule, len(rules)), -i),
    )
    chosen = outcomes[index]
    shown = ", ".join(f"'{t}'" for t in candidates)
    why = (
        f"{chosen.reason} for tool '{candidates[index]}', the strictest outcome of the {len(candidates)} "
        f"tool calls in flight ({shown}), any of which could have sent the request"
    )
    return dataclasses.replace(chosen, reason=why, tool=candidates[index])


def _decide_one(rules: Sequence[Rule], facts: Facts) -> Decision:
    for rule in rules:
        if why_not(rule, facts) is None:
            return Decision(rule.action, rule.name, f"rule '{rule.name}' matched", rule.message, rule, facts.tool)
    return Decision("prompt", DEFAULT_RULE, "no rule matched; the default is prompt", tool=facts.tool)


def why_not(rule: Rule, facts: Facts) -> str | None:
    """None when the rule matches, else why the first failing condition failed (for explanations)."""
    matched, reason = rule.when.test(facts)
    return None if matched else reason


def why(rule: Rule, facts: Facts) -> str:
    """Why the rule matches, or why it does not (the explanation either way)."""
    return rule.when.test(facts)[1]
