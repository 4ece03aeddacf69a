"""The last stage before the server gets an answer: the rule's checks on it, credentials in it,
and a human's review (`approval.review_response`, for our own LLM's answers); then its record."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import anyio
from msgspec import Struct

from mcp_sampling_proxy.approval.approver import Approver
from mcp_sampling_proxy.audit.recorder import AuditLog
from mcp_sampling_proxy.audit.records import AuditFields, digest
from mcp_sampling_proxy.config.settings import Settings
from mcp_sampling_proxy.log import get_logger
from mcp_sampling_proxy.policy.engine import Decision
from mcp_sampling_proxy.protocol import jsonrpc
from mcp_sampling_proxy.protocol.jsonrpc import RpcError
from mcp_sampling_proxy.protocol.wire_types import CreateMessageParams
from mcp_sampling_proxy.relay.keepalive import waiting_for
from mcp_sampling_proxy.services import secret_scan
from mcp_sampling_proxy.services.sampling.checks import Checks
from mcp_sampling_proxy.services.sampling.ended import Ended

if TYPE_CHECKING:
    from mcp_sampling_proxy.relay.ports import HostLine
    from mcp_sampling_proxy.services.sampling.approve import Approved

log = get_logger("mcp_sampling_proxy.services.sampling")


class Answer(Struct, frozen=True):
    """An LLM's answer to a request: the result, and the fields of its audit record so far."""

    result: dict[str, Any]
    fields: AuditFields
    by_host: bool  # the host's LLM answered (no human review: the host showed it or not)


class Review:
    def __init__(self, settings: Settings, approver: Approver, audit_log: AuditLog, checks: Checks):
        self._settings = settings
        self._approver = approver
        self._audit = audit_log
        self._checks = checks

    async def review(self, approved: Approved, decision: Decision, host: HostLine, answer: Answer) -> dict[str, Any]:
        """What the server gets of `answer`, recorded: after the rule's answer checks, the credential
        scan (last, so that nothing a check wrote goes out unscanned) and, for our own LLM's answers
        under `approval.review_response`, a human's review."""
        params = approved.request.wire
        fields: AuditFields = {**answer.fields}  # the checks, the scan and the review add to it
        server = host.session.server_name
        result = await self._checks.on_answer(approved.request, answer.result, decision, server, fields)
        result = self._scan_answer(params, result, fields)
        if answer.by_host or not self._settings.approval.review_response:
            self._audit.record(params=params, result=result, **fields)
            return result
        return await self._by_a_human(approved, host, result, fields)

    async def _by_a_human(
        self, approved: Approved, host: HostLine, result: dict[str, Any], fulfilled: AuditFields
    ) -> dict[str, Any]:
        """The record waits for the review, so that it holds the answer the server gets."""
        params = approved.request.wire
        try:
            assert approved.asked is not None  # made whenever review_response is on
            with waiting_for("waiting for review of the answer"):  # progress keep-alive (relay/keepalive.py)
                review = await self._approver.review(approved.asked, result, host)
        except BaseException as exc:  # the LLM was called all the same: its record says how it ended
            cancelled = isinstance(exc, anyio.get_cancelled_exc_class())
            unreviewed: AuditFields = {
                **fulfilled,
                "decision": "cancelled" if cancelled else "error",
                "reason": "cancelled while the answer was under review"
                if cancelled
                else f"the review failed: {type(exc).__name__}",
            }
            self._audit.record(params=params, result=result, **unreviewed)
            raise
        if not review.accepted:  # one record, `rejected`, with the provider, model and a digest of the answer
            rejected: AuditFields = {**fulfilled, "original_answer_sha256": digest(result)["sha256"]}
            self._audit.record(params=params, result=result, **rejected)
            raise Ended(
                "rejected",
                RpcError(jsonrpc.USER_REJECTED, f"the LLM's answer was not approved for the server ({review.channel})"),
                approver=review.channel,
            )
        if review.result != result:  # the reviewer replaced the answer: record what the server gets
            fulfilled = {
                **fulfilled,
                "answer_edited_by": review.channel,
                "original_answer_sha256": digest(result)["sha256"],
            }
        self._audit.record(params=params, result=review.result, **fulfilled)
        return review.result

    def _scan_answer(self, params: CreateMessageParams, result: dict[str, Any], fields: AuditFields) -> dict[str, Any]:
        """Credentials in an LLM's answer: masked, refused or let through by `sampling.on_secret`,
        and named in the audit record (`fields`, filled in here), never the secret itself."""
        scanned = secret_scan.scan(result.get("content"))
        if not scanned.types:
            return result
        fields["answer_secrets"] = list(scanned.types)
        on_secret = self._settings.sampling.checks.on_secret
        log.warning("credentials in an LLM answer", types=scanned.types, on_secret=on_secret)
        if on_secret == "deny":
            refused: AuditFields = {**fields, "original_answer_sha256": digest(result)["sha256"]}
            self._audit.record(params=params, result=None, **refused)  # the secret stays out of the log
            raise Ended(
                "deny",
                RpcError(
                    jsonrpc.USER_REJECTED,
                    f"the LLM's answer held credentials ({', '.join(scanned.types)}) and was withheld: "
                    "the proxy's policy refuses them (sampling.on_secret: deny)",
                ),
                answer_secrets=list(scanned.types),
            )
        if on_secret == "allow":
            return result
        fields["original_answer_sha256"] = digest(result)["sha256"]
        return {**result, "content": scanned.value}
