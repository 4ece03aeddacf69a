"""A human's approval, when the matched rule says prompt. An edited prompt is checked as the
original was (services/assess.py's `checked_edit`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from msgspec import Struct
from msgspec.structs import replace

from mcp_sampling_proxy.approval.approver import Approver
from mcp_sampling_proxy.approval.channels import ApprovalRequest
from mcp_sampling_proxy.audit.notes import governance_notes
from mcp_sampling_proxy.audit.records import AuditFields
from mcp_sampling_proxy.config.settings import Settings
from mcp_sampling_proxy.policy.engine import Decision
from mcp_sampling_proxy.protocol import jsonrpc
from mcp_sampling_proxy.protocol.jsonrpc import RpcError
from mcp_sampling_proxy.protocol.sampling_request import SamplingRequest, describe
from mcp_sampling_proxy.protocol.wire_types import JsonRpcRequest
from mcp_sampling_proxy.relay.keepalive import waiting_for
from mcp_sampling_proxy.services.assess import SamplingJudgement, checked_edit
from mcp_sampling_proxy.services.sampling.ended import Ended

if TYPE_CHECKING:
    from mcp_sampling_proxy.relay.ports import HostLine
    from mcp_sampling_proxy.relay.session import Session


class Approved(Struct, frozen=True):
    """A request cleared to go on: the message to forward and the request (edited or not), what
    the human was asked (for the review), and who approved it (None: the policy allowed it)."""

    message: JsonRpcRequest
    request: SamplingRequest
    asked: ApprovalRequest | None  # None when nobody will be shown it (no prompt, no review)
    approver: str | None
    as_received: bool  # False when a cap or an editor changed the request: its bytes may not be reused

    @classmethod
    def of(
        cls, message: JsonRpcRequest, request: SamplingRequest, asked: ApprovalRequest | None, approver: str | None
    ) -> Approved:
        as_received = request.wire is message.get("params")
        return cls(
            message if as_received else {**message, "params": dict(request.wire)}, request, asked, approver, as_received
        )


class Approval:
    def __init__(self, settings: Settings, approver: Approver):
        self._settings = settings
        self._approver = approver

    async def approve(
        self,
        message: JsonRpcRequest,
        request: SamplingRequest,
        judged: SamplingJudgement,
        host: HostLine,
        audit: AuditFields,
    ) -> Approved:
        """Ask a human when the rule says prompt; an edited prompt is checked like the original,
        under the caps that applied to it."""
        session, tool, decision = host.session, audit.get("tool"), judged.decision
        if decision.action != "prompt":  # what a human would be shown is needed only for a review
            shown = asked(request, session, tool, decision) if self._settings.approval.review_response else None
            return Approved.of(message, request, shown, None)
        found = tuple(n["text"] for n in governance_notes(audit))  # the checks passed, credentials masked
        question = replace(asked(request, session, tool, decision), notes=found)
        with waiting_for("waiting for approval"):  # progress keep-alive (relay/keepalive.py)
            approval = await self._approver.ask(question, host)
        if approval.approved_by:  # each approver by name (several under approval.quorum)
            audit["approved_by"] = list(approval.approved_by)
        if not approval.approved:
            raise Ended(
                "timeout" if approval.outcome == "timeout" else "rejected",
                RpcError(jsonrpc.USER_REJECTED, approval.reason),
                approver=approval.channel,
            )
        if approval.params is None:
            return Approved.of(message, request, question, approval.channel)
        audit["prompt_edited_by"] = approval.channel
        try:
            edited = checked_edit(approval.params, judged.caps)
        except RpcError as exc:
            raise Ended("error", exc, approver=approval.channel) from None
        question = replace(
            question,
            params=edited.wire,
            prompt_edited_by=approval.channel,
            summary=describe(edited.wire, server=session.server_label, tool=tool),
        )
        return Approved.of(message, edited, question, approval.channel)


def asked(request: SamplingRequest, session: Session, tool: str | None, decision: Decision) -> ApprovalRequest:
    """What a human is shown of a request: who asks, under which rule, and a summary safe for a screen."""
    return ApprovalRequest(
        session.server_name,
        session.host_name,
        tool,
        decision.rule,
        request.wire,
        describe(request.wire, server=session.server_label, tool=tool),
    )
