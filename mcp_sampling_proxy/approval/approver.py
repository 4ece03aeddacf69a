"""Human approval for `prompt` decisions, failing closed.

Channels are tried in the configured order (default: the controlling terminal, the companion
console, the host through `elicitation/create`); the first one that can reach a human asks.
When none can, or nobody answers within the timeout, the request is denied with a message that
says why and how to set up a channel. The timeout counts from when the question is shown: a request
waiting at the terminal behind another question has its whole time once it is asked. "Approve for
this session" lasts as long as the proxy; "always" is remembered per server and tool in the user's
state directory (memory.py).

Under `approval.quorum: N` (N > 1) every channel that can reach a human is asked at once, and a
request runs only when N different approvers said yes (`Approval.identity`: the terminal, the host's
user, each named console user, each webhook approver); the same approver twice counts once, and one
no ends it. Each approval then counts for this request only: nothing is remembered, and remembered
approvals are not used, since one person's "always" must not stand in for several people.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import anyio
from msgspec import Struct, field
from msgspec.structs import replace

from mcp_sampling_proxy.approval.channels import (
    Approval,
    ApprovalRequest,
    Channel,
    ChannelGone,
    HostLine,
    QuorumState,
    Review,
    person_of,
    timed,
)
from mcp_sampling_proxy.approval.memory import ApprovalMemory
from mcp_sampling_proxy.log import get_logger

log = get_logger("mcp_sampling_proxy.approval.approver")

DEFAULT_TIMEOUT = 120.0
REPEAT_PAUSE = 1.0  # s; before asking a channel again whose approver had approved already (a bot must not spin)

NO_CHANNEL_HINT = (
    "no approval channel is available (the proxy has no terminal, no companion console is attached, and "
    "the host does not support elicitation). Run `mcp-sampling-proxy console` in a terminal to approve "
    "requests, or add a rule with 'action: allow' for this server to the policy file (--policy)"
)


class Approver:
    def __init__(
        self,
        channels: list[Channel],
        *,
        timeout: float = DEFAULT_TIMEOUT,
        memory: ApprovalMemory | None = None,
        quorum: int = 1,
    ):
        self._channels = channels
        self._timeout = timeout
        self._memory = memory or ApprovalMemory()
        self._quorum = quorum

    def _channel(self, host: HostLine, skip: Sequence[str] = ()) -> Channel | None:
        return next((c for c in self._channels if c.name not in skip and c.available(host)), None)

    async def _settle(self) -> None:
        """Give a human on the way (a console attaching) the moment it needs, on every channel at once."""
        async with anyio.create_task_group() as group:
            for channel in self._channels:
                group.start_soon(channel.settle)

    async def ask(self, request: ApprovalRequest, host: HostLine) -> Approval:
        if self._quorum > 1:
            return await self._ask_quorum(request, host)
        remembered = await self._memory.recall(request.server, request.tool)
        if remembered:
            return Approval(True, "remembered", f"approved earlier for this {remembered}", "approved", remembered)
        if self._channel(host) is None:
            await self._settle()
        gone: list[str] = []  # channels whose human went away before answering (a console quit)
        with timed(self._timeout):
            while (channel := self._channel(host, skip=gone)) is not None:
                try:
                    answer = await channel.ask(request, host)
                except ChannelGone:
                    log.info("an approval channel went away before answering; trying the next", channel=channel.name)
                    gone.append(channel.name)
                    continue
                if answer.approved and answer.scope in ("session", "always"):
                    await self._memory.keep(request.server, request.tool, answer.scope, request.rule, answer.channel)
                if answer.approved and answer.who:
                    answer = replace(answer, approved_by=(answer.who,))
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
        channel = self._channel(host, skip=gone) or next(c for c in self._channels if c.name == gone[-1])
        return Approval(
            False,
            channel.name,
            f"nobody answered the approval request on the {channel.name} within {self._timeout:g} s; "
            "denied (raise approval.timeout, or add an allow rule for this server)",
            "timeout",
        )

    async def _ask_quorum(self, request: ApprovalRequest, host: HostLine) -> Approval:
        """Ask every channel that can reach a human at once until `quorum` different approvers said yes,
        one said no, every channel is done, or the time is up."""
        # a quorum needs every approver who is coming, not only the first: a console on its way counts
        await self._settle()
        channels = [c for c in self._channels if c.available(host)]
        rule = f"policy rule '{request.rule}'"
        if not channels:
            return Approval(False, None, f"approval required by {rule} but {NO_CHANNEL_HINT}", "unavailable")
        tally = _Tally(self._quorum)
        with timed(self._timeout) as waited:
            async with anyio.create_task_group() as group:
                for channel in channels:
                    group.start_soon(self._gather, channel, request, host, tally, group.cancel_scope)
        so_far = tally.so_far()
        if tally.refusal is not None:
            return replace(tally.refusal, approved_by=tuple(tally.approved))
        if len(tally.approved) >= self._quorum:
            return Approval(
                True,
                "+".join(dict.fromkeys(tally.approved.values())),
                f"approved by {self._quorum} different approvers ({', '.join(tally.approved)})",
                "approved",
                approved_by=tuple(tally.approved),
            )
        if waited.cancelled_caught:
            return Approval(
                False,
                "+".join(dict.fromkeys(c.name for c in channels)),
                f"{rule} needs {self._quorum} different approvers; {so_far} within {self._timeout:g} s; denied "
                "(raise approval.timeout, or lower approval.quorum)",
                "timeout",
                approved_by=tuple(tally.approved),
            )
        return Approval(
            False,
            "+".join(dict.fromkeys(c.name for c in channels)),
            f"{rule} needs {self._quorum} different approvers; {so_far}, and no other approver can be reached; denied",
            "rejected" if tally.approved else "unavailable",
            approved_by=tuple(tally.approved),
        )

    async def _gather(
        self, channel: Channel, request: ApprovalRequest, host: HostLine, tally: _Tally, done: anyio.CancelScope
    ) -> None:
        """Ask one channel, again for another approver when it can bring several, into the tally."""
        repeats = 0
        while True:
            asked = replace(request, quorum=QuorumState(self._quorum, tuple(tally.approved)))
            try:
                answer = await channel.ask(asked, host)
            except ChannelGone:
                log.info("an approval channel went away before answering", channel=channel.name)
                return
            if not answer.approved:
                tally.refusal = answer  # one no ends it
                done.cancel()
                return
            if answer.params is not None:
                tally.refusal = Approval(
                    False,
                    channel.name,
                    f"{answer.who} approved an edited prompt, but under approval.quorum every approver must see "
                    "what runs: edits are refused; denied (approve it unedited, or deny it)",
                    "rejected",
                    identity=answer.identity,
                )
                done.cancel()
                return
            who = answer.who or channel.name
            if any(person_of(who) == person_of(earlier) for earlier in tally.approved):
                repeats += 1
                log.info("the same approver approved again: it counts once", approver=who)
            else:
                tally.approved[who] = channel.name
                log.info("approval counted", approver=who, have=len(tally.approved), needed=self._quorum)
            if len(tally.approved) >= self._quorum:
                done.cancel()
                return
            if channel.single_approver:
                return
            if repeats:
                await anyio.sleep(min(REPEAT_PAUSE * repeats, 10 * REPEAT_PAUSE))

    def _noting_forgery(self, request: ApprovalRequest, approval: Approval) -> Approval:
        """The approval, its reason saying (for the audit record) when a forged remembered one was ignored."""
        if not self._memory.ignored(request.server, request.tool):
            return approval
        return replace(
            approval,
            reason=f"{approval.reason} (a remembered approval for this in approvals.json was "
            "not written by a proxy: ignored)",
        )

    async def review(self, request: ApprovalRequest, result: dict[str, Any], host: HostLine) -> Review:
        """Let a human check (and edit) the LLM's answer before the server gets it."""
        channel = self._channel(host)
        if channel is None:
            return Review(False, result, "none")
        with timed(self._timeout):
            try:
                return await channel.review(request, result, host)
            except ChannelGone:  # the reviewer went away: the answer was not approved for the server
                return Review(False, result, channel.name)
        return Review(False, result, channel.name)


class _Tally(Struct):
    """The answers of one request under a quorum: who approved (identity -> channel, in order) and the
    refusal that ended it, if any."""

    needed: int
    approved: dict[str, str] = field(default_factory=dict)
    refusal: Approval | None = None

    def so_far(self) -> str:
        if not self.approved:
            return "nobody approved it"
        return f"only {len(self.approved)} approved it ({', '.join(self.approved)})"
