"""What an approval channel is: the records it is asked with and answers with, the `Channel` protocol
each channel meets (terminal_channel.py, console_channel.py, host_channel.py; registry.py makes them by
name), and what it may use of the relay. The approver (approver.py) tries them in the configured order.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Protocol, get_args

# How an approval ended, in the words every channel answers with (the approver and the audit record read
# them): a human said yes, said no, did not answer in time, or no channel could reach one.
ApprovalOutcome = Literal["approved", "rejected", "timeout", "unavailable"]
# How long a yes lasts: this request, this proxy's session, or always (remembered per server and tool).
ApprovalScope = Literal["once", "session", "always"]
APPROVAL_SCOPES: tuple[ApprovalScope, ...] = get_args(ApprovalScope)


class HostSession(Protocol):
    host_capabilities: dict[str, Any]


class Relay(Protocol):
    """What a channel needs of the relay (relay/core.py's Relay): the host's capabilities, and a way to
    put a request to the host. Approval sits below the relay and reaches it only through this."""

    @property
    def session(self) -> HostSession: ...

    async def request_host(self, method: str, params: dict[str, Any]) -> dict[str, Any]: ...


@dataclass(frozen=True)
class ApprovalRequest:
    server: str
    host: str
    tool: str | None
    rule: str
    params: dict[str, Any]  # server-controlled: sanitise before showing
    summary: str  # already sanitised
    prompt_edited_by: str | None = None  # the channel whose human edited the prompt (for the review)


@dataclass(frozen=True)
class Approval:
    approved: bool
    channel: str | None  # terminal | console | host | remembered, or None when nobody was asked
    reason: str
    outcome: ApprovalOutcome
    scope: ApprovalScope = "once"
    params: dict[str, Any] | None = None  # the request as edited by the operator


@dataclass(frozen=True)
class Review:
    accepted: bool
    result: dict[str, Any]  # the (possibly edited) sampling result
    channel: str


class Channel(Protocol):
    name: str

    def available(self, relay: Relay) -> bool: ...

    async def ask(self, request: ApprovalRequest, relay: Relay) -> Approval: ...

    async def review(self, request: ApprovalRequest, result: dict[str, Any], relay: Relay) -> Review: ...
