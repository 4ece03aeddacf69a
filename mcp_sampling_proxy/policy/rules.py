"""A policy's rules and caps as data: what `config` parses and the engine and quotas read.

Pure data (no I/O), importing only the conditions a rule's `when:` is made of, so `config`
(which builds these) and the policy engine (which reads them) do not import each other.
"""

from __future__ import annotations

from msgspec import Struct
from msgspec.structs import fields, replace

from mcp_sampling_proxy.notation.vocabulary import Action, MaxTokensAction, MiB
from mcp_sampling_proxy.policy.conditions import ALWAYS, Condition


class SizeLimits(Struct, frozen=True):
    """Caps on one sampling request (top-level `limits:`; a rule's `limits:` overrides key by key)."""

    max_messages: int = 256
    max_text_bytes: int = 1 * MiB
    max_media_bytes: int = 8 * MiB
    max_request_bytes: int = 16 * MiB
    max_tokens: int | None = None  # None: no cap
    max_tokens_action: MaxTokensAction = "clamp"  # when the request's maxTokens is over max_tokens
    max_tools: int = 128


class RuleLimits(Struct, frozen=True):
    """A rule's `limits:`; None means "as the top-level limits say"."""

    max_messages: int | None = None
    max_text_bytes: int | None = None
    max_media_bytes: int | None = None
    max_request_bytes: int | None = None
    max_tokens: int | None = None
    max_tokens_action: MaxTokensAction | None = None
    max_tools: int | None = None


def effective_limits(base: SizeLimits, override: RuleLimits | None) -> SizeLimits:
    """The top-level limits with the rule's keys (those it sets) put over them."""
    if override is None:
        return base
    changes = {f.name: getattr(override, f.name) for f in fields(override) if getattr(override, f.name) is not None}
    return replace(base, **changes)


class RateLimit(Struct, frozen=True):
    """A rule's `rate_limit:` -- `requests` per `per` seconds (both or neither), and/or `concurrent`."""

    requests: int | None = None
    per: float | None = None  # seconds
    concurrent: int | None = None


class Budget(Struct, frozen=True):
    """A rule's `budget:` -- at most `tokens` (input + output) and/or `usd` (dollars, priced with
    the price table: config/prices.py) per `per` seconds; at least one of the two is set."""

    tokens: int | None
    per: float  # seconds
    usd: float | None = None


class Rule(Struct, frozen=True):
    """One `rules[]` entry. `when` is a condition tree (an `All`, empty: matches everything)."""

    name: str
    action: Action
    when: Condition = ALWAYS
    message: str | None = None
    line: int = 0  # where the rule starts in the file, for explanations
    rate_limit: RateLimit | None = None
    budget: Budget | None = None
    limits: RuleLimits | None = None
    provider: str | None = None  # answer with this provider
    model: str | None = None  # ... and/or this model (an alias is resolved to its model)
    checks: tuple[str, ...] = ()  # external checks (`checks:` names) run before the action applies
