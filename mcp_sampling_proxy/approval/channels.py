"""What an approval channel is: the records it is asked with and answers with, the `Channel` protocol
each channel meets (terminal_channel.py, console_channel.py, host_channel.py, webhook_channel.py;
registry.py makes them by name), and what it may use of the relay. The approver (approver.py) tries them
in the configured order, or all at once under a quorum.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar
from typing import Any, Literal, Protocol, get_args

import anyio
from msgspec import Struct

from mcp_sampling_proxy.protocol.wire_types import CallToolParams, CreateMessageParams
from mcp_sampling_proxy.text.identity import normalise

# How an approval ended, in the words every channel answers with (the approver and the audit record read
# them): a human said yes, said no, did not answer in time, or no channel could reach one.
ApprovalOutcome = Literal["approved", "rejected", "timeout", "unavailable"]
# How long a yes lasts: this request, this proxy's session, or always (remembered per server and tool).
ApprovalScope = Literal["once", "session", "always"]
APPROVAL_SCOPES: tuple[ApprovalScope, ...] = get_args(ApprovalScope)
# How a question a human was shown closed: answered there, out of time, or withdrawn (answered on another
# channel, ended by another approver under a quorum, or cancelled by the host).
ClosedHow = Literal["answered", "expired", "withdrawn"]


class HostSession(Protocol):
    host_capabilities: dict[str, Any]


class HostLine(Protocol):
    """What a channel needs of the relay (relay/ports.py's HostLine): the host's capabilities, and a way to
    put a request to the host. Approval sits below the relay and reaches it only through this."""

    @property
    def session(self) -> HostSession: ...

    async def request_host(self, method: str, params: dict[str, Any]) -> dict[str, Any]: ...


class QuorumState(Struct, frozen=True):
    """Where a request stands under `approval.quorum`: how many different approvers it needs and who has
    approved it so far (identities as in `Approval.identity`), for a channel to show its human."""

    needed: int
    approved_by: tuple[str, ...] = ()


class ApprovalRequest(Struct, frozen=True):
    server: str
    host: str
    tool: str | None
    rule: str
    params: CreateMessageParams | CallToolParams  # sampling or a tool call; server-controlled: sanitise before showing
    summary: str  # already sanitised
    prompt_edited_by: str | None = None  # the channel whose human edited the prompt (for the review)
    quorum: QuorumState | None = None  # set when more than one approver is needed
    notes: tuple[str, ...] = ()  # what the governance found before asking (checks passed ...): cleaned lines


class Approval(Struct, frozen=True):
    approved: bool
    channel: str | None  # terminal | console | host | remembered, or None when nobody was asked
    reason: str
    outcome: ApprovalOutcome
    scope: ApprovalScope = "once"
    params: CreateMessageParams | None = None  # the request as edited by the operator
    # who answered: "terminal", "host", "console" or "console:NAME" (the name a web-console user gave),
    # "webhook:NAME" (the receiver's `approver`); None: the channel's name
    identity: str | None = None
    approved_by: tuple[str, ...] = ()  # every approver counted (the approver fills it in; for the audit)

    @property
    def who(self) -> str | None:
        return self.identity or self.channel


def person_of(identity: str) -> str:
    """The person behind an approver identity, for counting a quorum: `console:alice` and
    `webhook:alice` are one alice (a name is a name on whichever channel it arrives), and so are `Alice`
    and a fullwidth `ａｌｉｃｅ` (names compare NFKC-normalised and case-folded, as server names do);
    `terminal`, `host` and an unnamed `console` are themselves."""
    channel, named, name = identity.partition(":")
    return normalise(name) if named and channel in ("console", "webhook") else identity


class Review(Struct, frozen=True):
    accepted: bool
    result: dict[str, Any]  # the (possibly edited) sampling result
    channel: str


class ChannelGone(Exception):
    """The channel's human (or receiver) cannot be reached any more: the approver tries the next channel."""


class Channel(Protocol):
    name: str
    # True when every answer on this channel comes from the same person (the terminal, the host's user):
    # under a quorum it is asked once; a console or a webhook can bring several approvers
    single_approver: bool

    def available(self, host: HostLine) -> bool: ...

    async def settle(self) -> None:
        """Wait briefly for a human who is on the way (a console attaching to a proxy that has just
        started); return at once when nobody can be on the way."""
        ...

    async def ask(self, request: ApprovalRequest, host: HostLine) -> Approval: ...

    async def review(self, request: ApprovalRequest, result: dict[str, Any], host: HostLine) -> Review: ...


WAIT_CEILING = 10  # a question waits its turn at most this many times approval.timeout (a form, which has
# no time limit, left open at the terminal holds no request forever; nor does a console that says it waits)


class ApprovalClock:
    """One approval's time limit (approval.timeout), counted from when its question is shown: a channel that
    asks one question at a time says when it queues it (`waiting`: no time counts, up to WAIT_CEILING times
    the limit) and when it shows it (`shown`: the whole limit from now)."""

    def __init__(self, scope: anyio.CancelScope, seconds: float):
        self._scope, self._seconds = scope, seconds

    def shown(self) -> None:
        self._scope.deadline = anyio.current_time() + self._seconds

    def waiting(self) -> None:
        self._scope.deadline = anyio.current_time() + self._seconds * WAIT_CEILING


_CLOCK: ContextVar[ApprovalClock | None] = ContextVar("approval_clock", default=None)  # set by `timed`


@contextlib.contextmanager
def timed(seconds: float) -> Iterator[anyio.CancelScope]:
    """A scope that gives up on an approval after `seconds`, its clock (`clock`) there for its channels."""
    with anyio.move_on_after(seconds) as scope:
        token = _CLOCK.set(ApprovalClock(scope, seconds))
        try:
            yield scope
        finally:
            _CLOCK.reset(token)


def clock() -> ApprovalClock | None:
    """The clock of the approval asking now (None outside one: an elicitation has no time limit)."""
    return _CLOCK.get()


def closed_how(answered: bool, deadline: float) -> ClosedHow:
    """How a question ended, for the consoles that still show it: a console answered it, its time ran
    out (`deadline`, taken when it was asked), or it was withdrawn (another channel answered it, another
    approver's no ended it under a quorum, or the host cancelled the request)."""
    if answered:
        return "answered"
    return "expired" if anyio.current_time() >= deadline else "withdrawn"
