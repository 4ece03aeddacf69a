"""How a stage ends a sampling request: an audit outcome, the server's error, extra audit fields."""

from __future__ import annotations

from typing import Unpack

from mcp_sampling_proxy.audit.records import AuditFields
from mcp_sampling_proxy.notation.vocabulary import Outcome
from mcp_sampling_proxy.protocol import jsonrpc
from mcp_sampling_proxy.protocol.jsonrpc import RpcError
from mcp_sampling_proxy.quotas.refusals import Refusal


class Ended(Exception):
    """A stage ended the request: how (an audit outcome), the error the server gets, and extra
    audit fields (the approver, the limit, the checks' verdicts)."""

    def __init__(self, outcome: Outcome, error: RpcError, /, **fields: Unpack[AuditFields]):
        super().__init__(error.message)
        self.outcome = outcome
        self.error = error
        self.fields: AuditFields = fields


def limit_error(refusal: Refusal) -> RpcError:
    """The server's error for a limit that refused it, with when to retry."""
    data = {"limit": refusal.limit, "retryAfter": round(refusal.retry_after, 1)} if refusal.retry_after else None
    return RpcError(jsonrpc.USER_REJECTED, refusal.message, data)
