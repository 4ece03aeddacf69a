"""Facts about a request and the conditions a rule's `when:` tests them with.

A rule's `when:` is parsed (in `config`) into a small tree of the condition objects defined here:
`All` (the conditions of one mapping, all must hold), `AnyOf`, `Not`, and one leaf class per
condition key. Every condition answers `test(facts) -> (matched, reason)`, where the reason says in
words why it matched or why not; `policy explain` shows it. Pure: no I/O.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

from msgspec import Struct, field
from msgspec.structs import force_setattr

from mcp_sampling_proxy.policy.survey import Survey, survey
from mcp_sampling_proxy.text.identity import bad_character, normalise
from mcp_sampling_proxy.text.sanitize import folded

if TYPE_CHECKING:
    from mcp_sampling_proxy.protocol.sampling_request import SamplingRequest

NO_TOOL = "none"  # `tool: none` matches when no host tools/call is in flight


class Facts(Struct, frozen=True):
    """What is known about one intercepted request when the policy is consulted.

    Build it from a request with `facts_for_sampling`. `tool` defaults to the most recent of
    `tools_in_flight` (and `tools_in_flight` to `(tool,)`), so either may be given."""

    method: str  # "sampling" | "elicitation"
    server: str  # the operator's name for the server (--name, or derived from its command or URL)
    host: str = ""  # the host's clientInfo name
    tools_in_flight: tuple[str, ...] = ()  # names of the host's tools/call requests now open, oldest first
    tool: str | None = None  # the in-flight tools/call name; None when none is in flight (SEP-2260)
    model_hints: tuple[str, ...] = ()  # modelPreferences.hints[].name, in order
    max_tokens: int | None = None
    message_count: int = 0
    content_types: frozenset[str] = frozenset()  # text, image, audio, tool_use, tool_result; tools if offered
    include_context: str = "none"  # none | thisServer | allServers
    text: str = ""  # every string the LLM gets (system prompt, blocks, tool inputs and results, tools), by line
    model_chosen: str | None = None  # the model the proxy would choose for the request (its preferences)
    extra: dict[str, object] = field(default_factory=dict)
    server_reported: str | None = None  # the server's own serverInfo.name: untrusted, see ServerReportedMatches
    client: str | None = None  # the caller's bearer token name under `serve`; None over stdio or without tokens

    def __post_init__(self) -> None:
        if self.tool is None and self.tools_in_flight:
            force_setattr(self, "tool", self.tools_in_flight[-1])
        elif self.tool is not None and not self.tools_in_flight:
            force_setattr(self, "tools_in_flight", (self.tool,))


def facts_for_sampling(
    request: SamplingRequest,
    *,
    server: str,
    host: str,
    tools_in_flight: tuple[str, ...],
    server_reported: str | None = None,
    model_chosen: str | None = None,
    client: str | None = None,
    surveyed: Survey | None = None,
) -> Facts:
    """The facts of a validated `sampling/createMessage` request: scalars from the typed request,
    content types and text from its survey (`surveyed`, else walked here). The text is every string
    the LLM will receive, not only text blocks: a rule that looks for a word must find it in a tool's
    description, a tool call's input or a tool result's structured content too."""
    typed = request.typed
    found = surveyed or survey(request.wire)
    return Facts(
        method="sampling",
        server=server,
        host=host,
        tools_in_flight=tuple(tools_in_flight),
        model_hints=request.hint_names,
        max_tokens=typed.max_tokens,
        message_count=len(typed.messages),
        content_types=found.content_types,
        include_context=typed.include_context or "none",
        text="\n".join(found.texts),
        server_reported=server_reported,
        model_chosen=model_chosen,
        client=client,
    )


# -- conditions -----------------------------------------------------------------------------------


class Condition(Protocol):
    def test(self, facts: Facts) -> tuple[bool, str]:
        """(matched, why): the reason says why it matched, or why not."""
        ...


def _quoted(patterns: Sequence[str]) -> str:
    shown = ", ".join(f"'{p}'" for p in patterns)
    return shown if len(patterns) == 1 else f"any of {shown}"


def _glob_hit(value: str, patterns: Sequence[str]) -> str | None:
    """The first pattern matching `value` (case-insensitive glob), or None."""
    folded = value.lower()
    return next((p for p in patterns if fnmatch.fnmatchcase(folded, p.lower())), None)


def _name_hit(value: str, patterns: Sequence[str]) -> str | None:
    """The first pattern matching the name `value`, both compared normalised (NFKC, casefold, trim)."""
    folded = normalise(value)
    return next((p for p in patterns if fnmatch.fnmatchcase(folded, normalise(p))), None)


class ServerMatches(Struct, frozen=True):
    """`server: GLOB` (or a list): the operator's name for the server (`--name`, or derived from
    its command or URL), never the name the server reports, which it could choose to borrow."""

    patterns: tuple[str, ...]

    def test(self, facts: Facts) -> tuple[bool, str]:
        hit = _name_hit(facts.server, self.patterns)
        if hit is None:
            return False, f"server '{facts.server}' does not match {_quoted(self.patterns)}"
        return True, f"server '{facts.server}' matches '{hit}'"


class ServerReportedMatches(Struct, frozen=True):
    """`server_reported: GLOB` (or a list): the name the server reports for itself (serverInfo.name).

    Untrusted: any server can report any name, so use it only to narrow a rule, never to grant.
    A reported name holding control or invisible characters never matches."""

    patterns: tuple[str, ...]

    def test(self, facts: Facts) -> tuple[bool, str]:
        reported = facts.server_reported
        if reported is None:
            return False, f"the server reported no name, so it does not match {_quoted(self.patterns)}"
        if bad_character(reported) is not None:
            return False, "the server's reported name holds control or invisible characters, so it matches nothing"
        hit = _name_hit(reported, self.patterns)
        if hit is None:
            return False, f"reported server name '{reported}' does not match {_quoted(self.patterns)}"
        return True, f"reported server name '{reported}' matches '{hit}'"


class ClientMatches(Struct, frozen=True):
    """`client: GLOB` (or a list): the caller's name under `serve`, the name of the bearer token it
    presented (`name:token` in the token file). The operator chose it, so it may grant. Over stdio,
    or when `serve` runs without tokens, there is no caller's name and it never matches."""

    patterns: tuple[str, ...]

    def test(self, facts: Facts) -> tuple[bool, str]:
        if facts.client is None:
            return False, (
                f"no client name (only `serve` with bearer tokens names its caller), "
                f"so client does not match {_quoted(self.patterns)}"
            )
        hit = _name_hit(facts.client, self.patterns)
        if hit is None:
            return False, f"client '{facts.client}' does not match {_quoted(self.patterns)}"
        return True, f"client '{facts.client}' matches '{hit}'"


class HostMatches(Struct, frozen=True):
    """`host: GLOB` (or a list): the host's clientInfo name, case-insensitive."""

    patterns: tuple[str, ...]

    def test(self, facts: Facts) -> tuple[bool, str]:
        hit = _glob_hit(facts.host, self.patterns)
        if hit is None:
            return False, f"host '{facts.host}' does not match {_quoted(self.patterns)}"
        return True, f"host '{facts.host}' matches '{hit}'"


class ToolMatches(Struct, frozen=True):
    """`tool: GLOB` (or a list): the in-flight host tools/call, case-insensitive.

    The literal `none` matches only when no host request is in flight (never a tool that is
    itself called "none"), and a glob only when one is (`*` means "during any tool call")."""

    patterns: tuple[str, ...]

    def test(self, facts: Facts) -> tuple[bool, str]:
        globs = [p for p in self.patterns if p.lower() != NO_TOOL]
        wants_none = len(globs) != len(self.patterns)
        if facts.tool is None:
            if wants_none:
                return True, "no host tool call is in flight (tool: none)"
            return False, f"no host tool call is in flight, so tool does not match {_quoted(globs)}"
        hit = _glob_hit(facts.tool, globs)
        if hit is None:
            if not globs:
                return False, f"tool call '{facts.tool}' is in flight, so tool is not none"
            return False, f"tool '{facts.tool}' does not match {_quoted(globs)}" + (" or none" if wants_none else "")
        return True, f"tool '{facts.tool}' matches '{hit}'"


class MethodIs(Struct, frozen=True):
    """`method: sampling | elicitation`."""

    method: str

    def test(self, facts: Facts) -> tuple[bool, str]:
        if facts.method != self.method:
            return False, f"method is {facts.method}, not {self.method}"
        return True, f"method is {self.method}"


class ModelMatches(Struct, frozen=True):
    """`model: GLOB` (or a list): true when any model hint matches any glob, case-insensitive."""

    patterns: tuple[str, ...]

    def test(self, facts: Facts) -> tuple[bool, str]:
        if facts.model_chosen is not None:  # the model that would run, whatever the hints say
            hit = _glob_hit(facts.model_chosen, self.patterns)
            if hit is not None:
                return True, f"the model the proxy chooses, '{facts.model_chosen}', matches '{hit}'"
        for hint in facts.model_hints:
            hit = _glob_hit(hint, self.patterns)
            if hit is not None:
                return True, f"model hint '{hint}' matches '{hit}'"
        chosen = f"the model chosen ('{facts.model_chosen}')" if facts.model_chosen else "no model is chosen"
        if not facts.model_hints:
            return False, f"{chosen}, and no model hint, matches {_quoted(self.patterns)}"
        shown = ", ".join(f"'{h}'" for h in facts.model_hints)
        return False, f"{chosen}, and no model hint ({shown}), matches {_quoted(self.patterns)}"


class Over(Struct, frozen=True):
    """`max_tokens_over: N` / `messages_over: N`: the request's value is greater than N."""

    subject: str  # "max_tokens" | "messages"
    limit: int

    def test(self, facts: Facts) -> tuple[bool, str]:
        value = facts.max_tokens if self.subject == "max_tokens" else facts.message_count
        label = "max_tokens" if self.subject == "max_tokens" else "message count"
        if value is None:
            return False, f"{label} is not given, so it is not over {self.limit}"
        if value > self.limit:
            return True, f"{label} {value} is over {self.limit}"
        return False, f"{label} {value} is not over {self.limit}"


class ContentHas(Struct, frozen=True):
    """`content: TYPE` or a list: any of the listed content types is present."""

    types: tuple[str, ...]

    def test(self, facts: Facts) -> tuple[bool, str]:
        present = [t for t in self.types if t in facts.content_types]
        if present:
            return True, f"content has {', '.join(present)}"
        has = ", ".join(sorted(facts.content_types)) or "no content"
        if len(self.types) == 1:
            return False, f"content has no {self.types[0]} (it has {has})"
        return False, f"content has none of {', '.join(self.types)} (it has {has})"


class IncludeContextIs(Struct, frozen=True):
    """`include_context: none | thisServer | allServers` or a list."""

    values: tuple[str, ...]

    def test(self, facts: Facts) -> tuple[bool, str]:
        if facts.include_context in self.values:
            return True, f"include_context is {facts.include_context}"
        expected = self.values[0] if len(self.values) == 1 else f"one of {', '.join(self.values)}"
        return False, f"include_context is {facts.include_context}, not {expected}"


class TextMatches(Struct, frozen=True):
    """`text_matches: REGEX`: `re.search` over every string the LLM gets, as written and folded (NFKC,
    without format characters: a zero-width space or fullwidth letters do not slip past it)."""

    regex: re.Pattern[str]

    def test(self, facts: Facts) -> tuple[bool, str]:
        found = self.regex.search(facts.text) or self.regex.search(folded(facts.text))
        if found is None:
            return False, f"text does not match /{self.regex.pattern}/"
        return True, f"text matches /{self.regex.pattern}/ ({_clip(found.group(0))!r})"


def _clip(text: str, limit: int = 40) -> str:
    return text if len(text) <= limit else text[:limit] + "…"


class All(Struct, frozen=True):
    """One `when:` mapping: every condition must hold (an empty one matches everything)."""

    conditions: tuple[Condition, ...] = ()

    def test(self, facts: Facts) -> tuple[bool, str]:
        reasons = []
        for condition in self.conditions:
            matched, reason = condition.test(facts)
            if not matched:
                return False, reason
            reasons.append(reason)
        return True, " and ".join(reasons) if reasons else "the rule has no conditions"


class AnyOf(Struct, frozen=True):
    """`any: [WHEN, ...]`: at least one of the mappings matches."""

    alternatives: tuple[All, ...]

    def test(self, facts: Facts) -> tuple[bool, str]:
        misses = []
        for alternative in self.alternatives:
            matched, reason = alternative.test(facts)
            if matched:
                return True, reason
            misses.append(reason)
        if len(misses) == 1:
            return False, misses[0]
        return False, "no alternative of any matches: " + "; ".join(f"({i}) {r}" for i, r in enumerate(misses, 1))


class Not(Struct, frozen=True):
    """`not: WHEN`: the mapping does not match."""

    condition: All

    def test(self, facts: Facts) -> tuple[bool, str]:
        matched, reason = self.condition.test(facts)
        if matched:
            return False, f"{reason}, which 'not' excludes"
        return True, reason


ALWAYS = All()
