"""Human approval for `prompt` decisions, failing closed.

Channels are tried in the configured order (default: the controlling terminal, the companion
console, the host through `elicitation/create`); the first one that can reach a human asks.
When none can, or nobody answers within the timeout, the request is denied with a message that
says why and how to set up a channel. "Approve for this session" lasts as long as the proxy;
"always" is remembered per server and tool in the user's state directory (memory.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import anyio

from mcp_sampling_proxy.approval.channels import Approval, ApprovalRequest, Channel, Relay, Review
from mcp_sampling_proxy.approval.console.server import ConsoleGone
from mcp_sampling_proxy.approval.memory import ApprovalMemory
from mcp_sampling_proxy.log import get_logger

log = get_logger("mcp_sampling_proxy.approval.approver")

DEFAULT_TIMEOUT = 120.0

NO_CHANNEL_HINT = (
    "no approval channel is available (the proxy has no terminal, no companion console is attached, and "
    "the host does not support elicitation). Run `mcp-sampling-proxy console` in a terminal to approve "
    "requests, or add a rule with 'action: allow' for this server to the policy file (--policy)"
)


class Approver:
    def __init__(
        self, channels: list[Channel], *, timeout: float = DEFAULT_TIMEOUT, memory: ApprovalMemory | None = None
    ):
        self._channels = channels
        self._timeout = timeout
        self._memory = memory or ApprovalMemory()

    def _channel(self, relay: Relay, skip: Sequence[str] = ()) -> Channel | None:
        return next((c for c in self._channels if c.name not in skip and c.available(relay)), None)

    async def ask(self, request: ApprovalRequest, relay: Relay) -> Approval:
        remembered = await self._memory.recall(request.server, request.tool)
        if remembered:
            return Approval(True, "remembered", f"approved earlier for this {remembered}", "approved", remembered)
        gone: list[str] = []  # channels whose human went away before answering (a console quit)
        with anyio.move_on_after(self._timeout):
            while (channel := self._channel(relay, skip=gone)) is not None:
                try:
                    answer = await channel.ask(request, relay)
                except ConsoleGone:
                    log.info("the companion console went away before answering; trying the next channel")
                    gone.append(channel.name)
                    continue
                if answer.approved and answer.scope in ("session", "always"):
                    await self._memory.keep(request.server, request.tool, answer.scope, request.rule, answer.channel)
                return self._noting_forgery(request, answer)
            why = (
                (
                    f"the {' and the '.join(gone)} went away before answering, and no other approval channel is "
                    "available; denied"
                )
                if gone
                else NO_CHANNEL_HINT
            )
            refused = Approval(
                False,
                gone[-1] if gone else None,
                f"approval required by policy rule '{request.rule}' but {why}",
                "rejected" if gone else "unavailable",
            )
            return self._noting_forgery(request, refused)
        channel = self._channel(relay, skip=gone) or next(c for c in self._channels if c.name == gone[-1])
        return Approval(
            False,
            channel.name,
            f"nobody answered the approval request on the {channel.name} within {self._timeout:g} s; "
            "denied (raise approval.timeout, or add an allow rule for this server)",
            "timeout",
        )

    def _noting_forgery(self, request: ApprovalRequest, approval: Approval) -> Approval:
        """The approval, its reason saying (for the audit record) when a forged remembered one was ignored."""
        if not self._memory.ignored(request.server, request.tool):
            return approval
        return replace(
            approval,
            reason=f"{approval.reason} (a remembered approval for this in approvals.json was "
            "not written by a proxy: ignored)",
        )

    async def review(self, request: ApprovalRequest, result: dict[str, Any], relay: Relay) -> Review:
        """Let a human check (and edit) the LLM's answer before the server gets it."""
        channel = self._channel(relay)
        if channel is None:
            return Review(False, result, "none")
        with anyio.move_on_after(self._timeout):
            try:
                return await channel.review(request, result, relay)
            except ConsoleGone:  # the reviewer went away: the answer was not approved for the server
                return Review(False, result, channel.name)
        return Review(False, result, channel.name)
