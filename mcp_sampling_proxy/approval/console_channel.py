"""The approval channel through the companion console (`mcp-sampling-proxy console`, attached over the
console socket): the request goes to it as a `pending` message, its answer comes back checked."""

from __future__ import annotations

from typing import Any

from mcp_sampling_proxy.approval.channels import (
    APPROVAL_SCOPES,
    Approval,
    ApprovalRequest,
    ApprovalScope,
    HostLine,
    Review,
)
from mcp_sampling_proxy.approval.console.server import ConsoleServer
from mcp_sampling_proxy.approval.edits import last_user, text_of, with_prompt, with_text
from mcp_sampling_proxy.text.sanitize import one_line

MAX_NAME = 64


def console_identity(name: Any) -> str:
    """Who answered at a console: `console:NAME` when the person gave a name (the web console keeps one per
    browser tab), else `console`. A convenience on a page only the user can open, not authentication."""
    if isinstance(name, str) and (clean := one_line(name, MAX_NAME).strip()):
        return f"console:{clean}"
    return "console"


class ConsoleChannel:
    name = "console"
    single_approver = False

    def __init__(self, server: ConsoleServer):
        self._server = server

    def available(self, host: HostLine) -> bool:
        return self._server.available

    async def settle(self) -> None:
        await self._server.settle()

    async def ask(self, request: ApprovalRequest, host: HostLine) -> Approval:
        # "edit": "prompt": answer an edit with the new text only (`prompt`); the proxy applies it.
        answer = await self._server.ask(
            {
                "type": "pending",
                "server": request.server,
                "host": request.host,
                "tool": request.tool,
                "rule": request.rule,
                "summary": request.summary,
                "params": dict(request.params),
                "edit": "prompt",
                **({"notes": list(request.notes)} if request.notes else {}),
                **(
                    {"quorum": {"needed": request.quorum.needed, "approved_by": list(request.quorum.approved_by)}}
                    if request.quorum is not None
                    else {}
                ),
            }
        )
        identity = console_identity(answer.get("approver"))
        if answer.get("approve") is not True:  # a peer's "false" string must not approve
            by = f" by {identity}" if identity != self.name else ""
            return Approval(False, self.name, f"rejected at the companion console{by}", "rejected", identity=identity)
        scope: ApprovalScope = answer["scope"] if answer.get("scope") in APPROVAL_SCOPES else "once"
        text = answer.get("prompt")
        if not isinstance(text, str) and isinstance(answer.get("params"), dict):
            # A console from before "edit": "prompt" sends the whole edited request: only its text is taken,
            # so a console can neither drop the request's images nor change anything else in it.
            index = last_user(answer["params"])
            text = None if index is None else text_of(answer["params"]["messages"][index].get("content"))
            if text is None:
                return Approval(
                    False, self.name, "the companion console sent an edited request without text; denied", "rejected"
                )
        if not isinstance(text, str):
            return Approval(True, self.name, "approved at the companion console", "approved", scope, identity=identity)
        try:
            edited = with_prompt(request.params, text)
        except ValueError as exc:
            return Approval(
                False, self.name, f"the companion console's edit was not applied ({exc}); denied", "rejected"
            )
        return Approval(
            True,
            self.name,
            "approved with an edited prompt at the companion console",
            "approved",
            scope,
            edited,
            identity=identity,
        )

    async def review(self, request: ApprovalRequest, result: dict[str, Any], host: HostLine) -> Review:
        # "edit": "text": a replaced answer comes back as its new text only (`text`); the proxy applies it.
        answer = await self._server.ask(
            {
                "type": "review",
                "server": request.server,
                "tool": request.tool,
                "summary": request.summary,
                "prompt_edited_by": request.prompt_edited_by,
                "result": result,
                "edit": "text",
            }
        )
        text = answer.get("text")
        if not isinstance(text, str) and isinstance(answer.get("result"), dict):
            text = text_of(answer["result"].get("content"))  # a console from before "edit": "text"
        edited = with_text(result, text) if isinstance(text, str) else result
        return Review(answer.get("accept") is True, edited, self.name)
