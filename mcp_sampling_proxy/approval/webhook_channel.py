"""The approval channel through a webhook: the proxy POSTs a signed approval request to `approval.webhook.url`
(a chat bot, an on-call tool) and waits, up to `approval.webhook.timeout`, for the signed answer in the
response (webhook_signing.py has the format).

Synchronous on purpose: the answer comes back on the connection the proxy opened, so the receiver needs
no way in to the proxy (no listening port on the user's machine, nothing a governed server could post
to). Anything that is not a well-signed answer bound to this very request is a refusal, with the reason
in the audit record; a receiver that cannot be reached is a channel that went away (the next one is
asked). The secret is held here only, never logged, never sent.
"""

from __future__ import annotations

import json
import secrets
from typing import Any
from urllib.parse import urlsplit

from mcp_sampling_proxy.approval.channels import Approval, ApprovalRequest, ChannelGone, HostLine, Review
from mcp_sampling_proxy.approval.webhook_signing import (
    REQUEST_ID_HEADER,
    BadAnswer,
    request_sha256,
    signed_headers,
    verify_answer,
)
from mcp_sampling_proxy.config.approval_grammar import WebhookSettings
from mcp_sampling_proxy.log import get_logger
from mcp_sampling_proxy.system.shared_files import read_regular
from mcp_sampling_proxy.text.sanitize import one_line

log = get_logger("mcp_sampling_proxy.approval.webhook")

MAX_ANSWER = 64 * 1024  # bytes of an answer; more is refused


class WebhookChannel:
    name = "webhook"
    single_approver = False  # a receiver can bring several people (each answer names its approver)

    def __init__(self, settings: WebhookSettings, secret: bytes | None):
        self._settings = settings
        self._secret = secret
        self._where = urlsplit(settings.url)._replace(query="", fragment="").geturl()  # for logs: no query

    def available(self, host: HostLine) -> bool:
        return self._secret is not None  # without it nothing could be signed or checked (doctor says so)

    async def settle(self) -> None:
        """Nobody arrives on this channel later: it is there from the start or not at all."""

    def request_body(self, request: ApprovalRequest, request_id: str) -> dict[str, Any]:
        """What the receiver is shown: who asks under which rule, and exactly what would run."""
        return {
            "type": "mcp-sampling-proxy/approval-request",
            "version": 1,
            "request_id": request_id,
            "server": request.server,
            "host": request.host,
            "tool": request.tool,
            "rule": request.rule,
            "method": "sampling/createMessage",
            "summary": request.summary,
            "params": request.params,
            "request_sha256": request_sha256(request.params),
            "quorum": (
                {"needed": request.quorum.needed, "approved_by": list(request.quorum.approved_by)}
                if request.quorum is not None
                else None
            ),
            "timeout_seconds": self._settings.timeout,
        }

    async def ask(self, request: ApprovalRequest, host: HostLine) -> Approval:
        import httpx  # start-up cost: the common path (no webhook) never needs it

        assert self._secret is not None  # asked only when available
        request_id = secrets.token_hex(16)
        body = json.dumps(self.request_body(request, request_id), separators=(",", ":")).encode("ascii")
        headers = {
            "Content-Type": "application/json",
            REQUEST_ID_HEADER: request_id,
            **signed_headers(self._secret, body),
        }
        timeout = self._settings.timeout
        try:
            async with (
                httpx.AsyncClient(timeout=httpx.Timeout(timeout, connect=min(timeout, 10.0))) as client,
                client.stream("POST", self._settings.url, content=body, headers=headers) as response,
            ):
                answer = await _read_capped(response)
                status = response.status_code
                answer_headers = response.headers
        except httpx.ConnectError as exc:
            log.warning("cannot reach the approval webhook", url=self._where, error=one_line(str(exc), 200))
            raise ChannelGone from None
        except httpx.TimeoutException:
            return Approval(False, self.name, f"the webhook did not answer within {timeout:g} s; denied", "timeout")
        except (httpx.HTTPError, _TooLarge) as exc:
            return self._refused(f"no usable answer ({one_line(str(exc) or type(exc).__name__, 200)})")
        if status != 200:
            return self._refused(f"it answered HTTP {status}")
        try:
            verified = verify_answer(
                self._secret, answer_headers, answer, request_id=request_id, digest=request_sha256(request.params)
            )
        except BadAnswer as exc:
            return self._refused(f"its answer was refused: {exc}")
        approver = one_line(verified.approver, 64)
        identity = f"webhook:{approver}"
        if verified.decision == "deny":
            why = f"denied through the webhook by {approver}"
            return Approval(False, self.name, why, "rejected", identity=identity)
        return Approval(True, self.name, f"approved through the webhook by {approver}", "approved", identity=identity)

    def _refused(self, why: str) -> Approval:
        log.warning("approval webhook refused", url=self._where, reason=why)
        return Approval(False, self.name, f"the webhook gave no valid approval: {why}; denied", "rejected")

    async def review(self, request: ApprovalRequest, result: dict[str, Any], host: HostLine) -> Review:
        log.warning(
            "approval.review_response is not offered through the webhook: the answer is withheld; "
            "put terminal, console or host before webhook in approval.channels to review answers"
        )
        return Review(False, result, self.name)


class _TooLarge(Exception):
    def __str__(self) -> str:
        return f"the answer is over {MAX_ANSWER} bytes"


async def _read_capped(response: Any) -> bytes:
    data = b""
    async for chunk in response.aiter_bytes():
        data += chunk
        if len(data) > MAX_ANSWER:
            raise _TooLarge
    return data


def read_secret(settings: WebhookSettings, environ: Any, withheld: Any) -> bytes | None:
    """The shared secret from its variable (`withheld`: read once the proxy took it out of its environment)
    or its file's first line; None when it is not set (the channel is then unavailable)."""
    if settings.secret_env:
        value = environ.get(settings.secret_env) or withheld(settings.secret_env)
        return value.encode("utf-8") if value else None
    assert settings.secret_file is not None
    try:
        text = read_regular(settings.secret_file, 64 * 1024).decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        log.warning("cannot read the webhook secret", file=settings.secret_file, error=one_line(str(exc), 200))
        return None
    line = text.strip().splitlines()[0].strip() if text.strip() else ""
    return line.encode("utf-8") if line else None
