"""The policy engine: a pure function from request facts and rules to a decision.

No I/O here, so every rule can be tested and explained without starting anything. The
default when no rule matches is `prompt`: a human decides, and when nobody can be asked the
approval step turns that into a deny that says how to configure the proxy.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Sequence
from dataclasses import dataclass, field

from mcp_sampling_proxy.config import Rule

DEFAULT_RULE = "default"


@dataclass(frozen=True)
class Facts:
    """What is known about one intercepted request when the policy is consulted."""

    method: str  # "sampling" | "elicitation"
    server: str  # upstream serverInfo name, or --name
    host: str = ""  # the host's clientInfo name
    tools_in_flight: tuple[str, ...] = ()  # names of the host's tools/call requests now open
    extra: dict[str, object] = field(default_factory=dict)


@dataclass(frozen=True)
class Decision:
    action: str  # allow | deny | prompt
    rule: str  # the matching rule's name, or "default"
    reason: str
    message: str | None = None  # shown to the server on deny


def decide(rules: Sequence[Rule], facts: Facts) -> Decision:
    """First matching rule wins; nothing matched means prompt."""
    for rule in rules:
        mismatch = why_not(rule, facts)
        if mismatch is None:
            return Decision(rule.action, rule.name, f"rule '{rule.name}' matched", rule.message)
    return Decision("prompt", DEFAULT_RULE, "no rule matched; the default is prompt")


def why_not(rule: Rule, facts: Facts) -> str | None:
    """None when the rule matches, else the first condition that failed (for explanations)."""
    for key, expected in rule.when.items():
        if key == "server" and not fnmatch.fnmatchcase(facts.server.lower(), str(expected).lower()):
            return f"server '{facts.server}' does not match '{expected}'"
        if key == "method" and facts.method != expected:
            return f"method is {facts.method}, not {expected}"
    return None
