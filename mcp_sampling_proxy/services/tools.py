"""The host's tools/list and tools/call under the proxy's eye: pinned tools and tool-call rules.

The relay hands every tools/list result here before the host gets it (`screen_list`): each tool is
compared with its pin (quotas/tool_pins.py), and a changed or new one is held (hidden, its calls
refused) until a human accepts it, per `tools.on_change`; a tool a `deny` rule names is hidden too.
Every tools/call is checked (`needs_screening`, cheap and synchronous, on the relay's path) against
the held tools and the `tools.rules`; a call that must be refused or asked about is finished in
`screen_call`, which asks a human through the approval channels (approval/approver.py) before the
call goes on to the server. Every decision a rule or a pin makes gets an audit record; a call no
rule names is let through without one (it is the host's own business, as without the proxy).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import anyio

from mcp_sampling_proxy.approval.approver import Approver
from mcp_sampling_proxy.approval.channels import ApprovalRequest
from mcp_sampling_proxy.audit.recorder import AuditLog
from mcp_sampling_proxy.audit.records import AuditFields, ToolChangeRecord
from mcp_sampling_proxy.config.tool_settings import ToolRule, ToolSettings, why_not
from mcp_sampling_proxy.log import get_logger
from mcp_sampling_proxy.notation.vocabulary import TOOL_CALL_APPROVAL, Outcome
from mcp_sampling_proxy.protocol import jsonrpc
from mcp_sampling_proxy.protocol.jsonrpc import RpcError
from mcp_sampling_proxy.protocol.wire_types import ErrorObject, JsonObject, JsonRpcRequest
from mcp_sampling_proxy.quotas.tool_pins import ServerIdentity, ToolChange, ToolPins, client_view, tool_digest
from mcp_sampling_proxy.text.sanitize import one_line, strip_controls

if TYPE_CHECKING:
    from mcp_sampling_proxy.relay.ports import HostLine
    from mcp_sampling_proxy.relay.session import Session

log = get_logger("mcp_sampling_proxy.services.tools")

TOOL_REFUSED = -32001  # a tools/call the proxy refused (held tool, deny rule, or a human said no)
MAX_CHANGE_TEXT = 2000  # characters of each changed field kept in the audit record
MAX_SHOWN_ARGUMENTS = 4000  # characters of a call's arguments shown to the human asked about it
COMMAND = "mcp-sampling-proxy"


def changed_text(value: Any) -> str:
    """A changed field as text for the audit record: cleaned of controls, bounded."""
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True, ensure_ascii=False)
    text = strip_controls(text)
    return text if len(text) <= MAX_CHANGE_TEXT else text[:MAX_CHANGE_TEXT] + f"... ({len(text)} characters)"


def change_record(change: ToolChange) -> ToolChangeRecord:
    """What an audit record says of a tool change: which fields, both digests, the changed text."""
    record: ToolChangeRecord = {
        "kind": change.kind,
        "fields": list(change.fields),
        "old_sha256": change.old_digest,
        "new_sha256": change.new_digest,
    }
    if change.old is not None:
        record["old"] = _changed(change.old, change.fields)
    if change.new is not None:
        record["new"] = _changed(change.new, change.fields)
    return record


def _changed(copy: Mapping[str, object], fields: tuple[str, ...]) -> dict[str, str]:
    return {key: changed_text(copy.get(key)) for key in fields if key in copy}


class ToolGate:
    """Pins and rules for one proxy's server (its identity: the operator's name and command/URL)."""

    def __init__(
        self, settings: ToolSettings, approver: Approver, audit: AuditLog, pins: ToolPins | None, target: str = ""
    ):
        self._settings = settings
        self._approver = approver
        self._audit = audit
        self._pins = pins if settings.pin else None
        self._target = target
        self._held: dict[str, str] = {}  # tool -> why its calls are refused (this session's lists)
        self._held_digest: dict[str, str] = {}  # tool -> the digest of the version held (what an accept pins)
        self._fresh = False  # paging through a list whose first page was first sight
        self._problem_recorded = False

    @property
    def active(self) -> bool:
        return self._pins is not None or bool(self._settings.rules)

    # -- rules --------------------------------------------------------------------------------------------
    def rule_for(self, session: Session, tool: str, arguments: Any = None, *, listing: bool = False) -> ToolRule | None:
        """The first rule naming this call by this session's caller (for a listing: only rules without
        an `arguments` condition)."""
        server, client = session.server_name, session.client
        return next(
            (
                r
                for r in self._settings.rules
                if why_not(r, server, tool, arguments, listing=listing, client=client) is None
            ),
            None,
        )

    # -- tools/list ---------------------------------------------------------------------------------------
    async def screen_list(self, message: JsonRpcRequest, result: JsonObject, session: Session) -> JsonObject:
        """The tools/list result as the host gets it: held and denied tools left out."""
        tools = result.get("tools")
        if not isinstance(tools, list):
            return result
        named = [t for t in tools if isinstance(t, dict) and isinstance(t.get("name"), str)]
        hidden: set[str] = set()
        if self._pins is not None:
            hidden |= await self._check_pins(message, result, named, session)
        for tool in named:
            name = tool["name"]
            rule = self.rule_for(session, name, listing=True)
            if rule is not None and rule.action == "deny" and name not in hidden:
                hidden.add(name)
                self._record(session, message, name, "deny", rule.name, f"hidden by tools rule '{rule.name}'")
        if not hidden:
            return result
        log.info(
            "tools hidden from the host", server=session.server_name, tools=sorted(one_line(h, 80) for h in hidden)
        )
        kept = [t for t in tools if not (isinstance(t, dict) and t.get("name") in hidden)]
        return {**result, "tools": kept}

    async def _check_pins(
        self, message: JsonRpcRequest, result: JsonObject, tools: list[dict[str, Any]], session: Session
    ) -> set[str]:
        assert self._pins is not None
        cursor = jsonrpc.as_object(message.get("params")).get("cursor")
        paged = result.get("nextCursor") is not None
        identity = ServerIdentity(session.server_name, self._target)
        on_change = self._settings.on_change
        pins = self._pins
        view = client_view(session.server_era, session.host_capabilities)  # which client the server listed for

        def see() -> Any:
            return pins.see(
                identity,
                tools,
                on_change,
                complete=cursor is None and not paged,
                fresh=self._fresh and cursor is not None,
                view=view,
            )

        sighting = await anyio.to_thread.run_sync(see)  # the file's lock is within the server's reach
        self._fresh = sighting.first_sight and paged
        server = session.server_name
        if sighting.problem is not None:
            why = sighting.problem
            log.error("tool pins cannot be trusted: every tool is held", server=server, problem=why)
            if not self._problem_recorded:
                self._problem_recorded = True
                self._record(session, message, None, "deny", None, why)
        elif sighting.first_sight:
            log.info("tools pinned on first sight", server=server, tools=len(tools) - len(sighting.over_cap))
        for change in sighting.changes:
            held = change.tool in sighting.held
            decision: Outcome = "deny" if held else "allow"
            what = {"changed": "changed", "new": "appeared", "removed": "was removed"}[change.kind]
            reason = f"tool '{one_line(change.tool, 80)}' {what}"
            if change.fields and change.kind == "changed":
                reason += f" ({', '.join(change.fields)})"
            if held:
                reason += f"; held until accepted ({COMMAND} tools diff {server})"
            elif change.kind != "removed":
                reason += "; re-pinned (tools.on_change: allow)"
            (log.warning if held else log.info)(
                "tool change", server=server, tool=one_line(change.tool, 80), change=what
            )
            self._record(
                session,
                message,
                change.tool,
                decision if change.kind != "removed" else "allow",
                None,
                reason,
                tool_change=change_record(change),
            )
        for tool in tools:
            name = tool["name"]
            if name in sighting.held:
                self._held[name] = self._held_message(server, name, sighting.problem)
                if sighting.problem is None:
                    self._held_digest[name] = tool_digest(tool)
            else:
                self._held.pop(name, None)
                self._held_digest.pop(name, None)
        return set(sighting.held)

    async def _accepted_since(self, session: Session, tool: str) -> bool:
        """True when the version of `tool` held at the last list has been accepted (`tools accept`) since:
        its call goes on without the host listing again."""
        digest = self._held_digest.get(tool)
        if digest is None or self._pins is None:
            return False
        pins, identity = self._pins, ServerIdentity(session.server_name, self._target)
        return await anyio.to_thread.run_sync(pins.pinned, identity, tool) == digest

    def _held_message(self, server: str, tool: str, problem: str | None) -> str:
        if problem is not None:
            return f"tool '{one_line(tool, 80)}' of server '{server}' is held: {problem}"
        how = (
            "tools.on_change is deny: it stays held until accepted"
            if self._settings.on_change == "deny"
            else "a human must accept the change first"
        )
        return (
            f"tool '{one_line(tool, 80)}' of server '{server}' changed since it was pinned (or is new), and {how}: "
            f"see `{COMMAND} tools diff {server}`, then `{COMMAND} tools accept {server} {one_line(tool, 80)}`"
        )

    # -- tools/call ---------------------------------------------------------------------------------------
    def needs_screening(self, message: JsonRpcRequest, session: Session) -> bool:
        """True when the call must wait for `screen_call` (refused, or asked); an allow rule is recorded here."""
        params = jsonrpc.as_object(message.get("params"))
        name = params.get("name")
        if not isinstance(name, str) or "requestState" in params:  # a retry of a round: screened when it began
            return False
        if name in self._held:
            return True
        rule = self.rule_for(session, name, params.get("arguments"))
        if rule is None:
            return False
        if rule.action == "allow":
            self._record(session, message, name, "allow", rule.name, f"allowed by tools rule '{rule.name}'")
            return False
        return True

    async def screen_call(self, message: JsonRpcRequest, host: HostLine) -> ErrorObject | None:
        """None to send the call on; else the JSON-RPC error the host gets instead."""
        session = host.session
        params = jsonrpc.as_object(message.get("params"))
        name = str(params.get("name"))
        held = self._held.get(name)
        if held is not None and await self._accepted_since(session, name):
            log.info("a held tool was accepted since the host's last list", tool=one_line(name, 80))
            self._held.pop(name, None)
            held = None
        if held is not None:
            self._record(session, message, name, "deny", None, held)
            return RpcError(TOOL_REFUSED, held).to_dict()
        rule = self.rule_for(session, name, params.get("arguments"))
        if rule is None or rule.action == "allow":
            return None
        if rule.action == "deny":
            why = f"tool '{one_line(name, 80)}' is refused by the proxy's tools rule '{rule.name}'"
            if rule.message:
                why += f": {rule.message}"
            self._record(session, message, name, "deny", rule.name, why)
            return RpcError(TOOL_REFUSED, why).to_dict()
        arguments = params.get("arguments")
        shown = json.dumps(arguments, indent=2, ensure_ascii=False, sort_keys=True) if arguments is not None else "{}"
        if len(shown) > MAX_SHOWN_ARGUMENTS:
            shown = shown[:MAX_SHOWN_ARGUMENTS] + f"\n... ({len(shown)} characters in all)"
        summary = (  # channels show it quoted (sanitize.quote), as a sampling request's summary
            f"The host wants to call tool '{one_line(name, 80)}' of server {session.server_label} "
            f"with these arguments:\n{strip_controls(shown)}"
            + (f"\n({one_line(rule.message, 200)})" if rule.message else "")
        )
        asked = ApprovalRequest(
            session.server_name,
            session.host_name,
            TOOL_CALL_APPROVAL + name,  # remembered approvals go per server and tool: never mixed with sampling's
            rule.name,
            {"name": name, "arguments": arguments},
            summary,
        )
        try:
            approval = await self._approver.ask(asked, host)
        except RpcError as exc:  # a channel that could not ask (a 2026 host asked outside a call)
            self._record(session, message, name, "rejected", rule.name, exc.message)
            return RpcError(
                TOOL_REFUSED, f"tool call needs approval, which could not be asked: {exc.message}"
            ).to_dict()
        if approval.approved:
            self._record(session, message, name, "approved", rule.name, approval.reason, approver=approval.channel)
            return None
        outcome: Outcome = "timeout" if approval.outcome == "timeout" else "rejected"
        self._record(session, message, name, outcome, rule.name, approval.reason, approver=approval.channel)
        return RpcError(
            jsonrpc.USER_REJECTED, f"tool call '{one_line(name, 80)}' not approved: {approval.reason}"
        ).to_dict()

    # -- audit --------------------------------------------------------------------------------------------
    def _record(
        self,
        session: Session,
        message: JsonRpcRequest,
        tool: str | None,
        decision: Outcome,
        rule: str | None,
        reason: str,
        *,
        approver: str | None = None,
        tool_change: ToolChangeRecord | None = None,
    ) -> None:
        action = {"allow": "allow", "approved": "prompt", "rejected": "prompt", "timeout": "prompt"}.get(
            decision, "deny"
        )
        fields: AuditFields = {
            "server": session.server_name,
            "host": session.host_name or None,
            "method": str(message.get("method")),
            "request_id": message.get("id"),
            "tool": tool,
            "protocol_version": session.protocol_version,
            "decision": decision,
            "rule": rule,
            "reason": reason,
            "approver": approver,
            "action": action,
        }
        if tool_change is not None:
            fields["tool_change"] = tool_change
        if session.client is not None:  # served over HTTP: who called (front/endpoint.py)
            fields["client"] = session.client
        if session.served is not None:
            fields["session"] = session.served
        try:
            self._audit.record(**fields)
        except Exception as exc:  # the call's fate is decided; a record that cannot be written is logged
            log.error("cannot write the audit record of a tool decision", error=str(exc))
