"""How a service opens a server request it answers: the one front sampling and elicitation share.

Both take a `ServerRequest` (relay/ports.py), learn which host calls could own it, open the one audit
record every ending of it writes (`AuditLog.every_ending`), and count it against the requests the
proxy holds at once (`Limiters.holding`). What differs comes after: each service's own stages.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, Unpack

from msgspec import Struct

from mcp_sampling_proxy.audit.recorder import AuditLog
from mcp_sampling_proxy.audit.records import AuditFields, elapsed_ms, request_fields
from mcp_sampling_proxy.quotas.limiters import Limiters
from mcp_sampling_proxy.quotas.refusals import Refusal

if TYPE_CHECKING:
    from mcp_sampling_proxy.relay.ports import ServerRequest


class Opened(Struct):
    """A server request as its service opened it."""

    incoming: ServerRequest
    audit: AuditFields  # the fields its one record shares; the stages add what they learn
    started: float  # time.monotonic() when it was opened: the record's latency counts from here
    in_flight: tuple[str, ...]  # every host tool call that could own it (policy.decide judges each)
    busy: Refusal | None  # the proxy holds too many requests already: the request ends at once

    def ended(self, **fields: Unpack[AuditFields]) -> AuditFields:
        """The record of how it ended: the shared fields, the latency so far, then `fields`."""
        return {**self.audit, "latency_ms": elapsed_ms(self.started), **fields}


@asynccontextmanager
async def opened(
    incoming: ServerRequest, audit_log: AuditLog, limiters: Limiters, params: Any, **fields: Unpack[AuditFields]
) -> AsyncIterator[Opened]:
    """`async with opened(...) as request:` around a service's stages; `params` is what the record
    keeps of the request should it end before a stage records it (an error, a cancellation)."""
    started = time.monotonic()
    session = incoming.session
    in_flight = session.tool_candidates()
    tool = in_flight[-1] if in_flight else None
    audit = request_fields(session, incoming.message, tool, in_flight)
    audit.update(fields)
    async with audit_log.every_ending(audit, params):
        with limiters.holding() as busy:
            yield Opened(incoming, audit, started, in_flight, busy)
