"""How an elicitation ends: what the server gets back, and the fields of the request's one record."""

from __future__ import annotations

from typing import Any, Unpack

from msgspec import Struct

from mcp_sampling_proxy.audit.records import AuditFields
from mcp_sampling_proxy.notation.vocabulary import Outcome
from mcp_sampling_proxy.protocol.jsonrpc import RpcError


class Ending(Struct, frozen=True):
    """`result` is what the record keeps and, unless `error` is set, what the server gets; with `error`
    the server gets that error instead (a host that failed, or answered with something not an object)."""

    result: Any
    fields: AuditFields
    error: RpcError | None = None


class Answered(Exception):
    """A stage answers for the proxy (the policy's, a limit's, an auto-answer's answer, or nobody's to
    give): the request ends here with `action` and, when given, `content`."""

    def __init__(
        self,
        action: str,
        why: str,
        decision: Outcome,
        content: dict[str, Any] | None = None,
        /,
        **extra: Unpack[AuditFields],  # e.g. the limit that refused it
    ) -> None:
        super().__init__(why)
        reply = {"action": action, "content": content} if content is not None else {"action": action}
        self.ending = Ending(reply, {"decision": decision, "reason": why, "action": action, **extra})
