"""The approval channel through the host's own UI: a yes/no `elicitation/create` form, for hosts that
declare elicitation (form mode)."""

from __future__ import annotations

from typing import Any

from mcp_sampling_proxy.approval.channels import Approval, ApprovalRequest, ApprovalScope, HostLine, Review
from mcp_sampling_proxy.approval.edits import result_text
from mcp_sampling_proxy.protocol import jsonrpc
from mcp_sampling_proxy.text.sanitize import one_line, quote


class HostChannel:
    """Ask the user through the host's own UI with a yes/no elicitation form."""

    name = "host"
    single_approver = True

    def available(self, host: HostLine) -> bool:
        caps = host.session.host_capabilities.get("elicitation")
        return isinstance(caps, dict) and (not caps or "form" in caps)  # {} means form mode (2025-06-18)

    async def settle(self) -> None:
        """Nobody arrives on this channel later: it is there from the start or not at all."""

    async def ask(self, request: ApprovalRequest, host: HostLine) -> Approval:
        tool = f" during tool call '{one_line(request.tool, 80)}'" if request.tool else ""
        response = await host.request_host(
            "elicitation/create",
            {
                "message": f"mcp-sampling-proxy: server '{one_line(request.server, 80)}' asks to use an LLM{tool}. "
                f"What it sent (quoted):\n\n{quote(request.summary)}",
                "requestedSchema": {
                    "type": "object",
                    "properties": {
                        "approve": {"type": "boolean", "title": "Allow this LLM request?", "default": False},
                        "remember": {
                            "type": "boolean",
                            "title": "Allow this server's tool for the rest of the session",
                            "default": False,
                        },
                    },
                    "required": ["approve"],
                },
            },
        )
        result = jsonrpc.as_object(response.get("result"))
        content = jsonrpc.as_object(result.get("content"))
        if result.get("action") == "accept" and content.get("approve") is True:
            scope: ApprovalScope = "session" if content.get("remember") is True else "once"
            return Approval(True, self.name, "approved in the host", "approved", scope)
        error = response.get("error")
        why = (
            (jsonrpc.as_object(error).get("message") or one_line(str(error), 200))
            if "error" in response
            else result.get("action", "no answer")
        )
        return Approval(False, self.name, f"rejected in the host ({why})", "rejected")

    async def review(self, request: ApprovalRequest, result: dict[str, Any], host: HostLine) -> Review:
        response = await host.request_host(
            "elicitation/create",
            {
                "message": f"mcp-sampling-proxy: the LLM answered server '{one_line(request.server, 80)}' "
                f"(quoted):\n\n{quote(result_text(result))}",
                "requestedSchema": {
                    "type": "object",
                    "properties": {
                        "send": {"type": "boolean", "title": "Send this answer to the server?", "default": True}
                    },
                    "required": ["send"],
                },
            },
        )
        answer = jsonrpc.as_object(response.get("result"))
        content = jsonrpc.as_object(answer.get("content"))
        return Review(answer.get("action") == "accept" and content.get("send") is True, result, self.name)
